"""The what-if page under Streamlit's AppTest (no browser): what it shows is what ``sim.plan``
says for the same inputs; a bad input is a message naming the field, and the page stays
usable. Skipped without the app extra."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sim import cli_app
from sim.plan_summary import summary_lines
from tests.sim.app_reference import reference_plan

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

TIMEOUT_S = 180
"""Seconds one page run may take (a plan is a few seconds on a loaded 2-core machine)."""


@pytest.fixture
def page():
    at = AppTest.from_file(str(cli_app.PAGE), default_timeout=TIMEOUT_S)
    return at.run()


def decision(at) -> list[str]:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]
    return at.code[0].value.splitlines()


def chart_data(at, index: int = 0):
    """The first layer's data of the page's ``index``-th chart, as a DataFrame."""
    proto = at.get("vega_lite_chart")[index].proto
    return pa.ipc.open_stream(proto.datasets[0].data.data).read_all().to_pandas()


def test_the_page_shows_what_sim_plan_says(page):
    expected = reference_plan()
    assert decision(page) == summary_lines(expected)
    command = [c.value for c in page.code if c.value.startswith("ppd plan ")]
    assert command and "--shape vicuna-13b --gpu h100-sxm" in command[0]
    front = expected.frontier
    shown = chart_data(page, 0)  # the Pareto chart: every method's frontier
    assert sorted(shown.speedup.round(12)) == sorted(front.speedup.round(12))
    best = front[front.recommended].iloc[0]
    assert any(f"recommended {best.config}, {best.speedup:.3f}x" in c.value for c in page.caption)
    assert len(page.get("vega_lite_chart")) == 3  # Pareto, against p, waterfall


def test_changing_gpu_and_devices_follows_sim_plan(page):
    before = decision(page)
    page.selectbox(key="gpu").select("a100-80gb").run()
    page.number_input(key="devices").set_value(2).run()
    after = decision(page)
    assert after == summary_lines(reference_plan(gpu="a100-80gb", devices=2))
    assert after != before


def test_a_bad_config_is_named_and_the_page_stays_usable(page, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    page.radio(key="model_from").set_value("local folder or config.json path").run()
    page.text_input(key="config_path").input(str(bad)).run()
    assert not page.exception
    assert [e.value for e in page.error] == [
        "model config.json: config: none of ['num_attention_heads', 'n_head', 'num_heads'] "
        "found (not a decoder-only model config?)"
    ]
    page.radio(key="model_from").set_value("shape preset").run()
    assert decision(page) == summary_lines(reference_plan())


def test_a_file_that_is_no_table_is_named(page, tmp_path):
    bad = tmp_path / "rates.csv"
    bad.write_bytes(b"\x00\x01\x02 no table here")
    page.selectbox(key="table_kind").select("local folder or file path").run()
    page.text_input(key="table_path").input(str(bad)).run()
    assert not page.exception
    assert len(page.error) == 1 and page.error[0].value.startswith("p-table: ")


def test_a_p_set_by_hand_plans_the_what_if_workload(page):
    page.radio(key="p_from").set_value("set p by hand").run()
    page.slider(key="p").set_value(0.9).run()
    lines = decision(page)
    assert lines[1].startswith("what-if: ") and "p assumed 0.90" in "\n".join(lines)


def test_an_unexpected_failure_is_one_line_and_the_command(monkeypatch):
    import streamlit as st

    import sim.cli_app_view

    def broken(inputs, folder):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(sim.cli_app_view, "page_view", broken)
    st.cache_resource.clear()
    at = AppTest.from_file(str(cli_app.PAGE), default_timeout=TIMEOUT_S).run()
    st.cache_resource.clear()  # no broken view kept for the tests after this one
    assert not at.exception
    assert [e.value for e in at.error] == [
        "unexpected failure (RuntimeError): boom; this command with --debug shows where:"
    ]
    assert at.code[0].value.startswith("ppd plan --shape vicuna-13b")
