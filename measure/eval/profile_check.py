"""Is a cost profile still this machine's? Its greedy step re-timed beside the judged runs.

A profile prices the machine as it was while it was taken. On a shared machine that is not
the machine of the runs minutes later: over 24 validations on the 2-vCPU VM (SmolLM2 and three
random shapes, 2026-11-26 to 11-28), the profile-only predictions' median signed error moved
with a standard deviation of 6.7 points from one validation to the next, the interleaved
probes' by 1.9 (``experiments/price_statistic.py``); no statistic of the profile's samples
(median, mean, trimmed mean) removed that, as the machine's slow spells come and go over
minutes. A validation cannot make an old profile right, but it can say when it is wrong now.

``ppd validate`` therefore re-times a greedy step (``DecodeProbe.step``: host, embedding, every
layer, the final head) before the judged runs and after them, each compared backend in turn
within a round at its own thread count, for ``CHECK_SECONDS`` and at least ``CHECK_ROUNDS``
rounds (``measure.decode.settings``), prices a greedy token from the steps' means by the
profile's own rule (``reprice``; the figures not re-timed are kept) and sets it beside the
profile's price and that price's 95 % interval over the profile's cost replicates (which carry
its drift). It also reads how many CPUs other work kept busy over the check
(``measure.profile.cpu_share``, Linux) against the profile's own reading. A sustained span and a
mean, not a few steps and a median: with two busy processes on the 2-vCPU VM, 4 steps read a
greedy token at 0.93-2.09x a quiet profile's price and 8 steps 1.04-1.42x by turns (the
scheduler leaves our process alone on a CPU for a while, then shares it), while the runs took
1.5x. The profile is stale for this machine now when the price lies outside the interval or
other work took ``STALE_LOAD_CPUS`` more CPUs than while it was profiled; ``--if-stale``
decides: ``warn`` (the default: say so, with the numbers, and go on), ``remeasure`` (take a
fresh profile first, as when no ``--profile`` is given) or ``refuse`` (exit before the runs).
The check after the runs tells whether the machine moved while they ran. The profile's own
predictions do not change with it; the profile scaled by the checks' ratios
(``checked_columns``) is reported beside them, as a third prediction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

import measure.profile.cpu_share as cpu_share
from measure.decode.settings import CHECK_ROUNDS, CHECK_SECONDS
from measure.profile.probes import DecodeProbe
from measure.profile.profile import DIST_THREADS, reprice
from measure.profile.stats import Spread
from ppdmodel.cost_profile import CostProfile
from ppdmodel.defaults import default_d_bar
from ppdmodel.intervals import interval_of

STALE_LOAD_CPUS = 0.5
"""Other work keeping this many CPUs busier than while the profile was taken makes it stale."""


@dataclass(frozen=True)
class ProfileCheck:
    """One backend's greedy token priced now beside the profile's price (seconds)."""

    backend: str
    when: str
    """``before`` or ``after`` the judged runs."""
    profile_s: float
    """The profile's price of a greedy token on this backend."""
    low_s: float | None
    """The 95 % interval of that price over the profile's cost replicates (None: the profile
    kept no samples)."""
    high_s: float | None
    now_s: float
    """The same price with the greedy step's pieces re-timed now (their means)."""
    rounds: int
    others_cpus: float | None = None
    """CPUs other work kept busy over the check (None: not measured, e.g. not Linux)."""
    profile_others_cpus: float | None = None
    """The same while the profile was taken (None: not recorded)."""

    @property
    def ratio(self) -> float:
        """Now over the profile's price (> 1: the machine is slower than when profiled)."""
        return self.now_s / self.profile_s

    @property
    def inside(self) -> bool | None:
        """Whether now's price lies in the profile's interval (None without one)."""
        if self.low_s is None or self.high_s is None:
            return None
        return self.low_s <= self.now_s <= self.high_s

    @property
    def load_moved(self) -> float | None:
        """Other work's CPUs now less while profiled (None where either is unknown)."""
        if self.others_cpus is None or self.profile_others_cpus is None:
            return None
        return self.others_cpus - self.profile_others_cpus

    @property
    def stale(self) -> bool:
        """The price now outside the profile's interval, or other work busier by
        ``STALE_LOAD_CPUS`` or more."""
        moved = self.load_moved
        return self.inside is False or (moved is not None and moved >= STALE_LOAD_CPUS)

    def describe(self) -> str:
        """'single, before the runs: a greedy token 13.2 ms now, 1.09x the profile's 12.1 ms
        [11.4, 12.9] (outside)'."""
        band = "no interval"
        if self.inside is not None:
            band = f"[{1e3 * self.low_s:.3g}, {1e3 * self.high_s:.3g}] " + (
                "(inside)" if self.inside else "(OUTSIDE)"
            )
        load = ""
        if self.others_cpus is not None:
            then = self.profile_others_cpus
            load = f"; other work {self.others_cpus:.2f} CPUs" + (
                "" if then is None else f" ({then:.2f} while profiled)"
            )
        return (
            f"{self.backend}, {self.when} the runs: a greedy token {1e3 * self.now_s:.3g} ms now "
            f"({self.rounds} steps), {self.ratio:.3g}x the profile's {1e3 * self.profile_s:.3g} "
            f"ms {band}{load}"
        )

    def to_dict(self) -> dict:
        return dict(backend=self.backend, when=self.when, profile_s=self.profile_s,
                    low_s=self.low_s, high_s=self.high_s, now_s=self.now_s, ratio=self.ratio,
                    inside=self.inside, rounds=self.rounds, others_cpus=self.others_cpus,
                    profile_others_cpus=self.profile_others_cpus,
                    stale=self.stale)  # fmt: skip


def probe_threads(profile: CostProfile, backend: str) -> int:
    """The torch threads ``profile`` timed ``backend`` at (its ``threads`` entry; else 1, or
    ``DIST_THREADS`` for ``dist``): a re-timing at another count would price another machine."""
    threads = profile.data.get("backends", {}).get(backend, {}).get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
        return threads
    return DIST_THREADS if backend == "dist" else 1


def greedy_token_price(profile: CostProfile, backend: str) -> tuple:
    """(price, low, high): a greedy token's seconds on ``backend`` by ``profile`` and the 95 %
    interval over its cost replicates (None, None without replicates)."""
    d = profile.d
    d_bar = default_d_bar(d)
    price = profile.greedy_costs(backend, d_bar=d_bar).greedy_token_seconds(d)
    replicates = profile.cost_replicates(backend, d_bar=d_bar, greedy=True)
    if not replicates:
        return float(price), None, None
    band = interval_of([c.greedy_token_seconds(d) for c in replicates])
    return float(price), band.low, band.high


def check_profile(
    model,
    profile: CostProfile,
    backends,
    *,
    when: str,
    seconds: float = CHECK_SECONDS,
    rounds: int = CHECK_ROUNDS,
    probe=None,
) -> list[ProfileCheck]:
    """A ``ProfileCheck`` per backend in ``backends`` (each in ``profile``): greedy steps timed
    now at the profile's context length, round by round with the backends in turn, each at its
    threads, for ``seconds`` and at least ``rounds`` rounds. ``probe``: a ``DecodeProbe`` of
    ``model`` to reuse (a second check skips the prefill)."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"seconds must be a number >= 0, got {seconds!r}")
    if when not in ("before", "after"):
        raise ValueError(f"when must be 'before' or 'after', got {when!r}")
    backends = list(dict.fromkeys(backends))
    for backend in backends:
        if backend not in profile.backends:
            raise ValueError(f"backends: the profile has no backend {backend!r}")
    context = profile.data.get("model", {}).get("context_tokens")
    if not isinstance(context, int):
        raise ValueError("the profile records no context_tokens to check at")
    probe = probe if probe is not None else DecodeProbe(model, context_tokens=context)
    device = next(model.parameters()).device
    previous = torch.get_num_threads()
    samples = {backend: {} for backend in backends}
    done = 0
    try:  # round by round, the backends in turn: a slow spell meets them alike
        for backend in backends:  # warm-up round, untimed
            torch.set_num_threads(probe_threads(profile, backend))
            probe.step()
        start, cpu = time.perf_counter(), cpu_share.snapshot()
        while done < rounds or time.perf_counter() - start < seconds:
            for backend in backends:
                torch.set_num_threads(probe_threads(profile, backend))
                for name, value in probe.step().items():
                    samples[backend].setdefault(name, []).append(value)
            done += 1
        shares = cpu_share.shares_between(cpu, cpu_share.snapshot())
    finally:
        torch.set_num_threads(previous)
    load = profile.provenance.get("load_average") or {}
    then = load.get("others_measured")
    then = float(then) if isinstance(then, int | float) and not isinstance(then, bool) else None
    checks = []
    for backend in backends:
        timed = samples[backend]
        timed["layer_s"] = [s / probe.d for s in timed["layers_s"]]
        means = {name: _mean_priced(values) for name, values in timed.items()}
        now = reprice(profile, {backend: means}, shapes=probe.shapes(), device=device,
                      note="profile check")  # fmt: skip
        price, low, high = greedy_token_price(profile, backend)
        now_s, _, _ = greedy_token_price(now, backend)
        checks.append(ProfileCheck(backend, when, price, low, high, now_s, done,
                                   None if shares is None else shares.others, then))  # fmt: skip
    return checks


def _mean_priced(values) -> Spread:
    """A Spread of ``values`` whose price (its median field) is their mean: a run's time is the
    sum of its steps, and over a sustained span the slow ones count."""
    s = Spread.of(values)
    return Spread(s.mean, s.q1, s.q3, s.n, s.samples)


def stale_note(checks) -> str | None:
    """The warning for the checks that found the profile stale, or None: before the runs, the
    profile is not this machine's now; after them, the machine moved while they ran."""
    stale = [c for c in checks if c.stale]
    if not stale:
        return None
    moved = ", ".join(f"{c.backend} {c.ratio:.3g}x" for c in stale)
    where = f"({moved} the profile's price of a greedy token"
    load = [c.load_moved for c in stale if c.load_moved is not None]
    if load and max(load) >= STALE_LOAD_CPUS:
        where += f"; other work {max(load):+.2f} CPUs busier than while profiled"
    where += ")"
    if all(c.when == "after" for c in stale):
        return (
            f"the machine moved while the runs ran {where}: the predictions from the profile "
            "carry that shift; ppd validate's interleaved probes (on by default) price the machine "
            "the runs met"
        )
    return (
        f"the profile is stale for this machine now {where}: its predictions carry that "
        "shift; take a new profile (--if-stale remeasure, or ppd measure profile); ppd "
        "validate's interleaved probes (on by default) price the machine the runs met"
    )


def check_scales(checks) -> dict[str, float]:
    """Per backend, the geometric mean of its checks' ratios (before and after the runs): the
    machine's speed over the runs relative to the profile's, as the check read it (greedy steps
    of its own, never the judged runs)."""
    ratios: dict[str, list[float]] = {}
    for c in checks:
        ratios.setdefault(c.backend, []).append(c.ratio)
    return {b: float(np.exp(np.mean(np.log(r)))) for b, r in ratios.items()}


def checked_columns(table: pd.DataFrame, checks) -> pd.DataFrame:
    """``table`` (validation.csv's rows) with ``check_scale`` (``check_scales`` of the row's
    backend), ``checked_predicted_s`` (``predicted_s`` times it) and ``checked_rel_err``
    against ``measured_s`` (NaN where no check read the row's backend)."""
    scale = table["backend"].map(check_scales(checks)).astype(float)
    predicted = table["predicted_s"].astype(float) * scale
    error = predicted / table["measured_s"].astype(float) - 1
    return table.assign(check_scale=scale, checked_predicted_s=predicted, checked_rel_err=error)


def checked_summary(table: pd.DataFrame) -> dict:
    """``checked_median_abs_rel_err`` and ``checked_worst_abs_rel_err`` over the rows other than
    greedy's, and ``checked_greedy_rel_err_by_backend`` (empty without checked rows)."""
    if "checked_rel_err" not in table or table["checked_rel_err"].isna().all():
        return {}
    others = table.loc[table["method"] != "greedy", "checked_rel_err"].abs().dropna()
    greedy = table[(table["method"] == "greedy") & table["checked_rel_err"].notna()]
    out = {"checked_greedy_rel_err_by_backend": dict(
        zip(greedy["backend"], greedy["checked_rel_err"].astype(float), strict=True))}  # fmt: skip
    if not others.empty:
        out.update(checked_median_abs_rel_err=float(others.median()),
                   checked_worst_abs_rel_err=float(others.max()))  # fmt: skip
    return out
