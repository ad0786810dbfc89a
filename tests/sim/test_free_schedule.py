"""FREE's SimPy schedule against the closed form: equal on random exit sequences, and the
Monte Carlo mean against the i.i.d. expectation."""

from __future__ import annotations

import numpy as np
import pytest

import ppdmodel
import sim
from ppdmodel import DecodeCosts
from tests.ppdmodel.test_free import COSTS, LINEAR, D, L


@pytest.mark.parametrize("seed", range(5))
def test_closed_form_equals_simulator_on_random_traces(seed):
    rng = np.random.default_rng(seed)
    ell = int(rng.integers(1, 40))
    exits = (rng.random(ell) < rng.random()).astype(int)
    for costs in (COSTS, LINEAR, DecodeCosts.unit()):
        closed = ppdmodel.free_trace_latency_seconds(d=D, exit_layer=L, exits=exits, costs=costs)
        result = sim.simulate_free(d=D, exit_layer=L, costs=costs, exits=exits)
        assert result.latency_s == pytest.approx(closed, rel=1e-12)
        assert result.busy_s == pytest.approx(closed - ell * costs.host_s, rel=1e-12)
        deep = result.events[result.events.kind == "deep"]
        assert len(deep) == (D - L) * int((exits == 0).sum())


def test_monte_carlo_mean_matches_expectation():
    q, ell = 0.55, 24
    runs = sim.monte_carlo_free(d=D, exit_layer=L, costs=COSTS, ell=ell, q=q, n_runs=400, seed=1)
    exp = ppdmodel.free_expected_latency_seconds(d=D, exit_layer=L, ell=ell, q=q, costs=COSTS)
    sem = runs.latency_s.std() / np.sqrt(len(runs))
    assert abs(runs.latency_s.mean() - exp) < 4 * sem
