"""Argument checks shared by the closed form: cheap, vectorised, and ValueError on bad input.

Every check names the parameter and the allowed range in its message. Checks reduce an array
with one or two passes (min/max) so that validating a 10^6-point grid costs about as much as
evaluating the formula once; scalars take a plain-Python fast path.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

ArrayLike = float | int | np.ndarray


def _as_array(name: str, value) -> np.ndarray:
    """Return ``value`` as a numeric numpy array, or raise naming ``name``."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real number or an array of them, got {value!r}")
    return arr


def _describe(arr: np.ndarray) -> str:
    """A short description of an offending value for an error message."""
    return repr(arr.item()) if arr.size == 1 else f"an array with min {arr.min()!r}"


def check_positive_int(name: str, value) -> ArrayLike:
    """Check that ``value`` is a positive integer (or an array of them); return it.

    Integer-valued floats (``40.0``) are accepted; NaN, inf, 0, negatives and 2.5 are not.
    """
    if isinstance(value, Integral) and not isinstance(value, bool):
        if value < 1:
            raise ValueError(f"{name} must be a positive integer (>= 1), got {value!r}")
        return value
    if isinstance(value, Real) and not isinstance(value, bool):
        if not (math.isfinite(value) and value >= 1 and value == int(value)):
            raise ValueError(f"{name} must be a positive integer (>= 1), got {value!r}")
        return value
    arr = _as_array(name, value)
    if arr.size == 0:
        return arr
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must be a positive integer (>= 1), got booleans")
    lo = arr.min()
    if arr.dtype.kind == "f":
        hi = arr.max()
        ok = bool(lo >= 1) and math.isfinite(hi) and bool(np.all(arr == np.floor(arr)))
    else:
        ok = bool(lo >= 1)
    if not ok:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {_describe(arr)}")
    return arr


def check_probability(name: str, value) -> ArrayLike:
    """Check that ``value`` lies in [0, 1] and is not NaN (scalar or array); return it."""
    if isinstance(value, Real) and not isinstance(value, bool):
        if not 0.0 <= value <= 1.0:  # False for NaN as well
            raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
        return value
    arr = _as_array(name, value)
    if arr.size == 0:
        return arr
    lo, hi = arr.min(), arr.max()  # both NaN if any element is NaN
    if not (lo >= 0 and hi <= 1):
        bad = "NaN" if (np.isnan(lo) or np.isnan(hi)) else f"values in [{lo}, {hi}]"
        raise ValueError(f"{name} must be a probability in [0, 1], got {bad}")
    return arr


def check_d_bar(d, d_bar) -> None:
    """Check d/2 <= d_bar < d (Theorem 4.1's domain), elementwise after broadcasting."""
    if isinstance(d_bar, Real) and isinstance(d, Real):
        if not math.isfinite(d_bar):
            raise ValueError(f"d_bar must be a finite number in [d/2, d), got {d_bar!r}")
        if 2 * d_bar < d:
            raise ValueError(
                f"d_bar={d_bar!r} is below d/2={d / 2!r}: outside Theorem 4.1's domain "
                "(d/2 <= d_bar < d); the closed form does not cover it"
            )
        if d_bar >= d:
            raise ValueError(f"d_bar must satisfy d/2 <= d_bar < d, got d_bar={d_bar!r}, d={d!r}")
        return
    d_bar_arr = _as_array("d_bar", d_bar)
    if d_bar_arr.size == 0:
        return
    ratio = np.true_divide(d_bar_arr, d)  # d > 0 is checked first; one pass, two reductions
    lo, hi = ratio.min(), ratio.max()
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError("d_bar must be a finite number in [d/2, d), got NaN or inf")
    if lo < 0.5:
        raise ValueError(
            "d_bar is below d/2 for some element: outside Theorem 4.1's domain "
            "(d/2 <= d_bar < d); the closed form does not cover it"
        )
    if hi >= 1:
        raise ValueError("d_bar must satisfy d/2 <= d_bar < d; got d_bar >= d for some element")


def check_nonnegative(name: str, value) -> ArrayLike:
    """Check that ``value`` is a finite real >= 0 (scalar or array); return it."""
    if isinstance(value, Real) and not isinstance(value, bool):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        return value
    arr = _as_array(name, value)
    if arr.size and not (bool(arr.min() >= 0) and math.isfinite(arr.max())):
        raise ValueError(f"{name} must be a finite number >= 0, got {_describe(arr)}")
    return arr


def check_positive(name: str, value) -> ArrayLike:
    """Check that ``value`` is a finite real > 0 (scalar or array); return it."""
    check_nonnegative(name, value)
    if not bool(np.all(np.asarray(value) > 0)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def check_model(d, d_bar, ell=None) -> None:
    """Check the model's shape parameters: d, ell positive integers and d/2 <= d_bar < d."""
    check_positive_int("d", d)
    if ell is not None:
        check_positive_int("ell", ell)
    check_d_bar(d, d_bar)


def default_d_bar(d, d_bar):
    """Return ``d_bar``, or d/2 (the paper's Eq. 3, 5, 6 setting) when it is None."""
    return np.divide(d, 2) if d_bar is None else d_bar
