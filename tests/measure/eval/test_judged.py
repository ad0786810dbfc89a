"""One result type for every judged method: its error, speed-ups, row and verdict come from its
own seconds and its prediction, whatever the method."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from measure.eval.judged import JudgedResult, Quality
from measure.eval.predict import Prediction
from measure.profile.stats import Spread

COLUMNS = ("method", "backend", "tokens", "p_hat", "predicted_s", "simulated_s", "iid_s",
           "rel_err", "exact", "quality_rouge_l", "exit_layer")  # fmt: skip


@dataclass(frozen=True)
class _Config:
    label: str = "m"


def _judged(simulated_s=1.9, **kw) -> JudgedResult:
    predicted = Prediction(2.2, simulated_s, 10, 0, None, term_seconds=dict(draft_s=0.1,
                           verify_s=0.12), iid_s=2.1, rate=0.5)  # fmt: skip
    greedy = Prediction(3.3, 3.3, 10, 0, None)
    return JudgedResult(_Config(), Spread.of([2.0]), predicted, Spread.of([3.0]), greedy, True,
                        **kw)  # fmt: skip


def test_derived_figures_follow_their_formulas():
    judged = _judged()
    assert judged.rel_err == pytest.approx(0.1)
    assert judged.simulated_rel_err == pytest.approx(-0.05)
    assert judged.iid_rel_err == pytest.approx(0.05)
    assert judged.speedup_measured == pytest.approx(1.5)
    assert judged.speedup_predicted == pytest.approx(1.5)
    assert judged.speedup_band is None  # no cost replicates
    assert math.isnan(_judged(simulated_s=math.nan).simulated_rel_err)  # no schedule


def test_a_judged_result_fills_its_row_and_verdict():
    o = _judged(columns=dict(p_hat=0.5, other=1), lines=("a line",), notes=("a note",))
    row = o.table_row(COLUMNS)
    assert set(row) == set(COLUMNS) and row["p_hat"] == 0.5 and row["tokens"] == 10
    assert row["rel_err"] == pytest.approx(0.1) and row["method"] == "m"
    assert row["iid_s"] == 2.1 and row["exit_layer"] is None and row["quality_rouge_l"] is None
    assert o.verdict().startswith("m: 1.5x faster than greedy")
    assert "verify forwards" in o.verdict() and o.verdict().endswith("; a note")
    assert o.report_lines() == ["a line"] and not o.approximate
    assert [r["term"] for r in o.waterfall_rows()] == ["draft_s", "verify_s", "measured"]


def test_an_approximate_result_carries_its_quality():
    o = _judged(quality=Quality(agreement=0.75, rouge_l=0.5), method_name="FREE")
    assert o.approximate and o.table_row(COLUMNS)["quality_rouge_l"] == 0.5
    assert o.verdict().endswith("quality vs greedy: tokens 0.750, ROUGE-L 0.500 (approximate)")
    assert "of FREE's time" in o.verdict()
