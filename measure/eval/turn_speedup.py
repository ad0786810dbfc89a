"""A measured speed-up read turn by turn: each prompt's PPD run against greedy's beside it.

``ppd validate`` reports a measured speed-up as greedy's median seconds over its rounds divided
by the method's (``JudgedResult.speedup_measured``). The two medians come from different
moments, and a shared machine changes speed in spells of seconds to minutes
(``measure.eval.paired``), so on the 2-vCPU VM of this project one configuration's measured
speed-up moved by 10-15 points between four validations of the same code (issue 24).

Greedy and every method decode prompt i of round r one after the other (turns by prompt,
``measure.eval.repeat``), seconds apart. ``turn_speedup`` divides greedy's seconds by the
method's within each such turn and takes the Hodges-Lehmann estimate of the logs of those
ratios (the median of all pairwise means, Walsh averages): robust to a run that met a stall,
nearly as efficient as the mean where none did. Its interval is the distribution-free one that
goes with that estimate (the Walsh averages at the signed-rank statistic's critical ranks,
assuming only that the log ratios scatter symmetrically about their centre; it covers at least
``level``): the measurement's own uncertainty, which tells a user whether a second validation
can agree to within a few points at all (``rounds_for``).

Recomputed from the stored per-turn seconds of the 8 turns-by-prompt validations (4 per model)
of 2026-11-27 (8 PPD configurations each, 3 held-out prompts, 3 rounds; ``python
benchmarks/validate_summary.py FOLDER1 ... FOLDER4``), one configuration's speed-up error
changed over the four runs by a median 10.2 points on SmolLM2 and 6.2 on small-wide-vocab,
against 13.8 and 9.2 for the ratio of medians; the intervals (9 turns) were +-7 % (SmolLM2) and
+-12 % (small-wide-vocab) wide on average, and held the predicted speed-up in 27 and 32 of 32.
A drift that lasts a whole turn cancels; one that starts inside a run does not. With turns by
run (``--turns runs``) the ratio pairs runs timed a method apart: still valid, less paired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ppdmodel.intervals import LEVEL, check_level
from ppdmodel.validation import as_int, as_real

EXACT_TURNS = 60
"""Up to this many turns the interval uses the signed-rank statistic's exact law."""
TARGET_HALF_WIDTH = 0.025
"""The half-width (relative) ``rounds_for`` aims at: two validations whose speed-ups are each
known to +-2.5 % differ by about 3.5 % or less, 19 times in 20 (within issue 24's 5 points)."""


def hodges_lehmann(values) -> float:
    """The median of the Walsh averages (x_i + x_j) / 2, i <= j, of ``values`` (one or more
    finite numbers): the Hodges-Lehmann estimate of their centre."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"values must be one or more finite numbers, got {x!r:.80}")
    i, j = np.triu_indices(x.size)
    return float(np.median((x[i] + x[j]) / 2))


@dataclass(frozen=True)
class TurnSpeedup:
    """Greedy's seconds over the method's, turn by turn: estimate and interval."""

    speedup: float
    """exp(Hodges-Lehmann of the turns' log ratios)."""
    low: float
    high: float
    """The interval over the turns (module docstring), at least ``level``."""
    turns: int
    """Turns behind it (prompts x rounds)."""
    level: float = LEVEL

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the estimate."""
        return (self.high - self.low) / (2 * self.speedup)


def turn_ratios(greedy_results, method_results) -> np.ndarray:
    """Greedy's ``wall_s`` / the method's for every (round, prompt) both hold
    (``TimedMethod.results``: ``results[r][i]``); ValueError when no turn has two positive
    times."""
    ratios = []
    for g_runs, m_runs in zip(greedy_results, method_results, strict=False):
        for g, m in zip(g_runs, m_runs, strict=False):
            if g.wall_s > 0 and m.wall_s > 0:
                ratios.append(g.wall_s / m.wall_s)
    if not ratios:
        raise ValueError("no turn has both a greedy and a method run with positive seconds")
    return np.asarray(ratios)


def turn_speedup(ratios, *, level: float = LEVEL) -> TurnSpeedup:
    """The turn speed-up of ``ratios`` (greedy / method seconds per turn, ``turn_ratios``) with
    its interval (module docstring); a single turn gives a point."""
    values = np.asarray(ratios, dtype=float).ravel()
    if values.size == 0 or not np.all(np.isfinite(values) & (values > 0)):
        raise ValueError(f"ratios must be one or more positive finite numbers, got {ratios!r:.80}")
    logs = np.log(values)
    level = check_level(level)
    i, j = np.triu_indices(logs.size)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    c = _rank_bound(logs.size, level)
    low, centre, high = walsh[c], float(np.median(walsh)), walsh[walsh.size - 1 - c]
    return TurnSpeedup(math.exp(centre), math.exp(low), math.exp(high), int(logs.size), level)


def _rank_bound(n: int, level: float) -> int:
    """The 0-based rank c of the interval's lower end among the n (n + 1) / 2 sorted Walsh
    averages: the largest c with P(T <= c) <= (1 - level) / 2 for the signed-rank statistic T
    under symmetry (exact up to ``EXACT_TURNS`` turns, normal beyond); 0 when even the outer
    averages cover less than ``level`` (then the interval is their whole range)."""
    total = n * (n + 1) // 2
    tail = (1 - level) / 2
    if n <= EXACT_TURNS:
        dist = np.zeros(total + 1)
        dist[0] = 1.0
        for r in range(1, n + 1):  # T's law: each rank r enters T with probability 1/2
            dist[r:] = (dist[r:] + dist[:-r].copy()) / 2
            dist[:r] /= 2
        cdf = np.cumsum(dist)
        below = int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right"))
    else:
        sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        z = NormalDist().inv_cdf(1 - tail)
        below = int(math.floor(total / 2 - z * sd + 0.5))  # (the same count, approximately)
    return max(0, min(below - 1, (total - 1) // 2))


def rounds_for(measured: TurnSpeedup, rounds: int, *,
               target: float = TARGET_HALF_WIDTH) -> int:  # fmt: skip
    """Rounds that would narrow ``measured`` (taken over ``rounds`` rounds) to ``target``
    relative half-width, were its turns independent (width ~ 1 / sqrt(turns)); at least 1."""
    rounds = as_int("rounds", rounds, minimum=1)
    target = as_real("target", target, strict=True)
    if measured.half_width <= 0:
        return 1
    return max(1, math.ceil(rounds * (measured.half_width / target) ** 2 - 1e-9))
