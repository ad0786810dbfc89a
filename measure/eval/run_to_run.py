"""How far two or more validations of the same configurations may disagree by chance alone.

Issue 24 asks that a repeated validation reproduce each configuration's error within 5
percentage points and the median |error| within 2. A run's error is predicted / measured - 1,
and both sides are estimates: the measured speed-up has the interval of its turns
(``measure.eval.turn_speedup``), the predicted one the interval of the profile's cost
replicates (``measure.eval.predict.speedup_interval``). Two runs of a perfectly reproducible
procedure still differ by the noise of both; if that noise alone often moves a row by more
than 5 points, a larger change says nothing about the procedure, and more rounds are the only
way to test the bound.

``noise_allowance`` takes each row's error in every run with its log-scale standard deviation
(from the two intervals, ``log_sd_of``) and asks, by Monte Carlo, how much the rows' errors and
the runs' median |error| move when every run draws its errors about one common centre per row
(the inverse-variance mean of the row's runs) with its own spread: the ``level`` quantile of
each row's change (largest minus smallest error over the runs) and of the median's spread.
A row that moved more than its allowance moved by more than its runs' own intervals explain.
``rounds_to_hold`` scales the measured part of the spread as 1 / sqrt(rounds) (the turns'
interval, ``turn_speedup.rounds_for``) and finds the rounds per run at which a row's allowance
falls to a bound; the predicted part does not shrink with rounds (it is the profile's), so a
row whose profile spread alone exceeds the bound gets None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ppdmodel.intervals import LEVEL, check_level
from ppdmodel.validation import as_int, as_real

DRAWS = 4000
"""Monte Carlo draws of the runs under the null of one centre per row."""
MAX_ROUNDS = 10_000
"""``rounds_to_hold`` gives up beyond this many rounds per run (None)."""


def log_sd_of(low, high, coverage) -> np.ndarray:
    """The log-scale standard deviation a normal law would need to give the interval
    [low, high] of ``coverage`` (elementwise); NaN where the interval is missing, empty of
    coverage or not positive."""
    low, high, coverage = (np.asarray(v, dtype=float) for v in (low, high, coverage))
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (low > 0) & (high >= low) & (coverage > 0) & (coverage < 1)
        pairs = zip(np.ravel(coverage), np.ravel(ok), strict=True)
        z = np.array([NormalDist().inv_cdf((1 + c) / 2) if good else np.nan for c, good in pairs])
        sd = (np.log(high) - np.log(low)) / (2 * z.reshape(np.shape(ok)))
    return np.where(ok, sd, np.nan)


@dataclass(frozen=True)
class Allowance:
    """What chance alone lets the runs differ by, in percentage points, at ``level``."""

    rows: np.ndarray
    """Per row: the change (largest minus smallest error over the runs) chance exceeds with
    probability 1 - level."""
    median: float
    """The spread of the runs' median |error| that chance exceeds with probability
    1 - level."""
    level: float


def _checked(name: str, values) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 2:
        raise ValueError(f"{name} must be a (rows, runs) array with at least 1 row and 2 runs, "
                         f"got shape {array.shape}")  # fmt: skip
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array!r}")
    return array


def _draw(log_errors, log_sds, draws: int, seed: int) -> np.ndarray:
    """(draws, rows, runs) errors, in points, drawn about each row's inverse-variance centre."""
    weights = 1 / np.maximum(log_sds, 1e-12) ** 2
    centre = (weights * log_errors).sum(axis=1, keepdims=True) / weights.sum(axis=1, keepdims=True)
    noise = np.random.default_rng(seed).standard_normal((draws, *log_errors.shape))
    return 100 * np.expm1(centre + log_sds * noise)


def noise_allowance(log_errors, log_sds, *, level: float = LEVEL, draws: int = DRAWS,
                    seed: int = 0) -> Allowance:  # fmt: skip
    """The ``Allowance`` of runs whose rows' log errors (log of predicted / measured) are
    ``log_errors`` with standard deviations ``log_sds``, both (rows, runs) (module docstring)."""
    log_errors = _checked("log_errors", log_errors)
    log_sds = _checked("log_sds", log_sds)
    if log_sds.shape != log_errors.shape or np.any(log_sds < 0):
        raise ValueError(f"log_sds must be >= 0 and shaped like log_errors {log_errors.shape}, "
                         f"got {log_sds!r}")  # fmt: skip
    level = check_level(level)
    draws = as_int("draws", draws, minimum=100)
    points = _draw(log_errors, log_sds, draws, seed)
    changes = points.max(axis=2) - points.min(axis=2)
    medians = np.median(np.abs(points), axis=1)
    spread = medians.max(axis=1) - medians.min(axis=1)
    return Allowance(np.quantile(changes, level, axis=0), float(np.quantile(spread, level)),
                     level)  # fmt: skip


def rounds_to_hold(
    bound: float, rounds: int, measured_sds, predicted_sds, *,
    level: float = LEVEL, draws: int = DRAWS, seed: int = 0,
) -> int | None:  # fmt: skip
    """Rounds per run at which one row's change allowance (``noise_allowance``) falls to
    ``bound`` points, its runs' measured log-sds (``measured_sds``, one per run, taken over
    ``rounds`` rounds) shrinking as 1 / sqrt(rounds) and the predicted ones staying; at least 1,
    None where the predicted spread alone exceeds the bound or more than ``MAX_ROUNDS`` would
    be needed."""
    bound = as_real("bound", bound, strict=True)
    rounds = as_int("rounds", rounds, minimum=1)
    measured = _checked("measured_sds", [measured_sds])[0]
    predicted = _checked("predicted_sds", [predicted_sds])[0]
    if predicted.shape != measured.shape or np.any(measured < 0) or np.any(predicted < 0):
        raise ValueError("measured_sds and predicted_sds must be >= 0, one per run each, got "
                         f"{measured!r} and {predicted!r}")  # fmt: skip

    def allowance(r: float) -> float:
        sds = np.sqrt(measured**2 * rounds / r + predicted**2)[None, :]
        return float(noise_allowance(np.zeros_like(sds), sds, level=level, draws=draws,
                                     seed=seed).rows[0])  # fmt: skip

    if allowance(math.inf) > bound:
        return None
    low, high = 0, 1
    while allowance(high) > bound:
        low, high = high, 2 * high
        if high > 2 * MAX_ROUNDS:
            return None
    while high - low > 1:  # allowance(low) > bound >= allowance(high)
        mid = (low + high) // 2
        low, high = (mid, high) if allowance(mid) > bound else (low, mid)
    return high if high <= MAX_ROUNDS else None
