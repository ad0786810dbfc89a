"""Match sources: where the m_t (t = 2..ell) of a simulated sequence come from.

``m_t = 1`` when the pass producing token t starts from a handed-over candidate: the match at token
position t - 1 (the rule is stated once, in ``ppdmodel.positions``). Every source returns ``len ==
ell - 1`` values via ``draw(ell, rng)``. Recorded traces use the JSON Lines format of
``sim.formats`` (``MatchTrace``, ``read_traces``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ppdmodel.validation import (
    as_int,
    check_choice,
    check_instance,
    check_keys,
    check_probability,
    ndim,
)
from sim.formats import MatchTrace

MAX_ELL = 10**7
"""Largest ell a match source draws for (10^7 tokens: 80 MB of uniforms)."""


def _check_ell(ell: int) -> int:
    return as_int("ell", ell, limit=MAX_ELL)


def _check_rng(rng) -> None:
    check_instance("rng", rng, np.random.Generator, "e.g. numpy.random.default_rng(seed)")


@dataclass(frozen=True)
class Bernoulli:
    """i.i.d. m_t ~ Bernoulli(p), the assumption of Theorem 4.1."""

    p: float
    """Match probability p_correct, in [0, 1]."""

    def __post_init__(self) -> None:
        try:
            p = check_probability("p", self.p)
        except ValueError:
            raise ValueError(f"p must be in [0, 1], got {self.p!r:.80}") from None
        if np.ndim(p) != 0:
            raise ValueError(f"p must be in [0, 1] (a scalar), got {self.p!r:.80}")
        object.__setattr__(self, "p", p)

    def draw(self, ell: int, rng: np.random.Generator) -> np.ndarray:
        ell = _check_ell(ell)
        _check_rng(rng)
        return (rng.random(ell - 1) < self.p).astype(np.int8)

    def mean_matches(self, ell: int) -> float:
        """Expected sum of m_t over t = 2..ell."""
        return (_check_ell(ell) - 1) * self.p


@dataclass(frozen=True)
class PerPosition:
    """Independent m_t ~ Bernoulli(p_t) with a probability per token position (Tables 6-8)."""

    p_t: tuple[float, ...]
    """p_t for t = 2, 3, ...; at least ell - 1 values are needed for a sequence of ell tokens."""

    def __init__(self, p_t: Sequence[float]) -> None:
        if isinstance(p_t, str | bytes) or ndim("p_t", p_t) > 1:
            raise ValueError(
                f"p_t must be a one-dimensional sequence of probabilities, got {p_t!r:.80}"
            )
        try:
            values = check_probability("p_t", p_t)
        except ValueError as exc:
            raise ValueError(f"p_t values must be in [0, 1]: {exc}") from None
        values = tuple(np.ravel(values).tolist())
        if not values:
            raise ValueError("p_t must hold at least one probability")
        object.__setattr__(self, "p_t", values)

    def _probabilities(self, ell: int) -> np.ndarray:
        ell = _check_ell(ell)
        if len(self.p_t) < ell - 1:
            raise ValueError(f"p_t has {len(self.p_t)} values; ell = {ell} needs ell - 1 of them")
        return np.asarray(self.p_t[: ell - 1])

    def draw(self, ell: int, rng: np.random.Generator) -> np.ndarray:
        p_t = self._probabilities(ell)
        _check_rng(rng)
        return (rng.random(p_t.size) < p_t).astype(np.int8)

    def mean_matches(self, ell: int) -> float:
        return float(self._probabilities(ell).sum())


@dataclass(frozen=True)
class Replay:
    """A fixed, recorded sequence m_2..m_ell (the seed is not used)."""

    m: tuple[int, ...]
    """m_t for t = 2..ell, each 0 or 1."""

    def __init__(self, m: Sequence[int]) -> None:
        if isinstance(m, str | bytes) or ndim("m", m) != 1:
            raise ValueError(f"m must be a one-dimensional sequence of 0 and 1, got {m!r:.80}")
        if any(not isinstance(x, int | float | np.number | np.bool_) or x not in (0, 1) for x in m):
            raise ValueError("m must hold only 0 and 1")
        object.__setattr__(self, "m", tuple(int(x) for x in m))

    @classmethod
    def from_trace(cls, trace: MatchTrace) -> Replay:
        """Replay one sequence of a match-trace file (``sim.formats.read_traces``)."""
        return cls(check_instance("trace", trace, MatchTrace).m)

    @property
    def ell(self) -> int:
        return len(self.m) + 1

    def draw(self, ell: int, rng: np.random.Generator | None = None) -> np.ndarray:
        ell = _check_ell(ell)
        if ell != self.ell:
            raise ValueError(f"ell = {ell} but the replayed trace has ell = {self.ell}")
        return np.asarray(self.m, dtype=np.int8)

    def mean_matches(self, ell: int) -> float:
        return float(sum(self.draw(ell)))


MatchSource = Bernoulli | PerPosition | Replay


def match_source_to_dict(source: MatchSource) -> dict:
    """A JSON-ready description of a match source."""
    if isinstance(source, Bernoulli):
        return {"type": "bernoulli", "p": source.p}
    if isinstance(source, PerPosition):
        return {"type": "per_position", "p_t": list(source.p_t)}
    if isinstance(source, Replay):
        return {"type": "replay", "m": list(source.m)}
    raise ValueError(f"source must be a Bernoulli, PerPosition or Replay, got {type(source)}")


def match_source_from_dict(data: dict) -> MatchSource:
    """Inverse of ``match_source_to_dict``."""
    kind = check_keys("matches data", data, ("type",))["type"]
    check_choice("matches type", kind, ("bernoulli", "per_position", "replay"))
    if kind == "bernoulli":
        return Bernoulli(check_keys("matches data", data, ("p",))["p"])
    if kind == "per_position":
        return PerPosition(check_keys("matches data", data, ("p_t",))["p_t"])
    return Replay(check_keys("matches data", data, ("m",))["m"])


def check_trace_m(m) -> list[int]:
    """``m`` (m_t for t = 2..ell) as a list of ints 0 and 1; ValueError naming ``m`` otherwise."""
    if isinstance(m, str | bytes) or ndim("m", m) != 1:
        raise ValueError(f"m must be a sequence of values 0 and 1, got {m!r:.80}")
    if any(not isinstance(x, int | float | np.number | np.bool_) or x not in (0, 1) for x in m):
        raise ValueError(f"m must hold only 0 and 1 (m_t for t = 2..ell), got {list(m)!r:.200}")
    return [int(x) for x in m]
