"""Intervals: a prediction over the profile's cost replicates and p's sampling error."""

from __future__ import annotations

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts, Interval, p_draws, prediction_interval
from ppdmodel.intervals import interval_of


def test_p_draws_shrink_with_the_tokens_behind_p():
    assert np.all(p_draws(p=0.4, draws=10) == 0.4)  # no n: p is taken as exact
    widths = []
    for n in (50, 5000):
        draws = p_draws(p=0.4, n=n, draws=4000, seed=1)
        assert draws.mean() == pytest.approx(0.4, abs=0.01)
        assert draws.std() == pytest.approx(np.sqrt(0.4 * 0.6 / n), rel=0.1)  # binomial error
        widths.append(interval_of(draws).high - interval_of(draws).low)
    assert widths[1] < widths[0] / 5
    assert np.array_equal(p_draws(p=0.4, n=50, seed=3), p_draws(p=0.4, n=50, seed=3))


def test_interval_covers_the_replicates_and_p():
    base = DecodeCosts(layer_s=1.0, early_head_s=2.0)
    reps = [DecodeCosts(layer_s=s, early_head_s=2.0) for s in np.linspace(0.9, 1.1, 21)]

    def per_token(costs, p):
        return ppdmodel.latency_per_token_seconds(d=8, d_bar=4, p=p, costs=costs)

    point = per_token(base, 0.5)
    costs_only = prediction_interval(per_token, base, reps, p=0.5, level=0.9)
    assert costs_only.contains(point) and costs_only.low >= per_token(reps[0], 0.5) - 1e-12
    assert costs_only.high <= per_token(reps[-1], 0.5) + 1e-12
    p_only = prediction_interval(per_token, base, p=0.5, n=40)
    assert p_only.contains(point) and p_only.high - p_only.low > 0
    assert prediction_interval(per_token, base, p=0.5).low == point  # nothing uncertain


def test_interval_methods_and_bad_input():
    a, b = Interval(1.0, 2.0), Interval(2.5, 3.0)
    assert a.contains(1.5) and not a.contains(2.1) and not a.overlaps(b)
    assert a.overlaps(Interval(1.9, 4.0)) and a.scaled(2).to_dict()["high"] == 4.0
    with pytest.raises(ValueError, match="Interval.low must be <= high"):
        Interval(2.0, 1.0)
    with pytest.raises(ValueError, match="level"):
        Interval(1.0, 2.0, level=1.5)
    with pytest.raises(ValueError, match="draws"):
        p_draws(p=0.5, n=10, draws=10**9)
    with pytest.raises(ValueError, match="p must be one match rate"):
        p_draws(p=[0.5, 0.6], n=10)
    with pytest.raises(TypeError, match="predict"):
        prediction_interval(3, DecodeCosts())
    with pytest.raises(ValueError, match="replicates"):
        prediction_interval(lambda c, p: 1.0, DecodeCosts(), ["x"])
