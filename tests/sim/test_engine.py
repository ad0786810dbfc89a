"""Execution regimes (sim/engine.py) and published batch-1 measurements against them."""

import numpy as np
import pytest

from ppdmodel.cli import build_parser, iter_commands
from sim.engine import EngineHardware, regime_table
from sim.hardware import ENGINE_PRESETS, Engine, GPUSpec, Link
from sim.hardware_costs import RooflineHardware, decode_costs, greedy_costs
from sim.published import compare_published, error_summary, read_published, table3_on_engines
from sim.shape import ModelShape

MEDIAN_TOLERANCE = 0.15
"""Issue 21: median |error| of the held-out published rows at most 15 %..."""
WORST_TOLERANCE = 0.25
"""...and the worst at most 25 %."""


def _hw(engine="hf-eager", shape="llama2-7b", gpu="a100-80gb", **kw):
    return EngineHardware(ModelShape.from_name(shape), GPUSpec.from_name(gpu),
                          Link.from_name("nvlink3"), Engine.from_name(engine), **kw)  # fmt: skip


def test_presets_name_the_two_regimes():
    assert [n for n in ENGINE_PRESETS if "eager" in n] == ["hf-eager"]
    assert [n for n in ENGINE_PRESETS if "compiled" in n] == ["torch-compiled"]
    assert Engine.from_name("hf-eager").eager and not Engine.from_name("torch-compiled").eager
    for engine in ENGINE_PRESETS.values():
        assert engine.source


def test_plan_help_lists_the_engine_presets():
    plan = dict(iter_commands(build_parser()))["ppd plan"]
    action = next(a for a in plan._actions if "--engine" in a.option_strings)
    assert sorted(action.choices) == sorted(ENGINE_PRESETS) and action.default is None


def test_published_rows_are_predicted_within_the_issue_tolerance():
    compared = compare_published()
    judged = error_summary(compared, "judge")
    assert judged["median_abs_error"] <= MEDIAN_TOLERANCE
    assert judged["worst_abs_error"] <= WORST_TOLERANCE
    held_out = compared[compared.role == "judge"]
    assert set(held_out.engine_preset) == set(ENGINE_PRESETS)  # both regimes
    assert held_out.tp.min() == 1 and held_out.tp.max() == 8  # 1-8 GPUs
    assert {"launch-bound", "bandwidth-bound"} <= set(held_out.regime)


def test_published_table_cites_every_row():
    frame = read_published()
    assert frame[["source", "url", "gpu", "engine", "dtype", "model"]].notna().all().all()
    assert set(frame.trust) <= {"high", "medium", "low"}
    assert (frame.role == "calibrate").any() and (frame.role == "judge").sum() >= 8


def test_eager_is_launch_bound_and_tensor_parallelism_does_not_help():
    hw = _hw("hf-eager")
    assert hw.regime(1).regime == "launch-bound"
    assert hw.greedy_token_seconds(2) >= hw.greedy_token_seconds(1)
    compiled = _hw("torch-compiled")
    assert compiled.regime(1).regime == "bandwidth-bound"
    assert compiled.greedy_token_seconds(8) < compiled.greedy_token_seconds(4)  # TP8 for 7B
    assert 8 in compiled.tp_degrees()


def test_eager_layer_is_the_slower_of_host_and_device():
    hw = _hw("hf-eager")
    host, device = hw.host_layer_seconds(1), hw.device_layer_seconds(1, 1)
    assert hw.layer_seconds(1, 1) == pytest.approx(max(host, device))
    # a k-row candidate batch costs no more while the host bounds the layer
    assert hw.layer_seconds(1, 5) == pytest.approx(hw.layer_seconds(1, 1))
    compiled = _hw("torch-compiled")
    assert compiled.layer_seconds(1, 1) == pytest.approx(compiled.device_layer_seconds(1, 1))


def test_one_host_thread_serializes_launches_two_processes_do_not():
    one_thread = _hw("hf-eager")
    two_processes = EngineHardware(one_thread.shape, one_thread.gpu, one_thread.link,
                                   one_thread.engine.with_overrides(shared_host=False))  # fmt: skip
    assert one_thread.shared_device_slowdown == pytest.approx(2.0)
    assert 1.0 <= two_processes.shared_device_slowdown < 2.0


def test_messages_carry_the_engine_cost_and_vanish_on_a_shared_device():
    eager, compiled = _hw("hf-eager"), _hw("torch-compiled")
    assert eager.handoff_seconds(1, 20, False) > 1e-3 > compiled.handoff_seconds(1, 20, False)
    assert eager.handoff_seconds(1, 20, True) == 0
    costs = decode_costs(eager, d_bar=20, k=3, early_head="main", tp_candidates=1)
    assert costs.handoff_s >= eager.engine.message_s
    greedy = greedy_costs(eager)
    assert greedy.greedy_token_seconds(32) == pytest.approx(eager.greedy_token_seconds(1))


def test_regime_table_and_bad_input():
    ideal = RooflineHardware(_hw().shape, _hw().gpu, _hw().link)
    table = regime_table([_hw("hf-eager"), ideal])
    assert list(table.tp) == [1, 2, 4, 8] and (table.regime == "launch-bound").all()
    with pytest.raises(ValueError, match="engine name"):
        Engine.from_name("vllm")
    with pytest.raises(ValueError, match="Engine.launch"):
        Engine("x", "jit", 0, 0, 0, 0.5, 0.5, 0, 0, 0)
    with pytest.raises(ValueError, match="bandwidth_efficiency"):
        Engine.from_name("hf-eager").with_overrides(bandwidth_efficiency=1.5)
    with pytest.raises(ValueError, match="max_tp"):
        _hw(max_tp=0)
    assert np.all(_hw().allreduce_seconds(np.array([1, 2]), 1e4) >= 0)


def test_table3_on_the_engine_presets_gets_close_to_theorem_4_1():
    table = table3_on_engines()
    assert set(table.engine) == set(ENGINE_PRESETS) and len(table) == 8
    assert (table.speedup > table.published_speedup).all()
    assert (table.speedup <= table.theorem_speedup + 1e-12).all()
