"""Every judged method's error and speed-ups come from one base, from its own seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from measure.eval.early_exit import EarlyExitOutcome
from measure.eval.free_eval import FreeOutcome
from measure.eval.judged import JudgedResult
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


@pytest.mark.parametrize("result", [ConfigResult, FreeOutcome, EarlyExitOutcome])
def test_every_judged_result_shares_the_base(result):
    assert issubclass(result, JudgedResult)
    for name in ("rel_err", "simulated_rel_err", "speedup_measured", "speedup_predicted"):
        assert getattr(result, name) is getattr(JudgedResult, name)  # not redefined


def test_early_exit_has_no_simulated_error():
    assert math.isnan(EarlyExitOutcome.simulated_s)
