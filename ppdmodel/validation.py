"""Argument checks shared by ppdmodel and sim: cheap, vectorised, and ValueError on bad input.

Every check names the parameter and the allowed range in its message, and refuses booleans,
strings, None, NaN and infinities where a number is meant. Array checks reduce with one or two
passes (min/max) so that validating a 10^6-point grid costs about as much as evaluating the
formula once; scalars take a plain-Python fast path.

Dtypes: the closed form computes in float64 whatever the input dtype (an int8 ``d`` times an
int8 ``ell`` would wrap around), so the array checks return float64 values, and integer
parameters are refused above ``MAX_EXACT_INT`` = 2^53, the largest range float64 holds
exactly; products of a few such numbers stay far below float64's overflow (~1.8e308).
``as_int``, ``as_real`` and friends are the scalar checks of configuration objects (sim).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from contextlib import contextmanager
from numbers import Integral, Real
from pathlib import Path

import numpy as np

ArrayLike = float | int | np.ndarray

MAX_EXACT_INT = 2**53
"""Largest integer accepted for d, d_bar, ell, k, n: integers up to 2^53 are exact in float64."""


def _show(value) -> str:
    """repr of ``value`` for an error message, shortened for huge integers and long reprs."""
    if isinstance(value, Integral) and not isinstance(value, bool) and abs(int(value)) > 10**30:
        return f"an integer of {int(value).bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _limit(limit) -> str:
    """A limit as printed in error messages, with the reason for the default one."""
    if limit == MAX_EXACT_INT:
        return f"{limit} (2^53: larger integers are not exact in float64)"
    return str(limit)


def is_finite(value) -> bool:
    """``math.isfinite`` that says False, not OverflowError, for an int beyond float64's range."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
    except TypeError:  # not a real number (a list, a string, an array of several values)
        raise TypeError(f"value must be a real number, got {_show(value)}") from None


def _check_limit_type(limit, what: str = "limit", *, finite: bool = False) -> None:
    """A check's own ``limit`` (or ``what``) argument must be a real number, not NaN, and
    finite where ``finite`` (a caller's mistake otherwise)."""
    if not _is_number(limit) or limit != limit or (finite and not is_finite(limit)):
        kind = "a finite real number" if finite else "a real number"
        raise TypeError(f"{what} must be {kind}, got {_show(limit)}")


def _check_option(name: str, value) -> None:
    """A check's own True/False option (``as_float``, ``half_depth_ok``, ...) must be a bool."""
    if value is not True and value is not False:
        raise TypeError(f"{name} must be True or False, got {_show(value)}")


def check_name(name) -> None:
    """A check's ``name`` (the parameter its messages name) must be a non-empty string."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string (the parameter's name), got "
                        f"{_show(name)}")  # fmt: skip


def items_of(value) -> list | None:
    """The items of an iterable as a list; None for a non-iterable, a string or bytes (one
    value, not a sequence of them) and a 0-d array (``Iterable``, but iterating it raises)."""
    if isinstance(value, str | bytes):
        return None
    try:
        return list(value)
    except TypeError:
        return None


def check_names(name: str, names) -> tuple[str, ...]:
    """``names`` (a sequence of key, column or field names, not one string) as a tuple of
    strings; TypeError naming ``name`` otherwise."""
    check_name(name)
    items = items_of(names)
    if items is None:
        raise TypeError(f"{name} must be a sequence of names, got {_show(names)}")
    names = tuple(items)
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{name} must hold strings, got {_show(names)}")
    return names


def _is_number(value) -> bool:
    """True for a real scalar that is not a bool (numpy scalars included)."""
    return isinstance(value, Real) and not isinstance(value, bool | np.bool_)


def _as_array(name: str, value) -> np.ndarray:
    """Return ``value`` as a numeric (non-boolean) numpy array, or raise naming ``name``."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged nesting, unconvertible objects
        arr = None
    if arr is None or arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be a real number or an array of them, got {_show(value)}")
    if arr.dtype.kind == "b":
        raise ValueError(f"{name} must be a real number or an array of them, got booleans")
    return arr


def as_real_array(name: str, value) -> np.ndarray:
    """``value`` (a number or a nested sequence of them, not booleans) as a float64 array, else
    ValueError naming ``name`` (ragged nesting, text and objects included)."""
    check_name(name)
    return _as_array(name, value).astype(np.float64, copy=False)


def ndim(name: str, value) -> int:
    """``np.ndim(value)``, or ValueError naming ``name`` for a ragged nesting numpy cannot
    shape (``np.ndim`` itself raises there)."""
    check_name(name)
    try:
        return np.ndim(value)
    except (ValueError, TypeError):
        raise ValueError(f"{name} must be a number or a regular array (not ragged), got "
                         f"{_show(value)}") from None  # fmt: skip


def _describe(arr: np.ndarray) -> str:
    """A short description of an offending value for an error message."""
    if arr.size == 1:
        return _show(arr.item())
    return f"an array with min {arr.min()!r} and max {arr.max()!r}"


def _float(value) -> float | np.ndarray:
    """``value`` as float64: a Python float for scalars, a float64 array otherwise."""
    if isinstance(value, np.ndarray):
        return value.astype(np.float64, copy=False)
    return float(value)


def check_positive_int(
    name: str, value, limit: int = MAX_EXACT_INT, *, as_float: bool = True
) -> ArrayLike:
    """Check that ``value`` is an integer in [1, limit] (or an array of them); return float64.

    Integer-valued floats (``40.0``) are accepted; NaN, inf, 0, negatives, 2.5, booleans and
    values above ``limit`` (default 2^53) are not. ``as_float=False`` returns an array
    unconverted (the caller computes in float64 itself, saving a copy).
    """
    check_name(name)
    _check_limit_type(limit)
    _check_option("as_float", as_float)
    if _is_number(value):
        if isinstance(value, Integral):
            ok = value >= 1
        else:
            ok = math.isfinite(value) and value >= 1 and value == int(value)
        if not ok:
            raise ValueError(f"{name} must be a positive integer (>= 1), got {_show(value)}")
        if (int(value) if isinstance(value, Integral) else float(value)) > limit:
            raise ValueError(f"{name} must be <= {_limit(limit)}, got {_show(value)}")
        return float(value)
    arr = _as_array(name, value)
    if arr.size == 0:
        return _float(arr) if as_float else arr
    lo, hi = arr.min(), arr.max()
    if arr.dtype.kind == "f":
        ok = bool(lo >= 1) and math.isfinite(hi) and bool(np.all(arr == np.floor(arr)))
    else:
        ok = bool(lo >= 1)
    if not ok:
        raise ValueError(f"{name} must be a positive integer (>= 1), got {_describe(arr)}")
    if (int(hi) if arr.dtype.kind in "iu" else float(hi)) > limit:
        raise ValueError(f"{name} must be <= {_limit(limit)}, got {_describe(arr)}")
    return _float(arr) if as_float else arr


def check_probability(name: str, value) -> ArrayLike:
    """Check that ``value`` lies in [0, 1] and is not NaN (scalar or array); return float64."""
    check_name(name)
    if _is_number(value):
        if not 0.0 <= value <= 1.0:  # False for NaN as well
            raise ValueError(f"{name} must be a probability in [0, 1], got {_show(value)}")
        return float(value)
    arr = _as_array(name, value)
    if arr.size == 0:
        return _float(arr)
    lo, hi = arr.min(), arr.max()  # both NaN if any element is NaN
    if not (lo >= 0 and hi <= 1):
        bad = "NaN" if (np.isnan(lo) or np.isnan(hi)) else f"values in [{lo}, {hi}]"
        raise ValueError(f"{name} must be a probability in [0, 1], got {bad}")
    return _float(arr)


def check_d_bar(d, d_bar, *, half_depth_ok: bool = False, as_float: bool = True) -> ArrayLike:
    """Check that d_bar is an integer layer with d/2 <= d_bar < d (Theorem 4.1); return float64.

    d_bar is the layer the early prediction is made at, so it must be a whole number: 20.5 is
    refused. ``half_depth_ok`` also admits d_bar = d/2 exactly for odd d: the ell -> infinity
    formulas (Eq. 3, 5, 6) are stated at d_bar = d/2 for any d, and ``ppdmodel.asymptotic``
    evaluates them there (its default). ``d`` must have been checked already. ``as_float``:
    as for ``check_positive_int``.
    """
    _check_option("half_depth_ok", half_depth_ok)
    _check_option("as_float", as_float)
    if _is_number(d_bar) and _is_number(d):
        if d == 1 and not half_depth_ok:
            raise ValueError(f"d_bar: d = 1 has no such layer (d/2 <= d_bar < d), got {d_bar!r}")
        if not is_finite(d_bar) or not is_finite(d):
            raise ValueError(f"d_bar must be a finite number in [d/2, d), got {_show(d_bar)}")
        half = float(d) / 2  # compared natively: exact for any int, no int8 wrap-around
        if d_bar < half:
            raise ValueError(
                f"d_bar={_show(d_bar)} is below d/2={half!r}: outside Theorem 4.1's domain "
                "(d/2 <= d_bar < d); the closed form does not cover it"
            )
        if d_bar >= d:
            raise ValueError(
                f"d_bar must satisfy d/2 <= d_bar < d, got d_bar={_show(d_bar)}, d={_show(d)}"
                + ("; d = 1 has no such layer" if d == 1 and not half_depth_ok else "")
            )
        d_bar_f = float(d_bar)
        if d_bar_f != math.floor(d_bar_f) and not (half_depth_ok and d_bar_f == half):
            hint = ""
            if d_bar_f == half:
                hint = f" (d = {int(d)} is odd: use {math.floor(half)} or {math.ceil(half)})"
            raise ValueError(
                "d_bar must be an integer layer (the early prediction's layer)"
                + (" or exactly d/2" if half_depth_ok else "")
                + f", got {_show(d_bar)}{hint}"
            )
        return d_bar_f
    d_bar_arr = _as_array("d_bar", d_bar)
    d_arr = _as_array("d", d)
    check_broadcast(d=d_arr.shape, d_bar=d_bar_arr.shape)
    if d_bar_arr.size == 0 or d_arr.size == 0:
        return _float(d_bar_arr) if as_float else d_bar_arr
    ratio = np.true_divide(
        d_bar_arr, d_arr, dtype=np.float64
    )  # d > 0 is checked first; one pass, two reductions
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
    if d_bar_arr.dtype.kind == "f":  # integer dtypes hold whole layers
        whole = d_bar_arr == np.floor(d_bar_arr)
        if half_depth_ok:
            whole |= ratio == 0.5
        whole = bool(np.all(whole))
    else:
        whole = True
    if not whole:
        raise ValueError(
            "d_bar must be an integer layer (the early prediction's layer)"
            + (" or exactly d/2" if half_depth_ok else "")
            + ", got a non-integer element"
        )
    return _float(d_bar_arr) if as_float else d_bar_arr


def check_nonnegative(name: str, value) -> ArrayLike:
    """Check that ``value`` is a finite real >= 0 (scalar or array); return float64."""
    check_name(name)
    if _is_number(value):
        if not (is_finite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {_show(value)}")
        return float(value)
    arr = _as_array(name, value)
    if arr.size and not (bool(arr.min() >= 0) and math.isfinite(arr.max())):
        raise ValueError(f"{name} must be a finite number >= 0, got {_describe(arr)}")
    return _float(arr)


def check_positive(name: str, value) -> ArrayLike:
    """Check that ``value`` is a finite real > 0 (scalar or array); return float64."""
    value = check_nonnegative(name, value)
    if not bool(np.all(np.asarray(value) > 0)):
        raise ValueError(f"{name} must be a finite number > 0, got {_show(value)}")
    return value


def check_model(d, d_bar, ell=None) -> None:
    """Check the model's shape parameters: d, ell positive integers and d/2 <= d_bar < d."""
    check_positive_int("d", d)
    if ell is not None:
        check_positive_int("ell", ell)
    check_d_bar(d, d_bar)


def check_flag(name: str, value, allow_none: bool = False) -> bool | None:
    """Check that ``value`` is a bool (or None when ``allow_none``); return it."""
    check_name(name)
    if not isinstance(allow_none, bool | np.bool_):
        raise TypeError(f"allow_none must be True or False, got {_show(allow_none)}")
    if value is None and allow_none:
        return None
    if not isinstance(value, bool | np.bool_):
        allowed = "True, False or None" if allow_none else "True or False"
        raise ValueError(f"{name} must be {allowed}, got {_show(value)}")
    return bool(value)


def check_broadcast(**shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Check that arrays of the named shapes broadcast together; return the broadcast shape."""
    try:
        return np.broadcast_shapes(*shapes.values())
    except ValueError:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(
            f"{', '.join(shapes)} must broadcast together, got shapes {listed}"
        ) from None


def check_limit(name: str, value, limit, what: str = "") -> None:
    """Refuse a size above ``limit`` (time or memory), naming the parameter and the limit."""
    check_name(name)
    _check_limit_type(limit)
    if not isinstance(what, str):
        raise TypeError(f"what must be a string (why the limit), got {_show(what)}")
    if not _is_number(value):
        raise ValueError(f"{name} must be a number, got {_show(value)}")
    if value > limit:
        reason = f" ({what})" if what else ""
        raise ValueError(f"{name} must be <= {limit}{reason}, got {_show(value)}")


def d_bar_or_half_depth(d, d_bar):
    """Return ``d_bar``, or d/2 (the paper's Eq. 3, 5, 6 setting) when it is None."""
    return np.divide(check_positive_int("d", d), 2) if d_bar is None else d_bar


# -- scalar checks for configuration objects (sim) ------------------------------------------


def _scalar(value):
    """Unwrap a 0-d numpy array to its item; other values unchanged."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    return value


def as_int(name: str, value, *, minimum: int = 1, limit: int = MAX_EXACT_INT) -> int:
    """``value`` as a Python int in [minimum, limit] (integer-valued floats accepted)."""
    check_name(name)
    _check_limit_type(minimum, "minimum")
    _check_limit_type(limit)
    value = _scalar(value)
    expected = "a positive integer (>= 1)" if minimum == 1 else f"an integer >= {minimum}"
    if not _is_number(value):
        raise ValueError(f"{name} must be {expected}, got {_show(value)}")
    if not isinstance(value, Integral):
        if not (math.isfinite(value) and value == math.floor(value)):
            raise ValueError(f"{name} must be {expected}, got {_show(value)}")
    value = int(value)  # exact, and no numpy scalar overflow in the comparisons below
    if value < minimum:
        raise ValueError(f"{name} must be {expected}, got {_show(value)}")
    if value > limit:
        raise ValueError(f"{name} must be <= {_limit(limit)}, got {_show(value)}")
    return value


def as_int_tuple(name: str, value, *, minimum: int = 0, what: str = "an integer") -> tuple:
    """``value`` (one integer, or an iterable of them; each >= minimum, not a bool, float or
    string) as a tuple of Python ints; ValueError naming ``name`` (and ``what`` an item is)
    otherwise."""
    check_name(name)
    _check_limit_type(minimum, "minimum")
    if not isinstance(what, str):
        raise TypeError(f"what must be a string, got {_show(what)}")
    value = _scalar(value)
    items = [value] if isinstance(value, Integral) else items_of(value)
    bad = items is None or any(
        isinstance(v, bool | np.bool_) or not isinstance(_scalar(v), Integral) or v < minimum
        for v in items
    )
    if bad:
        raise ValueError(f"{name} must be {what} >= {minimum}, a list of them or None, got "
                         f"{_show(value)}")  # fmt: skip
    return tuple(int(v) for v in items)


def as_real(
    name: str, value, *, minimum: float = 0.0, strict: bool = False, maximum: float | None = None
) -> float:
    """``value`` as a finite float >= minimum (> minimum if ``strict``), <= maximum if given."""
    check_name(name)
    _check_limit_type(minimum, "minimum", finite=True)
    if maximum is not None:
        _check_limit_type(maximum, "maximum", finite=True)
    if not isinstance(strict, bool | np.bool_):
        raise TypeError(f"strict must be True or False, got {_show(strict)}")
    value = _scalar(value)
    low = f"> {minimum:g}" if strict else f">= {minimum:g}"
    high = f" and <= {maximum:g}" if maximum is not None else ""
    message = f"{name} must be a finite number {low}{high}, got {_show(value)}"
    if not _is_number(value):
        raise ValueError(message)
    try:
        value = float(value)
    except OverflowError:  # an int beyond float64's range
        raise ValueError(message) from None
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        raise ValueError(message)
    if maximum is not None and value > maximum:
        raise ValueError(message)
    return value


def check_instance(name: str, value, types, hint: str = ""):
    """Check ``isinstance(value, types)``; ValueError naming the field and the expected types."""
    check_name(name)
    if not isinstance(hint, str):
        raise TypeError(f"hint must be a string, got {_show(hint)}")
    try:
        ok = isinstance(value, types)
    except TypeError:  # types is not a type, a tuple of types or a union
        raise TypeError(f"types must be a type or a tuple of types, got {_show(types)}") from None
    if not ok:
        types = types if isinstance(types, tuple) else getattr(types, "__args__", (types,))
        expected = " or ".join(t.__name__ for t in types)
        extra = f" ({hint})" if hint else ""
        raise ValueError(
            f"{name} must be a {expected}{extra}, got {type(value).__name__} {_show(value)}"
        )
    return value


def check_keys(name: str, mapping, keys: Iterable[str]) -> dict:
    """Check that ``mapping`` is a dict holding ``keys``; return it."""
    check_name(name)
    keys = check_names("keys", keys)
    if not isinstance(mapping, dict):
        raise ValueError(f"{name} must be a dict, got {type(mapping).__name__}")
    missing = [key for key in keys if key not in mapping]
    if missing:
        raise ValueError(f"{name} is missing keys {missing}")
    return mapping


def check_columns(name: str, frame, columns: Iterable[str]):
    """Check that ``frame`` is a pandas DataFrame holding ``columns``; return it."""
    import pandas as pd  # pandas is imported only where frames are checked

    check_name(name)
    columns = check_names("columns", columns)
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{name} is missing columns {missing} (has {[str(c) for c in frame.columns][:20]})"
        )
    return frame


def check_choice(name: str, value, choices: tuple[str, ...]) -> str:
    """Check that ``value`` is one of the strings ``choices``; return it (no array compares
    element-wise here: anything but a string is refused first)."""
    check_name(name)
    choices = check_names("choices", choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {_show(value)}")
    return value


def check_seed(name: str, seed, *, generator_ok: bool = True):
    """Check a seed numpy takes: None, an integer >= 0 or a sequence of them, a
    ``SeedSequence``, or (``generator_ok``) a ``Generator``; return it unchanged."""
    check_name(name)
    _check_option("generator_ok", generator_ok)
    if seed is None or isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        if generator_ok:
            return seed
        raise ValueError(f"{name} must be None, an integer >= 0 or a SeedSequence, got a "
                         "Generator")  # fmt: skip
    try:
        if isinstance(seed, bool | np.bool_) or np.asarray(seed).dtype.kind not in "iuO":
            raise TypeError("not integers")
        np.random.SeedSequence(seed)
    except (TypeError, ValueError, OverflowError):
        allowed = "an integer >= 0 or a sequence of them" + (", a SeedSequence or a Generator"
                                                             if generator_ok else
                                                             " or a SeedSequence")  # fmt: skip
        raise ValueError(f"{name} must be None, {allowed}, got {_show(seed)}") from None
    return seed


class MissingPath(FileNotFoundError, ValueError):
    """A path argument that names nothing there: a ValueError naming the argument, as every
    refused argument is, and a FileNotFoundError for callers that catch that."""


def as_path(name: str, value) -> Path:
    """``value`` (a non-empty ``str`` or ``os.PathLike``, no NUL byte) as a Path, else
    ValueError naming ``name`` (``""`` would name the working directory)."""
    check_name(name)
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValueError(f"{name} must be a file path, got {_show(value)}")
    return Path(value)


def check_path(name: str, path) -> Path:
    """A path to write: ``as_path``, and not an existing folder; return it as a Path."""
    path = as_path(name, path)
    if path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a folder, not a file")
    return path


def check_input_file(name: str, path) -> Path:
    """A path to read: ``check_path``, and an existing file; return it as a Path."""
    path = check_path(name, path)
    if not path.is_file():
        raise ValueError(f"{name} {str(path)!r}: no such file")
    return path


def check_input_dir(name: str, path) -> Path:
    """A folder to read: ``as_path``, existing and a folder (``MissingPath`` otherwise)."""
    path = as_path(name, path)
    if not path.is_dir():
        what = "is a file, not a folder" if path.exists() else "no such folder"
        raise MissingPath(f"{name} {str(path)!r}: {what}")
    return path


def check_output_dir(name: str, path) -> Path:
    """A folder to write into: ``as_path``, and not an existing file."""
    path = as_path(name, path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name} {str(path)!r} is a file, not a folder")
    return path


@contextmanager
def refused_as(name: str):
    """Within: a ValueError (a file or model refused by a reader that names its own argument,
    such as ``path``) is raised again naming ``name``, the caller's argument that gave it
    (``MissingPath`` stays one)."""
    check_name(name)
    try:
        yield
    except ValueError as exc:
        kind = MissingPath if isinstance(exc, FileNotFoundError) else ValueError
        raise kind(f"{name}: {exc}") from exc


MALFORMED = (ValueError, TypeError, KeyError, IndexError, AttributeError)
"""What a reader raises on a record laid out otherwise than it expects (a list for a dict, a
missing key, a string for a number)."""


@contextmanager
def reading(name: str, path):
    """Within: reading file ``path`` (argument ``name``); a ``MALFORMED`` error of its content
    is raised as a ValueError naming ``name`` and the file (a MissingPath as one)."""
    check_name(name)
    try:
        yield
    except MissingPath:
        raise
    except MALFORMED as exc:
        text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{name} {str(path)!r}: {text}") from exc
