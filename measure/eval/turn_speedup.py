"""A speed-up judged turn by turn: each prompt's PPD run against greedy's beside it.

``ppd validate`` reports a measured speed-up as greedy's median seconds over its rounds divided
by the method's (``JudgedResult.speedup_measured``). The two medians come from different
moments, and a shared machine changes speed in spells of seconds to minutes
(``measure.eval.paired``), so on the 2-vCPU VM of this project one configuration's measured
speed-up moved by 10-15 points between four validations of the same code (issue 24).

Greedy and every method decode prompt i of round r one after the other (turns by prompt,
``measure.eval.repeat``), seconds apart. ``turn_log_errors`` takes, for each such turn, the
log of the measured ratio (greedy's seconds over the method's) over the predicted ratio of
the same prompt (greedy's predicted seconds over the method's, ``Prediction.per_run_s``):
prompts differ in length and in match rate, so only the prompt's own prediction is a fair
reference. ``read_turns`` takes the Hodges-Lehmann estimate of those errors (the median of all
pairwise means, Walsh averages: robust to a run that met a stall, nearly as efficient as the
mean where none did) and the distribution-free interval that goes with it: the Walsh averages
at the signed-rank statistic's critical ranks, exact up to ``EXACT_TURNS`` turns and normal
beyond. It assumes the turns' errors independent and scattered symmetrically about one
centre, and covers ``coverage`` (at least ``level`` from 6 turns on; fewer cannot reach 95 %).
``TurnReading.ratio`` (measured over predicted) then gives the measured speed-up on the
prediction's own weighting of the prompts, speedup_predicted x ratio, with its interval: the
measurement's own uncertainty, which tells a user whether a second validation can agree to
within a few points at all (``rounds_for``).

A drift that lasts a whole turn cancels; one that starts inside a run does not. With turns by
run (``--turns runs``) a turn pairs runs timed a method apart: still valid, less paired.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ppdmodel.intervals import LEVEL, check_level
from ppdmodel.validation import as_int, as_real

TURN_COLUMNS = ("speedup_turns", "speedup_turns_low", "speedup_turns_high",
                "speedup_turns_rel_err", "speedup_turns_coverage")  # fmt: skip
"""The columns a turn reading adds to ``ppd validate``'s table (``measure.eval.validate``)."""
EXACT_TURNS = 60
"""Up to this many turns the interval uses the signed-rank statistic's exact law."""
TARGET_HALF_WIDTH = 0.025
"""The half-width (relative) ``rounds_for`` aims at: two validations whose speed-ups are each
known to +-2.5 % differ by about 3.5 % or less, 19 times in 20 (within issue 24's 5 points)."""


def hodges_lehmann(values) -> float:
    """The median of the Walsh averages (x_i + x_j) / 2, i <= j, of ``values`` (one or more
    finite numbers): the Hodges-Lehmann estimate of their centre."""
    return float(np.median(_walsh(_finite("values", values))))


def _finite(name: str, values) -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be one or more finite numbers, got {x!r:.80}")
    return x


def _walsh(x: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(x.size)
    return (x[i] + x[j]) / 2


@dataclass(frozen=True)
class TurnReading:
    """Measured over predicted speed-up, turn by turn: estimate and interval (ratios)."""

    ratio: float
    """exp(Hodges-Lehmann of the turns' log errors): measured / predicted speed-up."""
    low: float
    high: float
    """The interval's ends (module docstring)."""
    turns: int
    """Turns behind it (prompts x rounds)."""
    coverage: float
    """The interval's coverage under the module's assumptions (exact up to ``EXACT_TURNS``
    turns, approximate beyond)."""
    level: float = LEVEL
    """The coverage asked for."""

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the estimate."""
        return (self.high - self.low) / (2 * self.ratio)

    @property
    def short(self) -> bool:
        """Too few turns for an interval of ``level`` (coverage below it by more than the
        normal approximation's rounding)."""
        return self.coverage < self.level - 0.005


def turn_log_errors(greedy_results, method_results, predicted) -> np.ndarray:
    """log(measured ratio / predicted ratio) for every turn: ``greedy_results[r][i].wall_s`` /
    ``method_results[r][i].wall_s`` (``TimedMethod.results``) over ``predicted[i]``, prompt
    i's predicted greedy seconds over the method's (``log_errors``); ValueError when the
    shapes differ."""
    predicted = np.asarray(predicted, dtype=float).ravel()
    if predicted.size == 0 or not np.all(np.isfinite(predicted) & (predicted > 0)):
        raise ValueError(f"predicted must be positive finite ratios, one per prompt, got "
                         f"{predicted!r:.80}")  # fmt: skip
    if len(greedy_results) != len(method_results):
        raise ValueError(f"greedy and the method must have the same rounds, got "
                         f"{len(greedy_results)} and {len(method_results)}")  # fmt: skip
    g, m, ratio = [], [], []
    for g_runs, m_runs in zip(greedy_results, method_results, strict=True):
        if not len(g_runs) == len(m_runs) == predicted.size:
            raise ValueError(f"every round must hold one run per prompt ({predicted.size}), got "
                             f"{len(g_runs)} and {len(m_runs)}")  # fmt: skip
        g += [run.wall_s for run in g_runs]
        m += [run.wall_s for run in m_runs]
        ratio += list(predicted)
    return log_errors(g, m, ratio)


def log_errors(greedy_s, method_s, predicted_ratio) -> np.ndarray:
    """log(greedy_s / method_s / predicted_ratio), element by element (one per turn), leaving
    out turns with a non-positive or non-finite time; ValueError when none is left."""
    g, m, r = (np.asarray(x, dtype=float).ravel() for x in (greedy_s, method_s, predicted_ratio))
    if not g.size == m.size == r.size:
        raise ValueError(f"greedy_s, method_s and predicted_ratio must have one value per turn, "
                         f"got {g.size}, {m.size} and {r.size}")  # fmt: skip
    keep = np.isfinite(g) & np.isfinite(m) & (g > 0) & (m > 0)
    if not keep.any():
        raise ValueError("no turn has both a greedy and a method run with positive seconds")
    return np.log(g[keep] / m[keep] / r[keep])


def read_turn_table(table, *, level: float = LEVEL) -> dict:
    """{method: TurnReading} of a turn table (``ProfileValidation.turn_table``, ``turns.csv``:
    ``method``, ``seconds``, ``greedy_seconds``, ``predicted_ratio`` per turn)."""
    missing = {"method", "seconds", "greedy_seconds", "predicted_ratio"} - set(table.columns)
    if missing:
        raise ValueError(f"the turn table lacks the columns {sorted(missing)}")
    return {
        method: read_turns(log_errors(rows["greedy_seconds"], rows["seconds"],
                                      rows["predicted_ratio"]), level=level)
        for method, rows in table.groupby("method", sort=False)
    }  # fmt: skip


def read_turns(log_errors, *, level: float = LEVEL) -> TurnReading:
    """The turn reading of ``log_errors`` (``turn_log_errors``): Hodges-Lehmann estimate and
    signed-rank interval (module docstring); a single turn gives a point of coverage 0."""
    logs = _finite("log_errors", log_errors)
    level = check_level(level)
    walsh = np.sort(_walsh(logs))
    c, coverage = _rank_bound(logs.size, level)
    centre = hodges_lehmann(logs)
    low, high = walsh[c], walsh[walsh.size - 1 - c]
    return TurnReading(math.exp(centre), math.exp(low), math.exp(high), int(logs.size),
                       coverage, level)  # fmt: skip


def _rank_bound(n: int, level: float) -> tuple[int, float]:
    """(c, coverage): c the 0-based rank of the interval's lower end among the n (n + 1) / 2
    sorted Walsh averages, the largest with P(T <= c) <= (1 - level) / 2 for the signed-rank
    statistic T (0 when none is: the interval is then their whole range), and the interval's
    coverage 1 - 2 P(T <= c) - exact up to ``EXACT_TURNS`` turns, normal beyond."""
    total = n * (n + 1) // 2
    tail = (1 - level) / 2
    if n <= EXACT_TURNS:
        dist = np.zeros(total + 1)
        dist[0] = 1.0
        for r in range(1, n + 1):  # T's law: each rank r enters T with probability 1/2
            dist[r:] = (dist[r:] + dist[:-r].copy()) / 2
            dist[:r] /= 2
        cdf = np.cumsum(dist)
        c = max(0, int(np.searchsorted(cdf, tail * (1 + 1e-12), side="right")) - 1)
        c = min(c, (total - 1) // 2)
        return c, float(max(0.0, 1 - 2 * cdf[c]))
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    normal = NormalDist(total / 2, sd)
    c = max(0, int(math.floor(total / 2 - NormalDist().inv_cdf(1 - tail) * sd + 0.5)) - 1)
    return c, float(1 - 2 * normal.cdf(c + 0.5))


def rounds_for(reading: TurnReading, rounds: int, *,
               target: float = TARGET_HALF_WIDTH) -> int | None:  # fmt: skip
    """Rounds that would narrow ``reading`` (taken over ``rounds`` rounds) to ``target``
    relative half-width, were its turns independent (width ~ 1 / sqrt(turns)); at least 1;
    None for a reading of too few turns to have an interval (``TurnReading.short``)."""
    rounds = as_int("rounds", rounds, minimum=1)
    target = as_real("target", target, strict=True)
    if reading.short:
        return None
    return max(1, math.ceil(rounds * (reading.half_width / target) ** 2 - 1e-9))


def turn_columns(reading: TurnReading | None, predicted: float) -> dict:
    """The ``TURN_COLUMNS`` of a table row whose predicted speed-up is ``predicted``: the
    measured speed-up on the prediction's weighting (predicted x ratio), its interval, the
    error predicted / measured - 1 and the coverage; NaN without a reading."""
    if reading is None:
        return dict.fromkeys(TURN_COLUMNS, float("nan"))
    values = (predicted * reading.ratio, predicted * reading.low, predicted * reading.high,
              1 / reading.ratio - 1, reading.coverage)  # fmt: skip
    return dict(zip(TURN_COLUMNS, values, strict=True))
