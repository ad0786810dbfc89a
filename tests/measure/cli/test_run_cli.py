"""``ppd run`` and ``ppd validate`` end to end on a tiny model saved to a directory."""

from __future__ import annotations

import json

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from measure.eval.calibrate import (  # noqa: E402
    Calibration,
)
from ppdmodel.cli import main  # noqa: E402
from sim.formats import read_traces  # noqa: E402
from tests.measure.tiny_models import char_tokenizer, tiny_model  # noqa: E402

torch.set_num_threads(1)
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [40, 41]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
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


def test_cli_run_with_a_translator_head_and_spec_bench_prompts(model_dir, tmp_path, capsys):
    from measure.datasets import sample_path
    from measure.train.distill import new_head

    model = tiny_model("llama", seed=3)
    head = new_head(model, "translator", 3)
    with torch.no_grad():
        head.translator.bias.normal_()
    head.save(tmp_path / "head")
    argv = ["run", "--model", str(model_dir), "--prompts", str(sample_path("spec-bench"))]
    argv += ["--category", "qa", "--head-dir", str(tmp_path / "head"), "--no-assistant"]
    argv += ["--max-new-tokens", "4", "--k", "2", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "d_bar = 3" in printed  # the head's layer
    assert "translator head" in printed and "n_tokens" in printed
    traces = read_traces(tmp_path / "out" / "traces.jsonl")
    assert [t.sequence for t in traces] == ["7-k2", "8-k2"] and {t.head for t in traces} == {
        "translator"
    }


def test_cli_run_undefined_p_prints_na(model_dir, tmp_path, capsys):
    argv = ["run", "--model", str(model_dir), "--prompt", "hi", "--max-new-tokens", "1"]
    assert main([*argv, "--k", "1", "--no-assistant", "--out", str(tmp_path)]) == 0
    ppd_row = [
        line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("ppd")
    ]
    assert ppd_row and " n/a " in ppd_row[0] and " 0 " in ppd_row[0]  # p_correct n/a, n_m 0
