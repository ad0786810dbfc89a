"""Which kind of pass is off: fresh and resumed passes against the closed form's times."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from measure.eval.pass_check import describe_passes, pass_check, pass_seconds, predicted_pass_s
from measure.eval.repeat import PPDConfig
from ppdmodel.cost_profile import parse_cost_profile
from ppdmodel.passes import pass_times
from tests.ppdmodel.profiles import minimal_profile

D, D_BAR = 4, 3
PROFILE = parse_cost_profile(
    minimal_profile(d=D, layer_s=0.01, embedding_s=0.0, early_head_s=0.02, final_head_s=0.02,
                    host_s=0.001, candidate_layer_s_by_k={"1": 0.0121, "3": 0.02})
)  # fmt: skip


def _run(token_times, m):
    return SimpleNamespace(tokens=list(range(len(token_times))), token_times_s=token_times, m=m)


def test_passes_are_split_by_kind_and_the_last_is_left_out():
    # passes 1..5 last 10, 20, 30, 40, 50 ms; m_t for t = 2..5: pass 2 and 4 follow a match
    run = _run([0.010, 0.030, 0.060, 0.100, 0.150], [1, 0, 1, 1])
    got = pass_seconds(run)
    assert got["fresh"] == pytest.approx([0.010, 0.030])  # pass 1 (first) and 3 (after a miss)
    assert got["resumed"] == pytest.approx([0.020, 0.040])  # pass 5, the last, left out
    with pytest.raises(ValueError, match=r"run.m must hold 4 outcomes"):
        pass_seconds(_run([0.010, 0.030, 0.060, 0.100, 0.150], [1, 0]))


@pytest.mark.parametrize("early_head", ["main", "candidates"])
def test_each_kind_is_priced_as_the_closed_form_prices_its_passes(early_head):
    config = PPDConfig(D_BAR, 3, early_head)
    costs = PROFILE.costs("single", d_bar=D_BAR, k=3, early_head=early_head)
    times = pass_times(d=D, d_bar=D_BAR, k=3, costs=costs, early_head=early_head)
    got = predicted_pass_s(PROFILE, config)
    assert got["fresh"] == pytest.approx(float(times.miss_only_s))  # B = P_f + E_m + tau
    # a match saves S = P_f - P_r - w - eta on the pass after it
    assert got["resumed"] == pytest.approx(float(times.miss_only_s - times.saving_s))


def test_the_gaps_add_up_to_the_runs_gap_per_token():
    config = PPDConfig(D_BAR, 1)
    price = predicted_pass_s(PROFILE, config)
    fresh, resumed = 1.2 * price["fresh"], 0.9 * price["resumed"]
    # passes: fresh, resumed, fresh, (last, left out); tokens 4 + 4 over two runs
    times = [fresh, fresh + resumed, 2 * fresh + resumed, 3 * fresh + resumed]
    runs = [_run(times, [1, 0, 0]), _run(times, [1, 0, 0])]
    table = pass_check(PROFILE, config, runs).set_index("pass")
    assert table.loc["fresh", "count"] == 4 and table.loc["resumed", "count"] == 2
    assert table.loc["fresh", "ratio"] == pytest.approx(1.2)
    assert table.loc["resumed", "ratio"] == pytest.approx(0.9)
    gap = (4 * 0.2 * price["fresh"] - 2 * 0.1 * price["resumed"]) / 8
    assert table["gap_s_per_token"].sum() == pytest.approx(gap)
    line = describe_passes(table.reset_index())
    assert line.startswith("fresh x1.20 (+") and "4 passes), resumed x0.90 (-" in line


def test_a_run_without_a_match_has_no_resumed_row():
    config = PPDConfig(D_BAR, 1)
    table = pass_check(PROFILE, config, [_run([0.05, 0.10, 0.15], [0, 0])])
    assert table["pass"].tolist() == ["fresh"] and table["count"].tolist() == [2]
