"""measure.eval.run_to_run: what chance alone lets repeated validations differ by."""

import math

import numpy as np
import pytest

from measure.eval.run_to_run import log_sd_of, noise_allowance, rounds_to_hold

Z = 1.959963984540054  # the normal law's 97.5 % point


def test_log_sd_of_inverts_a_normal_interval():
    sd = 0.03
    low, high = math.exp(-Z * sd), math.exp(Z * sd)
    assert log_sd_of([low], [high], [0.95])[0] == pytest.approx(sd)
    # a 50 % interval of the same law is narrower by z(0.75) / z(0.975)
    q = 0.6744897501960817
    assert log_sd_of([math.exp(-q * sd)], [math.exp(q * sd)], [0.5])[0] == pytest.approx(sd)
    # no interval: a point (coverage 0), a missing bound, a non-positive bound
    got = log_sd_of([0.9, np.nan, -1.0], [1.1, 1.1, 1.0], [0.0, 0.95, 0.95])
    assert np.isnan(got).all()


def test_two_runs_may_differ_by_the_normal_difference_law():
    """Two runs, each row's error drawn with log-sd s: the 95 % change is z * sqrt(2) * s."""
    s = 0.01
    allow = noise_allowance(np.zeros((3, 2)), np.full((3, 2), s), draws=40_000)
    expected = 100 * Z * math.sqrt(2) * s  # (points; expm1 is linear to 0.1 % here)
    assert allow.rows == pytest.approx(np.full(3, expected), rel=0.03)
    assert allow.level == 0.95
    # the runs' median |error| over 3 rows spreads by less than one row changes
    assert 0 < allow.median < expected


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
    s, r, bound = 0.02, 4, 5.0
    expected = r * (100 * Z * math.sqrt(2) * s / bound) ** 2  # 19.7
    got = rounds_to_hold(bound, r, [s, s], [0.0, 0.0], draws=40_000)
    assert abs(got - expected) <= 1.5
    assert rounds_to_hold(bound, r, [0.001, 0.001], [0.0, 0.0]) == 1  # already held
    # the profile's part does not shrink with rounds
    assert rounds_to_hold(bound, r, [s, s], [0.03, 0.03]) is None


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: noise_allowance([[0.1]], [[0.01]]), "log_errors"),
        (lambda: noise_allowance([[0.1, np.nan]], [[0.01, 0.01]]), "log_errors"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, -0.01]]), "log_sds"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, 0.01]], level=1.5), "level"),
        (lambda: noise_allowance([[0.1, 0.1]], [[0.01, 0.01]], draws=10), "draws"),
        (lambda: rounds_to_hold(0.0, 4, [0.01, 0.01], [0, 0]), "bound"),
        (lambda: rounds_to_hold(5.0, 0, [0.01, 0.01], [0, 0]), "rounds"),
        (lambda: rounds_to_hold(5.0, 4, [0.01, 0.01], [0]), "predicted_sds"),
    ],
)
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
