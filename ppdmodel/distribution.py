"""The exact law of the PPD latency T = d_bar*ell + (d - d_bar)*N for a fixed output length ell.

N - 1 counts failed early predictions among tokens t = 2..ell. With an i.i.d. match rate p it is
Bin(ell - 1, 1 - p) (scipy.stats.binom); with a per-position p_t it is Poisson-binomial, whose
pmf is the product of the ell - 1 polynomials (1 - q_t) + q_t x (q_t = 1 - p_t), multiplied
pairwise with real FFTs: O(ell log^2 ell), exact to float rounding (about 1e-16 absolute per
entry; ``poisson_binomial_pmf_exact`` is the O(ell^2) reference the tests compare against).
ell is limited to ``MAX_LAW_ELL``: the law holds ell values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppdmodel.theorem import _is_per_position, validate_theorem_args
from ppdmodel.validation import check_limit, check_probability

MAX_LAW_ELL = 10**6
"""Largest ell for latency_distribution: 10^6 values take ~1 s (FFT) and 16 MB."""
QUANTILE_TOLERANCE = 1e-12
"""A cdf value within this of q counts as reaching q (rounding in the cumulative sum)."""


@dataclass(frozen=True)
class LatencyDistribution:
    """Exact distribution of the latency T (time units) of one PPD generation of ell tokens."""

    support: np.ndarray
    """Possible values of T in increasing order: d_bar*ell + (d - d_bar)*n for n = 1..ell."""
    pmf: np.ndarray
    """P(T = support[i]); sums to 1."""
    top: int | None = None
    """Index of the largest value T takes with positive probability (None: the last index
    with pmf > 0). Given by the construction, since the pmf of a long sequence underflows."""

    def __post_init__(self) -> None:
        for name in ("support", "pmf"):
            value = getattr(self, name)
            if not (isinstance(value, np.ndarray) and value.ndim == 1 and value.size >= 1):
                raise ValueError(f"{name} must be a non-empty one-dimensional numpy array")
            if value.dtype.kind not in "iuf" or not np.all(np.isfinite(value)):
                raise ValueError(f"{name} must hold finite real numbers")
        if self.support.shape != self.pmf.shape:
            raise ValueError("support and pmf must have the same length")
        if self.pmf.min() < 0 or abs(self.pmf.sum() - 1.0) > 1e-9:
            raise ValueError("pmf must be >= 0 and sum to 1")
        if self.support.size > 1 and not np.all(np.diff(self.support) > 0):
            raise ValueError("support must be strictly increasing")
        if self.top is not None and (
            isinstance(self.top, bool) or not isinstance(self.top, int | np.integer)
            or not 0 <= self.top < self.support.size
        ):  # fmt: skip
            raise ValueError(f"top must be an index into support or None, got {self.top!r}")

    def __repr__(self) -> str:
        """A short summary, not the two arrays."""
        return (
            f"LatencyDistribution({self.support.size} values in [{self.support[0]:g}, "
            f"{self.support[-1]:g}], mean={self.mean:.6g}, std={self.std:.4g}, "
            f"p50={self.p50:g}, p99={self.p99:g})"
        )

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

    @property
    def max(self) -> float:
        """The largest value T takes with positive probability (the top of its support)."""
        return float(self.support[self._top()])

    def _top(self) -> int:
        if self.top is not None:
            return int(self.top)
        return int(np.flatnonzero(self.pmf)[-1])

    def quantile(self, q):
        """Smallest support value t with P(T <= t) >= q (scalar or array q in [0, 1]).

        ``quantile(1.0)`` is the top of the support (``max``). For q < 1 a cdf within
        ``QUANTILE_TOLERANCE`` of q counts as reaching it (rounding of the cumulative sum).
        """
        q = np.asarray(check_probability("q", q), dtype=float)
        top = self._top()
        idx = np.searchsorted(self.cdf, q - QUANTILE_TOLERANCE, side="left")
        idx = np.where(q >= 1.0, top, np.minimum(idx, top))
        values = self.support[idx]
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
    """pmf of the number of successes among independent Bernoulli(q_i), by FFT convolution.

    Returns an array of length len(q) + 1. The polynomials (1 - q_i) + q_i x are multiplied
    pairwise, level by level (all pairs of a level in one batched real FFT): O(n log^2 n).
    Certain outcomes (q_i = 0 or 1) only shift the law and are taken out first, so entries
    outside [#(q_i = 1), #(q_i > 0)] are exactly 0; rounding noise (~1e-16) is clipped at 0.
    """
    q = np.asarray(check_probability("q", q), dtype=float).ravel()
    n = q.size
    pmf = np.zeros(n + 1)
    sure = int(np.count_nonzero(q == 1.0))
    random = q[(q > 0.0) & (q < 1.0)]
    pmf[sure : sure + random.size + 1] = _product_fft(random)
    return pmf


def _product_fft(q: np.ndarray) -> np.ndarray:
    """Coefficients of prod_i ((1 - q_i) + q_i x), normalised to sum 1."""
    from scipy import fft  # scipy is imported only when a per-position law is built

    n = q.size
    if n == 0:
        return np.ones(1)
    size = 1 << (n - 1).bit_length()  # pad with q = 0 (the polynomial 1) to a power of 2
    polys = np.zeros((size, 2))
    polys[:, 0] = 1.0
    polys[:n, 0], polys[:n, 1] = 1.0 - q, q
    while polys.shape[0] > 1:
        length = 2 * polys.shape[1] - 1  # coefficients of a product of two polynomials
        nfft = fft.next_fast_len(length, real=True)
        spectra = fft.rfft(polys, n=nfft, axis=1)
        polys = fft.irfft(spectra[0::2] * spectra[1::2], n=nfft, axis=1)[:, :length]
    pmf = np.clip(polys[0, : n + 1], 0.0, None)
    return pmf / pmf.sum()


def poisson_binomial_pmf_exact(q) -> np.ndarray:
    """The same pmf by the O(n^2) dynamic program, folding one Bernoulli in at a time.

    The reference for ``poisson_binomial_pmf`` (tests); use that one for long sequences.
    """
    q = np.asarray(check_probability("q", q), dtype=float).ravel()
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
    N - 1 is Poisson-binomial with success probabilities 1 - p_t. ell <= ``MAX_LAW_ELL``.
    """
    d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position)
    d, d_bar, ell = _scalar("d", d), _scalar("d_bar", d_bar), _scalar("ell", ell)
    check_limit("ell", ell, MAX_LAW_ELL, "latency_distribution holds one value per run count")
    ell = int(ell)
    runs = np.arange(1, ell + 1)  # N = 1..ell
    support = d_bar * ell + (d - d_bar) * runs
    if _is_per_position(ell, p, per_position):
        if np.ndim(p) != 1:
            raise ValueError("p must be one-dimensional (t = 2..ell) for latency_distribution")
        q = 1.0 - np.asarray(p, dtype=float)
        pmf = poisson_binomial_pmf(q)
        top = int(np.count_nonzero(q > 0))  # N - 1 = number of possible failures
    else:
        from scipy.stats import binom  # scipy.stats is slow to import; load it only here

        p = _scalar("p", p)
        pmf = binom.pmf(runs - 1, ell - 1, 1.0 - p)
        top = 0 if p == 1.0 else ell - 1
    support.setflags(write=False)
    pmf = np.asarray(pmf, dtype=float)
    pmf.setflags(write=False)
    return LatencyDistribution(support=support, pmf=pmf, top=top)
