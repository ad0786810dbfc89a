"""The ell -> infinity per-token figures (paper Eq. 3, 5, 6), generalised to any d/2 <= d_bar < d.

Derivation (this project's generalisation; the paper states only d_bar = d/2). From the run model
T = d_bar*ell + (d - d_bar)*N and C = T + k(d - d_bar)*ell, with N - 1 ~ Bin(ell - 1, 1 - p) the
law of large numbers gives N/ell -> 1 - p almost surely as ell -> infinity. Hence

    T/ell -> d_bar + (d - d_bar)(1 - p) = d - (d - d_bar) p                  (latency per token)
    C/ell -> d - (d - d_bar) p + k (d - d_bar)                              (compute per token)
    C/T   -> 1 + k (d - d_bar) / (d - (d - d_bar) p)                         (compute per time)

At d_bar = d/2 these reduce to d(1 - p/2) (Eq. 3), d(2 + k - p)/2 (Eq. 6) and
(k + 2 - p)/(2 - p) (Eq. 5). ``ppdmodel.symbolic`` derives the same limits with sympy.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.theorem import _as_result
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_positive_int,
    check_probability,
    d_bar_or_half_depth,
)


def _validate(d, d_bar, p, k=None):
    """Check d, d_bar (default d/2) and p (and that ``k``, when given, broadcasts with them);
    return them as float64.

    d_bar is an integer layer, or exactly d/2 (the paper's setting of Eq. 3, 5 and 6, which
    these limits are stated at for any d, odd d included).
    """
    d = check_positive_int("d", d)
    d_bar = check_d_bar(d, d_bar_or_half_depth(d, d_bar), half_depth_ok=True)
    p = check_probability("p", p)
    check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), p=np.shape(p), k=np.shape(k))
    return d, d_bar, p


def latency_per_token(*, d, p, d_bar=None):
    """Latency per token as ell -> infinity, in time units: d - (d - d_bar) p.

    Eq. 3 of the paper at d_bar = d/2 (the default): d (1 - p/2). Greedy decoding takes d.
    """
    d, d_bar, p = _validate(d, d_bar, p)
    return _as_result(np.subtract(d, np.multiply(np.subtract(d, d_bar), p)))


def compute_per_time(*, d, p, k, d_bar=None):
    """Average compute units busy per time unit as ell -> infinity (dimensionless).

    1 + k (d - d_bar) / (d - (d - d_bar) p); Eq. 5 at d_bar = d/2: (k + 2 - p)/(2 - p).
    Greedy decoding uses 1.
    """
    k = check_positive_int("k", k)
    d, d_bar, p = _validate(d, d_bar, p, k)
    gap = np.subtract(d, d_bar)
    return _as_result(1.0 + np.multiply(k, gap) / np.subtract(d, np.multiply(gap, p)))


def compute_per_token(*, d, p, k, d_bar=None):
    """Compute per token as ell -> infinity, in compute units x time units.

    d - (d - d_bar) p + k (d - d_bar); Eq. 6 at d_bar = d/2: d (2 + k - p)/2 (the paper prints
    it per unit d). Greedy decoding uses d.
    """
    k = check_positive_int("k", k)
    d, d_bar, p = _validate(d, d_bar, p, k)
    gap = np.subtract(d, d_bar)
    return _as_result(np.subtract(d, np.multiply(gap, p)) + np.multiply(k, gap))
