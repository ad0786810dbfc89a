"""Theorem 4.1 of the PPD paper: expected latency and compute for a fixed output length ell.

Run model (paper section 4.2, Algorithm 2): d layers of one time unit each, early prediction at
layer d_bar (d/2 <= d_bar < d), k candidates, ell generated tokens. N = 1 + #failed early
predictions runs; latency T = d_bar*ell + (d - d_bar)*N and compute C = T + k*(d - d_bar)*ell.

``p`` is either the i.i.d. match rate p_correct (scalar or array, broadcast against d, d_bar,
ell, k) or a per-position match rate p_t for t = 2..ell (paper Tables 6-8): an array whose last
axis has ell - 1 entries, summed over that axis.

Arguments: d, ell (and k) are integers in [1, 2^53]; d_bar is an integer layer with
d/2 <= d_bar < d (20.5 is not a layer and is refused; only the ell -> infinity forms of
``ppdmodel.asymptotic`` also take d_bar = d/2 for odd d, the paper's Eq. 3, 5, 6 setting).
Everything is computed in float64, whatever the input dtypes.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_flag,
    check_positive_int,
    check_probability,
)

F = np.float64
"""The dtype everything is computed in."""


def _is_per_position(ell, p, per_position: bool | None) -> bool:
    """Decide whether ``p`` is per-position (last axis = t = 2..ell) or i.i.d. and broadcast.

    ``None`` means auto: per-position exactly when ell is a scalar and p's last axis has
    ell - 1 entries. Pass ``per_position=False`` to broadcast such a p as a grid instead.
    """
    check_flag("per_position", per_position, allow_none=True)
    if per_position is False:
        return False
    p_shape = np.shape(p)
    ell_scalar = np.ndim(ell) == 0
    if per_position is None:
        return ell_scalar and len(p_shape) >= 1 and p_shape[-1] == int(ell) - 1
    if not ell_scalar:
        raise ValueError("ell must be a scalar when p is per-position (one value per t=2..ell)")
    if len(p_shape) == 0 or p_shape[-1] != int(ell) - 1:
        raise ValueError(
            f"p must have ell - 1 = {int(ell) - 1} values (t = 2..ell) on its last axis when "
            f"per_position=True, got shape {p_shape}"
        )
    return True


def expected_matches(*, ell, p, per_position: bool | None = None):
    """Expected number of accepted early predictions, E[ell - N] = sum_{t=2..ell} p_t.

    i.i.d.: (ell - 1) p (proof of Theorem 4.1). Per-position: the sum of p_t over t = 2..ell.
    ``ell`` and ``p`` are checked (float64, no integer wrap-around).
    """
    ell, p = check_positive_int("ell", ell), check_probability("p", p)
    per = _is_per_position(ell, p, per_position)
    check_broadcast(ell=np.shape(ell), p=np.shape(p)[:-1] if per else np.shape(p))
    if per:
        return np.sum(p, axis=-1)
    return np.multiply(np.subtract(ell, 1), p)


def validate_theorem_args(
    d, d_bar, ell, p, per_position: bool | None = None, as_float=True, **others
):
    """Check d, ell positive integers <= 2^53, d_bar an integer in [d/2, d), p in [0, 1].

    Returns (d, d_bar, ell, p) as float64 (Python floats for scalars) so that the formulas
    cannot wrap around in a small integer dtype, after checking that they broadcast together
    (a per-position p's last axis excluded). Raises ValueError naming the parameter.
    ``as_float=False`` leaves integer arrays as they are, for callers that compute in float64
    with ufunc ``dtype=`` arguments (one pass less over each array).
    """
    d = check_positive_int("d", d, as_float=as_float)
    ell = check_positive_int("ell", ell, as_float=as_float)
    d_bar = check_d_bar(d, d_bar, as_float=as_float)
    p = check_probability("p", p)
    p_shape = np.shape(p)[:-1] if _is_per_position(ell, p, per_position) else np.shape(p)
    others = {name: np.shape(value) for name, value in others.items()}
    check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), ell=np.shape(ell), p=p_shape, **others)
    return d, d_bar, ell, p


def _as_result(x):
    """Return a Python float for 0-d results, the array otherwise."""
    return float(x) if np.ndim(x) == 0 else x


def expected_latency(*, d, d_bar, ell, p, per_position: bool | None = None):
    """Expected latency E[T] of PPD in time units (layers), Theorem 4.1.

    E[T] = d*ell - (d - d_bar)(ell - 1) p            (i.i.d. p = p_correct)
    E[T] = d*ell - (d - d_bar) sum_{t=2..ell} p_t     (per-position p, Tables 6-8)

    Greedy decoding takes d*ell. Broadcasts over numpy arrays; see the module docstring for how
    a per-position ``p`` is recognised (``per_position`` forces the choice). Computed in float64
    whatever the input dtypes.
    """
    d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position, as_float=False)
    return _latency(d, d_bar, ell, p, per_position)


def _latency(d, d_bar, ell, p, per_position):
    """Theorem 4.1's E[T] for validated arguments, computed in float64 (``dtype=F``)."""
    gap = np.subtract(d, d_bar, dtype=F)
    if _is_per_position(ell, p, per_position):
        saved = np.multiply(gap, np.sum(p, axis=-1, dtype=F))
    else:  # scalar factors first: one full-size pass when only p is an array
        saved = np.multiply(np.multiply(gap, np.subtract(ell, 1, dtype=F)), p, dtype=F)
    greedy = np.multiply(d, ell, dtype=F)
    if _writable_float_result(saved, greedy):
        return np.subtract(greedy, saved, out=saved)  # reuse the temporary: no allocation
    return _as_result(greedy - saved)


def _writable_float_result(saved, greedy) -> bool:
    """True if ``greedy - saved`` can be written into the temporary ``saved``."""
    return (
        isinstance(saved, np.ndarray)
        and saved.ndim > 0
        and saved.dtype.kind == "f"
        and np.ndim(greedy) <= saved.ndim
        and np.broadcast_shapes(np.shape(greedy), saved.shape) == saved.shape
    )


def expected_compute(*, d, d_bar, ell, p, k, per_position: bool | None = None):
    """Expected total compute E[C] of PPD in compute units x time units, Theorem 4.1.

    E[C] = d*ell - (d - d_bar)(ell - 1) p + k (d - d_bar) ell = E[T] + k (d - d_bar) ell.
    Per-position p replaces (ell - 1) p by sum_{t=2..ell} p_t. ``k`` is the number of
    candidates (sub-processes), a positive integer; k + 1 compute units run in parallel.
    """
    k = check_positive_int("k", k, as_float=False)
    d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position, as_float=False,
                                             k=k)  # fmt: skip
    latency = _latency(d, d_bar, ell, p, per_position)
    extra = np.multiply(np.multiply(k, np.subtract(d, d_bar, dtype=F), dtype=F), ell, dtype=F)
    return _as_result(np.add(latency, extra))


def latency_variance(*, d, d_bar, ell, p, per_position: bool | None = None):
    """Variance of the latency, Var[T] = (d - d_bar)^2 Var[N], in time units squared.

    i.i.d.: N - 1 ~ Bin(ell - 1, 1 - p), so Var[T] = (d - d_bar)^2 (ell - 1) p (1 - p).
    Per-position: N - 1 is Poisson-binomial, Var[T] = (d - d_bar)^2 sum_t p_t (1 - p_t).
    """
    d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position)
    p_arr = np.asarray(p, dtype=float)
    pq = p_arr * (1.0 - p_arr)
    var_n = expected_matches(ell=ell, p=pq, per_position=per_position)
    return _as_result(np.square(np.subtract(d, d_bar)) * var_n)
