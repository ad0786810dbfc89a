"""The exact law of the PPD latency T = d_bar*ell + (d - d_bar)*N for a fixed output length ell.

N - 1 counts failed early predictions among tokens t = 2..ell. With an i.i.d. match rate p it is
Bin(ell - 1, 1 - p) (scipy.stats.binom); with a per-position p_t it is Poisson-binomial, whose
pmf is built here by exact convolution of the ell - 1 Bernoulli laws (O(ell^2) dynamic program).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppdmodel.theorem import _is_per_position, validate_theorem_args
from ppdmodel.validation import check_probability


@dataclass(frozen=True)
class LatencyDistribution:
    """Exact distribution of the latency T (time units) of one PPD generation of ell tokens."""

    support: np.ndarray
    """Possible values of T in increasing order: d_bar*ell + (d - d_bar)*n for n = 1..ell."""
    pmf: np.ndarray
    """P(T = support[i]); sums to 1."""

    @property
    def cdf(self) -> np.ndarray:
        """P(T <= support[i])."""
        return np.minimum(np.cumsum(self.pmf), 1.0)

    @property
    def mean(self) -> float:
        """E[T] computed from the pmf (equals Theorem 4.1)."""
        return float(np.dot(self.support, self.pmf))

    @property
    def var(self) -> float:
        """Var[T] computed from the pmf."""
        centred = self.support - self.mean
        return float(np.dot(centred * centred, self.pmf))

    @property
    def std(self) -> float:
        """Standard deviation of T."""
        return float(np.sqrt(self.var))

    def quantile(self, q):
        """Smallest support value t with P(T <= t) >= q (scalar or array q in [0, 1])."""
        check_probability("q", q)
        idx = np.searchsorted(self.cdf, np.asarray(q, dtype=float) - 1e-12, side="left")
        values = self.support[np.minimum(idx, self.support.size - 1)]
        return float(values) if np.ndim(values) == 0 else values

    @property
    def p50(self) -> float:
        """Median latency."""
        return self.quantile(0.5)

    @property
    def p99(self) -> float:
        """99th-percentile latency."""
        return self.quantile(0.99)


def poisson_binomial_pmf(q) -> np.ndarray:
    """pmf of the number of successes among independent Bernoulli(q_i), by exact convolution.

    Returns an array of length len(q) + 1. Each step folds one Bernoulli in: O(n^2) in total.
    """
    q = np.asarray(q, dtype=float)
    pmf = np.zeros(q.size + 1)
    pmf[0] = 1.0
    for i, qi in enumerate(q):
        head = pmf[: i + 2].copy()
        pmf[1 : i + 2] = head[1:] * (1.0 - qi) + head[:-1] * qi
        pmf[0] = head[0] * (1.0 - qi)
    return pmf


def _scalar(name: str, value) -> float:
    """Return ``value`` as a float, or raise if it is an array."""
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a scalar for latency_distribution, got an array")
    return float(value)


def latency_distribution(
    *, d, d_bar, ell, p, per_position: bool | None = None
) -> LatencyDistribution:
    """Exact law of T for scalar d, d_bar, ell and an i.i.d. or per-position match rate p.

    i.i.d. p: N - 1 ~ Bin(ell - 1, 1 - p). Per-position p (ell - 1 values, t = 2..ell):
    N - 1 is Poisson-binomial with success probabilities 1 - p_t.
    """
    validate_theorem_args(d, d_bar, ell, p)
    d, d_bar, ell = _scalar("d", d), _scalar("d_bar", d_bar), int(_scalar("ell", ell))
    runs = np.arange(1, ell + 1)  # N = 1..ell
    support = d_bar * ell + (d - d_bar) * runs
    if _is_per_position(ell, p, per_position):
        if np.ndim(p) != 1:
            raise ValueError("p must be one-dimensional (t = 2..ell) for latency_distribution")
        pmf = poisson_binomial_pmf(1.0 - np.asarray(p, dtype=float))
    else:
        from scipy.stats import binom  # scipy.stats is slow to import; load it only here

        pmf = binom.pmf(runs - 1, ell - 1, 1.0 - _scalar("p", p))
    support.setflags(write=False)
    pmf = np.asarray(pmf, dtype=float)
    pmf.setflags(write=False)
    return LatencyDistribution(support=support, pmf=pmf)
