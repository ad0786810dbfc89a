"""Main's decoding rule as a value: greedy, or sampled as ``generate(do_sample=True, ...)``.

Torch-free (the rule travels in run settings, parsers and rank arguments); how a rule picks a
token is ``measure.decode.sampling``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from numbers import Real

import numpy as np

MIN_TEMPERATURE = 1e-30
"""Smallest sampling temperature: fp32 logits divided by less overflow to inf (logits of
magnitude up to ~3e8 stay finite at this one), and softmax then gives no distribution."""
MAX_TOP_K = 2**31 - 1
"""Largest top_k (transformers' top-k warper takes it as a C int); any k >= the vocabulary
keeps every token."""


@dataclass(frozen=True)
class Decoding:
    """Main's decoding rule: greedy, or sampling as ``generate(do_sample=True, ...)``.

    A field left None takes the model's generation config's value, then transformers'
    default (temperature 1.0, top_k 50, top_p 1.0), exactly as ``generate`` resolves it.
    """

    do_sample: bool = False
    """False: argmax of the final logits (no processors); True: sample (Appendix B)."""
    temperature: float | None = None
    """Softmax temperature > 0 (sampling only)."""
    top_k: int | None = None
    """Sample among the top_k most likely tokens; 0 turns transformers' default 50 off."""
    top_p: float | None = None
    """Nucleus sampling: the smallest set whose probability reaches top_p, in (0, 1]."""

    def __post_init__(self) -> None:
        if not isinstance(self.do_sample, bool):
            raise ValueError(f"do_sample must be True or False, got {self.do_sample!r}")
        t, k, p = self.temperature, self.top_k, self.top_p
        if t is not None and (_flag(t) or not is_finite(t) or t <= 0):
            raise ValueError(f"temperature must be a number > 0, got {t!r}")
        if t is not None and t < MIN_TEMPERATURE:
            raise ValueError(
                f"temperature must be >= {MIN_TEMPERATURE:g} (smaller ones overflow the logits "
                f"to inf, and no token can be drawn), got {t!r}"
            )
        if k is not None and (_flag(k) or not is_integral(k) or not 0 <= k <= MAX_TOP_K):
            raise ValueError(f"top_k must be an integer >= 0 (at most {MAX_TOP_K}), got {k!r}")
        if p is not None and (_flag(p) or not is_finite(p) or not 0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")
        if not self.do_sample and (t, k, p) != (None, None, None):
            given = (("temperature", t), ("top_k", k), ("top_p", p))
            named = [n for n, v in given if v is not None]
            raise ValueError(f"{', '.join(named)} apply to sampling: pass do_sample=True")

    @property
    def label(self) -> str:
        """'greedy' or 'sample top_k=50 top_p=0.9' (the fields set)."""
        if not self.do_sample:
            return "greedy"
        parts = [f"{n}={v:g}" for n, v in self.generate_kwargs().items() if n != "do_sample"]
        return " ".join(["sample", *parts])

    def generate_kwargs(self) -> dict:
        """The ``model.generate`` keywords of this rule (fields left None are left out)."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> Decoding:
        return cls(**data) if data else cls()


GREEDY = Decoding()
"""Plain greedy decoding (the paper's main setting)."""


def _flag(x) -> bool:
    """True for a boolean (Python's or numpy's): no number here."""
    return isinstance(x, bool | np.bool_)


def is_finite(x) -> bool:
    """True for a real number (not a string, bytes or array) that is finite."""
    if isinstance(x, str | bytes) or not isinstance(x, Real):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond float64's range
        return False


def is_integral(x) -> bool:
    """True for a value equal to its integer conversion (2, 2.0, numpy integers)."""
    try:
        return int(x) == x
    except (TypeError, ValueError, OverflowError):
        return False
