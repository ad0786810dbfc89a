"""Cost models, hardware presets, model shapes and match sources."""

import numpy as np
import pandas as pd
import pytest

import sim
from sim.formats import MatchTrace, read_traces, write_layer_times, write_traces


def test_gpu_and_link_presets():
    h100 = sim.GPUSpec.from_name("h100-sxm")
    assert h100.peak_flops_bf16 == 989.5e12 and h100.hbm_bytes_per_s == 3.35e12
    assert sim.GPUSpec.from_name("a100-80gb").hbm_bytes_per_s == 2039e9
    assert sim.GPUSpec.from_name("h200").hbm_bytes_per_s == 4.8e12
    for name in ("nvlink4", "pcie4-x16", "pcie5-x16", "loopback"):
        link = sim.Link.from_name(name)
        assert link.transfer_time(0) == link.latency_s
    nv, p4, p5 = (sim.Link.from_name(n) for n in ("nvlink4", "pcie4-x16", "pcie5-x16"))
    assert nv.bandwidth_bytes_per_s > p5.bandwidth_bytes_per_s > p4.bandwidth_bytes_per_s
    with pytest.raises(ValueError, match="gpu name"):
        sim.GPUSpec.from_name("tpu")
    with pytest.raises(ValueError, match="link name"):
        sim.Link.from_name("ethernet")
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        sim.Link("x", 0.0, 0.0)


def test_shape_handoff_bytes():
    shape = sim.ModelShape.from_name("vicuna-13b")
    # hidden row (5120 * 2 B) + K and V of one token in 20 layers (2 * 5120 * 2 B each)
    assert shape.handoff_bytes(1, 20) == 5120 * 2 + 20 * 2 * 5120 * 2
    gqa = sim.ModelShape.from_name("llama2-70b")
    assert gqa.kv_width == 8 * 128
    # one definition, vectorised over layers (the planner's grids) and exact for integers
    gaps = np.array([0, 1, 20, 40])
    assert shape.handoff_bytes(1, gaps).tolist() == [shape.handoff_bytes(1, g) for g in gaps]
    assert isinstance(shape.handoff_bytes(2, 3), int)
    for bad in (-1, 2.5, np.array([1, -2]), np.array([0.5])):
        with pytest.raises(ValueError, match="n_layers"):
            shape.handoff_bytes(1, bad)
    with pytest.raises(ValueError, match="shape name"):
        sim.ModelShape.from_name("gpt-5")
    with pytest.raises(ValueError, match="hidden_size"):
        sim.ModelShape(0, 1, 1, 1, 1, 1)


def test_roofline_layer_time_from_the_formula():
    shape = sim.ModelShape.from_name("vicuna-13b")  # context 1024
    cost = sim.RooflineCost(shape, sim.GPUSpec.from_name("h100-sxm"), 0.6, 0.8)
    params = 2 * 5120**2 + 2 * 5120**2 + 3 * 5120 * 13824
    nbytes = params * 2 + 1024 * 2 * 5120 * 2
    assert cost.block_seconds(1, 1, 1) == pytest.approx(nbytes / (3.35e12 * 0.8))
    assert cost.block_seconds(1, 10, 1) == pytest.approx(10 * cost.block_seconds(1, 1, 1))


def test_roofline_batching_is_nearly_free_when_memory_bound():
    cost = sim.RooflineCost(
        sim.ModelShape.from_name("vicuna-13b"), sim.GPUSpec.from_name("h100-sxm")
    )
    one, three = cost.block_seconds(1, 1, 1), cost.block_seconds(1, 1, 3)
    assert one < three < 1.1 * one  # weights dominate: 3 candidates cost < 10% more
    # without a KV cache to read, a large batch is compute-bound: linear in batch
    flat = sim.RooflineCost(cost.shape.with_context(0), cost.gpu)
    assert flat.block_seconds(1, 1, 8192) == pytest.approx(2 * flat.block_seconds(1, 1, 4096))
    assert flat.block_seconds(1, 1, 4096) == pytest.approx(
        flat.layer_flops(4096) / (989.5e12 * 0.6)
    )
    # k sub-processes batched on one GPU: compute far below one GPU per candidate
    base = dict(d=40, d_bar=20, k=3, ell=16, cost=cost, matches=sim.Replay([1] * 15))
    batched = sim.simulate(sim.SimConfig(**base, n_gpus=2))
    spread = sim.simulate(sim.SimConfig(**base, n_gpus=4))
    assert batched.latency_s == pytest.approx(spread.latency_s, rel=0.05)
    assert batched.compute_s < 0.6 * spread.compute_s


def test_measured_cost_from_the_shared_csv(tmp_path):
    rows = [("embed", -1, 1, 0.5), ("head", -1, 1, 2.0), ("head", -1, 3, 3.0)]
    rows += [("layer", i, 1, 1.0 + i) for i in range(4)]
    rows += [("layer", i, 3, 2.0 + i) for i in range(4)]
    rows += [("token", -1, 1, 12.0)]
    df = pd.DataFrame(rows, columns=["component", "layer", "batch", "seconds"])
    df["std_seconds"], df["n_samples"] = 0.0, 10
    path = write_layer_times(tmp_path / "layers.csv", df)
    cost = sim.MeasuredCost.from_csv(path)
    assert cost.block_seconds(1, 4, 1) == 1 + 2 + 3 + 4  # layer l is row l - 1
    assert cost.block_seconds(2, 3, 3) == 3 + 4
    assert cost.block_seconds(1, 1, 2) == pytest.approx(1.5)  # interpolated batch
    assert cost.block_seconds(1, 1, 8) == 2.0  # clamped to the largest measured batch
    assert cost.head_seconds(2) == pytest.approx(2.5) and cost.embed_seconds(3) == 0.5
    assert cost.unit_seconds() == 2.5 and cost.token_overhead_seconds() == pytest.approx(-0.5)
    greedy = sim.simulate(sim.SimConfig(d=4, d_bar=2, k=1, ell=3, cost=cost, schedule="greedy"))
    assert greedy.latency_s == 3 * (0.5 + 10 + 2.0)
    # PPD, all matches: token 1 = embed + layers 1..2 + head + layers 3..4 + head,
    # then each token: empty prefix (head 2.0) + layers 3..4 (7) + head (2.0)
    ppd = sim.simulate(sim.SimConfig(d=4, d_bar=2, k=1, ell=3, cost=cost,
                                     matches=sim.Replay([1, 1])))  # fmt: skip
    assert ppd.latency_s == (0.5 + 3 + 2 + 7 + 2) + 2 * (2 + 7 + 2)
    with pytest.raises(ValueError, match="layer"):
        sim.MeasuredCost(df[df["component"] != "layer"])


def test_match_sources(tmp_path):
    rng = np.random.default_rng(0)
    assert sim.Bernoulli(1.0).draw(5, rng).tolist() == [1, 1, 1, 1]
    assert sim.PerPosition([0, 1, 0]).draw(4, rng).tolist() == [0, 1, 0]
    with pytest.raises(ValueError, match="p_t"):
        sim.PerPosition([0.5]).draw(4, rng)
    with pytest.raises(ValueError, match="p must be in"):
        sim.Bernoulli(1.5)
    trace = MatchTrace(sequence="s0", d=4, d_bar=2, k=1, m=[1, 0, 1])
    path = write_traces(tmp_path / "t.jsonl", [trace])
    replay = sim.Replay.from_trace(read_traces(path)[0])
    assert replay.m == (1, 0, 1) and replay.ell == 4
    result = sim.simulate(sim.SimConfig(d=4, d_bar=2, k=1, ell=4, matches=replay))
    assert result.m == [1, 0, 1] and result.latency_units == 2 * 4 + 2 * 2
    with pytest.raises(ValueError, match="ell"):
        sim.SimConfig(d=4, d_bar=2, k=1, ell=5, matches=replay)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d=4, d_bar=4), "d_bar"),
        (dict(d=4, d_bar=0), "d_bar"),
        (dict(d=10, d_bar=4), "d_bar"),
        (dict(d=0, d_bar=1), "d"),
        (dict(k=0), "k"),
        (dict(ell=2.5), "ell"),
        (dict(ell=float("nan")), "ell"),
        (dict(d=float("inf"), d_bar=2), "d"),
        (dict(n_gpus=0), "n_gpus"),
        (dict(n_gpus=4), "n_gpus"),
        (dict(per_token_overhead_s=-1.0), "per_token_overhead_s"),
        (dict(per_handoff_overhead_s=float("nan")), "per_handoff_overhead_s"),
        (dict(schedule="beam"), "schedule"),
        (dict(link=sim.Link.from_name("nvlink4")), "shape"),
        (dict(cost="uniform"), "cost"),
    ],
)
def test_bad_config_names_the_parameter(kwargs, name):
    args = dict(d=4, d_bar=2, k=2, ell=3) | kwargs
    with pytest.raises(ValueError, match=rf"^{name}\b"):  # the message starts with the name
        sim.SimConfig(**args)


def test_config_round_trip_and_monte_carlo_errors():
    config = sim.SimConfig(
        d=40, d_bar=20, k=3, ell=8, matches=sim.PerPosition([0.5] * 7), n_gpus=2,
        cost=sim.RooflineCost(sim.ModelShape.from_name("llama2-7b"), sim.GPUSpec.from_name("h200")),
        link=sim.Link.from_name("pcie5-x16"),
    )  # fmt: skip
    again = sim.SimConfig.from_dict(config.to_dict())
    assert again == config
    with pytest.raises(ValueError, match="n must"):
        sim.monte_carlo(config, n=0, seed=1)
    with pytest.raises(ValueError, match="m must"):
        sim.simulate(config, m=[1, 0])
