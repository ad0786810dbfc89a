"""The simulator under DecodeCosts against the closed form: exact traces, random traces, MC."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

import ppdmodel
import sim
from ppdmodel import DecodeCosts

sys.path.insert(0, str(Path(__file__).parents[1] / "ppdmodel"))
from test_costs import random_costs  # noqa: E402

# d=4, d_bar=2 (D=2), k=3, ell=3, m = [m_2, m_3] = [1, 0], separate devices. Batch of 3 rows:
# 1 + 2 * 0.5 = 2 s per layer. Derived by hand from the schedule in sim.costs_schedule.
COSTS = DecodeCosts(
    layer_s=1.0, candidate_extra_row_layer_s=0.5, embedding_s=0.5, early_head_s=1.0,
    final_head_s=1.0, candidate_dispatch_s=0.5, hidden_dispatch_s=0.25, handoff_s=0.25,
    host_s=0.5,
)  # fmt: skip
SUBS = "sub1+sub2+sub3"
HAND_DERIVED = {
    "main": [  # B = 2.5 + 1 + 3 + 0.5 = 7, wait 1.5, S = 2.5 - 1.5 - 0.25 = 0.75: T = 21 - 0.75
        ("main", 0, 1, 1, 2, 0.0, 2.5, "prefix"),
        ("main", 0, 1, 2, 2, 2.5, 3.5, "early_head"),
        (SUBS, -1, 2, 0, 0, 3.5, 4.0, "dispatch"),
        ("main", 0, 1, 3, 4, 3.5, 6.5, "suffix"),
        (SUBS, 1, 2, 1, 2, 4.0, 8.5, "speculate"),
        ("main", -1, 1, 4, 4, 6.5, 7.0, "overhead"),
        (SUBS, -1, 2, 2, 2, 8.5, 8.75, "handoff"),  # waited 1.5 for the batch
        ("main", 0, 2, 2, 2, 8.75, 9.75, "early_head"),  # resumed: layers 3..2, none
        (SUBS, -1, 3, 0, 0, 9.75, 10.25, "dispatch"),
        ("main", 0, 2, 3, 4, 9.75, 12.75, "suffix"),
        (SUBS, 1, 3, 1, 2, 10.25, 13.25, "abandoned"),
        ("main", -1, 2, 4, 4, 12.75, 13.25, "overhead"),
        ("main", 0, 3, 1, 2, 13.25, 15.75, "prefix"),
        ("main", 0, 3, 2, 2, 15.75, 16.75, "early_head"),
        (SUBS, -1, 4, 0, 0, 16.75, 17.25, "dispatch"),
        ("main", 0, 3, 3, 4, 16.75, 19.75, "suffix"),
        (SUBS, 1, 4, 1, 2, 17.25, 20.25, "abandoned"),
        ("main", -1, 3, 4, 4, 19.75, 20.25, "overhead"),
    ],
    "candidates": [  # B = 2.5 + 3 + 0.5 = 6, wait 2.25, S = 0: T = 18
        ("main", 0, 1, 1, 2, 0.0, 2.5, "prefix"),
        (SUBS, -1, 2, 0, 0, 2.5, 2.75, "dispatch"),
        ("main", 0, 1, 3, 4, 2.5, 5.5, "suffix"),
        (SUBS, 1, 2, 2, 2, 2.75, 3.75, "early_head"),
        (SUBS, 1, 2, 1, 2, 3.75, 8.25, "speculate"),
        ("main", -1, 1, 4, 4, 5.5, 6.0, "overhead"),
        (SUBS, -1, 2, 2, 2, 8.25, 8.5, "handoff"),
        (SUBS, -1, 3, 0, 0, 8.5, 8.75, "dispatch"),
        ("main", 0, 2, 3, 4, 8.5, 11.5, "suffix"),
        (SUBS, 1, 3, 2, 2, 8.75, 9.75, "early_head"),
        (SUBS, 1, 3, 1, 2, 9.75, 12.0, "abandoned"),
        ("main", -1, 2, 4, 4, 11.5, 12.0, "overhead"),
        ("main", 0, 3, 1, 2, 12.0, 14.5, "prefix"),
        (SUBS, -1, 4, 0, 0, 14.5, 14.75, "dispatch"),
        ("main", 0, 3, 3, 4, 14.5, 17.5, "suffix"),
        (SUBS, 1, 4, 2, 2, 14.75, 15.75, "early_head"),
        (SUBS, 1, 4, 1, 2, 15.75, 18.0, "abandoned"),
        ("main", -1, 3, 4, 4, 17.5, 18.0, "overhead"),
    ],
}


@pytest.mark.parametrize("early_head", sorted(HAND_DERIVED))
def test_exact_trace_both_placements(early_head):
    config = sim.SimConfig(
        d=4, d_bar=2, k=3, ell=3, matches=sim.Replay([1, 0]), costs=COSTS, early_head=early_head
    )
    result = sim.simulate(config)
    assert sorted(result.records) == sorted(HAND_DERIVED[early_head])
    closed = ppdmodel.trace_latency_seconds(
        d=4, d_bar=2, m=[1, 0], k=3, costs=COSTS, early_head=early_head
    )
    assert result.latency_s == closed == {"main": 20.25, "candidates": 18.0}[early_head]


def _random_case(rng, shared):
    costs, k = random_costs(rng, shared=shared), int(rng.integers(1, 6))
    d = int(rng.integers(2, 41))
    d_bar = int(rng.integers(math.ceil(d / 2), d))
    ell = int(rng.integers(1, 33))
    m = (rng.random(ell - 1) < rng.random()).astype(int)
    early_head = ("main", "candidates")[int(rng.integers(2))]
    config = sim.SimConfig(
        d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m), costs=costs, early_head=early_head
    )
    closed = ppdmodel.trace_latency_seconds(
        d=d, d_bar=d_bar, m=m, k=k, costs=costs, early_head=early_head
    )
    return config, closed


def test_closed_form_equals_simulator_on_random_traces_separate_devices():
    """2000 random traces x cost draws (multiples of 1/16: float sums exact): T_sim == T."""
    rng = np.random.default_rng(2024)
    for _ in range(2000):
        config, closed = _random_case(rng, shared=False)
        assert sim.simulate(config, record_events=False).latency_s == closed, config


def test_closed_form_equals_simulator_with_arbitrary_float_costs():
    rng = np.random.default_rng(5)
    for _ in range(300):
        values = {name: float(rng.exponential(0.01)) for name in DecodeCosts().to_dict()}
        values.update(layer_s=float(rng.uniform(1e-4, 1e-2)), candidate_layer_s_by_k={})
        serial = bool(rng.integers(2))  # a serial device (the single backend) is exact too
        values.update(shared_device_slowdown=2.0 if serial else 1.0, serial_device=serial)
        d, d_bar, k, ell = 30, int(rng.integers(15, 30)), int(rng.integers(1, 6)), 64
        m = (rng.random(ell - 1) < 0.4).astype(int)
        costs = DecodeCosts.from_dict(values)
        for early_head in ("main", "candidates"):
            config = sim.SimConfig(d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m),
                                   costs=costs, early_head=early_head)  # fmt: skip
            closed = ppdmodel.trace_latency_seconds(
                d=d, d_bar=d_bar, m=m, k=k, costs=costs, early_head=early_head
            )
            assert sim.simulate(config, record_events=False).latency_s == pytest.approx(
                closed, rel=1e-12
            )


SHARED_TOLERANCE = 1e-9
"""Relative: on one device the closed form is exact for fluid sharing (``ppdmodel.passes``);
the simulator's rate changes re-scale the remaining work, so only float rounding differs."""


def test_shared_device_closed_form_within_tolerance_of_simulator():
    rng = np.random.default_rng(77)
    for _ in range(1000):
        config, closed = _random_case(rng, shared=True)
        assert config.n_gpus == 1
        latency = sim.simulate(config, record_events=False).latency_s
        assert latency == pytest.approx(closed, rel=SHARED_TOLERANCE)


def test_shared_device_slows_overlapped_work_only():
    costs = DecodeCosts(layer_s=1.0, candidate_dispatch_s=1.0, shared_device_slowdown=2.0)
    result = sim.simulate(sim.SimConfig(d=4, d_bar=2, k=1, ell=1, matches=sim.Replay([]),
                                        costs=costs))  # fmt: skip
    suffix = [r for r in result.records if r[7] == "suffix"]
    # main alone for 1 s (the dispatch), then 1 s of work at half speed: 2 s
    assert suffix == [("main", 0, 1, 3, 4, 2.0, 5.0, "suffix")]
    assert result.latency_s == ppdmodel.trace_latency_seconds(d=4, d_bar=2, m=[], costs=costs)


@pytest.mark.parametrize("early_head", ["main", "candidates"])
@pytest.mark.parametrize("shared", [False, True])
def test_monte_carlo_mean_within_4_sigma(early_head, shared):
    rng = np.random.default_rng(31 + shared)
    costs = random_costs(rng, shared=shared)
    d, d_bar, k, ell, p, n = 24, 14, 3, 40, 0.45, 300
    config = sim.SimConfig(d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Bernoulli(p),
                           costs=costs, early_head=early_head)  # fmt: skip
    summary = sim.monte_carlo(config, n=n, seed=3)
    args = dict(d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head)
    expected = ppdmodel.expected_latency_seconds(**args, ell=ell, p=p)
    saving = ppdmodel.latency_per_token_seconds(**args, p=0.0) - (
        ppdmodel.latency_per_token_seconds(**args, p=1.0)
    )
    sigma = abs(saving) * math.sqrt((ell - 1) * p * (1 - p) / n)
    assert abs(summary.samples["latency_s"].mean() - expected) <= 4 * sigma + 1e-9


def test_monte_carlo_per_position_p():
    p_t = np.linspace(0.1, 0.9, 15)
    config = sim.SimConfig(d=10, d_bar=6, k=2, ell=16, matches=sim.PerPosition(p_t), costs=COSTS)
    summary = sim.monte_carlo(config, n=400, seed=8)
    args = dict(d=10, d_bar=6, k=2, costs=COSTS)
    expected = ppdmodel.expected_latency_seconds(**args, ell=16, p=p_t)
    saving = ppdmodel.latency_per_token_seconds(**args, p=0.0) - (
        ppdmodel.latency_per_token_seconds(**args, p=1.0)
    )
    sigma = abs(saving) * math.sqrt((p_t * (1 - p_t)).sum() / 400)
    assert abs(summary.samples["latency_s"].mean() - expected) <= 4 * sigma


def test_unit_costs_reproduce_theorem_4_1_and_greedy():
    rng = np.random.default_rng(4)
    for _ in range(50):
        m = (rng.random(19) < 0.5).astype(int)
        config = sim.SimConfig(d=10, d_bar=6, k=2, ell=20, matches=sim.Replay(m),
                               costs=DecodeCosts.unit())  # fmt: skip
        old = sim.SimConfig(d=10, d_bar=6, k=2, ell=20, matches=sim.Replay(m))
        assert (
            sim.simulate(config).latency_s
            == sim.simulate(old).latency_s
            == 6 * 20 + 4 * (1 + (1 - m).sum())
        )
    greedy = sim.SimConfig(d=10, d_bar=6, k=2, ell=20, costs=COSTS, schedule="greedy")
    assert sim.simulate(greedy).latency_s == ppdmodel.greedy_latency_seconds(
        d=10, ell=20, costs=COSTS
    )


def test_config_with_costs_round_trips_and_refuses_clashes():
    config = sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=COSTS, early_head="candidates")
    assert config.n_gpus == 2
    assert sim.SimConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"leave \['cost', 'per_token_overhead_s'\]"):
        sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=COSTS, cost=sim.UniformCost(2.0),
                      per_token_overhead_s=1.0)  # fmt: skip
    shared = DecodeCosts(shared_device_slowdown=1.3)
    assert sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=shared).n_gpus == 1
    with pytest.raises(ValueError, match=r"n_gpus must be 1"):
        sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=shared, n_gpus=2)
    with pytest.raises(ValueError, match=r"early_head must be one of"):
        sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=COSTS, early_head="sideways")
    with pytest.raises(ValueError, match=r"costs must be a ppdmodel.DecodeCosts"):
        sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs={"layer_s": 1.0})


def _kernel_max(config) -> float:
    """The longest kernel under per_layer_events: a layer with its embedding or head, or a head."""
    c, layer_k = config.costs, config.costs.candidate_layer_seconds(config.k)
    return max(c.layer_s + c.embedding_s, c.layer_s + c.final_head_s, c.early_head_s,
               layer_k + c.embedding_s, layer_k)  # fmt: skip


def test_per_layer_events_on_separate_devices_change_nothing():
    rng = np.random.default_rng(12)
    for _ in range(200):
        config, closed = _random_case(rng, shared=False)
        fine = sim.SimConfig.from_dict({**config.to_dict(), "per_layer_events": True})
        result = sim.simulate(fine)
        assert result.latency_s == closed
        assert all(r[3] == r[4] for r in result.records if r[1] != -1)  # one layer per event


def test_kernel_granular_sharing_within_the_stated_bound():
    """A layer's slowdown fixed at its start: |T_sim - T| <= 2 ell (sigma - 1) K_max."""
    rng = np.random.default_rng(13)
    for _ in range(300):
        config, closed = _random_case(rng, shared=True)
        fine = sim.SimConfig.from_dict({**config.to_dict(), "per_layer_events": True})
        latency = sim.simulate(fine, record_events=False).latency_s
        slack = config.costs.shared_device_slowdown - 1
        assert abs(latency - closed) <= 2 * config.ell * slack * _kernel_max(config) + 1e-9


def test_kernel_granular_sharing_close_on_smollm2_like_costs():
    rng = np.random.default_rng(14)
    for i in range(40):
        costs = DecodeCosts(
            layer_s=1e-3, candidate_extra_row_layer_s=float(rng.uniform(0, 3e-4)),
            embedding_s=5e-5, early_head_s=float(rng.uniform(0, 6e-3)), final_head_s=5e-3,
            candidate_dispatch_s=float(rng.uniform(0, 1e-3)), handoff_s=1e-3, host_s=1e-3,
            hidden_dispatch_s=float(rng.uniform(0, 1e-3)),
            shared_device_slowdown=float(rng.uniform(1.05, 1.4)),
        )  # fmt: skip
        d_bar, k, m = int(rng.integers(15, 30)), int(rng.integers(1, 4)), rng.random(63) < 0.4
        early_head = ("main", "candidates")[i % 2]
        config = sim.SimConfig(d=30, d_bar=d_bar, k=k, ell=64, matches=sim.Replay(m), costs=costs,
                               early_head=early_head, per_layer_events=True)  # fmt: skip
        closed = ppdmodel.trace_latency_seconds(
            d=30, d_bar=d_bar, m=m.astype(int), k=k, costs=costs, early_head=early_head
        )
        assert sim.simulate(config, record_events=False).latency_s == pytest.approx(
            closed, rel=0.05
        )


def test_serial_device_exact_event_trace():
    """The single backend: main runs the whole batch at the split, then its suffix."""
    costs = DecodeCosts(
        layer_s=1.0, candidate_layer_s_by_k={1: 1.0, 3: 2.0}, embedding_s=0.5, early_head_s=1.0,
        final_head_s=0.5, host_s=0.25, handoff_s=0.5, shared_device_slowdown=2.0,
        serial_device=True,
    )  # fmt: skip
    config = sim.SimConfig(d=4, d_bar=2, k=3, ell=3, matches=sim.Replay([1, 0]), costs=costs)
    result = sim.simulate(config)
    batch = "sub1+sub2+sub3"
    log = [tuple(r) for r in result.events[["process", "token", "start", "end", "kind"]].values]
    assert log == [
        ("main", 1, 0.0, 2.5, "prefix"), ("main", 1, 2.5, 3.5, "early_head"),
        (batch, 2, 3.5, 8.0, "speculate"), ("main", 1, 8.0, 10.5, "suffix"),
        ("main", 1, 10.5, 10.75, "overhead"), (batch, 2, 10.75, 11.25, "handoff"),
        ("main", 2, 11.25, 12.25, "early_head"), (batch, 3, 12.25, 16.75, "speculate"),
        ("main", 2, 16.75, 19.25, "suffix"), ("main", 2, 19.25, 19.5, "overhead"),
        ("main", 3, 19.5, 22.0, "prefix"), ("main", 3, 22.0, 23.0, "early_head"),
        (batch, 4, 23.0, 27.5, "speculate"), ("main", 3, 27.5, 30.0, "suffix"),
        ("main", 3, 30.0, 30.25, "overhead"),
    ]  # fmt: skip
    closed = ppdmodel.trace_latency_seconds(d=4, d_bar=2, m=[1, 0], k=3, costs=costs)
    assert result.latency_s == closed == 30.25


@pytest.mark.parametrize("per_layer_events", [False, True])
def test_serial_device_closed_form_equals_simulator_when_the_batch_outlasts_main(
    per_layer_events,
):
    rng = np.random.default_rng(11)
    for _ in range(40):
        costs = random_costs(rng, shared=True)
        costs = DecodeCosts.from_dict({**costs.to_dict(), "serial_device": True})
        d, d_bar, k, ell = 12, int(rng.integers(6, 12)), int(rng.integers(1, 4)), 24
        m = (rng.random(ell - 1) < 0.5).astype(int)
        for early_head in ("main", "candidates"):
            config = sim.SimConfig(d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m),
                                   costs=costs, early_head=early_head,
                                   per_layer_events=per_layer_events)  # fmt: skip
            result = sim.simulate(config, record_events=False)
            shape = dict(d=d, d_bar=d_bar, m=m, k=k, costs=costs, early_head=early_head)
            assert result.latency_s == pytest.approx(
                ppdmodel.trace_latency_seconds(**shape), rel=1e-12
            )
            busy = ppdmodel.trace_compute_seconds(**shape)
            assert sum(result.busy_s) == pytest.approx(busy, rel=1e-12)
