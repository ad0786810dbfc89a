"""The simulator with each side's own sharing factor (s_m main, s_c the candidate batch)
against the closed form: an exact event log, random traces, busy time, per-layer kernels."""

import dataclasses
import math

import numpy as np
import pytest
import simpy

import ppdmodel
import sim
from ppdmodel import DecodeCosts
from ppdmodel.passes import device_work
from sim.device import SharedDevice
from tests.ppdmodel.test_costs import random_costs

# d = 4, d_bar = 2, k = 1, ell = 3, m = [m_2, m_3] = [1, 0], one device; s_m = 3, s_c = 1.5.
# W_m = 2 L + h_f = 3; early head h_e = 4. Derived by hand (fluid sharing, module sim.device):
# "main": W_c = 2, delta = 1. Main alone for 1 (R = 2 left), then both: the batch needs
#   s_c W_c = 3 (main does 3 / 3 = 1 meanwhile), main its last 1 alone: E_m = 5, E_c = 4, so
#   the batch finishes first and main never waits. P_f = 6, P_r = 4: T = 3 (6 + 5 + 0.5) -
#   (2 + 0.25) = 32.25 + 0.5 = 32.75.
# "candidates": W_c = h_e + 2 = 6, delta = 0.5. Main alone 0.5 (R = 2.5), then both: main
#   needs s_m R = 7.5, the batch did 7.5 / 1.5 = 5 of its 6 (its head 4 in the first 6 s,
#   then 1 layer), its last 1 alone: E_m = 8, E_c = 9: main finishes first and waits
#   w = 9 - 8 - 0.5 = 0.5 on a match. T = 3 (2 + 8 + 0.5) - (2 - 0.5 - 0.25) = 30.25.
COSTS = DecodeCosts(
    layer_s=1.0, final_head_s=1.0, early_head_s=4.0, candidate_dispatch_s=1.0,
    hidden_dispatch_s=0.5, host_s=0.5, handoff_s=0.25, shared_device_slowdown=3.0,
    candidate_device_slowdown=1.5,
)  # fmt: skip
SUB = "sub1"
HAND_DERIVED = {
    "main": [
        ("main", 0, 1, 1, 2, 0.0, 2.0, "prefix"),
        ("main", 0, 1, 2, 2, 2.0, 6.0, "early_head"),
        (SUB, -1, 2, 0, 0, 6.0, 7.0, "dispatch"),
        (SUB, 0, 2, 1, 2, 7.0, 10.0, "speculate"),  # 2 at rate 1/1.5 beside main
        ("main", 0, 1, 3, 4, 6.0, 11.0, "suffix"),  # 1 alone, 1 at 1/3, 1 alone
        ("main", -1, 1, 4, 4, 11.0, 11.5, "overhead"),
        (SUB, -1, 2, 2, 2, 11.5, 11.75, "handoff"),  # the batch was done: no wait
        ("main", 0, 2, 2, 2, 11.75, 15.75, "early_head"),  # resumed: no prefix layers
        (SUB, -1, 3, 0, 0, 15.75, 16.75, "dispatch"),
        (SUB, 0, 3, 1, 2, 16.75, 19.75, "speculate"),  # done before the miss is known
        ("main", 0, 2, 3, 4, 15.75, 20.75, "suffix"),
        ("main", -1, 2, 4, 4, 20.75, 21.25, "overhead"),
        ("main", 0, 3, 1, 2, 21.25, 23.25, "prefix"),
        ("main", 0, 3, 2, 2, 23.25, 27.25, "early_head"),
        (SUB, -1, 4, 0, 0, 27.25, 28.25, "dispatch"),
        (SUB, 0, 4, 1, 2, 28.25, 31.25, "speculate"),
        ("main", 0, 3, 3, 4, 27.25, 32.25, "suffix"),
        ("main", -1, 3, 4, 4, 32.25, 32.75, "overhead"),
    ],
    "candidates": [
        ("main", 0, 1, 1, 2, 0.0, 2.0, "prefix"),
        (SUB, -1, 2, 0, 0, 2.0, 2.5, "dispatch"),
        (SUB, 0, 2, 2, 2, 2.5, 8.5, "early_head"),  # 4 at rate 1/1.5
        (SUB, 0, 2, 1, 2, 8.5, 11.0, "speculate"),  # 1 beside main until 10, 1 alone
        ("main", 0, 1, 3, 4, 2.0, 10.0, "suffix"),  # 0.5 alone, 2.5 at 1/3
        ("main", -1, 1, 4, 4, 10.0, 10.5, "overhead"),
        (SUB, -1, 2, 2, 2, 11.0, 11.25, "handoff"),  # waited 0.5 for the batch
        (SUB, -1, 3, 0, 0, 11.25, 11.75, "dispatch"),
        (SUB, 0, 3, 2, 2, 11.75, 17.75, "early_head"),
        ("main", 0, 2, 3, 4, 11.25, 19.25, "suffix"),
        ("main", -1, 2, 4, 4, 19.25, 19.75, "overhead"),
        (SUB, 0, 3, 1, 2, 17.75, 19.75, "abandoned"),  # token 3 missed: cut
        ("main", 0, 3, 1, 2, 19.75, 21.75, "prefix"),
        (SUB, -1, 4, 0, 0, 21.75, 22.25, "dispatch"),
        (SUB, 0, 4, 2, 2, 22.25, 28.25, "early_head"),
        ("main", 0, 3, 3, 4, 21.75, 29.75, "suffix"),
        ("main", -1, 3, 4, 4, 29.75, 30.25, "overhead"),
        (SUB, 0, 4, 1, 2, 28.25, 30.25, "abandoned"),  # t = ell: a miss
    ],
}


@pytest.mark.parametrize("early_head", sorted(HAND_DERIVED))
def test_exact_event_log_with_two_factors(early_head):
    config = sim.SimConfig(d=4, d_bar=2, k=1, ell=3, matches=sim.Replay([1, 0]), costs=COSTS,
                           early_head=early_head)  # fmt: skip
    assert config.n_gpus == 1
    result = sim.simulate(config)
    assert sorted(result.records) == sorted(HAND_DERIVED[early_head])
    shape = dict(d=4, d_bar=2, m=[1, 0], k=1, costs=COSTS, early_head=early_head)
    expected = {"main": 32.75, "candidates": 30.25}[early_head]
    assert result.latency_s == ppdmodel.trace_latency_seconds(**shape) == expected
    busy = sum(r[6] - r[5] for r in HAND_DERIVED[early_head] if r[1] == 0)
    assert sum(result.busy_s) == busy == ppdmodel.trace_compute_seconds(**shape)


def _two_factor_case(rng, i):
    """A random trace and dyadic costs with s_m != s_c (each in [1, 3]; some at 1)."""
    costs = random_costs(rng, shared=True)
    s_m = 1 + float(rng.integers(0, 33)) / 16 if i % 7 else 1.0
    s_c = 1 + float(rng.integers(1, 33)) / 16 if i % 5 else 1.0
    if s_c == s_m:
        s_c += 1 / 16
    costs = dataclasses.replace(costs, shared_device_slowdown=s_m, candidate_device_slowdown=s_c)
    d = int(rng.integers(2, 31))
    d_bar, k = int(rng.integers(math.ceil(d / 2), d)), int(rng.integers(1, 6))
    ell = int(rng.integers(1, 25))
    m = (rng.random(ell - 1) < rng.random()).astype(int)
    early_head = ("main", "candidates")[i % 2]
    config = sim.SimConfig(d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m), costs=costs,
                           early_head=early_head)  # fmt: skip
    return config, dict(d=d, d_bar=d_bar, m=m, k=k, costs=costs, early_head=early_head)


def _regime(shape) -> str:
    """Which side finishes first in every pass of ``shape`` (the same work each pass)."""
    costs = shape["costs"]
    args = {key: shape[key] for key in ("d", "d_bar", "k", "costs", "early_head")}
    work_main, work_cand, delta, _ = device_work(**args)
    rest = work_main - delta
    if rest <= 0 or work_cand == 0:
        return "no overlap"
    s_m, s_c = costs.shared_device_slowdown, costs.candidate_slowdown
    return "main first" if s_m * rest <= s_c * work_cand else "batch first"


def test_closed_form_equals_simulator_with_two_factors_on_random_traces():
    """Latency and busy device-seconds, both placements, main first and batch first."""
    rng = np.random.default_rng(2424)
    seen = {"main first": 0, "batch first": 0, "no overlap": 0}
    placements = set()
    for i in range(800):
        config, shape = _two_factor_case(rng, i)
        assert config.n_gpus == 1
        result = sim.simulate(config, record_events=False)
        assert result.latency_s == pytest.approx(
            ppdmodel.trace_latency_seconds(**shape), rel=1e-9
        ), config
        busy = ppdmodel.trace_compute_seconds(**shape)
        assert sum(result.busy_s) == pytest.approx(busy, rel=1e-9, abs=1e-12), config
        regime = _regime(shape)
        seen[regime] += 1
        placements.add((regime, shape["early_head"]))
    assert seen["main first"] > 100 and seen["batch first"] > 100, seen
    assert {(r, h) for r in ("main first", "batch first") for h in ("main", "candidates")} <= (
        placements
    )


def test_kernel_granular_two_factor_sharing_within_the_stated_bound():
    """A layer's rate fixed at its start: |T_sim - T| <= 2 ell (max(s_m, s_c) - 1) K_max."""
    rng = np.random.default_rng(31)
    for i in range(200):
        config, shape = _two_factor_case(rng, i)
        fine = sim.SimConfig.from_dict({**config.to_dict(), "per_layer_events": True})
        latency = sim.simulate(fine, record_events=False).latency_s
        c, layer_k = config.costs, config.costs.candidate_layer_seconds(config.k)
        kernel = max(c.layer_s + c.embedding_s, c.layer_s + c.final_head_s, c.early_head_s,
                     layer_k + c.embedding_s, layer_k)  # fmt: skip
        slack = max(c.shared_device_slowdown, c.candidate_slowdown) - 1
        closed = ppdmodel.trace_latency_seconds(**shape)
        assert abs(latency - closed) <= 2 * config.ell * slack * kernel + 1e-9


def test_config_round_trips_a_candidate_factor():
    costs = DecodeCosts(shared_device_slowdown=1.0, candidate_device_slowdown=1.5)
    config = sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=costs)
    assert config.n_gpus == 1  # only the batch slows, but the device is shared
    assert sim.SimConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="n_gpus must be 1"):
        sim.SimConfig(d=8, d_bar=4, k=2, ell=5, costs=costs, n_gpus=2)


def _run_two_streams(s_main, s_cand):
    """Main computes 2 solo seconds from t = 0, the other stream 1 from t = 1 (fluid)."""
    env = simpy.Environment()
    device = SharedDevice(env, s_main, {"candidates": s_cand})
    ends = {}

    def stream(name, start, seconds):
        yield env.timeout(start)
        yield from device.compute(seconds, name)
        ends[name] = env.now

    env.process(stream("main", 0.0, 2.0))
    env.process(stream("candidates", 1.0, 1.0))
    env.run()
    return ends


def test_shared_device_slows_each_stream_by_its_own_factor():
    # main: 1 alone, then its last 1 at 1/2 (done at 3); the batch did 0.5 at 1/4, 0.5 alone
    assert _run_two_streams(2.0, 4.0) == {"main": 3.0, "candidates": 3.5}
    # main at 1/4 beside the batch at 1/2: the batch is done at 3, main did 0.5 of its 1
    assert _run_two_streams(4.0, 2.0) == {"main": 3.5, "candidates": 3.0}
    assert _run_two_streams(1.0, 1.0) == {"main": 2.0, "candidates": 2.0}  # one timeout each
    with pytest.raises(ValueError, match=r"slowdowns\['candidates'\] must be a finite number"):
        SharedDevice(simpy.Environment(), 1.0, {"candidates": 0.5})
