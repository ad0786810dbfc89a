"""``ppd latency | compute | tradeoff`` through the dispatcher's ``main``."""

import json
import subprocess
import sys

import pytest

from ppdmodel.cli import main


def test_latency_table(capsys):
    assert main(["latency", "--d", "40", "--d-bar", "20", "--ell", "128", "--p", "0.5"]) == 0
    out = capsys.readouterr().out
    header, row, *legend = out.strip().splitlines()
    assert "expected_latency" in header and "p50" in header and "p99" in header
    assert "3850" in row
    assert "ell -> infinity" in " ".join(legend)


def test_latency_prints_the_readme_per_token_figure(capsys):
    """The README's 0.658 (Table 2's SQuAD+tr k=3 rate, ell -> infinity) beside the finite-ell
    normalized latency, each under its own labelled column."""
    assert main(["latency", "--p", "0.6837", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert round(row["normalized_per_token_inf"], 3) == 0.658
    assert row["normalized_per_token_inf"] == pytest.approx(1 - 0.6837 * 20 / 40)
    assert round(row["normalized_latency"], 4) == 0.6608  # at ell = 128: the last pass


def test_latency_json_grid_and_seconds(capsys):
    argv = ["latency", "--ell", "16", "--p", "0", "--p", "0.5", "1", "--json"]
    argv += ["--seconds-per-layer", "0.001", "--per-handoff-overhead-s", "0.01"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["p"] for r in rows] == [0.0, 0.5, 1.0]
    assert rows[0]["expected_latency"] == 640.0 and rows[0]["d_bar"] == 20
    assert rows[2]["expected_latency"] == 20 * 16 + 20
    assert rows[1]["expected_latency_s"] == pytest.approx(0.001 * 490 + 7.5 * 0.01)
    assert rows[1]["latency_per_token_inf"] == 30.0


def test_compute_json(capsys):
    assert main(["compute", "--p", "0.6837", "--k", "1", "3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["k"] for r in rows] == [1, 3]
    assert round(rows[1]["compute_per_time_inf"], 2) == 3.28
    assert rows[0]["expected_compute"] == pytest.approx(rows[0]["expected_latency"] + 20 * 128)


def test_compute_table(capsys):
    assert main(["compute", "--p", "0.5", "--k", "3"]) == 0
    out = capsys.readouterr().out
    assert "expected_compute" in out and "11530" in out


def test_latency_with_paper_positions(capsys):
    assert main(["latency", "--paper-positions", "squad:3:Y:20", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["ell"], row["d_bar"], row["p"]) == (16, 20, "Tables 6-8 squad:3:Y:20")
    # 40*16 - 20 * sum of p_t over t = 2..16, p_t = the rate at position t - 1 = 1..15
    # (bins 1-2 .. 15-16 of Table 6; position 16 is not used)
    bins = [0.5110, 0.7295, 0.7239, 0.7182, 0.7124, 0.6980, 0.6860, 0.6906]
    p_sum = 2 * sum(bins[:-1]) + bins[-1]
    assert row["expected_latency"] == pytest.approx(640 - 20 * p_sum)


def test_paper_positions_take_ell_and_k_from_the_options_or_the_table(capsys):
    # --ell 5 uses p_2..p_5 = positions 1..4 of Table 6 (bins 1-2, 1-2, 3-4, 3-4); k: the spec's 3
    assert main(["compute", "--paper-positions", "squad:3:Y:20", "--ell", "5", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["ell"], row["k"]) == (5, 3)
    p_sum = 0.5110 + 0.5110 + 0.7295 + 0.7295
    assert row["expected_latency"] == pytest.approx(40 * 5 - 20 * p_sum)
    assert row["expected_compute"] == pytest.approx(row["expected_latency"] + 3 * 20 * 5)
    assert main(["compute", "--paper-positions", "squad:3:Y:20", "--k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["k"] == 1


def test_tradeoff_writes_files_and_prints_endpoints(tmp_path, capsys):
    assert main(["tradeoff", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0.629" in out and "0.892" in out and "1.561" in out and "4.973" in out
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.startswith("fig3") and n.endswith(".png") for n in names)
    assert any(n.startswith("fig4") and n.endswith(".png") for n in names)
    csv = tmp_path / "tradeoff_curves.csv"
    assert csv.read_text().splitlines()[0].startswith("dataset,trained,k,layer,p_correct")
    assert (tmp_path / names[0]).read_bytes()[:4] == b"\x89PNG"


def test_tradeoff_out_is_an_existing_file_exits_2(tmp_path, capsys):
    target = tmp_path / "taken"
    target.write_text("")
    with pytest.raises(SystemExit) as exc:
        main(["tradeoff", "--out", str(target)])
    assert exc.value.code == 2 and "--out: must be a folder" in capsys.readouterr().err


def test_tradeoff_default_out_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["tradeoff"]) == 0
    assert (tmp_path / "ppd-out" / "tradeoff_curves.csv").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["latency", "--p", "1.5"], "--p: must be a number in [0, 1]"),
        (["latency", "--p", "0.5", "--d-bar", "10"], "outside Theorem 4.1's domain"),
        (["compute", "--p", "0.5", "--k", "0"], "--k: must be an integer in [1, 2**53]"),
        (["tradeoff", "--layer", "10"], "outside Theorem 4.1's domain"),
        (["latency"], "give --p"),
        (["latency", "--paper-positions", "squad:x:Y:20"], "must look like squad:3:Y:20"),
        (["latency", "--paper-positions", "squad:3:Y:20", "--ell", "17"], "ell must be in [2, 16]"),
        (["latency", "--paper-positions", "wmt:3:Y:20", "--ell", "1"], "ell must be in [2, 128]"),
    ],
)
def test_bad_input_exits_2(argv, message, capsys, tmp_path):
    if argv[0] == "tradeoff":
        argv = [*argv, "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_python_dash_m_help():
    result = subprocess.run(
        [sys.executable, "-m", "ppdmodel", "latency", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "--d-bar" in result.stdout


# --- cost terms (DecodeCosts flags or a profile file) ---------------------------------------

COST_ARGV = ["--d", "30", "--d-bar", "15", "--ell", "64", "--p", "0.3", "--json"]
COST_ARGV += ["--layer-s", "0.002", "--early-head-s", "0.01", "--final-head-s", "0.011"]


def test_latency_with_cost_flags_prints_seconds_speedup_and_break_even(capsys):
    import ppdmodel

    argv = ["latency", *COST_ARGV, "--k", "1", "3", "--early-head", "main", "candidates"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["k"], r["early_head"]) for r in rows] == [
        (1, "main"), (1, "candidates"), (3, "main"), (3, "candidates")
    ]  # fmt: skip
    costs = ppdmodel.DecodeCosts(layer_s=0.002, early_head_s=0.01, final_head_s=0.011)
    for row in rows:
        shape = dict(d=30, d_bar=15, k=row["k"], costs=costs, early_head=row["early_head"])
        ppd = ppdmodel.expected_latency_seconds(ell=64, p=0.3, **shape) / 64
        assert row["ppd_s_per_token"] == pytest.approx(ppd)
        assert row["greedy_s_per_token"] == pytest.approx(30 * 0.002 + 0.011)
        assert row["speedup"] == pytest.approx(row["greedy_s_per_token"] / ppd)
        assert row["break_even_p"] == pytest.approx(ppdmodel.break_even_p(**shape))
        assert row["expected_latency"] == pytest.approx(30 * 64 - 15 * 63 * 0.3)  # unit model
    assert rows[0]["break_even_p"] == pytest.approx(0.01 / (15 * 0.002))  # h_e / (D L)
    assert rows[1]["break_even_p"] == 0.0  # nothing on main's path: PPD never loses


def test_compute_with_a_profile_file_and_waterfall(tmp_path, capsys):
    import ppdmodel
    from ppdmodel.cost_profile import parse_cost_profile
    from tests.ppdmodel.profiles import minimal_profile

    path = tmp_path / "profile.json"
    path.write_text(json.dumps(minimal_profile(d=30)))
    argv = ["compute", "--costs", str(path), "--p", "0.4", "--k", "3", "--waterfall", "--json"]
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["d"], row["d_bar"], row["backend"], row["priced_as"]) == (30, 15, "single", "main")
    costs = parse_cost_profile(minimal_profile(d=30)).costs("single", d_bar=15)
    split = ppdmodel.latency_waterfall(d=30, d_bar=15, k=3, p=0.4, ell=128, costs=costs)
    assert row["waterfall_s"] == pytest.approx(split.terms())
    assert sum(row["waterfall_s"].values()) == pytest.approx(row["ppd_s_per_token"])
    assert row["break_even_p"] is None or row["break_even_p"] >= 0  # null: unreachable
    argv = ["compute", "--costs", str(path), "--p", "0.4", "--k", "3", "--waterfall"]
    argv += ["--early-head-s", "0"]  # a flag overrides the profile's term
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "where PPD's time per token goes (ms)" in out and "+ sharing one device" in out
    assert "speed-up" in out and "break-even p" in out


def test_unit_cost_output_is_unchanged_without_cost_options(capsys):
    assert main(["latency", "--p", "0.5", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert "ppd_s_per_token" not in row and "k" not in row


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["latency", "--p", "0.3", "--k", "3"], "--k of ppd latency applies to the cost terms"),
        (
            ["latency", "--p", "0.3", "--seconds-per-layer", "1", "--layer-s", "1"],
            "give either --seconds-per-layer",
        ),
        (["latency", "--p", "0.3", "--shared-device-slowdown", "0.5"], "shared_device_slowdown"),
        (["latency", "--p", "0.3", "--layer-s", "0"], "DecodeCosts.layer_s"),
        (["latency", "--p", "0.3", "--backend", "dist"], "give --costs FILE too"),
        (["latency", "--p", "0.3", "--costs", "PROFILE", "--d", "12"], "does not match"),
        (["latency", "--p", "0.3", "--costs", "PROFILE", "--backend", "dist"], "--backend must"),
        (["latency", "--p", "0.3", "--costs", "BROKEN"], "backends.single.costs.host_s is"),
        (["latency", "--p", "0.3", "--costs", "MISSING"], "--costs: file not found"),
        (["compute", "--p", "0.3", "--early-head", "side"], None),
    ],
)
def test_bad_cost_input_exits_2(argv, message, tmp_path, capsys):
    from tests.ppdmodel.profiles import minimal_profile

    good, broken = tmp_path / "good.json", tmp_path / "broken.json"
    good.write_text(json.dumps(minimal_profile(d=30)))
    data = minimal_profile(d=30)
    del data["backends"]["single"]["costs"]["host_s"]
    broken.write_text(json.dumps(data))
    names = {"PROFILE": str(good), "BROKEN": str(broken), "MISSING": str(tmp_path / "no.json")}
    with pytest.raises(SystemExit) as exc:
        main([names.get(a, a) for a in argv])
    assert exc.value.code == 2
    if message:
        assert message in capsys.readouterr().err


def test_latency_with_a_profile_prints_its_intervals(capsys, tmp_path):
    from tests.ppdmodel.profiles import minimal_profile

    data = minimal_profile(d=30, serial=True)
    entry = data["backends"]["single"]
    entry["cost_replicates"] = [
        {"costs": {**entry["costs"], "layer_s": entry["costs"]["layer_s"] * f}}
        for f in (0.9, 0.95, 1.0, 1.05, 1.1)
    ]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    base = ["latency", "--d", "30", "--d-bar", "15", "--p", "0.5", "--costs", str(path), "--json"]
    assert main(base) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["ppd_s_low"] < row["ppd_s_per_token"] < row["ppd_s_high"]
    assert row["speedup_low"] <= row["speedup"] <= row["speedup_high"]
    assert main([*base, "--p-tokens", "20"]) == 0  # p's sampling error widens it
    (wider,) = json.loads(capsys.readouterr().out)
    assert wider["ppd_s_high"] - wider["ppd_s_low"] > row["ppd_s_high"] - row["ppd_s_low"]
    assert "the profile's cost replicates" in row["interval_covers"]
    del entry["cost_replicates"]  # an older profile: no samples, a stated spread stands in
    path.write_text(json.dumps(data))
    assert main(base) == 0
    (older,) = json.loads(capsys.readouterr().out)
    assert older["ppd_s_low"] < older["ppd_s_per_token"] < older["ppd_s_high"]
    assert "no replicates in the profile: +-10% stated" in older["interval_covers"]


# --- settings: one value per concern, checked on construction, passed whole -------------------


def test_the_model_grid_is_checked_on_construction():
    from ppdmodel.cli_settings import ModelGrid

    with pytest.raises(ValueError, match="give --p or --paper-positions, not both"):
        ModelGrid(p=[0.5], paper_positions="squad:3:Y:20")
    with pytest.raises(ValueError, match="give --p"):
        ModelGrid()
    with pytest.raises(ValueError, match="must look like squad:3:Y:20"):
        ModelGrid(paper_positions="squad:x:Y:20")
    with pytest.raises(ValueError, match="p: must be a number in"):
        ModelGrid(p=[1.5])
    with pytest.raises(ValueError, match="d: must be an integer"):
        ModelGrid(p=[0.5], d=[0])
    assert ModelGrid(p=[0.5], d=[30, 40]).d == (30, 40)


def test_the_workflows_take_the_settings_the_commands_build(capsys, tmp_path):
    """``latency_rows`` / ``compute_rows`` called from Python give the command's rows."""
    from ppdmodel.cli_costs import CostSettings
    from ppdmodel.cli_model import compute_rows, latency_rows
    from ppdmodel.cli_settings import LayerSeconds, ModelGrid

    assert main(["latency", "--p", "0.5", "--ell", "16", "--layer-s", "0.001", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    rows = latency_rows(ModelGrid(p=[0.5], ell=[16]), LayerSeconds(), CostSettings(layer_s=1e-3))
    assert json.loads(json.dumps(rows)) == expected
    assert main(["compute", "--p", "0.5", "--k", "1", "3", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert compute_rows(ModelGrid(p=[0.5], k=[1, 3]), CostSettings()) == expected
    with pytest.raises(ValueError, match="DecodeCosts.layer_s"):
        latency_rows(ModelGrid(p=[0.5]), LayerSeconds(), CostSettings(layer_s=0.0))
    with pytest.raises(ValueError, match="give either --seconds-per-layer"):
        latency_rows(
            ModelGrid(p=[0.5]), LayerSeconds(seconds_per_layer=1.0), CostSettings(host_s=0.0)
        )


def test_tradeoff_options_share_the_model_and_output_settings(tmp_path):
    from ppdmodel.cli_model import write_tradeoff
    from ppdmodel.cli_settings import ModelParameters, OutputSettings, TradeoffTable

    drawn = write_tradeoff(
        TradeoffTable(table="smollm2"), ModelParameters(), OutputSettings(out=str(tmp_path))
    )
    assert (drawn.layer, drawn.d) == (15, 30)
    assert drawn.paths["csv"] == tmp_path / "tradeoff_curves.csv" and drawn.paths["csv"].exists()
    with pytest.raises(ValueError, match="table must be one of paper, smollm2"):
        TradeoffTable(table="other")
