"""Table-3 report, overhead calibration, three-way validation and the ``ppd run|validate`` CLI."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
from measure.eval.calibrate import (  # noqa: E402
    Calibration,
    fit_link,
    fit_overheads,
    ppd_pass_compute,
)
from measure.eval.report import REPORT_COLUMNS, format_table, table3  # noqa: E402
from measure.eval.validate import compare, simulate_ppd, split_halves  # noqa: E402
from ppdmodel.cli import main  # noqa: E402
from sim.formats import MatchTrace, read_traces  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

torch.set_num_threads(1)
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [40, 41]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_table3_rows_are_exact(arch):
    model = tiny_model(arch, seed=1)
    report = table3(model, PROMPTS, d_bar=2, ks=(1, 3), max_new_tokens=8)
    table = report.table
    assert tuple(table.columns) == REPORT_COLUMNS
    assert list(table["method"]) == [
        "greedy",
        "ppd",
        "ppd",
        "hf generate (greedy)",
        "hf assistant_early_exit",
    ]
    ppd = table[table["method"] == "ppd"]
    assert list(ppd["k"]) == [1, 3] and ppd["exact"].all()
    for k, runs in report.ppd.items():
        ms = [x for r in runs for x in r.m]
        assert ppd.loc[ppd["k"] == k, "p_correct"].item() == pytest.approx(np.mean(ms))
    assert (table["tokens_per_s"].iloc[:4] > 0).all()
    early = table.iloc[-1]
    if arch == "gpt2":  # transformers' early exit needs a Llama-like layout
        assert early["exact"] is None and "not supported for gpt2" in early["note"]
    else:
        assert early["exact"] is True or early["exact"] == True  # noqa: E712
    assert "ppd" in format_table(table)


def _fake_run(m, d, d_bar, cost, per_token, handoff, nbytes, samples, sequence="s"):
    compute = ppd_pass_compute(cost, d=d, d_bar=d_bar, m=m)
    durations = compute + per_token + handoff * np.concatenate([[0], m])
    times = np.cumsum(durations).tolist()
    trace = MatchTrace(sequence=sequence, d=d, d_bar=d_bar, k=1, m=m, source="ppd_run")
    return SimpleNamespace(
        trace=trace,
        m=list(m),
        token_times_s=times,
        wall_s=times[-1],
        handoff_bytes=nbytes,
        link_samples=samples,
        n_runs=trace.n_runs,
        tokens=[0] * (len(m) + 1),
    )


def test_calibration_recovers_planted_overheads_and_sim_reproduces_runs():
    d, d_bar, unit = 8, 5, 0.01
    cost = sim.UniformCost(seconds_per_layer=unit)
    shape = sim.ModelShape(
        hidden_size=64,
        num_layers=d,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=100,
        dtype_bytes=4,
    )
    nbytes = shape.handoff_bytes(1, d - d_bar)
    latency, bandwidth = 2e-4, 1e7
    samples = [(b, latency + b / bandwidth) for b in (256, 4096, 65536) for _ in range(3)]
    assert fit_link(samples) == pytest.approx((latency, bandwidth), rel=1e-6)
    rng = np.random.default_rng(0)
    runs = [
        _fake_run(
            rng.integers(0, 2, 15).tolist(), d, d_bar, cost, 0.003, 0.004, nbytes, samples, f"s{i}"
        )
        for i in range(4)
    ]
    calib = fit_overheads(runs, cost)
    assert calib.per_token_overhead_s == pytest.approx(0.003, abs=1e-9)
    link_s = latency + nbytes / bandwidth
    assert calib.per_handoff_overhead_s == pytest.approx(0.004 - link_s, abs=1e-9)
    assert calib.rms_residual_s < 1e-9
    for run in runs:  # the simulator's accounting is the one fitted: exact replay
        assert simulate_ppd(run, cost, calib, shape, n_gpus=2) == pytest.approx(run.wall_s)
    greedy = [
        SimpleNamespace(
            tokens=[0] * 16,
            wall_s=16 * (d * unit + 0.001),
            token_times_s=list(np.arange(1, 17) * (d * unit + 0.001)),
        )
    ]
    calib = fit_overheads(runs, cost, greedy_results=greedy)
    assert calib.greedy_per_token_overhead_s == pytest.approx(0.001)
    table = compare(runs[:1], [("s0", greedy[0])], cost, calib, shape, n_gpus=2)
    assert table["simulated_rel_err"].abs().max() < 1e-9
    assert split_halves(5)[:2] == ([0, 2, 4], [1, 3]) and split_halves(1)[2] is False


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.measure.test_measure_cli import char_tokenizer

    path = tmp_path_factory.mktemp("tiny-llama-ppd")
    tiny_model("llama", seed=3).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def test_cli_run_prints_report_and_writes_traces(model_dir, tmp_path, capsys):
    code = main(
        [
            "run",
            "--model",
            str(model_dir),
            "--prompt",
            "hello",
            "--prompt",
            "abc",
            "--max-new-tokens",
            "6",
            "--k",
            "1",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "hf assistant_early_exit" in printed and "ppd" in printed
    report = pd.read_csv(tmp_path / "report.csv")
    assert report.loc[report["method"] == "ppd", "exact"].all()
    traces = read_traces(tmp_path / "traces.jsonl")
    assert [t.sequence for t in traces] == ["0-k1", "1-k1", "0-k2", "1-k2"]
    assert all(t.source == "ppd_run" and t.events for t in traces)


def test_cli_validate_writes_table_and_plot(model_dir, tmp_path, capsys):
    code = main(
        [
            "validate",
            "--model",
            str(model_dir),
            "--prompt",
            "hello",
            "--prompt",
            "xyz",
            "--max-new-tokens",
            "8",
            "--d-bar",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    for name in (
        "validation.csv",
        "summary.csv",
        "calibration.json",
        "layer_times.csv",
        "traces.jsonl",
        "validation.png",
    ):
        assert (tmp_path / name).is_file(), name
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert set(summary["method"]) == {"greedy", "ppd k=1"}
    assert "simulated_rel_err" in capsys.readouterr().out
    text = (tmp_path / "calibration.json").read_text()
    calibration = json.loads(text, parse_constant=_refuse)  # strict JSON: no Infinity/NaN
    assert Calibration.from_dict(calibration).per_token_overhead_s >= 0


def _refuse(name):
    raise AssertionError(f"calibration.json is not strict JSON: {name}")


def test_calibration_without_link_round_trips_through_strict_json():
    calib = Calibration(0.001, 0.0, 0.0, math.inf)
    data = json.loads(json.dumps(calib.to_dict(), allow_nan=False))
    assert data["link_bandwidth_bytes_per_s"] is None
    assert Calibration.from_dict(data) == calib


def test_cli_refuses_d_bar_below_half(model_dir, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(
            [
                "run",
                "--model",
                str(model_dir),
                "--prompt",
                "hi",
                "--d-bar",
                "1",
                "--max-new-tokens",
                "2",
                "--no-assistant",
                "--out",
                str(tmp_path),
            ]
        )
    assert info.value.code == 2
