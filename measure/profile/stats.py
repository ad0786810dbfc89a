"""Robust timing: interleaved repeats, median and interquartile range, noise and load warnings.

A timed figure is never one number: ``Spread`` holds the median and the quartiles of repeated
samples (warm-up excluded), ``noisy`` when IQR / median exceeds ``NOISY_REL_IQR``.
``run_interleaved`` repeats several timed tasks in rounds (each round runs every task once,
in an order that rotates), so a slow spell of a shared machine hits every task alike instead
of the one that happened to run then. ``LoadReading`` compares ``os.getloadavg`` before and
after a measurement with the CPU count.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from numbers import Real

import numpy as np

import measure.profile.cpu_share as cpu_share
from ppdmodel.validation import as_int, is_finite, items_of

NOISY_REL_IQR = 0.10
"""A figure whose interquartile range exceeds this fraction of its median is flagged noisy."""
WIDE_REL_IQR = 0.20
"""A price whose IQR / median still exceeds this after re-measuring is too wide to predict from
(``measure.profile.profile.remeasure_wide``): above the noisy flag's 10 %, below the 24-46 % of
the profile whose ``dist`` predictions were 7-26 % off (issue 24)."""
REMEASURE_ROUNDS = 2
"""Extra measurements of a backend's figures while a price is wider than ``WIDE_REL_IQR``."""
RANK_REPEATS = 16
"""Timed rounds of a profile's two-rank probe (``measure.profile.ranks``). On a 2-vCPU VM the
pair factor of 2 rounds moves by about 11 % (log-sd); between stretches of 8 rounds it moved
5-7 %, of 16 rounds 3-4 % as a ratio of means (``experiments/sharing_drift.py``)."""
LOADED_FRACTION = 0.5
"""The machine counts as loaded when other work kept more than this fraction of its CPUs busy
(measured from CPU times, ``LoadReading``; else the 1-minute load average before a
measurement, or after it minus the threads it used)."""
CONTENDED_FRACTION = 0.25
"""Other work's share of the CPUs that flags a measurement LOADED when the CPUs were full."""
FULL_FRACTION = 0.9
"""Other work's and ours together at or above this share of the CPUs: the CPUs were full."""


@dataclass(frozen=True)
class Spread:
    """Median and quartiles of repeated samples (seconds, or any unit)."""

    median: float
    q1: float
    """First quartile (numpy's linear interpolation)."""
    q3: float
    """Third quartile."""
    n: int
    """Samples behind the figure."""
    samples: tuple[float, ...] = field(default=(), repr=False, compare=False)
    """The timed samples themselves (empty where only the quartiles were kept): a profile
    keeps them so a prediction can resample them (``measure.profile.replicates``)."""

    def __post_init__(self) -> None:
        """ValueError naming a field that is no finite number (any sign: a figure may be a
        difference of timed pieces), or ``n`` no integer >= 0."""
        for name in ("median", "q1", "q3"):
            value = getattr(self, name)
            if isinstance(value, bool | np.bool_) or not isinstance(value, Real) or not (
                    is_finite(value)):  # fmt: skip
                raise ValueError(f"{name} must be a finite number, got {value!r:.60}")
        as_int("n", self.n, minimum=0)
        items = items_of(self.samples)
        if items is None or not all(
            isinstance(v, Real) and not isinstance(v, bool | np.bool_) and is_finite(v)
            for v in items
        ):
            raise ValueError(f"samples must be finite numbers, got {self.samples!r:.80}")

    @classmethod
    def of(cls, samples) -> Spread:
        """The Spread of ``samples`` (at least one finite value; ValueError otherwise)."""
        values = np.asarray(samples, dtype=float).ravel()
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise ValueError(f"samples must be one or more finite numbers, got {values!r}")
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        kept = tuple(float(v) for v in values)
        return cls(float(median), float(q1), float(q3), int(values.size), kept)

    @property
    def mean(self) -> float:
        """The mean of the samples where kept, else the median (a figure read from quartiles)."""
        return float(np.mean(self.samples)) if self.samples else self.median

    @property
    def iqr(self) -> float:
        """Interquartile range q3 - q1."""
        return self.q3 - self.q1

    @property
    def rel_iqr(self) -> float:
        """IQR / median (inf for a zero median with spread, 0 without)."""
        if self.median == 0:
            return 0.0 if self.iqr == 0 else float("inf")
        return self.iqr / abs(self.median)

    @property
    def noisy(self) -> bool:
        """True when IQR / median > NOISY_REL_IQR."""
        return self.rel_iqr > NOISY_REL_IQR

    def scaled(self, factor: float) -> Spread:
        """The same figure in another unit (e.g. a total divided by the number of layers)."""
        return Spread(self.median * factor, self.q1 * factor, self.q3 * factor, self.n,
                      tuple(v * factor for v in self.samples))  # fmt: skip

    def to_dict(self) -> dict:
        """{"median", "q1", "q3", "n"} and "samples" when kept (``from_dict`` inverts it)."""
        data = {"median": self.median, "q1": self.q1, "q3": self.q3, "n": self.n}
        if self.samples:
            data["samples"] = list(self.samples)
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> Spread:
        samples = tuple(float(v) for v in data.get("samples", ()))
        return cls(float(data["median"]), float(data["q1"]), float(data["q3"]), int(data["n"]),
                   samples)  # fmt: skip

    def describe(self, unit: str = "ms", scale: float = 1e3) -> str:
        """'12.3 ms (IQR 0.4 ms, 3.2 %, n=30)' with a NOISY tag when flagged."""
        tag = ", NOISY" if self.noisy else ""
        return (
            f"{self.median * scale:.4g} {unit} (IQR {self.iqr * scale:.3g} {unit}, "
            f"{100 * self.rel_iqr:.1f} %, n={self.n}{tag})"
        )


def load_average() -> float:
    """The 1-minute load average (0 where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return 0.0


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


@dataclass(frozen=True)
class LoadReading:
    """How busy other work kept the CPUs around a measurement: measured from CPU times where
    Linux's ``/proc`` allows (``measure.profile.cpu_share``), else estimated from the 1-minute
    load averages before and after it."""

    before: float
    after: float
    cpus: int
    own_threads: int = 1
    """Threads the measurement itself kept busy (they raise the load read after it)."""
    shares: cpu_share.CpuShares | None = None
    """CPUs other work and the measurement's own processes kept busy, from CPU times (None:
    not measured)."""

    @property
    def others(self) -> float:
        """CPUs kept busy by other work: the measured figure, else the estimate
        max(before, after - own_threads), >= 0."""
        if self.shares is not None:
            return self.shares.others
        return max(self.before, self.after - self.own_threads, 0.0)

    @property
    def loaded(self) -> bool:
        """True when other work kept more than LOADED_FRACTION of the CPUs busy, or (measured)
        more than CONTENDED_FRACTION of them while the CPUs were full: there other work can
        take no more than we leave it, yet it slows every step."""
        if self.others > LOADED_FRACTION * self.cpus:
            return True
        shares = self.shares
        return shares is not None and (
            shares.others > CONTENDED_FRACTION * self.cpus
            and shares.others + shares.own >= FULL_FRACTION * self.cpus
        )

    def describe(self) -> str:
        """'load average 0.30 -> 2.10 on 2 CPUs' (with ', other work 0.05 CPUs beside ours
        1.40' when measured) plus a LOADED tag when flagged."""
        tag = " (LOADED: timings are not trustworthy)" if self.loaded else ""
        measured = "" if self.shares is None else f", {self.shares.describe()}"
        return (f"load average {self.before:.2f} -> {self.after:.2f} on {self.cpus} "
                f"CPUs{measured}{tag}")  # fmt: skip

    def to_dict(self) -> dict:
        shares = self.shares
        return {"before": self.before, "after": self.after, "cpus": self.cpus,
                "own_threads": self.own_threads,
                "others_measured": None if shares is None else shares.others,
                "own_measured": None if shares is None else shares.own,
                "loaded": self.loaded}  # fmt: skip


class LoadMonitor:
    """Read the load average and CPU times now; ``reading()`` later gives the LoadReading of
    the span."""

    def __init__(self, own_threads: int = 1):
        self.before = load_average()
        self.own_threads = own_threads
        self.start = cpu_share.snapshot()

    def reading(self) -> LoadReading:
        shares = cpu_share.shares_between(self.start, cpu_share.snapshot())
        return LoadReading(self.before, load_average(), cpu_count(), self.own_threads, shares)


TimedTask = Callable[[], "Mapping[str, float] | float"]
"""A timed task: returns its seconds, or several named figures in seconds."""


def run_interleaved(
    tasks: Mapping[str, TimedTask],
    *,
    repeats: int,
    warmup: int = 1,
    calls: int = 1,
    progress=None,
) -> dict[str, list[float]]:
    """Run ``tasks`` in ``warmup + repeats`` rounds; samples of the last ``repeats`` rounds.

    Round r runs every task, starting at task r mod n (the order rotates). A task returning a
    float gives the figure named after the task; one returning a mapping gives each of its
    names. Each sample is the mean of ``calls`` back-to-back calls: a decode adds up many
    pieces, so its time follows their means (skewed on a busy machine), while the median over
    rounds keeps one slow round from setting the figure. ``progress(done, total)`` is called
    after every round.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if isinstance(calls, bool) or not isinstance(calls, int) or calls < 1:
        raise ValueError(f"calls must be an integer >= 1, got {calls!r}")
    names = list(tasks)
    if not names:
        raise ValueError("tasks must hold at least one timed task")
    samples: dict[str, list[float]] = {}
    total = warmup + repeats
    for r in range(total):
        start = r % len(names)
        for name in names[start:] + names[:start]:
            sums: dict[str, float] = {}
            for _ in range(calls):
                out = tasks[name]()
                figures = out if isinstance(out, Mapping) else {name: out}
                for key, value in figures.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
            if r < warmup:
                continue
            for key, value in sums.items():
                samples.setdefault(key, []).append(value / calls)
        if progress is not None:
            progress(r + 1, total)
    return samples


def spreads(samples: Mapping[str, list[float]]) -> dict[str, Spread]:
    """A Spread per named figure."""
    return {name: Spread.of(values) for name, values in samples.items()}


def noisy_warnings(figures: Mapping[str, Spread], context: str = "") -> list[str]:
    """One warning per figure whose IQR / median exceeds NOISY_REL_IQR."""
    where = f"{context}: " if context else ""
    return [
        f"{where}{name} is noisy: IQR/median = {100 * s.rel_iqr:.0f} % > "
        f"{100 * NOISY_REL_IQR:.0f} %"
        for name, s in figures.items()
        if s.noisy
    ]
