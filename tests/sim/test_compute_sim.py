"""Closed-form busy device-seconds (ppdmodel.compute_seconds) == the simulator's busy_s."""

import math

import numpy as np
import pytest

import sim
from ppdmodel.compute_seconds import greedy_compute_seconds, trace_compute_seconds
from tests.ppdmodel.test_costs import random_costs


@pytest.mark.parametrize("shared", [False, True])
def test_trace_compute_equals_simulated_busy_time(shared):
    """500 random traces x cost draws: sum of the simulator's busy_s == the closed form (to
    float rounding: the closed form goes through the rate M / ell)."""
    rng = np.random.default_rng(99 + shared)
    for _ in range(500):
        costs, k = random_costs(rng, shared=shared), int(rng.integers(1, 6))
        d = int(rng.integers(2, 31))
        d_bar = int(rng.integers(math.ceil(d / 2), d))
        ell = int(rng.integers(1, 25))
        m = (rng.random(ell - 1) < rng.random()).astype(int)
        early_head = ("main", "candidates")[int(rng.integers(2))]
        config = sim.SimConfig(
            d=d,
            d_bar=d_bar,
            k=k,
            ell=ell,
            matches=sim.Replay(m),
            costs=costs,
            early_head=early_head,
        )
        closed = trace_compute_seconds(
            d=d, d_bar=d_bar, m=m, k=k, costs=costs, early_head=early_head
        )
        busy = sum(sim.simulate(config, record_events=False).busy_s)
        assert busy == pytest.approx(closed, rel=1e-9 if shared else 1e-12, abs=1e-12), config


def test_greedy_compute_equals_simulated_busy_time():
    rng = np.random.default_rng(5)
    costs = random_costs(rng, shared=False)
    config = sim.SimConfig(d=12, d_bar=6, k=1, ell=7, costs=costs, schedule="greedy")
    busy = sum(sim.simulate(config, record_events=False).busy_s)
    assert busy == greedy_compute_seconds(d=12, ell=7, costs=costs)
