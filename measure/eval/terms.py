"""Which term is off: each block of a pass as the profile prices it beside the same block
timed inside the judged runs (the decoder's trace events, ``sim.formats.EVENT_KEYS``).

The runs' own timings are used here only to explain a disagreement, never to predict. Blocks
(e = d - d_bar; main is process 0, the candidate side processes 1..):

=========================  ==========================  ====================================
block                      events                      the profile's price
=========================  ==========================  ====================================
main prefix, fresh         main layers [0, d_bar)      embedding + d_bar L
main prefix, resumed       main layers [e, d_bar)      (2 d_bar - d) L
early head on main         main head at d_bar          early head
main suffix                main layers [d_bar, d)      e L (one device shared: slowed while
                                                       the candidates run, not counted here)
final head                 main head at d              final head
candidate batch            candidate layers [0, e)     embedding + e L_k (completed batches),
                                                       + the start-up after an early head (a
                                                       single backend; dist with the early
                                                       head on the candidate side)
early head, candidates     candidate head at d_bar     early head
candidate start            main's split to the         the dispatch message (``dispatch_s``,
                           candidate side's first      less the batch's start-up it holds);
                           block of the next token     not on a serial backend: no message
                           (``measure.profile.dispatch``)
hand-off (with wait)       main handoff                hand-off + the wait on a match the
                                                       prediction prices (w, ``ppdmodel.passes``:
                                                       main waits there for a batch not done)
host per token             pass time - main's blocks   host (single backend: the candidate
                                                       blocks it ran are subtracted too)
=========================  ==========================  ====================================

``gap_s_per_token`` = (mean measured - price) x blocks / tokens: how much each block adds to
the measured time per token beyond the prediction. The prices are solo ones; the factors the
prediction applied to each side while both compute (``CostProfile.sharing``: on a ``dist``
profile with pair factors, main's and the batch's own at the configuration's k) are in every
row as ``sharing_main`` and ``sharing_candidates``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from measure.eval.ppd_config import PPDConfig
from measure.profile.dispatch import dispatch_delays
from measure.profile.host import host_seconds
from ppdmodel.cost_profile import CostProfile
from ppdmodel.intervals import Interval, interval_of
from ppdmodel.passes import pass_times

TERM_COLUMNS = ("block", "count", "measured_median_s", "price_s", "ratio", "gap_s_per_token",
                "sharing_main", "sharing_candidates")  # fmt: skip


def _blocks(config: PPDConfig, d: int, costs, startup: float) -> list[tuple[str, object, float]]:
    """(name, timed(events) -> list of seconds, price in seconds) of every block of a pass;
    ``startup``: the batch's start-up after an early head (``BackendCosts.batch_startup``),
    timed inside the batch though the prediction prices it in the dispatch."""
    d_bar, e = config.d_bar, d - config.d_bar
    layer_k = costs.candidate_layer_seconds(config.k)

    def sel(side, kind, a, b):
        def match(ev):
            on_main = ev["process"] == 0
            return (on_main == (side == "main") and ev["kind"] == kind
                    and (ev["layer_start"], ev["layer_end"]) == (a, b))  # fmt: skip

        return match

    blocks = [
        ("main prefix, fresh", sel("main", "layers", 0, d_bar),
         costs.embedding_s + d_bar * costs.layer_s),
        ("early head on main", sel("main", "head", d_bar, d_bar), costs.early_head_s),
        ("main suffix", sel("main", "layers", d_bar, d), e * costs.layer_s),
        ("final head", sel("main", "head", d, d), costs.final_head_s),
        ("candidate batch", sel("cand", "layers", 0, e),
         costs.embedding_s + e * layer_k + startup),
        ("early head, candidates", sel("cand", "head", d_bar, d_bar), costs.early_head_s),
        ("hand-off (with wait)", lambda ev: ev["process"] == 0 and ev["kind"] == "handoff",
         costs.handoff_s + _wait_s(config, d, costs)),
    ]  # fmt: skip
    if 2 * d_bar > d:  # a resumed pass runs layers [e, d_bar); empty when d_bar = d / 2
        blocks.insert(1, ("main prefix, resumed", sel("main", "layers", e, d_bar),
                          (2 * d_bar - d) * costs.layer_s))  # fmt: skip
    timed = [(name, _durations(match), price) for name, match, price in blocks]
    if not costs.serial_device:  # a message starts the candidates: its delay, before the batch
        at = next(i for i, (name, _, _) in enumerate(timed) if name == "candidate batch")
        timed.insert(at, ("candidate start", lambda events: list(dispatch_delays(
            events, d=d, d_bar=d_bar, early_head=config.early_head).values()),
            costs.dispatch_seconds(config.early_head) - startup))  # fmt: skip
    return timed


def _wait_s(config: PPDConfig, d: int, costs) -> float:
    """w: how long the closed form has main wait for the accepted batch on a match (0 on a
    serial device, where the batch is done before main's suffix starts)."""
    times = pass_times(d=d, d_bar=config.d_bar, k=config.k, costs=costs,
                       early_head=config.early_head)  # fmt: skip
    return float(times.wait_s)


def _durations(match):
    return lambda events: [ev["end_s"] - ev["start_s"] for ev in events if match(ev)]


def term_check(profile: CostProfile, config: PPDConfig, runs) -> pd.DataFrame:
    """One row per block (``TERM_COLUMNS``): measured inside ``runs`` (PPDResult with trace
    events) vs the profile's price for ``config``."""
    costs = profile.costs(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    tokens = sum(len(r.tokens) for r in runs)
    rows = []
    startup = profile.backends[config.backend].batch_startup(config.early_head, config.k)
    for name, timed, price in _blocks(config, profile.d, costs, startup):
        seconds = [s for r in runs for s in timed(r.trace.events)]  # per run: tokens restart
        rows.append(_row(name, seconds, price, tokens))
    host = [s for r in runs for s in host_seconds(r, config.backend)]
    rows.append(_row("host per token", host, costs.host_s, tokens))
    sharing = profile.sharing(config.backend, config.k, config.early_head)
    factors = dict(sharing_main=sharing.main, sharing_candidates=sharing.candidate)
    return pd.DataFrame([{**r, **factors} for r in rows if r["count"]], columns=list(TERM_COLUMNS))


def block_prices(profile: CostProfile, config: PPDConfig, costs=None,
                 startup: float | None = None) -> dict[str, float]:  # fmt: skip
    """Each block's price in seconds (the table above) under ``config``, from ``costs``
    (DecodeCosts) and ``startup`` (``BackendCosts.batch_startup``); default: the profile's own
    for the configuration's backend."""
    costs = costs or profile.costs(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    if startup is None:
        startup = profile.backends[config.backend].batch_startup(config.early_head, config.k)
    blocks = _blocks(config, profile.d, costs, startup)
    prices = {name: float(price) for name, _, price in blocks}
    prices["host per token"] = float(costs.host_s)
    return prices


def price_intervals(profile: CostProfile, config: PPDConfig) -> dict[str, Interval]:
    """Each block's price over the profile's cost replicates (``ppdmodel.intervals``' 95 %
    interval); empty for a profile that kept no timed samples."""
    replicates = profile.cost_replicates(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    reps = profile.backends[config.backend].replicates
    startups = [rep.batch_startup(config.early_head, config.k) for rep in reps]
    prices = [block_prices(profile, config, costs, startup)
              for costs, startup in zip(replicates, startups, strict=True)]  # fmt: skip
    if not prices:
        return {}
    return {name: interval_of([p[name] for p in prices]) for name in prices[0]}


def _row(name: str, seconds: list[float], price: float, tokens: int) -> dict:
    if not seconds:
        return dict(block=name, count=0)
    median = float(np.median(seconds))
    return dict(
        block=name,
        count=len(seconds),
        measured_median_s=median,
        price_s=float(price),
        ratio=median / price if price > 0 else float("nan"),
        gap_s_per_token=(float(np.mean(seconds)) - price) * len(seconds) / max(tokens, 1),
    )


def largest_gap(table: pd.DataFrame) -> str:
    """'main suffix: +21.3 ms/token (measured x1.41 the profile)' for the block whose time
    adds the most to the measurement beyond its price (by absolute value). The candidate start
    is left out: a delay, not work, it reaches the measurement only through main's wait at
    the hand-off, which has its own row."""
    table = table[table["block"] != "candidate start"]
    row = table.loc[table["gap_s_per_token"].abs().idxmax()]
    ratio = "" if np.isnan(row["ratio"]) else f" (measured x{row['ratio']:.2f} the profile)"
    return f"{row['block']}: {1e3 * row['gap_s_per_token']:+.3g} ms/token{ratio}"
