"""Exact schedules of small cases, derived by hand from Algorithm 2 and Figure 2."""

import numpy as np
import pandas as pd
import pytest

import sim
from sim.formats import LAYER_TIMES_COLUMNS

# d=4, d_bar=2, k=1, ell=3 (D = d - d_bar = 2): token 1 takes 4; token t takes 2 after a
# match (main resumes at layer 3, its prefix is empty) and 4 after a miss.
MAIN_T1 = [("main", 0, 1, 1, 2, 0, 2, "prefix"), ("main", 0, 1, 3, 4, 2, 4, "suffix")]
HAND_DERIVED = {
    (0, 0): MAIN_T1
    + [
        ("sub1", 1, 2, 1, 2, 2, 4, "speculate"),
        ("main", 0, 2, 1, 2, 4, 6, "prefix"),
        ("main", 0, 2, 3, 4, 6, 8, "suffix"),
        ("sub1", 1, 3, 1, 2, 6, 8, "speculate"),
        ("main", 0, 3, 1, 2, 8, 10, "prefix"),
        ("main", 0, 3, 3, 4, 10, 12, "suffix"),
        ("sub1", 1, 4, 1, 2, 10, 12, "speculate"),
    ],
    (1, 0): MAIN_T1
    + [
        ("sub1", 1, 2, 1, 2, 2, 4, "speculate"),
        ("sub1", -1, 2, 2, 2, 4, 4, "handoff"),
        ("main", 0, 2, 3, 4, 4, 6, "suffix"),
        ("sub1", 1, 3, 1, 2, 4, 6, "speculate"),
        ("main", 0, 3, 1, 2, 6, 8, "prefix"),
        ("main", 0, 3, 3, 4, 8, 10, "suffix"),
        ("sub1", 1, 4, 1, 2, 8, 10, "speculate"),
    ],
    (0, 1): MAIN_T1
    + [
        ("sub1", 1, 2, 1, 2, 2, 4, "speculate"),
        ("main", 0, 2, 1, 2, 4, 6, "prefix"),
        ("main", 0, 2, 3, 4, 6, 8, "suffix"),
        ("sub1", 1, 3, 1, 2, 6, 8, "speculate"),
        ("sub1", -1, 3, 2, 2, 8, 8, "handoff"),
        ("main", 0, 3, 3, 4, 8, 10, "suffix"),
        ("sub1", 1, 4, 1, 2, 8, 10, "speculate"),
    ],
    (1, 1): MAIN_T1
    + [
        ("sub1", 1, 2, 1, 2, 2, 4, "speculate"),
        ("sub1", -1, 2, 2, 2, 4, 4, "handoff"),
        ("main", 0, 2, 3, 4, 4, 6, "suffix"),
        ("sub1", 1, 3, 1, 2, 4, 6, "speculate"),
        ("sub1", -1, 3, 2, 2, 6, 6, "handoff"),
        ("main", 0, 3, 3, 4, 6, 8, "suffix"),
        ("sub1", 1, 4, 1, 2, 6, 8, "speculate"),
    ],
}
LATENCY = {(0, 0): 12, (1, 0): 10, (0, 1): 10, (1, 1): 8}


def small(m, **kwargs):
    return sim.SimConfig(d=4, d_bar=2, k=1, ell=3, matches=sim.Replay(m), **kwargs)


@pytest.mark.parametrize("m", sorted(HAND_DERIVED))
def test_exact_trace_d4_dbar2_k1_ell3(m):
    result = sim.simulate(small(m))
    assert result.records == HAND_DERIVED[m]
    assert result.latency_units == LATENCY[m]
    assert result.compute_units == LATENCY[m] + 1 * 2 * 3
    assert result.n_runs == 1 + sum(1 - x for x in m)
    assert list(result.events.columns[:8]) == [
        "process", "gpu", "token", "layer_start", "layer_end", "start", "end", "kind",
    ]  # fmt: skip


@pytest.mark.parametrize("m", sorted(HAND_DERIVED))
def test_per_layer_events_split_the_same_blocks(m):
    fine = sim.simulate(small(m, per_layer_events=True)).records
    expected = []
    for process, gpu, token, a, b, start, end, kind in HAND_DERIVED[m]:
        if kind == "handoff":
            expected.append((process, gpu, token, a, b, start, end, kind))
            continue
        expected += [(process, gpu, token, i, i, start + i - a, start + i - a + 1, kind)
                     for i in range(a, b + 1)]  # fmt: skip
    assert sorted(fine) == sorted(expected)


def test_exact_trace_with_dbar_above_half():
    # d=5, d_bar=3 (D = 2): after a match main runs layer 3 (2*d_bar - d = 1 unit) and
    # predicts early, then layers 4..5; token 2 takes d_bar = 3.
    result = sim.simulate(sim.SimConfig(d=5, d_bar=3, k=2, ell=2, matches=sim.Replay([1])))
    assert result.records == [
        ("main", 0, 1, 1, 3, 0, 3, "prefix"),
        ("main", 0, 1, 4, 5, 3, 5, "suffix"),
        ("sub1", 1, 2, 1, 2, 3, 5, "speculate"),
        ("sub2", 2, 2, 1, 2, 3, 5, "speculate"),
        ("sub1", -1, 2, 2, 2, 5, 5, "handoff"),
        ("main", 0, 2, 3, 3, 5, 6, "prefix"),
        ("main", 0, 2, 4, 5, 6, 8, "suffix"),
        ("sub1", 1, 3, 1, 2, 6, 8, "speculate"),
        ("sub2", 2, 3, 1, 2, 6, 8, "speculate"),
    ]
    assert result.latency_units == 3 * 2 + 2 * 1
    assert result.compute_units == 8 + 2 * 2 * 2


def test_one_gpu_contends_per_block():
    # All processes on GPU 0; main's requests go ahead of queued sub-process requests, a
    # running block is never preempted: sub1 waits for main's suffix, then main waits for
    # sub1's layers 1..2 before the hand-off. Token 4's candidate (t = ell) is never needed.
    result = sim.simulate(small([1, 1], n_gpus=1))
    assert result.records == [
        ("main", 0, 1, 1, 2, 0, 2, "prefix"),
        ("main", 0, 1, 3, 4, 2, 4, "suffix"),
        ("sub1", 0, 2, 1, 2, 4, 6, "speculate"),
        ("sub1", -1, 2, 2, 2, 6, 6, "handoff"),
        ("main", 0, 2, 3, 4, 6, 8, "suffix"),
        ("sub1", 0, 3, 1, 2, 8, 10, "speculate"),
        ("sub1", -1, 3, 2, 2, 10, 10, "handoff"),
        ("main", 0, 3, 3, 4, 10, 12, "suffix"),
    ]
    assert result.latency_units == 12 and result.makespan_s == 12
    assert result.compute_units == 12 and result.utilisation.tolist() == [1.0]
    miss = sim.simulate(small([0, 0], n_gpus=1))
    # main never waits, so it keeps the GPU; every candidate is rejected before it would run
    assert miss.latency_units == 12 and miss.makespan_s == 12 and miss.compute_units == 12
    assert not [r for r in miss.records if r[0] == "sub1"]


def test_one_gpu_drops_speculation_of_rejected_candidates():
    # m_2 = 0, m_3 = 1 on one GPU: the queued speculation of token 2 was rejected at t = 4
    # (Algorithm 2 disregards it), so the hand-off of token 3 waits only for token 3's own
    # layers 1..2 (8-10), not for stale work first; T = 12, never worse than greedy's 12.
    result = sim.simulate(small([0, 1], n_gpus=1))
    assert result.records == [
        ("main", 0, 1, 1, 2, 0, 2, "prefix"),
        ("main", 0, 1, 3, 4, 2, 4, "suffix"),
        ("main", 0, 2, 1, 2, 4, 6, "prefix"),
        ("main", 0, 2, 3, 4, 6, 8, "suffix"),
        ("sub1", 0, 3, 1, 2, 8, 10, "speculate"),
        ("sub1", -1, 3, 2, 2, 10, 10, "handoff"),
        ("main", 0, 3, 3, 4, 10, 12, "suffix"),
    ]
    fine = sim.simulate(small([0, 1], n_gpus=1, per_layer_events=True))
    assert fine.latency_units == 12 and fine.compute_units == 12
    rng = np.random.default_rng(3)
    for _ in range(20):  # uniform cost, one GPU: PPD never takes longer than greedy's d*ell
        m = rng.integers(0, 2, 9)
        config = sim.SimConfig(d=6, d_bar=3, k=2, ell=10, matches=sim.Replay(m), n_gpus=1)
        assert sim.simulate(config).latency_units == 6 * 10


def test_subprocesses_sharing_a_gpu_run_as_one_batch():
    config = sim.SimConfig(d=4, d_bar=2, k=3, ell=2, matches=sim.Replay([1]), n_gpus=2)
    result = sim.simulate(config)
    spec = result.events[result.events["kind"] == "speculate"]
    assert set(spec["process"]) == {"sub1+sub2+sub3"} and set(spec["gpu"]) == {1}
    assert result.latency_units == 2 * 2 + 2 * 1
    assert result.compute_units == 6 + 2 * 2  # the batch of 3 costs one block (uniform)


def test_greedy_baseline_is_d_times_ell():
    config = sim.SimConfig(d=7, d_bar=4, k=2, ell=5, schedule="greedy", matches=sim.Bernoulli(1))
    result = sim.simulate(config, seed=3)
    assert result.latency_units == 35 and result.compute_units == 35
    assert result.records[0] == ("main", 0, 1, 1, 7, 0, 7, "forward")
    assert sim.simulate(config.__class__(**{**config.__dict__, "per_layer_events": True}))\
        .latency_units == 35  # fmt: skip


def test_link_adds_latency_plus_bytes_over_bandwidth():
    shape = sim.ModelShape(4, 4, 2, 2, 8, 16, dtype_bytes=2, context_len=0)
    assert shape.handoff_bytes(1, 2) == 4 * 2 + 2 * (2 * 4 * 2)  # hidden + K,V of 2 layers
    link = sim.Link("test", latency_s=0.5, bandwidth_bytes_per_s=16.0)
    assert link.transfer_time(40) == 0.5 + 40 / 16
    result = sim.simulate(small([1, 1], link=link, shape=shape))
    # dispatch of 1 candidate id (int64, 8 bytes) = 1.0, logged on the host row; hand-off
    # (40 bytes) = 3.0, derived by hand
    assert result.records == [
        ("main", 0, 1, 1, 2, 0, 2, "prefix"),
        ("sub1", -1, 2, 0, 0, 2, 3, "dispatch"),
        ("main", 0, 1, 3, 4, 2, 4, "suffix"),
        ("sub1", 1, 2, 1, 2, 3, 5, "speculate"),
        ("sub1", -1, 2, 2, 2, 5, 8, "handoff"),
        ("sub1", -1, 3, 0, 0, 8, 9, "dispatch"),
        ("main", 0, 2, 3, 4, 8, 10, "suffix"),
        ("sub1", 1, 3, 1, 2, 9, 11, "speculate"),
        ("sub1", -1, 3, 2, 2, 11, 14, "handoff"),
        ("sub1", -1, 4, 0, 0, 14, 15, "dispatch"),
        ("main", 0, 3, 3, 4, 14, 16, "suffix"),
        ("sub1", 1, 4, 1, 2, 15, 17, "speculate"),
    ]
    handoffs = result.events[result.events["kind"] == "handoff"]
    assert ((handoffs["end"] - handoffs["start"]) == link.transfer_time(40)).all()


@pytest.mark.parametrize("m", [[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
def test_overheads_add_exactly(m):
    base = sim.SimConfig(d=6, d_bar=3, k=2, ell=6, matches=sim.Replay(m))
    t0 = sim.simulate(base).latency_s
    token = sim.simulate(sim.SimConfig(**{**base.__dict__, "per_token_overhead_s": 0.25}))
    hand = sim.simulate(sim.SimConfig(**{**base.__dict__, "per_handoff_overhead_s": 0.5}))
    assert token.latency_s == t0 + 6 * 0.25
    assert hand.latency_s == t0 + sum(m) * 0.5


def test_below_half_is_refused_or_a_labelled_extension():
    with pytest.raises(ValueError, match="d_bar.*allow_below_half"):
        sim.SimConfig(d=10, d_bar=3, k=1, ell=4)
    config = sim.SimConfig(d=10, d_bar=3, k=2, ell=4, matches=sim.Replay([1, 0, 1]),
                           allow_below_half=True)  # fmt: skip
    result = sim.simulate(config)
    assert config.extension and result.summary()["extension_below_half"]
    # each match saves d_bar = 3 units (sub-processes can only run layers 1..d_bar)
    assert result.latency_units == 10 * 4 - 3 * 2
    assert result.compute_units == result.latency_units + 2 * 3 * 4


def test_random_traces_satisfy_both_identities_exactly():
    rng = np.random.default_rng(7)
    for _ in range(60):
        d = int(rng.integers(2, 41))
        d_bar = int(rng.integers((d + 1) // 2, d))
        k, ell = int(rng.integers(1, 6)), int(rng.integers(1, 60))
        m = rng.integers(0, 2, ell - 1)
        fine = bool(rng.integers(0, 2))
        config = sim.SimConfig(d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m),
                               per_layer_events=fine)  # fmt: skip
        result = sim.simulate(config)
        n_runs = 1 + int((1 - m).sum())
        assert result.n_runs == n_runs
        assert result.latency_units == d_bar * ell + (d - d_bar) * n_runs
        assert result.compute_units == result.latency_units + k * (d - d_bar) * ell


@pytest.mark.parametrize("m", [[2, 0], [-1, 1], [0.5, 1], ["1", 0]])
def test_simulate_rejects_m_other_than_0_and_1(m):
    # before: m=[2, 0] ran as a match but counted N = 1 + (1 - 2) + 1 = 1 run
    with pytest.raises(ValueError, match="m must hold only 0 and 1"):
        sim.simulate(small([0, 0]), m=m)
    assert sim.simulate(small([0, 0]), m=np.array([1, 0])).n_runs == 2


def test_one_message_size_for_a_token_id():
    # the real decoder sends candidate ids as int64 (measure.decode.dist); the simulator's
    # dispatch and the planner's message both count that size
    from sim.hardware_costs import dispatch_bytes
    from sim.shape import TOKEN_ID_BYTES

    assert TOKEN_ID_BYTES == np.dtype(np.int64).itemsize
    shape = sim.ModelShape(4, 4, 2, 2, 8, 16, dtype_bytes=2, context_len=0)
    assert dispatch_bytes(shape, 3, 0, "main") == 3 * TOKEN_ID_BYTES
    link = sim.Link("test", latency_s=0.5, bandwidth_bytes_per_s=16.0)
    config = sim.SimConfig(d=4, d_bar=2, k=3, ell=2, matches=sim.Replay([0]), link=link,
                           shape=shape, n_gpus=2)  # fmt: skip
    dispatch = sim.simulate(config).events.query("kind == 'dispatch'")
    assert ((dispatch["end"] - dispatch["start"]) == link.transfer_time(3 * 8)).all()


def _processes_records(config, m):
    """The records of the general path (SimPy processes), bypassing the fast path."""
    from sim.schedule import Schedule

    schedule = Schedule(config, m)
    schedule._start_processes()
    schedule.env.run()
    return schedule


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_equals_the_processes(seed):
    """Uneven measured layers, heads, a link and overheads on dedicated GPUs: the per-token
    arithmetic gives the same events as the SimPy processes."""
    rng = np.random.default_rng(seed)
    for _ in range(15):
        d = int(rng.integers(2, 12))
        d_bar, k = int(rng.integers((d + 1) // 2, d)), int(rng.integers(1, 6))
        rows = [("layer", i, b, float(rng.uniform(0.5, 2)), 0.0, 1)
                for i in range(d) for b in (1, 2, 3)]  # fmt: skip
        rows += [("embed", -1, 1, 0.25, 0.0, 1), ("head", -1, 1, float(rng.uniform(0, 3)), 0.0, 1)]
        cost = sim.MeasuredCost(pd.DataFrame(rows, columns=list(LAYER_TIMES_COLUMNS)))
        ell = int(rng.integers(1, 12))
        m = rng.integers(0, 2, ell - 1)
        config = sim.SimConfig(
            d=d, d_bar=d_bar, k=k, ell=ell, matches=sim.Replay(m), cost=cost,
            n_gpus=int(rng.integers(2, k + 2)), link=sim.Link("l", 0.1, 8.0),
            shape=sim.ModelShape(4, d, 2, 2, 8, 16), per_token_overhead_s=0.125,
            per_handoff_overhead_s=float(rng.choice([0.0, 0.5])),
        )  # fmt: skip
        fast = sim.simulate(config)
        slow = _processes_records(config, m)
        assert sorted(fast.raw_records) == sorted(slow.records)
        assert fast.latency_s == slow.latency_s
        assert fast.busy_s == pytest.approx(slow.busy_s)


def test_greedy_on_one_gpu_with_per_layer_events():
    # ppd simulate's greedy baseline of --gpus 1 --per-layer-events raised AttributeError
    config = sim.SimConfig(d=4, d_bar=2, k=5, ell=3, n_gpus=1, per_layer_events=True,
                           schedule="greedy")  # fmt: skip
    result = sim.simulate(config)
    assert result.latency_units == 12 and len(result.records) == 12


def test_both_cost_sources_build_the_one_engines_input():
    from ppdmodel import DecodeCosts
    from sim.step_costs import step_costs

    unit = step_costs(sim.SimConfig(d=6, d_bar=3, k=2, ell=4, n_gpus=2))
    seconds = step_costs(sim.SimConfig(d=6, d_bar=3, k=2, ell=4, costs=DecodeCosts.unit()))
    assert unit.main_layer_s == seconds.main_layer_s == (1.0,) * 6
    assert unit.groups == seconds.groups  # one batch "sub1+sub2" on GPU 1, layers 1..3
    assert (unit.abandon_rejected, seconds.abandon_rejected) == (False, True)
    roofline = sim.RooflineCost(sim.ModelShape.from_name("llama2-7b"),
                                sim.GPUSpec.from_name("a100-80gb"))  # fmt: skip
    priced = step_costs(sim.SimConfig(d=32, d_bar=16, k=3, ell=4, cost=roofline, n_gpus=3))
    assert priced.main_layer_s[0] == roofline.block_seconds(1, 1, 1)
    assert [(g.label, g.gpu, g.layer_s[0]) for g in priced.groups] == [
        ("sub1+sub3", 1, roofline.block_seconds(1, 1, 2)),
        ("sub2", 2, roofline.block_seconds(1, 1, 1)),
    ]
    assert priced.early_head_s == priced.final_head_s == roofline.head_seconds(1) > 0
