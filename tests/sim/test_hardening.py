"""Issue 10 for the simulator: ValueError naming the field, finite times, bounded sizes."""

import numpy as np
import pandas as pd
import pytest

import ppdmodel
import sim
from sim.config import MAX_GPUS, MAX_WORK
from sim.engine import EngineHardware, regime_advice
from sim.formats import LAYER_TIMES_COLUMNS, MatchTrace, read_layer_times, validate_layer_times
from sim.free_schedule import FreeSchedule
from sim.hardware import Engine
from sim.run import summarise

SMALL = dict(d=4, d_bar=2, k=1, ell=3)


def layer_times(n_layers: int = 8, seconds: float = 1e-3) -> pd.DataFrame:
    rows = [("layer", i, 1, seconds, 0.0, 5) for i in range(n_layers)]
    rows += [("embed", -1, 1, 1e-4, 0.0, 5), ("head", -1, 1, 2e-4, 0.0, 5)]
    return pd.DataFrame(rows, columns=list(LAYER_TIMES_COLUMNS))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(link="nvlink4"), "link"),  # was AttributeError deep inside the schedule
        (dict(link=sim.Link.from_name("nvlink4"), shape="llama2-7b"), "shape"),
        (dict(ell=2**63), "ell"),
        (dict(d=2**70, d_bar=2), "d"),
        (dict(ell=float("inf")), "ell"),
        (dict(k=float("-inf")), "k"),
        (dict(per_token_overhead_s=float("inf")), "per_token_overhead_s"),
        (dict(per_handoff_overhead_s=np.inf), "per_handoff_overhead_s"),
        (dict(per_token_overhead_s="1ms"), "per_token_overhead_s"),
        (dict(allow_below_half="yes"), "allow_below_half"),
        (dict(per_layer_events=None), "per_layer_events"),
        (dict(schedule=["ppd"]), "schedule"),
        (dict(d=True), "d"),
        (dict(n_gpus=2.5), "n_gpus"),
    ],
)
def test_bad_config_fields_are_named(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        sim.SimConfig(**(SMALL | kwargs))


def test_sizes_beyond_the_limits_are_refused():
    with pytest.raises(ValueError, match=r"^k must be <= 262144"):
        sim.SimConfig(d=8, d_bar=4, k=10**6, ell=5)  # ran for minutes
    with pytest.raises(
        ValueError, match=rf"n_gpus defaults to k \+ 1 = 5001, above the limit {MAX_GPUS}"
    ):  # noqa: E501
        sim.SimConfig(d=8, d_bar=4, k=5000, ell=5)
    assert sim.SimConfig(d=8, d_bar=4, k=5000, ell=5, n_gpus=2).n_gpus == 2  # batched: fine
    with pytest.raises(ValueError, match=r"ell = 2000000 tokens .* above the limit"):
        sim.SimConfig(d=8, d_bar=4, k=3, ell=2 * 10**6)
    with pytest.raises(ValueError, match=r"per-layer events .* reduce ell"):
        sim.SimConfig(d=80, d_bar=40, k=3, ell=20_000, per_layer_events=True)
    config = sim.SimConfig(**SMALL)
    with pytest.raises(ValueError, match=r"^n must be <= 1000000"):
        sim.monte_carlo(config, n=10**7)
    with pytest.raises(ValueError, match=rf"n = 100000 runs on 1 process.*{MAX_WORK / 1e6:.3g} s"):
        sim.monte_carlo(config, n=10**5)
    with pytest.raises(ValueError, match=r"^n must be a positive integer"):
        sim.monte_carlo(config, n=float("inf"))  # was OverflowError
    with pytest.raises(ValueError, match=r"^processes must be <= 256"):
        sim.monte_carlo(config, n=2, processes=10**9)
    with pytest.raises(ValueError, match=r"^ell must be <= 10000000"):
        sim.Bernoulli(0.5).draw(10**12, np.random.default_rng(0))


def test_wrong_object_types_are_named():
    with pytest.raises(ValueError, match=r"^config must be a SimConfig"):
        sim.simulate(SMALL)
    with pytest.raises(ValueError, match=r"^config must be a SimConfig"):
        sim.monte_carlo("config", n=2)
    with pytest.raises(ValueError, match=r"^result must be a SimResult"):
        sim.plot_gantt(sim.SimConfig(**SMALL))
    with pytest.raises(ValueError, match=r"^shape must be a ModelShape"):
        sim.RooflineCost("llama2-7b", sim.GPUSpec.from_name("h200"))
    with pytest.raises(ValueError, match=r"^gpu must be a GPUSpec"):
        sim.RooflineCost(sim.ModelShape.from_name("llama2-7b"), "h200")
    with pytest.raises(ValueError, match=r"^rng must be a Generator"):
        sim.Bernoulli(0.5).draw(4, 0)
    with pytest.raises(ValueError, match=r"^m must be a one-dimensional"):
        sim.Replay("0101")
    with pytest.raises(ValueError, match=r"^m must hold only 0 and 1"):
        sim.Replay([0.5, 1])  # was silently truncated to 0
    with pytest.raises(ValueError, match=r"^m must be a sequence"):
        sim.simulate(sim.SimConfig(**SMALL), m="10")
    with pytest.raises(ValueError, match=r"^gpu name must be one of"):
        sim.GPUSpec.from_name(["h200"])


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, 0.0])
def test_non_finite_or_non_positive_times_are_refused(bad):
    with pytest.raises(ValueError, match=r"^seconds_per_layer must be a finite number > 0"):
        sim.UniformCost(bad)
    with pytest.raises(ValueError, match=r"^GPUSpec.hbm_bytes_per_s must be a finite number > 0"):
        sim.GPUSpec("x", 1e12, bad)
    with pytest.raises(ValueError, match=r"^Link.bandwidth_bytes_per_s must be a finite"):
        sim.Link("x", 1e-6, bad)
    with pytest.raises(ValueError, match=r"^flops_efficiency must be a finite number > 0"):
        sim.RooflineCost(sim.ModelShape.from_name("llama2-7b"), sim.GPUSpec.from_name("h200"), bad)


def test_model_shape_refuses_infinities_and_huge_integers():
    with pytest.raises(ValueError, match=r"^ModelShape.hidden_size must be a positive integer"):
        sim.ModelShape(float("inf"), 1, 1, 1, 1, 1)  # was OverflowError
    with pytest.raises(ValueError, match=r"^ModelShape.vocab_size must be <="):
        sim.ModelShape(8, 1, 1, 1, 1, 2**64)
    with pytest.raises(ValueError, match=r"^ModelShape.context_len must be an integer >= 0"):
        sim.ModelShape(8, 1, 1, 1, 1, 1, context_len=-1)


@pytest.mark.parametrize("column", ["seconds", "std_seconds"])
@pytest.mark.parametrize("bad", [float("inf"), -1.0, float("nan")])
def test_layer_times_must_be_finite(tmp_path, column, bad):
    df = layer_times()
    df.loc[3, column] = bad
    with pytest.raises(ValueError, match=rf"{column} must be finite and >= 0"):
        sim.MeasuredCost(df)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    with pytest.raises(ValueError, match=rf"{column} must be"):
        read_layer_times(path)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda df: df.drop(columns="seconds"), r"missing columns \['seconds'\]"),
        (lambda df: df.assign(seconds="fast"), r"seconds must hold numbers"),
        (lambda df: df.assign(batch=1.5), r"batch must hold integers"),
        (lambda df: df.assign(batch=2**70), r"batch must hold (numbers|integers)"),
        (lambda df: df.assign(layer=None), r"layer must hold numbers"),
        (lambda df: df.assign(component="attention"), r"component must be one of"),
        (lambda df: df.assign(n_samples=0), r"n_samples must be >= 1"),
        (lambda df: df.iloc[:0], r"no 'layer' rows"),
        (lambda df: df.to_dict(), r"MeasuredCost df must be a pandas DataFrame"),
        (lambda df: 42, r"MeasuredCost df must be a pandas DataFrame"),
    ],
)
def test_malformed_layer_times_are_refused_naming_the_problem(change, match):
    with pytest.raises(ValueError, match=match):  # was KeyError / IndexError / AttributeError
        sim.MeasuredCost(change(layer_times()))


def test_embed_head_token_rows_must_have_layer_minus_one():
    df = layer_times()
    df.loc[df["component"] == "embed", "layer"] = 0
    with pytest.raises(ValueError, match=r"layer must be -1 for components embed"):
        validate_layer_times(df)


def test_layer_times_of_another_model_are_refused():
    cost = sim.MeasuredCost(layer_times(n_layers=8))
    with pytest.raises(ValueError, match=r"^cost \(MeasuredCost\) .* 8-layer model, but d = 40"):
        sim.SimConfig(d=40, d_bar=20, k=1, ell=5, cost=cost)  # was silently used
    assert sim.simulate(sim.SimConfig(d=8, d_bar=4, k=1, ell=5, cost=cost)).latency_s > 0
    with pytest.raises(ValueError, match=r"^layer_end must be <= 8"):
        cost.block_seconds(1, 40)


def test_summarise_refuses_empty_or_malformed_frames():
    with pytest.raises(ValueError, match=r"samples is missing columns"):
        summarise(pd.DataFrame())  # was KeyError
    with pytest.raises(ValueError, match=r"samples must hold at least one run"):
        summarise(pd.DataFrame(columns=["latency_units", "compute_units"]))
    with pytest.raises(ValueError, match=r"samples must be a pandas DataFrame"):
        summarise([1.0, 2.0])


def test_match_trace_refuses_infinities():
    with pytest.raises(ValueError, match=r"trace 's': d must be a positive integer"):
        MatchTrace("s", float("inf"), 2, 1, [1])
    with pytest.raises(ValueError, match=r"m must be a list of 0 and 1"):
        MatchTrace("s", 4, 2, 1, "0101")


# -- issue 47: functions the fuzz's valid inputs did not reach -------------------------------

FREE_COSTS = dict(layer_s=1e-3, embedding_s=1e-4, early_head_s=2e-3, final_head_s=2e-3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(costs=None), r"^costs must be a ppdmodel.DecodeCosts"),  # was AttributeError
        (dict(d=2**31), r"^d must be <= 1000000, got 2147483648"),  # ran without end
        (dict(exit_layer=127), r"^exit_layer must be in \[1, d - 1\] = \[1, 11\], got 127"),
        (dict(exit_layer=np.int8(127)), r"^exit_layer must be in \[1, d - 1\]"),
        (dict(exit_layer=-3), r"^exit_layer must be a positive integer"),  # negative layers
        (dict(exits=[1, 2]), r"^exits must hold only 0/1"),
        (dict(record_events="yes"), r"^record_events must be True or False"),
    ],
)
def test_free_schedule_checks_its_arguments(kwargs, match):
    args = dict(d=12, exit_layer=4, costs=ppdmodel.DecodeCosts(**FREE_COSTS), exits=[1, 0, 1])
    with pytest.raises(ValueError, match=match):
        FreeSchedule(**{**args, **kwargs}).run()


def test_free_schedule_refuses_a_sequence_beyond_the_work_limit():
    costs = ppdmodel.DecodeCosts(**FREE_COSTS)
    with pytest.raises(ValueError, match=r"d = 1000000, exit_layer = 1 over 3 tokens.*MAX_WORK"):
        FreeSchedule(d=10**6, exit_layer=1, costs=costs, exits=[0, 0, 0])
    with pytest.raises(ValueError, match=r"^n_runs = 2000 sequences of 10 tokens.*MAX_WORK"):
        sim.monte_carlo_free(d=10**4, exit_layer=1, costs=costs, ell=10, q=0.5, n_runs=2000)
    result = FreeSchedule(d=12, exit_layer=4, costs=costs, exits=[1, 0, 1]).run()
    assert result.events.layer_start.min() == 0 and result.events.layer_end.max() == 12


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((None, 1, 2), r"^by_devices must be a pandas DataFrame"),  # was AttributeError
        ((pd.DataFrame({"budget": [2]}), 1, 2), r"^by_devices is missing columns"),
        (("BY_DEVICES", 0, 2), r"^tp must be a positive integer"),
        (("BY_DEVICES", 1, 2.5), r"^devices must be a positive integer"),
        (("BY_DEVICES", 1, 10**6), r"^devices must be <= 1024"),
    ],
)
def test_regime_advice_checks_its_arguments(args, match):
    hw = EngineHardware(sim.ModelShape.from_name("llama2-7b"), sim.GPUSpec.from_name("h200"),
                        sim.Link.from_name("nvlink4"), Engine.from_name("hf-eager"))  # fmt: skip
    by_devices, tp, devices = args
    by_devices = BY_DEVICES if isinstance(by_devices, str) else by_devices
    with pytest.raises(ValueError, match=match):
        regime_advice(hw, by_devices, tp, devices)
    with pytest.raises(ValueError, match=r"^hw must be a HardwareModel"):
        regime_advice("h200", BY_DEVICES, 1, 2)
    assert regime_advice(hw, BY_DEVICES, 1, 2).startswith("Regime on 1 device: launch-bound")
    assert "PPD (ppd cfg) takes 10 ms/token against 12 for greedy cfg" in regime_advice(
        hw, BY_DEVICES.assign(hardware_name=hw.name), 1, 2
    )


BY_DEVICES = pd.DataFrame({
    "budget": [2, 2], "hardware_name": ["x", "x"], "method": ["ppd", "greedy"],
    "config": ["ppd cfg", "greedy cfg"], "latency_s": [0.010, 0.012],
})  # fmt: skip
"""``sim.plan.best_by_devices`` rows of one workload, as ``regime_advice`` reads them."""
