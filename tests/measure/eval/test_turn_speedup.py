"""The speed-up judged turn by turn (``measure.eval.turn_speedup``): the Hodges-Lehmann estimate,
its signed-rank interval against published critical values and a Monte Carlo, prompts of
different speed-ups judged each against its own prediction, and a planted machine whose speed
moves in spells, which the turns cancel better than a ratio of medians."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import measure.eval.turn_speedup as ts
from measure.eval.turn_speedup import (
    TurnReading,
    hodges_lehmann,
    read_turns,
    rounds_for,
    turn_columns,
    turn_log_errors,
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
    c, coverage = ts._rank_bound(n, 0.95)
    assert c == critical and coverage >= 0.95
    logs = np.random.default_rng(n).normal(size=n)
    got = read_turns(logs)
    i, j = np.triu_indices(n)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    assert math.log(got.low) == pytest.approx(walsh[critical])
    assert math.log(got.high) == pytest.approx(walsh[walsh.size - 1 - critical])
    assert math.log(got.ratio) == pytest.approx(hodges_lehmann(logs))
    assert got.coverage == coverage and not got.short


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_too_few_turns_give_their_whole_range_and_say_so(n):
    """Below 6 turns even the outer Walsh averages cover only 1 - 2 / 2^n."""
    got = read_turns(np.log(np.linspace(0.8, 1.2, n)))
    assert (got.low, got.high) == pytest.approx((0.8, 1.2 if n > 1 else 0.8))
    assert got.coverage == pytest.approx(1 - 2 / 2**n) and got.short
    assert rounds_for(got, 3) is None  # no interval to narrow


def test_the_normal_rank_matches_the_exact_law_where_they_meet(monkeypatch):
    exact = [ts._rank_bound(n, 0.95) for n in (40, 60)]
    monkeypatch.setattr(ts, "EXACT_TURNS", 0)
    normal = [ts._rank_bound(n, 0.95) for n in (40, 60)]
    for (c_exact, cov_exact), (c_normal, cov_normal) in zip(exact, normal, strict=True):
        assert abs(c_exact - c_normal) <= 1 and cov_normal == pytest.approx(cov_exact, abs=0.005)


@pytest.mark.parametrize("n", [9, 30, 80])
def test_the_interval_covers_a_planted_centre_at_its_level(n):
    """Log errors from a heavy-tailed symmetric law (Student t, 3 degrees of freedom)."""
    rng = np.random.default_rng(7)
    trials, hits = 1500, 0
    for _ in range(trials):
        got = read_turns(math.log(0.8) + 0.05 * rng.standard_t(3, size=n))
        hits += got.low <= 0.8 <= got.high
    assert 0.93 <= hits / trials <= 0.98, hits / trials


def _runs(seconds):
    """``TimedMethod.results``-like rows from seconds[r][i]."""
    return [[SimpleNamespace(wall_s=s) for s in row] for row in seconds]


def test_each_prompt_is_judged_against_its_own_prediction():
    """Three prompts of different length and speed-up, timed exactly as predicted: the error
    is nil and the interval a point, where pooling the prompts' ratios would not be."""
    greedy_s, speedups = np.array([3.0, 1.0, 1.0]), np.array([1.3, 1.0, 0.9])
    greedy, method = _runs([greedy_s] * 3), _runs([greedy_s / speedups] * 3)
    errors = turn_log_errors(greedy, method, speedups)
    assert errors == pytest.approx(np.zeros(9))
    got = read_turns(errors)
    assert (got.ratio, got.low, got.high) == pytest.approx((1.0, 1.0, 1.0))
    pooled = read_turns(turn_log_errors(greedy, method, [1.0] * 3))  # one centre for all
    assert pooled.high / pooled.low > 1.4


def test_turn_columns_scale_the_reading_by_the_predicted_speedup():
    got = turn_columns(TurnReading(1.1, 1.0, 1.2, 9, 0.96), 0.8)
    assert list(got) == list(ts.TURN_COLUMNS)
    assert list(got.values()) == pytest.approx([0.88, 0.8, 0.96, 1 / 1.1 - 1, 0.96])
    assert all(math.isnan(v) for v in turn_columns(None, 0.8).values())


def test_turns_read_a_spelled_machine_closer_than_a_ratio_of_medians():
    """A machine at 1x or 1.4x per turn (greedy and the method of one turn meet the same
    spell), 5 % noise per run, 3 rounds of 3 prompts of unequal length and speed-up, 400
    planted validations: the turn estimate's error spreads less than greedy's median round over
    the method's against the predicted ratio of sums (0.024 against 0.037 when written)."""
    rng = np.random.default_rng(3)
    lengths, speedups = np.array([0.9, 2.1, 2.1]), np.array([0.75, 0.8, 0.85])
    predicted = lengths.sum() / (lengths / speedups).sum()
    turns, medians = [], []
    for _ in range(400):
        spell = rng.choice([1.0, 1.4], size=(3, 3))
        greedy = spell * lengths * np.exp(0.05 * rng.normal(size=(3, 3)))
        method = spell * lengths / speedups * np.exp(0.05 * rng.normal(size=(3, 3)))
        reading = read_turns(turn_log_errors(_runs(greedy), _runs(method), speedups))
        turns.append(math.log(reading.ratio))
        ratio = np.median(greedy.sum(axis=1)) / np.median(method.sum(axis=1))
        medians.append(math.log(ratio / predicted))
    assert abs(np.mean(turns)) < 0.005  # (no bias)
    assert np.std(turns) < 0.75 * np.std(medians), (np.std(turns), np.std(medians))


def test_turn_errors_pair_each_prompt_of_each_round_and_check_shapes():
    greedy = _runs([[1.0, 2.0], [1.5, 0.0]])
    method = _runs([[2.0, 2.5], [3.0, 1.0]])
    got = turn_log_errors(greedy, method, [0.5, 1.0])
    assert np.exp(got).tolist() == pytest.approx([1.0, 0.8, 1.0])  # (the zero turn left out)
    with pytest.raises(ValueError, match="no turn has both a greedy and a method run"):
        turn_log_errors(_runs([[0.0]]), _runs([[1.0]]), [1.0])
    with pytest.raises(ValueError, match=r"every round must hold one run per prompt \(3\)"):
        turn_log_errors(greedy, method, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="greedy and the method must have the same rounds"):
        turn_log_errors(greedy, method[:1], [1.0, 1.0])
    for bad in ([], [0.0, 1.0], [np.nan, 1.0]):
        with pytest.raises(ValueError, match="predicted must be positive finite ratios"):
            turn_log_errors(greedy, method, bad)


def test_rounds_for_scales_with_the_square_of_the_width():
    wide = TurnReading(1.0, 0.95, 1.05, 9, 0.96)  # +-5 % over 3 rounds
    assert wide.half_width == pytest.approx(0.05)
    assert rounds_for(wide, 3) == 12  # (5 / 2.5)^2 x 3
    assert rounds_for(TurnReading(1.0, 0.99, 1.01, 9, 0.96), 3) == 1  # (already narrower)
    with pytest.raises(ValueError, match="rounds must be a positive integer"):
        rounds_for(wide, 0)
    with pytest.raises(ValueError, match="target must be a finite number > 0"):
        rounds_for(wide, 3, target=0)


@pytest.mark.parametrize("bad", [[], [np.nan], [1.0, np.inf]])
def test_bad_errors_are_refused(bad):
    with pytest.raises(ValueError, match="log_errors must be one or more finite numbers"):
        read_turns(bad)


def test_bad_level_is_refused():
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\)"):
        read_turns([0.0, 0.1], level=1.0)
