"""Model shapes from Hugging Face configs, tensor-parallel rooflines, the planner's hardware."""

import json

import numpy as np
import pytest

from ppdmodel import DecodeCosts
from ppdmodel.alternatives import ring_allreduce_seconds
from sim.cost import RooflineCost
from sim.hardware import GPUSpec, Link
from sim.hardware_costs import (
    ProfileHardware,
    RooflineHardware,
    decode_costs,
    early_head_cost,
    greedy_costs,
    load_profile,
)
from sim.shape import ModelShape

SMOLLM2_CONFIG = {  # the keys that matter of SmolLM2-135M-Instruct's config.json
    "model_type": "llama",
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "intermediate_size": 1536,
    "vocab_size": 49152,
    "head_dim": 64,
    "dtype": "float32",
}


def test_hf_config_of_smollm2_equals_the_preset(tmp_path):
    assert ModelShape.from_hf_config(SMOLLM2_CONFIG) == ModelShape.from_name("smollm2-135m")
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_CONFIG))
    assert ModelShape.from_hf_config(tmp_path) == ModelShape.from_hf_config(
        tmp_path / "config.json"
    )


def test_hf_config_gpt2_and_explicit_head_dim():
    gpt2 = ModelShape.from_hf_config(
        {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}
    )
    assert (gpt2.num_layers, gpt2.intermediate_size, gpt2.mlp_matrices) == (12, 3072, 2)
    assert gpt2.num_key_value_heads == 12 and gpt2.dtype_bytes == 2
    assert gpt2.layer_params() == 4 * 768 * 768 + 2 * 768 * 3072
    qwen3 = ModelShape.from_hf_config(
        {
            "model_type": "qwen3",
            "hidden_size": 1024,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 3072,
            "vocab_size": 151936,
            "torch_dtype": "bfloat16",
        }
    )
    assert qwen3.head_dim == 128 and qwen3.kv_width == 1024
    assert qwen3.layer_params() == 2 * 1024 * 2048 + 2 * 1024 * 1024 + 3 * 1024 * 3072


def test_hf_config_errors(tmp_path):
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelShape.from_hf_config({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 9})
    with pytest.raises(ValueError, match="no config.json"):
        ModelShape.from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelShape.from_hf_config(tmp_path)


SHAPE = ModelShape.from_name("vicuna-13b")
H100 = GPUSpec.from_name("h100-sxm")


def test_tensor_parallel_roofline_splits_the_memory_bound_layer():
    one, two = RooflineCost(SHAPE, H100), RooflineCost(SHAPE, H100, tensor_parallel=2)
    assert two.block_seconds(1, 1, 1) == pytest.approx(one.block_seconds(1, 1, 1) / 2)
    assert two.head_seconds(1) == pytest.approx(one.head_seconds(1) / 2)
    with pytest.raises(ValueError, match="tensor_parallel"):
        RooflineCost(SHAPE, H100, tensor_parallel=0)


def test_roofline_hardware_adds_two_allreduces_per_layer():
    link = Link.from_name("nvlink4")
    hw = RooflineHardware(SHAPE, H100, link)
    assert hw.tp_degrees() == (1, 2, 4, 8)
    shard = RooflineCost(SHAPE, H100, tensor_parallel=4).block_seconds(1, 1, 3)
    allreduce = ring_allreduce_seconds(
        n=4,
        nbytes=3 * 5120 * 2,
        latency_s=link.latency_s,
        bandwidth_bytes_per_s=link.bandwidth_bytes_per_s,
    )
    assert hw.layer_seconds(4, 3) == pytest.approx(shard + 2 * allreduce)
    assert hw.layer_seconds(1, 1) == pytest.approx(RooflineCost(SHAPE, H100).block_seconds(1, 1))
    layers = hw.layer_seconds(np.array([1, 2, 4]), np.array([1, 1, 1]))
    assert np.all(np.diff(layers) < 0)


def test_decode_costs_separate_and_shared():
    hw = RooflineHardware(SHAPE, H100, Link.from_name("pcie4-x16"))
    sep = decode_costs(hw, d_bar=30, k=3, early_head="main", tp_main=1, tp_candidates=1)
    assert sep.shared_device_slowdown == 1.0
    nbytes = 5120 * 2 + 10 * SHAPE.kv_bytes_per_token_layer()  # hidden row + KV of 10 layers
    assert sep.handoff_s == pytest.approx(hw.link.transfer_time(nbytes))
    assert sep.candidate_layer_seconds(3) == pytest.approx(hw.layer_seconds(1, 3))
    shared = decode_costs(hw, d_bar=30, k=3, early_head="main", tp_main=1)
    assert shared.shared_device_slowdown == 2.0 and shared.handoff_s == 0.0
    assert shared.candidate_dispatch_s == shared.hidden_dispatch_s == 0.0
    greedy = greedy_costs(hw, tp=1)
    assert greedy.greedy_token_seconds(40) == pytest.approx(
        hw.embedding_seconds(1) + 40 * hw.layer_seconds(1, 1) + hw.final_head_seconds(1)
    )


def test_translator_head_costs_an_extra_h_by_h_matrix():
    hw = RooflineHardware(SHAPE, H100, Link.from_name("nvlink4"))
    extra = early_head_cost(hw, 1, "translator") - early_head_cost(hw, 1, "shared")
    assert extra == pytest.approx(hw.layer_seconds(1, 1) * 5120**2 / SHAPE.layer_params())
    assert early_head_cost(hw, 1, "trained") == early_head_cost(hw, 1, "shared")


def test_profile_hardware_and_bare_loader(tmp_path):
    costs = DecodeCosts(
        layer_s=1e-3,
        candidate_layer_s_by_k={1: 1e-3, 3: 1.6e-3},
        early_head_s=4e-3,
        final_head_s=4e-3,
        handoff_s=1e-3,
        shared_device_slowdown=1.3,
    )
    shape = ModelShape.from_name("smollm2-135m")
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"provenance": {"cpu": "x"}, "decode_costs": costs.to_dict()}))
    (hw,) = load_profile(str(path), shape)  # a str, as the CLI passes it
    assert hw.base == costs and hw.layout == "shared"
    assert hw.tp_degrees() == (1,) and hw.tp_pairs(8) == [(1, 0)]
    assert list(hw.layer_seconds(np.array([1, 1]), np.array([1, 3]))) == [1e-3, 1.6e-3]
    built = decode_costs(hw, d_bar=20, k=3, early_head="candidates")
    assert built.shared_device_slowdown == 1.3 and built.handoff_s == 1e-3
    with pytest.raises(ValueError, match="tensor parallelism 1"):
        hw.layer_seconds(2, 1)
    with pytest.raises(ValueError, match="cost profile path .*missing.json': no such file"):
        load_profile(tmp_path / "missing.json", shape)
    (tmp_path / "bad.json").write_text(json.dumps({"layer_s": 1.0, "surprise": 2}))
    with pytest.raises(ValueError, match="surprise"):
        load_profile(tmp_path / "bad.json", shape)


def test_profile_messages_grow_per_candidate_layer():
    base = DecodeCosts(layer_s=1e-3, handoff_s=1e-3, candidate_dispatch_s=2e-3)
    shape = ModelShape.from_name("smollm2-135m")
    hw = ProfileHardware(base, shape, "separate", {"handoff_s": 1e-4}, name="dist")
    assert hw.tp_pairs(8) == [(1, 1)] and hw.tp_pairs(1) == []
    built = decode_costs(hw, d_bar=20, k=3, early_head="main", tp_candidates=1)
    assert built.handoff_s == pytest.approx(1e-3 + 10 * 1e-4)
    assert built.candidate_dispatch_s == 2e-3
    with pytest.raises(ValueError, match="layout"):
        ProfileHardware(base, shape, "remote")


def test_profile_file_of_ppd_measure_profile(tmp_path):
    pytest.importorskip("ppdmodel.cost_profile")
    costs = DecodeCosts(layer_s=2e-3, candidate_layer_s_by_k={1: 2.1e-3, 3: 3e-3},
                        shared_device_slowdown=2.0).to_dict()  # fmt: skip
    dist = {**costs, "shared_device_slowdown": 1.2, "handoff_s": 1e-3}
    data = {
        "format": "ppd-cost-profile", "version": 1, "model": {"name": "m", "d": 30},
        "backends": {"single": {"costs": costs},
                     "dist": {"costs": dist, "per_candidate_layer_s": {"handoff_s": 1e-4}}},
    }  # fmt: skip
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    single, separate = load_profile(path, ModelShape.from_name("smollm2-135m"))
    assert (single.layout, separate.layout) == ("shared", "separate")
    assert single.name == "m:single" and separate.shared_device_slowdown == 1.2
    built = decode_costs(separate, d_bar=15, k=3, early_head="main", tp_candidates=1)
    assert built.handoff_s == pytest.approx(1e-3 + 15 * 1e-4)
    with pytest.raises(ValueError, match="model.d"):
        load_profile(path, ModelShape.from_name("vicuna-13b"))
