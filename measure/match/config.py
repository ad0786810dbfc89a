"""Configuration of a match-rate run: record columns, sampling variants, validated settings.

Kept apart from ``measure.match.rate`` (the torch part) so the settings and their checks read
on their own; ``make_config`` validates every user-facing argument with a ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ppdmodel.validation import as_int, check_columns, check_flag, is_finite, items_of

RECORD_COLUMNS = ("prompt", "position", "layer", "k", "head", "decoding", "match", "token")
"""Columns of the tidy match-rate DataFrame, one row per (prompt, position, layer, k, head)."""

POSITIONS = "1..ell"
"""Which generated tokens the records cover (``x_1..x_ell``); stored in a run's config so that
a run recorded by an older version (positions 2..ell) is not resumed into a mixed run."""


@dataclass(frozen=True)
class Sampling:
    """Appendix B decoding: the generated token is sampled from the final distribution.

    Sampled exactly as ``model.generate(do_sample=True, top_k=...)`` (or ``top_p=...``) samples
    (``measure.decode.sampling``): the model's generation config and transformers' defaults
    apply as there, so ``top_p`` alone also keeps transformers' default top_k of 50.
    """

    top_k: int | None = None
    """Sample among the top_k most likely tokens (top-k sampling, Fan et al. 2018)."""
    top_p: float | None = None
    """Sample from the smallest set whose probability reaches top_p (nucleus sampling)."""

    def __post_init__(self) -> None:
        k, p = self.top_k, self.top_p
        if (k is None) == (p is None):
            raise ValueError("sampling must set exactly one of top_k and top_p")
        if k is not None and not (_is_number(k) and float(k).is_integer() and 1 <= k < 2**31):
            raise ValueError(f"sampling: top_k must be an integer >= 1, got {k!r:.60}")
        if p is not None and not (_is_number(p) and 0.0 < p <= 1.0):
            raise ValueError(f"sampling: top_p must be in (0, 1], got {p!r:.60}")

    @property
    def label(self) -> str:
        """Value of the ``decoding`` column: ``top_k=50`` or ``top_p=0.9``."""
        return f"top_k={self.top_k}" if self.top_k is not None else f"top_p={self.top_p:g}"

    def generate_kwargs(self) -> dict:
        """The ``model.generate`` keywords of this decoding (``do_sample=True`` and the one set)."""
        if self.top_k is not None:
            return {"do_sample": True, "top_k": int(self.top_k)}
        return {"do_sample": True, "top_p": float(self.top_p)}

    @classmethod
    def parse(cls, spec: Sampling | Mapping | str | None) -> Sampling | None:
        """None (greedy), a Sampling, ``{"top_k": 50}`` or the CLI string ``"top_p=0.9"``."""
        if spec is None or isinstance(spec, Sampling):
            return spec
        if not isinstance(spec, str | Mapping):
            raise ValueError(f"sampling must be None, {{'top_k': 50}}, {{'top_p': 0.9}} or "
                             f"'top_p=0.9', got {spec!r:.60}")  # fmt: skip
        if isinstance(spec, str):
            name, sep, value = spec.partition("=")
            if not sep or name.strip() not in ("top_k", "top_p"):
                raise ValueError(f"sampling must look like top_k=50 or top_p=0.9, got {spec!r}")
            try:
                spec = {name.strip(): float(value) if name.strip() == "top_p" else int(value)}
            except ValueError:
                raise ValueError(
                    f"sampling must look like top_k=50 or top_p=0.9, got {spec!r}"
                ) from None
        unknown = [key for key in spec if key not in ("top_k", "top_p")]
        if unknown:
            raise ValueError(f"sampling: its keys must be top_k or top_p, got {unknown!r:.60}")
        return cls(**spec)


@dataclass(frozen=True)
class MatchRateConfig:
    """What one p_correct run measures (validated against the model's depth d)."""

    d: int
    """Number of decoder layers of the model."""
    layers: tuple[int, ...]
    """Layers probed with the shared head (1-based count of layers run, 1..d)."""
    ks: tuple[int, ...]
    """Numbers of early candidates k."""
    max_new_tokens: int = 16
    """ell, the most tokens generated per prompt (fewer if EOS comes first)."""
    trained_layers: tuple[int, ...] = ()
    """Layers probed with a trained per-layer head."""
    sampling: Sampling | None = None
    """None for greedy decoding, else appendix B sampling."""
    seed: int = 0
    """Base seed of the sampling generator (combined with each prompt id)."""
    verify: bool = True
    """Check each greedy sequence against the model's own forward pass (one extra pass)."""

    @property
    def max_k(self) -> int:
        return max(self.ks)

    @property
    def decoding(self) -> str:
        return "greedy" if self.sampling is None else self.sampling.label

    def to_dict(self) -> dict:
        return {
            "d": self.d,
            "layers": list(self.layers),
            "ks": list(self.ks),
            "max_new_tokens": self.max_new_tokens,
            "trained_layers": list(self.trained_layers),
            "decoding": self.decoding,
            "seed": self.seed,
            "verify": self.verify,
            "positions": POSITIONS,
        }


def make_config(
    d: int,
    *,
    layers: Iterable[int] | None = None,
    ks: Iterable[int] = (1, 3, 5),
    max_new_tokens: int = 16,
    trained_layers: Iterable[int] = (),
    sampling=None,
    seed: int = 0,
    verify: bool = True,
) -> MatchRateConfig:
    """Validate the run parameters; ``layers=None`` probes every layer 1..d-1."""
    layers = tuple(range(1, d)) if layers is None else _sorted_ints(layers, "layers", 1, d)
    trained = _sorted_ints(trained_layers, "heads (layer keys)", 1, d) if trained_layers else ()
    if not layers and not trained:
        raise ValueError("layers must name at least one layer in [1, d]")
    ks = _sorted_ints(ks, "ks", 1, None)
    if not ks:
        raise ValueError("ks must hold at least one k >= 1")
    max_new_tokens = as_int("max_new_tokens", max_new_tokens, minimum=1)
    sampling = Sampling.parse(sampling)
    seed = as_int("seed", seed, minimum=0, limit=2**62)
    verify = check_flag("verify", verify)
    return MatchRateConfig(d, layers, ks, max_new_tokens, trained, sampling, seed, verify)


def _sorted_ints(values: Iterable[int], name: str, low: int, high: int | None) -> tuple[int, ...]:
    items = items_of(values)
    if items is None:
        raise ValueError(f"{name} must be a list of integers, got {values!r:.80}")
    out = []
    for v in items:
        ok = isinstance(v, Integral | float) and not isinstance(v, bool | np.bool_)
        if not ok or not math.isfinite(v) or int(v) != v or v < low or (
                high is not None and v > high):  # fmt: skip
            allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
            raise ValueError(f"{name} must hold integers in {allowed}, got {v!r:.80}")
        out.append(int(v))
    return tuple(sorted(set(out)))


RECORD_KINDS = {"position": "integer >= 1", "layer": "integer >= 0", "k": "integer >= 1",
                "match": "0 or 1", "head": "string"}  # fmt: skip
"""What each checked column of match records holds (``check_records``)."""


ATLAS_KINDS = {"prompt_set": "string", "head": "string", "layer": "integer >= 0",
               "k": "integer >= 1", "relative_depth": "number", "n_tokens": "integer >= 0",
               "p_correct": "number in [0, 1]", "boot_low": "number in [0, 1]",
               "boot_high": "number in [0, 1]"}  # fmt: skip
"""What the columns of an atlas table that ``plot_atlas`` reads hold."""


def check_records(
    df, name: str = "df", kinds: Mapping[str, str] = RECORD_KINDS, required=("prompt",)
):
    """``df`` if it is a DataFrame of match records (or, with ``ATLAS_KINDS`` and no
    ``required``, an atlas table): the ``required`` columns and each column of ``kinds``
    present, holding what ``kinds`` says ("integer >= 0", "integer >= 1", "0 or 1", "string",
    "number", "number in [0, 1]", NaN allowed only in the last two); ValueError naming
    ``name`` and the column otherwise. Returns ``df``, its numeric columns of mixed Python
    objects as numbers (float, or int64 for integers)."""
    check_columns(name, df, [*required, *kinds])
    cast = {}
    for column, kind in kinds.items():
        values = df[column].to_numpy()
        if not _column_holds(values, kind):
            bad = next((v for v in values if not _column_holds(np.array([v], dtype=object), kind)),
                       None)  # fmt: skip
            raise ValueError(f"{name}[{column!r}] must hold {kind}s, got {bad!r:.60}")
        if values.dtype.kind == "O" and kind != "string":
            cast[column] = float if kind.startswith("number") else "int64"
    return df.astype(cast) if cast else df


def _column_holds(values: np.ndarray, kind: str) -> bool:
    if kind == "string":
        return all(isinstance(v, str) for v in values)
    if kind == "0 or 1" and (values.dtype.kind == "b" or all(
            isinstance(v, bool | np.bool_) for v in values)):  # fmt: skip
        return True
    if values.dtype.kind == "O":
        if any(isinstance(v, bool | np.bool_ | str) or not isinstance(v, Real) for v in values):
            return False
        values = values.astype(float)
    elif values.dtype.kind not in "iuf":
        return False
    if kind in ("number", "number in [0, 1]"):
        finite = values[~np.isnan(values.astype(float))]
        ok = np.isfinite(finite).all()
        return bool(ok and (kind == "number" or ((finite >= 0) & (finite <= 1)).all()))
    values = values.astype(float)
    if not np.isfinite(values).all() or not (values == np.floor(values)).all():
        return False
    if kind == "0 or 1":
        return bool(np.isin(values, (0, 1)).all())
    low = 1 if kind.endswith(">= 1") else 0
    return bool((values >= low).all() and (values <= 2**53).all())


def _is_number(value) -> bool:
    """A finite real number, not a boolean."""
    return (isinstance(value, Real) and not isinstance(value, bool | np.bool_)
            and is_finite(value))  # fmt: skip
