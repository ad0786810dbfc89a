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

from sim.formats import MatchTrace


def _check_ell(ell: int) -> None:
    if isinstance(ell, bool) or int(ell) != ell or ell < 1:
        raise ValueError(f"ell must be a positive integer, got {ell}")


@dataclass(frozen=True)
class Bernoulli:
    """i.i.d. m_t ~ Bernoulli(p), the assumption of Theorem 4.1."""

    p: float
    """Match probability p_correct, in [0, 1]."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {self.p}")

    def draw(self, ell: int, rng: np.random.Generator) -> np.ndarray:
        _check_ell(ell)
        return (rng.random(ell - 1) < self.p).astype(np.int8)

    def mean_matches(self, ell: int) -> float:
        """Expected sum of m_t over t = 2..ell."""
        return (ell - 1) * self.p


@dataclass(frozen=True)
class PerPosition:
    """Independent m_t ~ Bernoulli(p_t) with a probability per token position (Tables 6-8)."""

    p_t: tuple[float, ...]
    """p_t for t = 2, 3, ...; at least ell - 1 values are needed for a sequence of ell tokens."""

    def __init__(self, p_t: Sequence[float]) -> None:
        values = tuple(float(x) for x in np.asarray(p_t, dtype=float).ravel())
        if not values:
            raise ValueError("p_t must hold at least one probability")
        if not all(0.0 <= x <= 1.0 for x in values):
            raise ValueError("p_t values must be in [0, 1]")
        object.__setattr__(self, "p_t", values)

    def _probabilities(self, ell: int) -> np.ndarray:
        _check_ell(ell)
        if len(self.p_t) < ell - 1:
            raise ValueError(f"p_t has {len(self.p_t)} values; ell = {ell} needs ell - 1 of them")
        return np.asarray(self.p_t[: ell - 1])

    def draw(self, ell: int, rng: np.random.Generator) -> np.ndarray:
        return (rng.random(ell - 1) < self._probabilities(ell)).astype(np.int8)

    def mean_matches(self, ell: int) -> float:
        return float(self._probabilities(ell).sum())


@dataclass(frozen=True)
class Replay:
    """A fixed, recorded sequence m_2..m_ell (the seed is not used)."""

    m: tuple[int, ...]
    """m_t for t = 2..ell, each 0 or 1."""

    def __init__(self, m: Sequence[int]) -> None:
        values = tuple(int(x) for x in m)
        if any(x not in (0, 1) for x in values):
            raise ValueError("m must hold only 0 and 1")
        object.__setattr__(self, "m", values)

    @classmethod
    def from_trace(cls, trace: MatchTrace) -> Replay:
        """Replay one sequence of a match-trace file (``sim.formats.read_traces``)."""
        return cls(trace.m)

    @property
    def ell(self) -> int:
        return len(self.m) + 1

    def draw(self, ell: int, rng: np.random.Generator | None = None) -> np.ndarray:
        _check_ell(ell)
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
    raise ValueError(f"matches must be Bernoulli, PerPosition or Replay, got {type(source)}")


def match_source_from_dict(data: dict) -> MatchSource:
    """Inverse of ``match_source_to_dict``."""
    kind = data.get("type")
    if kind == "bernoulli":
        return Bernoulli(data["p"])
    if kind == "per_position":
        return PerPosition(data["p_t"])
    if kind == "replay":
        return Replay(data["m"])
    raise ValueError(f"matches type must be bernoulli, per_position or replay, got {kind!r}")
