"""``ppd plan`` through the ppd dispatcher (its entry point declared in pyproject.toml)."""

import json
from importlib.metadata import EntryPoint
from pathlib import Path

import pandas as pd
import pytest

import ppdmodel.cli
from ppdmodel.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "plan",
    "--d-bar",
    "20",
    "30",
    "--k",
    "1",
    "3",
    "--workload",
    "SQuAD",
    "--devices",
    "2",
    "--confirm-n",
    "4",
    "--workers",
    "1",
]


@pytest.fixture(autouse=True)
def plan_registered(monkeypatch):
    """Make ``plan`` visible even where the installed metadata predates its entry point."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."ppd.commands"]')[1].split("\n[")[0]
    assert 'plan = "sim.cli_plan:register"' in section
    value = "sim.cli_plan:register"
    original = ppdmodel.cli.entry_points

    def with_plan(group):
        found = [ep for ep in original(group=group) if ep.name != "plan"]
        return [*found, EntryPoint("plan", value, group)]

    monkeypatch.setattr(ppdmodel.cli, "entry_points", with_plan)


def test_plan_writes_csv_png_and_prints_a_recommendation(tmp_path, capsys):
    assert main(SMALL + ["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "recommended:" in out and "Pareto frontier" in out
    front = pd.read_csv(tmp_path / "plan.csv")
    assert front.recommended.sum() == 1 and front.agrees.all()
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "confirm").glob("part-*.parquet"))


def test_plan_json_with_a_config_file_and_a_p_table_file(tmp_path, capsys):
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 10,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    table = pd.DataFrame(
        {
            "dataset": "chat",
            "trained": False,
            "layer": [5, 8],
            "k": 1,
            "p_correct": [0.3, 0.6],
            "d": 10,
        }
    )
    table.to_csv(tmp_path / "atlas.csv", index=False)
    argv = [
        "plan",
        "--config",
        str(tmp_path),
        "--table",
        str(tmp_path / "atlas.csv"),
        "--gpu",
        "a100-80gb",
        "--link",
        "pcie4-x16",
        "--confirm-n",
        "0",
        "--json",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["recommendations"]) == {"chat"} and report["n_screened"] > 0


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--gpu", "tpu-v9"], "gpu name must be one of"),
        (["--table", "missing.csv", "--table-d", "40"], "no such file"),
        (["--max-compute", "0.5"], "max_compute"),
        (["--k", "9"], "ks must"),
    ],
)
def test_plan_errors_exit_2(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(SMALL + ["--confirm-n", "0", "--out", str(tmp_path)] + extra)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_plan_from_a_measured_profile_infers_the_model(tmp_path, capsys):
    from tests.ppdmodel.profiles import minimal_profile

    profile = minimal_profile(d=30)
    profile["model"]["name"] = "smollm2"  # a shape preset: smollm2-135m
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    argv = [
        "plan",
        "--profile",
        str(path),
        "--devices",
        "2",
        "--confirm-n",
        "2",
        "--workers",
        "1",
        "--workload",
        "translation",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # the p-table defaults to the model's own shipped atlas (d = 30): no depth mapping
    assert "== translation:" in out and "mapped to" not in out and "smollm2:single" in out
    profile["model"]["name"] = "mystery"
    path.write_text(json.dumps(profile))
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and "give --shape or --config" in capsys.readouterr().err


def test_plan_engine_prints_regimes_and_offers_tp8_for_7b(tmp_path, capsys):
    args = "plan --shape llama2-7b --gpu a100-80gb --devices 8 --engine torch-compiled"
    args = args.split() + ["--workload", "SQuAD", "--confirm-n", "0", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "bandwidth-bound" in out and "Regime on" in out
    regimes = pd.read_csv(tmp_path / "regimes.csv")
    assert list(regimes.tp) == [1, 2, 4, 8]
    greedy = pd.read_csv(tmp_path / "by_devices.csv").query("method == 'greedy' and budget == 8")
    assert greedy.config.iloc[0].startswith("greedy, TP8")


def test_plan_engine_options_need_an_engine(tmp_path, capsys):
    with pytest.raises(SystemExit) as err:
        main(["plan", "--host-us-per-layer", "500", "--out", str(tmp_path)])
    assert err.value.code == 2
    assert "require --engine" in capsys.readouterr().err
