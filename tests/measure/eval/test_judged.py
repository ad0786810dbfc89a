"""Every judged method's error and speed-ups come from one base, from its own seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from measure.eval.early_exit import EarlyExitOutcome
from measure.eval.free_eval import FreeOutcome
from measure.eval.judged import JudgedResult, MethodOutcome
from measure.eval.validate import ConfigResult
from measure.profile.stats import Spread


@dataclass(frozen=True)
class Judged(JudgedResult):
    measured: Spread
    greedy_measured: Spread
    predicted_s: float
    simulated_s: float
    greedy_predicted_s: float


def test_derived_figures_follow_their_formulas():
    judged = Judged(Spread.of([2.0]), Spread.of([3.0]), 2.2, 1.9, 3.3)
    assert judged.rel_err == pytest.approx(0.1)
    assert judged.simulated_rel_err == pytest.approx(-0.05)
    assert judged.speedup_measured == pytest.approx(1.5)
    assert judged.speedup_predicted == pytest.approx(1.5)


@pytest.mark.parametrize("result", [ConfigResult, FreeOutcome, EarlyExitOutcome, MethodOutcome])
def test_every_judged_result_shares_the_base(result):
    assert issubclass(result, JudgedResult)
    for name in ("rel_err", "simulated_rel_err", "speedup_measured", "speedup_predicted"):
        assert getattr(result, name) is getattr(JudgedResult, name)  # not redefined


def test_early_exit_has_no_simulated_error():
    assert math.isnan(EarlyExitOutcome.simulated_s)


def test_a_method_outcome_fills_its_row_and_verdict():
    columns = ("method", "tokens", "p_hat", "rel_err", "exact", "iid_s")
    o = MethodOutcome(_Config(), Spread.of([2.0]), Spread.of([3.0]), 2.2, 3.3, True, 10,
                      columns=dict(p_hat=0.5, iid_s=2.1, other=1), term_seconds=dict(draft_s=0.1,
                      verify_s=0.12), lines=("a line",))  # fmt: skip
    row = o.table_row(columns)
    assert set(row) == set(columns) and row["p_hat"] == 0.5 and row["tokens"] == 10
    assert row["rel_err"] == pytest.approx(0.1) and row["method"] == "m"
    assert o.verdict().startswith("m: 1.5x faster than greedy")
    assert "verify forwards" in o.verdict() and o.report_lines() == ["a line"]


@dataclass(frozen=True)
class _Config:
    label: str = "m"
