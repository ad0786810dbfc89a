"""The speed-up read turn by turn (``measure.eval.turn_speedup``): the Hodges-Lehmann estimate,
its signed-rank interval against published critical values and a Monte Carlo, and a planted
machine whose speed moves in spells, which the turns cancel and a ratio of medians does not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import measure.eval.turn_speedup as ts
from measure.eval.turn_speedup import (
    TurnSpeedup,
    hodges_lehmann,
    rounds_for,
    turn_ratios,
    turn_speedup,
)


def test_hodges_lehmann_is_the_median_of_the_walsh_averages():
    assert hodges_lehmann([1, 2, 3]) == 2.0  # 1, 1.5, 2, 2, 2.5, 3
    assert hodges_lehmann([0, 0, 10]) == 2.5  # 0, 0, 0, 5, 5, 10
    assert hodges_lehmann([4.0]) == 4.0
    for bad in ([], [1.0, np.nan], [np.inf]):
        with pytest.raises(ValueError, match="values must be one or more finite numbers"):
            hodges_lehmann(bad)


@pytest.mark.parametrize(
    ("n", "critical"),
    [(6, 0), (7, 2), (8, 3), (9, 5), (10, 8), (12, 13), (15, 25), (20, 52), (25, 89)],
)
def test_the_interval_ends_sit_at_the_published_signed_rank_critical_values(n, critical):
    """Two-sided 5 % critical values of Wilcoxon's signed-rank T (standard tables): the
    interval runs from Walsh average number critical + 1 to N - critical (1-based)."""
    assert ts._rank_bound(n, 0.95) == critical
    walsh = np.arange(n * (n + 1) // 2)  # ratios whose Walsh averages are easy to name
    logs = np.sort(np.random.default_rng(n).normal(size=n))
    got = turn_speedup(np.exp(logs))
    i, j = np.triu_indices(n)
    sorted_walsh = np.sort((logs[i] + logs[j]) / 2)
    assert np.log(got.low) == pytest.approx(sorted_walsh[critical])
    assert np.log(got.high) == pytest.approx(sorted_walsh[walsh.size - 1 - critical])


def test_too_few_turns_give_the_whole_range_and_one_turn_a_point():
    assert ts._rank_bound(5, 0.95) == 0  # P(T = 0) = 1/32 > 2.5 %: no rank reaches 95 %
    got = turn_speedup([0.8, 0.9, 1.0, 1.1, 1.2])
    assert (got.low, got.high) == pytest.approx((0.8, 1.2))
    one = turn_speedup([0.75])
    assert (one.speedup, one.low, one.high, one.turns) == (0.75, 0.75, 0.75, 1)


def test_the_normal_rank_matches_the_exact_law_where_they_meet(monkeypatch):
    exact = [ts._rank_bound(n, 0.95) for n in (40, 60)]
    monkeypatch.setattr(ts, "EXACT_TURNS", 0)
    normal = [ts._rank_bound(n, 0.95) for n in (40, 60)]
    assert all(abs(a - b) <= 1 for a, b in zip(exact, normal, strict=True)), (exact, normal)


@pytest.mark.parametrize("n", [9, 30, 80])
def test_the_interval_covers_a_planted_speedup_at_its_level(n):
    """Log ratios from a heavy-tailed symmetric law (Student t, 3 degrees of freedom)."""
    rng = np.random.default_rng(7)
    trials = 1500
    hits = 0
    for _ in range(trials):
        got = turn_speedup(0.8 * np.exp(0.05 * rng.standard_t(3, size=n)))
        hits += got.low <= 0.8 <= got.high
    assert 0.93 <= hits / trials <= 0.98, hits / trials


def test_turns_read_a_spelled_machine_closer_than_a_ratio_of_medians():
    """A machine at 1x or 1.4x per turn (greedy and the method of one turn meet the same
    spell) and 5 % noise per run, 3 rounds of 3 prompts of unequal length, 400 planted
    validations: the turn estimate's error spreads less than greedy's median round over the
    method's (its spread was 0.024 against 0.037 when written)."""
    rng = np.random.default_rng(3)
    true, lengths = 0.8, np.array([0.9, 2.1, 2.1])  # greedy's seconds per prompt
    turns, medians = [], []
    for _ in range(400):
        spell = rng.choice([1.0, 1.4], size=(3, 3))
        greedy = spell * lengths * np.exp(0.05 * rng.normal(size=(3, 3)))
        method = spell * lengths / true * np.exp(0.05 * rng.normal(size=(3, 3)))
        turns.append(np.log(turn_speedup((greedy / method).ravel()).speedup / true))
        ratio = np.median(greedy.sum(axis=1)) / np.median(method.sum(axis=1))
        medians.append(np.log(ratio / true))
    assert abs(np.mean(turns)) < 0.005  # (no bias)
    assert np.std(turns) < 0.75 * np.std(medians), (np.std(turns), np.std(medians))


def _runs(seconds):
    """``TimedMethod.results``-like rows from seconds[r][i]."""
    return [[SimpleNamespace(wall_s=s) for s in row] for row in seconds]


def test_turn_ratios_pair_each_prompt_of_each_round():
    greedy = _runs([[1.0, 2.0], [1.5, 0.0]])
    method = _runs([[2.0, 2.5], [3.0, 1.0]])
    assert turn_ratios(greedy, method).tolist() == [0.5, 0.8, 0.5]  # (the zero turn skipped)
    with pytest.raises(ValueError, match="no turn has both a greedy and a method run"):
        turn_ratios(_runs([[0.0]]), _runs([[1.0]]))


def test_rounds_for_scales_with_the_square_of_the_width():
    wide = TurnSpeedup(1.0, 0.95, 1.05, 9)  # +-5 % over 3 rounds
    assert wide.half_width == pytest.approx(0.05)
    assert rounds_for(wide, 3) == 12  # (5 / 2.5)^2 x 3
    assert rounds_for(TurnSpeedup(1.0, 0.99, 1.01, 9), 3) == 1  # (already narrower)
    assert rounds_for(TurnSpeedup(1.0, 1.0, 1.0, 1), 3) == 1
    with pytest.raises(ValueError, match="rounds must be a positive integer"):
        rounds_for(wide, 0)
    with pytest.raises(ValueError, match="target must be a finite number > 0"):
        rounds_for(wide, 3, target=0)


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0], [np.nan], [1.0, np.inf]])
def test_bad_ratios_are_refused(bad):
    with pytest.raises(ValueError, match="ratios must be one or more positive finite numbers"):
        turn_speedup(bad)


def test_bad_level_is_refused():
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\)"):
        turn_speedup([1.0, 1.1], level=1.0)
