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
    assert main(SMALL + ["--out", str(tmp_path), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("decision per workload") and "what it rests on:" in out
    assert "recommended:" in out and "Pareto frontier" in out
    front = pd.read_csv(tmp_path / "plan.csv")
    assert front.recommended.sum() == 1 and front.agrees.all()
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "confirm").glob("part-*.jsonl"))


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
        "--verbose",
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
    args = args.split() + ["--workload", "SQuAD", "--confirm-n", "0", "--out", str(tmp_path),
                           "--verbose"]  # fmt: skip
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


FREE_CSV = (
    "exit_layer,threshold,exit_rate,quality,quality_metric\n"
    "20,0.5,0.8,0.3,rouge_l_vs_greedy\n20,0.9,0.4,0.6,rouge_l_vs_greedy\n"
)


def test_plan_without_a_free_table_leaves_free_out_with_a_note(tmp_path, capsys):
    assert main(SMALL + ["--out", str(tmp_path)]) == 0
    assert "FREE (approximate early exit) left out: give --free-table" in capsys.readouterr().out
    front = pd.read_csv(tmp_path / "plan.csv")
    assert "free" not in set(front.method) and (front.quality == 1.0).all()


def test_plan_free_table_quality_column_and_min_quality(tmp_path, capsys):
    table = tmp_path / "free_table.csv"
    table.write_text(FREE_CSV)
    argv = SMALL + ["--free-table", str(table), "--out", str(tmp_path / "exact"), "--verbose"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "left out" not in out and "FREE (approximate; below --min-quality" in out
    front = pd.read_csv(tmp_path / "exact" / "plan.csv")
    assert set(front[front.method == "free"].quality) == {0.3, 0.6}
    assert (front[front.method != "free"].quality == 1.0).all()
    assert front[front.recommended].method.iloc[0] != "free"  # default --min-quality 1.0
    argv = SMALL + ["--free-table", str(table), "--min-quality", "0.25", "--json"]
    assert main(argv + ["--out", str(tmp_path / "approx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["recommendations"]["SQuAD"].startswith("FREE L_s=20 threshold=0.5")
    assert "approximate: quality 0.300" in report["recommendations"]["SQuAD"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--min-quality", "1.5"], "argument --min-quality: must be a number in [0, 1]"),
        (["--min-quality", "-0.1"], "argument --min-quality"),
        (["--min-quality", "nan"], "argument --min-quality"),
        (["--free-table", "missing.csv"], "argument --free-table: file not found"),
    ],
)
def test_plan_bad_free_options_exit_2_naming_the_option(tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(SMALL + ["--confirm-n", "0", "--out", str(tmp_path)] + extra)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,message",
    [
        (FREE_CSV.replace("20,0.5", "40,0.5"), "exit_layer 40 is not below the model's d = 40"),
        ("exit_layer,threshold,exit_rate\n20,0.5,0.8\n", "missing columns ['quality']"),
        (FREE_CSV.replace("0.8,0.3", "0.8,1.3"), "quality must be in [0, 1.0]"),
    ],
)
def test_plan_malformed_free_table_exits_2_before_any_work(tmp_path, capsys, text, message):
    table = tmp_path / "free_table.csv"
    table.write_text(text)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(SMALL + ["--free-table", str(table), "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "ppd plan: error:" in err and message in err and "free_table.csv" in err
    assert not (out / "plan.csv").exists()


def _measured(tmp_path, *, model="smollm2", tokens=8):
    from tests.sim.plan_inputs import spread_profile, validation_folder

    profile = spread_profile(tmp_path / "profile.json", name=model)
    folder = validation_folder(tmp_path / "validate", p={22: 0.2}, tokens=tokens)
    return ["plan", "--profile", str(profile), "--devices", "2", "--confirm-n", "0", "--draws",
            "30", "--out", str(tmp_path / "out")], folder  # fmt: skip


def test_plan_from_a_validation_folder_says_too_close_and_how_to_settle_it(tmp_path, capsys):
    argv, folder = _measured(tmp_path)
    assert main([*argv, "--table", str(folder), "--d-bar", "22", "--k", "1", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "verdict: too close to call: PPD d_bar=22 k=1" in out and "against greedy" in out
    assert "questions: too close to call (" in out.splitlines()[1]
    (command,) = [line for line in out.splitlines() if line.startswith("  questions (")]
    assert "--model smollm2 --prompts questions.jsonl" in command
    assert "off the frontier" in out and "measured layers [22] only" not in out  # asked: 22
    table = pd.read_csv(tmp_path / "out" / "plan.csv")
    assert (table.speedup_low <= table.speedup).all()
    assert (table.speedup <= table.speedup_high).all()
    asked = table[table.asked]
    assert set(asked.d_bar) == {22} and (~asked.on_frontier).any() and table.on_frontier.any()
    assert main([*argv, "--table", str(folder / "traces.jsonl"), "--d-bar", "22", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (verdict,) = report["verdicts"].values()
    assert verdict["too_close"] and verdict["validate_command"].startswith("ppd validate")
    assert "--d-bar 22 --k 1 --early-head candidates --backend dist" in verdict[
        "validate_command"]  # fmt: skip
    assert len(report["summary"]) <= 10 and max(map(len, report["summary"])) <= 120
    (decision,) = report["decisions"].values()
    assert decision["verdict"] == "too close to call" and decision["dominant_source"]
    assert main([*argv, "--table", str(folder), "--d-bar", "20", "22"]) == 0
    assert "measured layers [22] only: p at the other d_bar (1 of them)" in capsys.readouterr().out


def test_plan_refuses_another_models_table_without_the_flag(tmp_path, capsys):
    argv, folder = _measured(tmp_path, model="qwen-mini")
    argv += ["--shape", "smollm2-135m"]
    for extra, other in (([], "vicuna-13b"), (["--table", str(folder)], "smollm2"),
                         (["--table", "smollm2"], "smollm2")):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main([*argv, *extra])
        err = capsys.readouterr().err.strip()
        assert exc.value.code == 2 and len(err.splitlines()) == 1
        assert f"'{other}'" in err and "'qwen-mini'" in err and "--allow-other-model-table" in err
    assert main([*argv, "--table", str(folder), "--allow-other-model-table"]) == 0
    assert "used for 'qwen-mini' (--allow-other-model-table)" in capsys.readouterr().out


def test_plan_prices_a_dist_profile_with_its_pair_factors_and_says_so(tmp_path, capsys):
    from ppdmodel import expected_latency_seconds
    from ppdmodel.cost_profile import parse_cost_profile
    from tests.sim.test_plan_pairs import BATCH, PAIRS, dist_profile

    data = dist_profile(PAIRS, **BATCH)
    data["model"]["name"] = "smollm2"  # a shape preset: smollm2-135m (d = 30)
    (tmp_path / "profile.json").write_text(json.dumps(data))
    rows = [{"workload": "qa", "head": "shared", "layer": 22, "k": k, "p_correct": 0.3}
            for k in (1, 2, 3)]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "p.csv", index=False)
    profile_path, table_path = str(tmp_path / "profile.json"), str(tmp_path / "p.csv")
    argv = ["plan", "--profile", profile_path, "--table", table_path, "--table-d", "30",
            "--devices", "2", "--d-bar", "22", "--k", "1", "2", "3", "--confirm-n", "0",
            "--draws", "0", "--ell", "32", "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert (
        "smollm2:dist shares the machine with the profile's pair factors (pair probe at "
        "d_bar=15), as ppd validate: k=1: x1.300 main / x1.050 batch, k=2: x1.300 main / "
        "x1.050 batch (k=1's, the nearest measured), k=3: x1.100 main / x1.700 batch (early "
        "head on main); early head on the candidate side: k=1: x1.350 main / x1.400 early "
        "head + batch, k=2: x1.350 main / x1.400 early head + batch (k=1's, the nearest "
        "measured), k=3: x1.150 main / x2.100 early head + batch"
    ) in out
    profile = parse_cost_profile(data)
    table = pd.read_csv(tmp_path / "out" / "plan.csv")
    dist = table[(table.method == "ppd") & (table.tp_candidates == 1)]
    assert sorted(set(dist.k)) == [1, 2, 3]
    for row in dist.itertuples():
        costs = profile.costs("dist", d_bar=22, k=int(row.k), early_head=row.early_head)
        want = expected_latency_seconds(d=30, d_bar=22, ell=32, p=0.3, k=int(row.k), costs=costs,
                                        early_head=row.early_head) / 32  # fmt: skip
        assert row.latency_s == pytest.approx(want, rel=1e-9)
