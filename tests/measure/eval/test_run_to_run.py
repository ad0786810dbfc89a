"""measure.eval.run_to_run: what chance alone lets repeated validations differ by."""

import math

import numpy as np
import pandas as pd
import pytest

from measure.eval.run_to_run import (
    correlation_of,
    log_sd_of,
    noise_allowance,
    rounds_to_hold,
    turn_noise,
)

Z = 1.959963984540054  # the normal law's 97.5 % point
RANGE3 = 3.3145  # the 95 % point of the range of 3 standard normal draws


def test_log_sd_of_inverts_a_normal_interval():
    sd = 0.03
    low, high = math.exp(-Z * sd), math.exp(Z * sd)
    assert log_sd_of([low], [high], [0.95])[0] == pytest.approx(sd)
    # a 50 % interval of the same law is narrower by z(0.75) / z(0.975); coverage broadcasts
    q = 0.6744897501960817
    assert log_sd_of([math.exp(-q * sd)] * 2, [math.exp(q * sd)] * 2, 0.5) == pytest.approx(
        [sd, sd]
    )
    # no interval: a point (coverage 0), a missing bound, a non-positive or infinite bound
    got = log_sd_of([0.9, np.nan, -1.0, 0.9], [1.1, 1.1, 1.0, np.inf], [0.0, 0.95, 0.95, 0.95])
    assert np.isnan(got).all()


def test_two_runs_may_differ_by_the_normal_difference_law():
    """Two runs, each row's error drawn with log-sd s: the 95 % change is z * sqrt(2) * s,
    whichever side (measured or predicted) the spread is on."""
    s = 0.01
    expected = 100 * Z * math.sqrt(2) * s  # (points; expm1 is linear to 0.1 % here)
    measured = noise_allowance(np.zeros((3, 2)), s)
    predicted = noise_allowance(np.zeros((3, 2)), 0.0, s)
    assert measured.rows == pytest.approx(np.full(3, expected), rel=0.02)
    assert predicted.rows == pytest.approx(np.full(3, expected), rel=0.02)
    assert measured.level == 0.95
    # the runs' median |error| over 3 independent rows spreads by less than one row changes
    assert 0 < measured.median < expected


def test_three_runs_may_differ_by_the_range_law():
    s = 0.02
    allow = noise_allowance(np.zeros((2, 3)), np.full((2, 3), s / math.sqrt(2)), s / math.sqrt(2))
    assert allow.rows == pytest.approx(np.full(2, 100 * RANGE3 * s), rel=0.02)


def test_correlated_rows_move_the_median_together():
    """Rows whose measured noise is perfectly correlated move as one: the median |error| of
    rows sharing one centre then spreads as much as one row changes."""
    errors, sds = np.full((3, 2), 0.05), np.full((3, 2), 0.01)
    alone = noise_allowance(errors, sds)
    together = noise_allowance(errors, sds, correlation=np.ones((3, 3)))
    assert together.rows == pytest.approx(alone.rows, rel=0.02)
    assert together.median == pytest.approx(together.rows[0], rel=0.02)
    assert together.median > 1.2 * alone.median


def test_the_allowance_holds_its_level_under_the_null():
    """Runs drawn about one centre per row with known spreads: a row moves beyond its
    allowance about 5 % of the time (the allowance is computed from each draw's own errors,
    as from a real pair of runs, so its centre moves with them)."""
    rng = np.random.default_rng(7)
    sds = np.array([[0.01, 0.02, 0.015], [0.03, 0.01, 0.02]])
    centre = np.array([[0.05], [-0.02]])
    beyond, trials = 0, 300
    for t in range(trials):
        logs = centre + sds * rng.standard_normal(sds.shape)
        allow = noise_allowance(logs, sds, draws=2000, seed=t)
        points = 100 * np.expm1(logs)
        beyond += int((points.max(axis=1) - points.min(axis=1) > allow.rows).sum())
    assert 0.025 < beyond / (2 * trials) < 0.08


def test_no_spread_allows_no_change():
    allow = noise_allowance([[0.1, 0.1]], [[0.0, 0.0]])
    assert allow.rows[0] == pytest.approx(0.0)
    assert allow.median == pytest.approx(0.0)


def test_rounds_to_hold_scales_the_measured_spread():
    """Measured log-sd s over r rounds, no predicted spread, two runs: the change allowance at
    R rounds is z sqrt(2) s sqrt(r / R), so R = r (100 z sqrt(2) s / bound)^2."""
    s, r, bound = 0.04, 4, 5.0
    expected = r * (100 * Z * math.sqrt(2) * s / bound) ** 2  # 19.7
    # (within 2: the Monte Carlo quantile is known to 0.7 %, the rounds to twice that)
    assert abs(rounds_to_hold(bound, r, [s, s], [0.0, 0.0]) - expected) <= 2
    # one run measured over twice the rounds with sd s / sqrt(2) is the same law
    got = rounds_to_hold(bound, [r, 2 * r], [s, s / math.sqrt(2)], [0.0, 0.0])
    assert abs(got - expected) <= 2
    assert rounds_to_hold(bound, r, [0.001, 0.001], [0.0, 0.0]) == 1  # already held
    # the profile's part does not shrink with rounds: none when it alone reaches the bound
    assert rounds_to_hold(bound, r, [s, s], [0.03, 0.03]) is None  # (8.3 points alone)
    # just under the bound it does not: many rounds, but a number
    p = 0.99 * bound / (100 * Z * math.sqrt(2))
    far = rounds_to_hold(bound, r, [s, s], [p, p])
    assert far is not None and far > 20 * expected  # (about 990)


def _turns(errors: dict[str, np.ndarray]) -> pd.DataFrame:
    """A turn table whose methods' log errors (rounds x prompts) are ``errors``."""
    rows = []
    for method, e in errors.items():
        for (r, i), value in np.ndenumerate(e):
            rows.append(dict(method=method, round=r, prompt=i, greedy_seconds=1.0,
                             seconds=1.0 / 0.8 / math.exp(value), predicted_ratio=0.8))  # fmt: skip
    return pd.DataFrame(rows)


def test_turn_noise_leaves_out_how_prompts_differ():
    """Each prompt's own error stays from run to run; only what is left moves the estimate.
    Planted: prompt effects of +-10 % and a within-prompt noise the test knows exactly."""
    rng = np.random.default_rng(3)
    rounds, prompts = 6, 4
    effects = np.array([0.1, -0.1, 0.05, -0.05])
    noise = rng.standard_normal((rounds, prompts)) * 0.02
    shared = rng.standard_normal((rounds, prompts)) * 0.02  # greedy's, in both methods' turns
    sd, corr = turn_noise(_turns({"a": effects + noise + shared, "b": shared}))
    resid = noise + shared - (noise + shared).mean(axis=0)
    expected = math.sqrt((resid**2).sum() / (rounds * prompts - prompts) / (rounds * prompts))
    assert sd["a"] == pytest.approx(expected)
    assert sd["a"] < 0.01  # the prompt effects alone would read about 0.08 / sqrt(24) = 0.016
    assert 0.4 < corr.loc["a", "b"] < 1.0  # they share greedy's noise
    one = _turns({"a": np.zeros((1, 2))})  # one round: no within-prompt spread to take
    assert np.isnan(turn_noise(one)[0]["a"])


def test_correlation_of_orders_the_rows_and_fills_what_it_cannot_estimate():
    corr = pd.DataFrame([[1.0, 0.5, np.nan], [0.5, 1.0, 0.2], [np.nan, 0.2, np.nan]],
                        index=list("abc"), columns=list("abc"))  # fmt: skip
    got = correlation_of(corr, ["c", "a", "x"])  # x: a row the turns did not have
    assert got.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert correlation_of(corr, ["b", "a"]).tolist() == [[1.0, 0.5], [0.5, 1.0]]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: noise_allowance([[0.1]], [[0.01]]), "log_errors"),
        (lambda: noise_allowance([[0.1, np.nan]], [[0.01, 0.01]]), "log_errors"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, -0.01]]), "measured_sds"),
        (lambda: noise_allowance([[0.1, 0.1]], 0.01, [[0.01, 0.01, 0.01]]), "predicted_sds"),
        (lambda: noise_allowance([[0.1, 0.1]], 0.01, correlation=[[1, 2]]), "correlation"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, 0.01]], level=1.5), "level"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, 0.01]], draws=10), "draws"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, 0.01]], seed=-1), "seed"),
        (lambda: rounds_to_hold(0.0, 4, [0.01, 0.01], [0, 0]), "bound"),
        (lambda: rounds_to_hold(5.0, 0, [0.01, 0.01], [0, 0]), "rounds"),
        (lambda: rounds_to_hold(5.0, [4, 4, 4], [0.01, 0.01], [0, 0]), "rounds"),
        (lambda: rounds_to_hold(5.0, 4, [0.01], [0]), "measured_sds"),
        (lambda: rounds_to_hold(5.0, 4, [0.01, 0.01], [0]), "predicted_sds"),
        (lambda: log_sd_of([0.9, 0.9], [1.1], 0.95), "low and high"),
        (lambda: turn_noise(pd.DataFrame({"method": ["a"]})), "turn columns"),
        (lambda: correlation_of(np.eye(2), ["a", "b"]), "correlation"),
        (
            lambda: correlation_of(pd.DataFrame([[1.0]], index=["a"], columns=["b"]), "a"),
            "correlation",
        ),  # fmt: skip
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
