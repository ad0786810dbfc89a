"""A prediction with its uncertainty: the costs' sampling error and p's (this project's extension).

A prediction rests on two estimates: the cost profile's medians (each from n timed samples)
and a match rate p (M matches in n predictable tokens). Neither is exact, so a prediction is
an interval, not a number:

* costs: the profile's bootstrap replicates (``CostProfile.cost_replicates``: every timed
  sample set redrawn with replacement and the costs rebuilt from the medians; an older
  profile without samples contributes no cost spread);
* p: Jeffreys' posterior of a binomial rate, Beta(M + 1/2, n - M + 1/2) with M = p n
  (``p_draws``); p given without its n (or a replayed trace, whose m_t are known) contributes
  none.

``prediction_interval`` evaluates a prediction on draw i = (replicate i, p draw i) and takes
the central ``level`` share of the values (percentile interval, seeded). An interval is a
statement about the estimates, not about a run: a measured median outside it says a cost
moved between the profile and the run, or a term is missing (``measure.eval.terms``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Real

import numpy as np

from ppdmodel.costs import DecodeCosts
from ppdmodel.validation import (
    as_int,
    as_real,
    as_real_array,
    check_instance,
    check_probability,
    check_seed,
    is_finite,
    items_of,
)

LEVEL = 0.95
"""The default central share of an interval."""
DRAWS = 200
"""Draws behind an interval by default (cost replicates are cycled when fewer)."""
MAX_DRAWS = 100_000
"""The most draws an interval may ask for."""
MISSING_LOG_SD = 0.05
"""Log-sd standing in for a cost profile's sampling error where it kept no replicates: a
missing source widens an interval by a stated default, never narrows it."""


@dataclass(frozen=True)
class Interval:
    """A central interval [low, high] at ``level`` around a point prediction (same unit)."""

    low: float
    high: float
    level: float = LEVEL
    """The share of draws inside."""

    def __post_init__(self) -> None:
        for name in ("low", "high"):
            value = getattr(self, name)
            ok = isinstance(value, int | float | np.floating) and not isinstance(value, bool)
            if not ok or not is_finite(value):
                raise ValueError(f"Interval.{name} must be a finite number, got {value!r}")
        if self.low > self.high:
            raise ValueError(f"Interval.low must be <= high, got {self.low!r} > {self.high!r}")
        check_level(self.level)

    def contains(self, value: float) -> bool:
        """True when low <= value <= high."""
        if isinstance(value, bool | np.bool_) or not isinstance(value, Real):
            raise ValueError(f"value must be a real number, got {value!r:.60}")
        return bool(self.low <= value <= self.high)

    def overlaps(self, other: Interval) -> bool:
        """True when the two intervals share a point (too close to call)."""
        check_instance("other", other, Interval)
        return bool(self.low <= other.high and other.low <= self.high)

    def scaled(self, factor: float) -> Interval:
        """The interval in another unit (factor > 0)."""
        factor = as_real("factor", factor, strict=True)
        if not (is_finite(self.low * factor) and is_finite(self.high * factor)):
            raise ValueError(f"factor {factor!r} takes the interval beyond float64's range")
        return Interval(self.low * factor, self.high * factor, self.level)

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high, "level": self.level}


def check_level(level) -> float:
    """``level`` if a real in (0, 1), else ValueError naming it."""
    ok = isinstance(level, int | float) and not isinstance(level, bool)
    if not ok or not 0 < level < 1:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    return float(level)


def p_draws(*, p, n=None, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """``draws`` values of a match rate measured as ``p`` over ``n`` predictable tokens:
    Jeffreys' Beta(p n + 1/2, (1 - p) n + 1/2); ``n`` None: p itself, ``draws`` times."""
    p = check_probability("p", p)
    if np.ndim(p) != 0:
        raise ValueError(f"p must be one match rate in [0, 1], got an array of shape {np.shape(p)}")
    draws = as_int("draws", draws, limit=MAX_DRAWS)
    check_seed("seed", seed)
    if n is None:
        return np.full(draws, p)
    n = as_int("n", n)
    rng = np.random.default_rng(seed)
    return rng.beta(p * n + 0.5, (1 - p) * n + 0.5, size=draws)


def interval_of(values, *, level: float = LEVEL) -> Interval:
    """The central ``level`` percentile interval of ``values`` (one or more finite numbers)."""
    level = check_level(level)
    values = as_real_array("values", values).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"values must be one or more finite numbers, got {values!r}")
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return Interval(float(low), float(high), level)


def spread_interval(values, *, level: float = LEVEL) -> Interval:
    """A prediction interval from n draws that holds a further draw with probability >= about
    ``level`` whatever their distribution: the r-th smallest and r-th largest draw, r the
    largest with (n + 1 - 2r) / (n + 1) >= ``level`` (at least 1: with 39 or 40 draws, their
    minimum and maximum hold 95 %). Unlike a percentile interval it does not shrink inward
    when draws are few, and unlike a parametric one it never leaves what the draws can reach."""
    level = check_level(level)
    values = np.sort(as_real_array("values", values).ravel())
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"values must be one or more finite numbers, got {values!r:.80}")
    n = values.size
    r = max(1, int(np.floor((n + 1) * (1 - level) / 2)))
    return Interval(float(values[r - 1]), float(values[n - r]), level)


def prediction_interval(
    predict: Callable[[DecodeCosts, float], float],
    costs: DecodeCosts,
    replicates: Sequence[DecodeCosts] = (),
    *,
    p: float = 0.0,
    n=None,
    level: float = LEVEL,
    draws: int = DRAWS,
    seed: int = 0,
) -> Interval:
    """The interval of ``predict(costs, p)`` (module docstring): draw i evaluates it on cost
    replicate i (cycled; ``costs`` itself when there are none) and p draw i (``p_draws``)."""
    if not callable(predict):
        raise TypeError(f"predict must be callable, got {type(predict).__name__}")
    if not isinstance(costs, DecodeCosts):
        raise ValueError(f"costs must be a ppdmodel.DecodeCosts, got {type(costs).__name__}")
    items = items_of(replicates)
    if items is None:
        raise ValueError(
            f"replicates must be a sequence of ppdmodel.DecodeCosts, got "
            f"{type(replicates).__name__}"
        )
    replicates = items
    if any(not isinstance(r, DecodeCosts) for r in replicates):
        raise ValueError("replicates must hold ppdmodel.DecodeCosts values")
    rates = p_draws(p=p, n=n, draws=draws, seed=seed)
    pool = replicates or [costs]
    values = [predict(pool[i % len(pool)], float(rate)) for i, rate in enumerate(rates)]
    values = as_real_array("predict(costs, p)'s values", values)
    if not np.all(np.isfinite(values)):
        raise ValueError("predict(costs, p) must return finite numbers")
    return interval_of(values, level=level)
