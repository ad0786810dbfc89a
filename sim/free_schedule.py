"""SimPy schedule of FREE (shallow-deep early exit, synchronized parallel decoding) on one GPU.

The closed form is ``ppdmodel.free``. The schedule runs on the simulator's one engine
(``sim.schedule.SimEngine``, as PPD and greedy do): one process, ``decode``, computes on GPU 0
(an engine device, as greedy's main) for each token: the embedding with the shallow layers
1..L_s, one layer per event, then the exit head; if token t does not exit, the deep layers
L_s+1..d over the n_t + 1 stacked rows at ``layer(n_t + 1)`` each and the final head; then the
host time tau, off the GPU. Exits come from a recorded sequence (``exits``) or are drawn
i.i.d. with rate ``q``. Every time is a sum of the costs, so the latency equals
``ppdmodel.free_trace_latency_seconds`` for the same exits (the agreement the tests check).
Costs are a ``ppdmodel.DecodeCosts``: measured, or from a device model with ``free_costs``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppdmodel.costs import DecodeCosts
from ppdmodel.free import (
    MAX_ELL,
    check_exits,
    check_free_shape,
    free_rows_layer_seconds,
)
from ppdmodel.passes import check_costs
from ppdmodel.validation import as_int, check_instance, check_probability, check_seed, ndim
from sim.config import MAX_WORK
from sim.hardware_costs import MAX_ROWS, HardwareModel, one_process_host_s
from sim.schedule import MAIN, SimEngine

FREE_EVENT_COLUMNS = ("token", "layer_start", "layer_end", "rows", "start", "end", "kind")
"""One row per event: a layer (``shallow``, ``deep``), a head or the host time."""
MAX_RUNS = 10**5
"""Largest ``n_runs`` of ``monte_carlo_free``."""
MAX_TOKENS = 2 * 10**4
"""Largest n_runs * ell of ``monte_carlo_free`` (every layer is an event)."""
EVENT_WORK = 20
"""Work units (``sim.config.MAX_WORK``'s, about 1 us) of one event of the schedule: 15-32 us
measured on a shared 2-core VM (d = 40, 2000 tokens, events recorded or not)."""


def _free_work(d: int, exit_layer: int, ell: float, deep: float) -> float:
    """Work units of simulating ``ell`` tokens of which ``deep`` did not exit: per token the
    embedding, exit_layer shallow layers, the exit head and the host time; per deep token
    d - exit_layer layers and the final head (``EVENT_WORK`` each)."""
    return EVENT_WORK * (ell * (exit_layer + 3) + deep * (d - exit_layer + 1))


def _check_free_work(work: float, what: str) -> None:
    """ValueError when ``work`` (``_free_work``) exceeds ``sim.config.MAX_WORK``."""
    if work > MAX_WORK:
        raise ValueError(
            f"{what} is about {work / 1e6:.3g} s of simulation, above the limit of "
            f"{MAX_WORK / 1e6:.3g} s (sim.config.MAX_WORK)"
        )


@dataclass
class FreeSimResult:
    """One simulated FREE sequence."""

    latency_s: float
    """When the last token's host time ends, seconds."""
    busy_s: float
    """Seconds the GPU computed (latency less host time: one device)."""
    exits: np.ndarray
    """x_t of the sequence (drawn or given)."""
    events: pd.DataFrame
    """``FREE_EVENT_COLUMNS``, one row per event (empty when not recorded)."""


class FreeSchedule(SimEngine):
    """One FREE sequence on one GPU (module docstring): ``d`` layers (an integer in [2, 10^6]),
    the exit head after layer ``exit_layer`` in [1, d - 1], ``exits`` x_t (0/1, 1..``MAX_ELL``
    tokens); ValueError naming the argument out of range, or when the sequence is more than
    ``sim.config.MAX_WORK`` of simulation (``_free_work``). Records: ``FREE_EVENT_COLUMNS``."""

    def __init__(self, d, exit_layer, costs: DecodeCosts, exits, record_events=True) -> None:
        d, exit_layer = check_free_shape(d, exit_layer)
        check_costs(costs)
        exits = check_exits(exits)
        if not isinstance(record_events, bool | np.bool_):
            raise ValueError(f"record_events must be True or False, got {record_events!r:.40}")
        deep = int(np.count_nonzero(~exits))
        _check_free_work(_free_work(d, exit_layer, exits.size, deep),
                        f"d = {d}, exit_layer = {exit_layer} over {exits.size} tokens "
                        f"({deep} deep): reduce d or the exits")  # fmt: skip
        self.d, self.exit_layer, self.costs = d, exit_layer, costs
        self.exits = exits
        super().__init__(1, bool(record_events))
        self.gpu = self._add_device(0)

    def _work(self, token, a, b, rows, seconds, kind):
        """``seconds`` of work on GPU 0 as main's stream, logged."""
        start = self.env.now
        yield from self.gpu.compute(seconds, MAIN)
        self.busy_s[0] += seconds
        if self.record_events:
            self.records.append((token, a, b, rows, start, self.env.now, kind))

    def decode(self):
        """The decoding process: per token, shallow block, exit head, maybe a deep pass."""
        c, d, ls = self.costs, self.d, self.exit_layer
        stacked = 0
        for t, exited in enumerate(self.exits, start=1):
            yield from self._work(t, 0, 0, 1, c.embedding_s, "embedding")
            for layer in range(1, ls + 1):
                yield from self._work(t, layer, layer, 1, c.layer_s, "shallow")
            yield from self._work(t, ls, ls, 1, c.early_head_s, "exit_head")
            if not exited:
                rows = stacked + 1
                layer_s = free_rows_layer_seconds(rows=rows, costs=c)
                for layer in range(ls + 1, d + 1):
                    yield from self._work(t, layer, layer, rows, layer_s, "deep")
                yield from self._work(t, d, d, 1, c.final_head_s, "final_head")
            stacked = stacked + 1 if exited else 0
            start = self.env.now
            yield self.env.timeout(c.host_s)
            if self.record_events:
                self.records.append((t, d, d, 0, start, self.env.now, "host"))

    def run(self) -> FreeSimResult:
        end = self._run(self.decode())
        events = pd.DataFrame(self.records, columns=list(FREE_EVENT_COLUMNS))
        return FreeSimResult(float(end), self.busy_s[0], self.exits, events)


def simulate_free(
    *, d, exit_layer, costs, exits=None, q=None, ell=None, seed=None, record_events=True
) -> FreeSimResult:
    """Simulate one FREE sequence: given ``exits`` (x_t, t = 1..ell), or ``ell`` exits drawn
    i.i.d. with rate ``q`` from ``numpy.random.default_rng(seed)`` (``FreeSchedule`` checks
    the rest)."""
    d, exit_layer = check_free_shape(d, exit_layer)
    if exits is not None:
        if q is not None or ell is not None:
            raise ValueError("give exits, or q and ell, not both")
        x = exits
    else:
        if q is None or ell is None:
            raise ValueError("pass exits (a recorded sequence), or q and ell (i.i.d. exits)")
        if ndim("q", q) != 0:
            raise ValueError(f"q must be a scalar probability, got {q!r:.80}")
        q = check_probability("q", q)
        ell = as_int("ell", ell, limit=MAX_ELL)
        x = np.random.default_rng(check_seed("seed", seed)).random(ell) < q
    return FreeSchedule(d, exit_layer, costs, x, record_events=bool(record_events)).run()


def monte_carlo_free(*, d, exit_layer, costs, ell, q, n_runs, seed=None) -> pd.DataFrame:
    """``n_runs`` sequences with i.i.d. exits at rate ``q``: a DataFrame of latency_s, busy_s
    and exits (the count) per run, seeded by ``seed``."""
    d, exit_layer = check_free_shape(d, exit_layer)
    n_runs = as_int("n_runs", n_runs, limit=MAX_RUNS)
    ell = as_int("ell", ell, limit=MAX_ELL)
    if n_runs * ell > MAX_TOKENS:
        raise ValueError(f"n_runs * ell must be <= {MAX_TOKENS}, got {n_runs} * {ell}")
    if ndim("q", q) != 0:
        raise ValueError(f"q must be a scalar probability, got {q!r:.80}")
    q = check_probability("q", q)
    _check_free_work(n_runs * _free_work(d, exit_layer, ell, ell * (1 - q)),
                    f"n_runs = {n_runs} sequences of {ell} tokens at d = {d}, exit_layer = "
                    f"{exit_layer}, q = {q:g}: reduce n_runs, ell or d")  # fmt: skip
    seeds = np.random.SeedSequence(check_seed("seed", seed, generator_ok=False)).spawn(n_runs)
    rows = []
    for s in seeds:
        r = simulate_free(
            d=d, exit_layer=exit_layer, costs=costs, q=q, ell=ell,
            seed=np.random.default_rng(s), record_events=False,
        )  # fmt: skip
        rows.append((r.latency_s, r.busy_s, int(r.exits.sum())))
    return pd.DataFrame(rows, columns=["latency_s", "busy_s", "exits"])


def free_costs(hw, *, rows=(2, 4, 8, 16), tp: int = 1) -> DecodeCosts:
    """FREE's DecodeCosts on a device model (``sim.hardware_costs.HardwareModel``): batch-1
    layers, heads and host time, and the per-layer time of ``rows`` rows at once."""
    check_instance("hw", hw, HardwareModel, "a sim.hardware_costs hardware model")
    tp = as_int("tp", tp, limit=MAX_ROWS)
    if isinstance(rows, str | bytes) or not isinstance(rows, tuple | list):
        raise ValueError(f"rows must be a tuple of row counts, got {rows!r:.60}")
    rows = [as_int("rows", r, limit=MAX_ROWS) for r in rows]
    return DecodeCosts(
        layer_s=float(hw.layer_seconds(tp, 1)),
        candidate_layer_s_by_k={int(r): float(hw.layer_seconds(tp, int(r))) for r in rows},
        embedding_s=float(hw.embedding_seconds(tp)),
        early_head_s=float(hw.early_head_seconds(tp)),
        final_head_s=float(hw.final_head_seconds(tp)),
        host_s=one_process_host_s(hw),
    )
