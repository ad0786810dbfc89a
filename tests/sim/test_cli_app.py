"""``ppd app``: the command without Streamlit, and the page model (``sim.cli_app_view``): its
figures equal ``sim.plan``'s for the same inputs, and ``ppd plan`` run with the command the page
shows prints the same decision; bad input is an InputError naming the page's field."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ppdmodel.cli import main
from sim import cli_app
from sim.cli_app_view import (
    P_GRID,
    WHAT_IF_WORKLOAD,
    InputError,
    PageInputs,
    command_line,
    page_view,
    plan_argv,
)
from sim.engine import regime_table
from sim.plan_summary import summary_lines
from sim.preset_error import evidence_rows, preset_error
from tests.sim.app_reference import reference_hardware, reference_plan

SMALL = dict(shape="vicuna-13b", gpu="a100-80gb", devices=2, engine="hf-eager",
             workload="SQuAD", draws=4)  # fmt: skip
"""Inputs small enough for a unit test (a 40-layer model on two devices, 4 draws)."""


@pytest.fixture(scope="module")
def small_view(tmp_path_factory):
    return page_view(PageInputs(**SMALL), tmp_path_factory.mktemp("app"))


@pytest.fixture(scope="module")
def small_plan():
    return reference_plan(**SMALL)


def test_the_parser_and_app_help_import_no_streamlit():
    code = (
        "import sys; from ppdmodel.cli import build_parser; build_parser(); "
        "assert 'streamlit' not in sys.modules, 'the parser imported streamlit'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    done = subprocess.run([sys.executable, "-m", "ppdmodel", "app", "--help"], check=True,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "what-if page" in done.stdout and '".[app]"' in done.stdout


def test_without_streamlit_ppd_app_names_the_extra(monkeypatch, capsys):
    real = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "streamlit" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(SystemExit) as exc:
        main(["app"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.strip() == ('ppd app: error: this command needs streamlit, which is not '
                           'installed: pip install -e ".[app]"')  # fmt: skip


def test_the_server_is_local_headless_and_sends_nothing():
    command = cli_app.streamlit_command("127.0.0.1", 8600)
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4] == str(cli_app.PAGE)
    for flag in ("--server.address=127.0.0.1", "--server.port=8600", "--server.headless=true",
                 "--browser.gatherUsageStats=false", "--client.showErrorDetails=none"):  # fmt: skip
        assert flag in command


@pytest.mark.parametrize("argv", [["--port", "0"], ["--port", "70000"], ["--address", "a b"]])
def test_bad_port_or_address_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["app", *argv])
    assert exc.value.code == 2 and "ppd app: error: argument --" in capsys.readouterr().err


def test_the_page_decision_equals_sim_plans(small_view, small_plan):
    """One model of everything: the summary, the decisions and every frontier point."""
    assert small_view.summary == summary_lines(small_plan)
    for workload, mine in small_view.plan.decisions.items():
        assert mine.to_dict() == small_plan.decisions[workload].to_dict()
    theirs = small_plan.frontier[small_view.pareto.columns].reset_index(drop=True)
    pd.testing.assert_frame_equal(small_view.pareto, theirs)
    assert list(small_view.sources)[: len(small_plan.uncertainty.notes)] == list(
        small_plan.uncertainty.notes.items())  # fmt: skip


def test_regimes_and_evidence_are_the_presets(small_view):
    hardware = reference_hardware(shape="vicuna-13b", gpu="a100-80gb", devices=2,
                                  engine="hf-eager")  # fmt: skip
    pd.testing.assert_frame_equal(small_view.regimes, regime_table(hardware))
    pd.testing.assert_frame_equal(small_view.evidence, evidence_rows("hf-eager", "a100-80gb"))
    assert small_view.preset == preset_error("hf-eager", "a100-80gb").describe()


def test_the_waterfall_sums_to_the_planned_latency(small_view, small_plan):
    for workload, terms in small_view.waterfall.groupby("workload"):
        decision = small_plan.decisions[workload]
        row = small_plan.screened.loc[decision.ppd_row]
        assert terms.seconds.sum() == pytest.approx(row.latency_s, rel=1e-9)
        assert terms.end.iloc[-1] == pytest.approx(row.latency_s, rel=1e-9)
        assert terms.term.iloc[0] == "ideal_s" and (terms.config == decision.ppd).all()


def test_speedup_against_p_crosses_the_alternative_at_the_break_even(small_view, small_plan):
    for workload, curve in small_view.p_curve.groupby("workload"):
        decision = small_plan.decisions[workload]
        row = small_plan.frontier.set_index("config").speedup
        at = np.interp(decision.assumed_p, curve.p, curve.ppd_speedup)
        base = small_plan.screened.loc[decision.ppd_row]
        rows = small_plan.screened
        greedy = rows[(rows.method == "greedy") & (rows.tp_main == 1)].latency_s.min()
        assert at == pytest.approx(greedy / base.latency_s, rel=1e-3)
        if 0 < decision.break_even_p < 1:
            # 1 / speed-up is linear in p: the gap in it, interpolated, crosses 0 exactly
            gap = 1 / curve.alternative_speedup - 1 / curve.ppd_speedup
            crossing = np.interp(0.0, gap, curve.p)  # the gap rises with p
            assert crossing == pytest.approx(decision.break_even_p, abs=1e-6)
        if decision.beats in row.index:
            assert curve.alternative_speedup.iloc[0] == pytest.approx(row[decision.beats])
        assert np.allclose(curve.p, P_GRID)


def test_ppd_plan_with_the_shown_command_prints_the_same_decision(small_view, tmp_path,
                                                                  capsys):  # fmt: skip
    argv = small_view.argv[:-1] + [str(tmp_path / "plan")]  # --out last
    assert command_line(small_view.argv).startswith("ppd plan --shape vicuna-13b --gpu a100-80gb")
    assert main(["plan", *argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"] == small_view.summary
    mine = {w: d.to_dict() for w, d in small_view.plan.decisions.items()}
    assert json.loads(json.dumps(mine)) == report["decisions"]


def test_a_p_set_by_hand_is_this_models_own_p(tmp_path):
    view = page_view(PageInputs(**{**SMALL, "workload": None}, p=0.8), tmp_path)
    decision = view.plan.decisions[WHAT_IF_WORKLOAD]
    assert decision.assumed_p == pytest.approx(0.8) and decision.k == 1
    table = next(a for a in view.argv if a.endswith(".csv"))
    shown = command_line(view.argv, {table: "p-what-if.csv"})
    assert "--table p-what-if.csv" in shown
    rows = pd.read_csv(table)
    assert set(rows.model) == {"vicuna-13b"} and set(rows.d) == {40}
    assert (rows.p_correct[rows.layer >= 20] == 0.8).all()
    assert (rows.p_correct[rows.layer < 20] == 0).all()
    assert "borrowed" not in dict(view.sources)["p"]


def test_the_command_carries_every_input():
    inputs = PageInputs(config="c.json", gpu="h200", link="pcie5-x16", devices=4,
                        engine="torch-compiled", host_us=30.0, launch_us=5.0, table="smollm2",
                        heads=("shared",), min_quality=0.9, draws=24)  # fmt: skip
    argv = plan_argv(inputs)
    assert command_line(argv) == (
        "ppd plan --config c.json --gpu h200 --link pcie5-x16 --devices 4 --engine "
        "torch-compiled --launch-us 5 --host-us 30 --table smollm2 --head shared "
        "--min-quality 0.9 --draws 24 --confirm-n 0 --context-len 1024 --out ppd-out/plan"
    )


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({"model_type": "llama", "hidden_size": 64}, "model config.json", "num_attention_heads"),
        (
            dict(num_hidden_layers=4, hidden_size=-5, num_attention_heads=4, vocab_size=100),
            "model config.json",
            "hidden_size",
        ),
        ("{not json", "model config.json", "not valid JSON"),
    ],
)
def test_a_bad_config_names_the_field(config, field, words, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(InputError) as exc:
        page_view(PageInputs(config=str(path), draws=4, devices=2), tmp_path)
    assert exc.value.field == field and words in str(exc.value)


def test_a_file_that_is_no_table_names_the_p_table(tmp_path):
    path = tmp_path / "rates.csv"
    path.write_bytes(b"\x00\x01 this is no table")
    with pytest.raises(InputError) as exc:
        page_view(PageInputs(table=str(path), table_d=40, draws=4, devices=2), tmp_path)
    assert exc.value.field == "p-table"
    with pytest.raises(InputError) as exc:
        page_view(PageInputs(table=str(tmp_path / "missing.csv"), draws=4, devices=2), tmp_path)
    assert exc.value.field == "p-table" and "no such file" in str(exc.value)


def test_a_workload_the_table_lacks_is_named(tmp_path):
    with pytest.raises(InputError) as exc:
        page_view(PageInputs(workload="poetry", draws=4, devices=2), tmp_path)
    assert exc.value.field == "workload" and "SQuAD" in str(exc.value)
