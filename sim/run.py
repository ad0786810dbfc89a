"""Running simulations: one sequence (``simulate``) or many, seeded (``monte_carlo``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter

import numpy as np
import pandas as pd

from ppdmodel.validation import (
    as_int,
    check_columns,
    check_flag,
    check_instance,
    check_seed,
    ndim,
)
from sim.config import MAX_WORK, SimConfig, estimated_work
from sim.pool import tied_pool, useful_workers
from sim.schedule import Schedule

MAX_RUNS = 10**6
"""Largest n of monte_carlo (one seed and one row per run)."""
MAX_PROCESSES = 256
"""Largest worker pool of monte_carlo."""
POOL_MIN_WORK = 2 * 10**6
"""Least work (units of ~1 us) monte_carlo spreads over processes: spawning workers takes
about a second or two, so less runs in this process."""
SAMPLE_COLUMNS = ("latency_units", "latency_s", "compute_units", "n_runs")

EVENT_COLUMNS = ("process", "gpu", "token", "layer_start", "layer_end", "start", "end", "kind")


@dataclass
class SimResult:
    """One simulated sequence. Times in seconds (``*_s``) and in time units (``*_units``).

    A time unit is one layer at batch 1 (``config.cost.unit_seconds()``, the mean layer for
    measured costs; ``config.costs.layer_s``), so under UniformCost() units equal the paper's.
    """

    config: SimConfig
    """The configuration that was run."""
    m: list[int]
    """The realised m_t, t = 2..ell."""
    raw_records: list[tuple] = field(repr=False)
    """Event records (columns ``EVENT_COLUMNS``) in the order they were logged."""
    latency_s: float
    """Time when main finished the last token (overheads included), seconds."""
    makespan_s: float
    """Time when the last block of any process ended, seconds (>= latency_s)."""
    busy_s: list[float]
    """Busy time per GPU, seconds (a batched block counts once)."""
    unit_s: float
    """Seconds per time unit."""

    @property
    def n_runs(self) -> int:
        """N: the number of runs (greedy: every token is its own run, N = ell)."""
        if self.config.schedule == "greedy":
            return self.config.ell
        return 1 + sum(1 - x for x in self.m)

    @property
    def latency_units(self) -> float:
        return self.latency_s / self.unit_s

    @property
    def compute_s(self) -> float:
        """Busy GPU time summed over GPUs, seconds."""
        return float(sum(self.busy_s))

    @property
    def compute_units(self) -> float:
        return self.compute_s / self.unit_s

    @property
    def utilisation(self) -> pd.Series:
        """Busy time / makespan per GPU, in [0, 1]."""
        span = self.makespan_s or 1.0
        return pd.Series(np.asarray(self.busy_s) / span, name="utilisation").rename_axis("gpu")

    @cached_property
    def records(self) -> list[tuple]:
        """Event records sorted by start, end, process, token, layer_start."""
        return sorted(self.raw_records, key=_sort_key)

    @cached_property
    def events(self) -> pd.DataFrame:
        """The event log as a DataFrame (gpu -1: host or link)."""
        return pd.DataFrame.from_records(self.records, columns=list(EVENT_COLUMNS))

    def __repr__(self) -> str:
        cfg = self.config
        return (
            f"SimResult({cfg.schedule}, d={cfg.d}, d_bar={cfg.d_bar}, k={cfg.k}, ell={cfg.ell}: "
            f"latency {self.latency_units:.6g} units ({self.latency_s:.4g} s), "
            f"N={self.n_runs}, compute {self.compute_units:.6g} units)"
        )

    def summary(self) -> dict:
        """Headline numbers as a JSON-ready dict."""
        return {
            "schedule": self.config.schedule,
            "latency_units": self.latency_units,
            "latency_s": self.latency_s,
            "compute_units": self.compute_units,
            "compute_s": self.compute_s,
            "n_runs": self.n_runs,
            "utilisation": [float(u) for u in self.utilisation],
            "extension_below_half": self.config.extension,
        }


_sort_key = itemgetter(5, 6, 0, 2, 3)  # start, end, process, token, layer_start


def simulate(config: SimConfig, seed=None, m=None, record_events: bool = True) -> SimResult:
    """Simulate one sequence; m_t come from ``config.matches`` (drawn with ``seed``) or ``m``."""
    check_instance("config", config, SimConfig)
    check_flag("record_events", record_events)
    if m is None:
        m = config.matches.draw(config.ell, np.random.default_rng(check_seed("seed", seed)))
    elif isinstance(m, str | bytes) or ndim("m", m) != 1:
        raise ValueError(f"m must be a sequence of ell - 1 = {config.ell - 1} values 0 and 1")
    elif len(m) != config.ell - 1:
        raise ValueError(f"m must hold ell - 1 = {config.ell - 1} values, got {len(m)}")
    elif any(not isinstance(x, int | float | np.number | np.bool_) or x not in (0, 1) for x in m):
        raise ValueError(f"m must hold only 0 and 1 (m_t for t = 2..ell), got {list(m)!r:.200}")
    schedule = Schedule(config, m, record_events=record_events).run()
    return SimResult(
        config=config,
        m=schedule.m,
        raw_records=schedule.records,
        latency_s=schedule.latency_s,
        makespan_s=schedule.makespan_s,
        busy_s=schedule.busy_s,
        unit_s=schedule.costs.unit_s,
    )


@dataclass
class MonteCarloSummary:
    """Statistics of latency over n seeded runs (time units); samples holds every run."""

    n: int
    mean: float
    """Mean latency, time units."""
    std: float
    """Sample standard deviation of latency (ddof=1), time units."""
    ci_low: float
    """Lower end of the 95% normal confidence interval of the mean."""
    ci_high: float
    p50: float
    p99: float
    compute_mean: float
    """Mean compute (busy GPU time), time units."""
    compute_std: float
    samples: pd.DataFrame = field(repr=False)
    """Per run: latency_units, latency_s, compute_units, n_runs."""

    def to_dict(self) -> dict:
        """Plain floats (no numpy scalars), samples excluded."""
        return {
            key: int(value) if key == "n" else float(value)
            for key, value in self.__dict__.items()
            if key != "samples"
        }

    def __repr__(self) -> str:
        spread = (
            f", std={self.std:.4g}, 95% CI of the mean [{self.ci_low:.6g}, {self.ci_high:.6g}]"
            if self.n > 1
            else ""
        )
        return (
            f"MonteCarloSummary(n={self.n}, mean={self.mean:.6g}{spread}, p50={self.p50:.6g}, "
            f"p99={self.p99:.6g}, compute_mean={self.compute_mean:.6g})"
        )


def _run_one(args) -> tuple[float, float, float, int]:
    config, seed = args
    result = simulate(config, seed=seed, record_events=False)
    return result.latency_units, result.latency_s, result.compute_units, result.n_runs


def monte_carlo(config: SimConfig, n: int, seed=None, processes: int = 1) -> MonteCarloSummary:
    """Simulate ``n`` sequences; run i uses ``SeedSequence(seed).spawn(n)[i]`` (reproducible,
    the same with any ``processes``, which fans the runs out over a worker pool tied to this
    process, ``sim.pool``: at most ``processes`` workers, no more than the CPU count or n)."""
    check_instance("config", config, SimConfig)
    n = as_int("n", n, limit=MAX_RUNS)
    processes = useful_workers(as_int("processes", processes, limit=MAX_PROCESSES), n)
    work = n * estimated_work(config) / processes
    if work > MAX_WORK:
        raise ValueError(
            f"n = {n} runs on {processes} process(es) is about {work / 1e6:.3g} s of "
            f"simulation, above the limit of {MAX_WORK / 1e6:.3g} s (sim.config.MAX_WORK): "
            "reduce n"
        )
    seed = check_seed("seed", seed, generator_ok=False)
    seeds = np.random.SeedSequence(seed).spawn(int(n))  # seeds[i] == sequence_seed(seed, i)
    jobs = [(config, s) for s in seeds]
    if n * estimated_work(config) < POOL_MIN_WORK:  # a pool would take longer to start
        processes = 1
    if processes > 1:
        with tied_pool(processes) as pool:
            rows = list(pool.map(_run_one, jobs, chunksize=max(1, n // (4 * processes))))
    else:
        rows = [_run_one(job) for job in jobs]
    samples = pd.DataFrame(rows, columns=list(SAMPLE_COLUMNS))
    return summarise(samples)


def sequence_seed(seed, i: int) -> np.random.SeedSequence:
    """The seed of sequence i of ``monte_carlo(config, n, seed)`` (any n > i)."""
    i = as_int("i", i, minimum=0)
    return np.random.SeedSequence(check_seed("seed", seed, generator_ok=False), spawn_key=(i,))


def summarise(samples: pd.DataFrame) -> MonteCarloSummary:
    """Mean, std, 95% CI of the mean, p50 and p99 of latency; mean/std of compute."""
    check_columns("samples", samples, ("latency_units", "compute_units"))
    if samples.empty:
        raise ValueError("samples must hold at least one run")
    for column in ("latency_units", "compute_units"):
        if samples[column].dtype.kind not in "iuf" or not np.isfinite(samples[column]).all():
            raise ValueError(f"samples column {column!r} must hold finite numbers")
    latency = samples["latency_units"].to_numpy()
    n = len(latency)
    mean = float(latency.mean())
    std = float(latency.std(ddof=1)) if n > 1 else 0.0
    half = 1.959963984540054 * std / np.sqrt(n)
    compute = samples["compute_units"].to_numpy()
    return MonteCarloSummary(
        n=n,
        mean=mean,
        std=std,
        ci_low=mean - half,
        ci_high=mean + half,
        p50=float(np.quantile(latency, 0.5)),
        p99=float(np.quantile(latency, 0.99)),
        compute_mean=float(compute.mean()),
        compute_std=float(compute.std(ddof=1)) if n > 1 else 0.0,
        samples=samples,
    )
