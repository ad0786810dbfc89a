"""FREE in the planner: the FREE table format, its rows, the quality column and min_quality."""

import numpy as np
import pandas as pd
import pytest

from ppdmodel.alternatives import EXACT_QUALITY, free_compute_per_token, free_seconds_per_token
from sim.formats import FREE_TABLE_COLUMNS, read_free_table, write_free_table
from sim.hardware import GPUSpec, Link
from sim.hardware_costs import ProfileHardware, RooflineHardware
from sim.plan import pareto_front, plan
from sim.plan_free import plan_free_costs
from sim.plan_grid import PlanSpace, screen
from sim.ptable import PTable
from sim.shape import ModelShape

SHAPE = ModelShape.from_name("vicuna-13b")
HW = [
    RooflineHardware(SHAPE, GPUSpec.from_name("h100-sxm"), Link.from_name("nvlink4"), host_s=2e-5)
]
TABLE = pd.DataFrame({
    "exit_layer": [20, 20, 30], "threshold": [0.5, 0.9, 1.01], "exit_rate": [0.8, 0.4, 0.0],
    "quality": [0.3, 0.6, 1.0], "quality_metric": "rouge_l_vs_greedy",
})  # fmt: skip
SPACE = PlanSpace(
    max_devices=2, d_bars=(20, 30), ks=(1, 3), workloads=("SQuAD", "WMT"), draft_lengths=(1, 3),
    exit_layers=(10, 20), free_table=TABLE,
)  # fmt: skip


def test_free_table_round_trip_and_defaults(tmp_path):
    path = write_free_table(tmp_path / "free_table.csv", TABLE)
    table = read_free_table(path)
    assert list(table.columns[:4]) == list(FREE_TABLE_COLUMNS)
    assert table.exit_layer.dtype.kind == "i" and list(table.quality) == [0.3, 0.6, 1.0]
    assert set(table["head"]) == {"shared"} and set(table["mode"]) == {"sync"}
    assert set(table.workload) == {""}


@pytest.mark.parametrize(
    "text,message",
    [
        ("exit_layer,threshold,exit_rate\n20,0.5,0.8\n", "missing columns"),
        ("exit_layer,threshold,exit_rate,quality\n", "no rows"),
        ("exit_layer,threshold,exit_rate,quality\n20.5,0.5,0.8,0.3\n", "exit_layer"),
        ("exit_layer,threshold,exit_rate,quality\n0,0.5,0.8,0.3\n", "exit_layer"),
        ("exit_layer,threshold,exit_rate,quality\n20,0.5,1.8,0.3\n", "exit_rate"),
        ("exit_layer,threshold,exit_rate,quality\n20,0.5,0.8,high\n", "quality"),
        ("exit_layer,threshold,exit_rate,quality\n20,0.5,0.8,\n", "quality"),
        ("exit_layer,threshold,exit_rate,quality\n20,-1,0.8,0.3\n", "threshold"),
    ],
)
def test_malformed_free_tables_are_refused_naming_the_column(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_free_table(path)


@pytest.fixture(scope="module")
def screened():
    return screen(HW, PTable.paper(), SPACE, 40)


def test_every_exact_method_has_quality_one_and_free_the_tables(screened):
    exact = screened[screened.method != "free"]
    assert set(exact.method) == {"ppd", "greedy", "early-exit"}
    assert (exact.quality == EXACT_QUALITY).all()
    free = screened[screened.method == "free"]
    # 3 table rows x TP 1, 2 x 2 workloads (a row without a workload applies to every one)
    assert len(free) == 12 and sorted(set(free.quality)) == [0.3, 0.6, 1.0]
    assert set(free.workload) == {"SQuAD", "WMT"}


def test_free_rows_equal_the_alternatives_closed_form(screened):
    """Screened FREE rows are ppdmodel.alternatives at the table's exit rate (tp devices)."""
    for row in screened[screened.method == "free"].itertuples():
        costs = plan_free_costs(HW[0], tp=row.tp_main, head=row.head_kind)
        kw = dict(d=40, exit_layer=row.exit_layer, q=row.exit_rate, ell=SPACE.ell, costs=costs)
        assert row.latency_s == pytest.approx(free_seconds_per_token(**kw), rel=1e-12)
        assert row.compute_s == pytest.approx(row.tp_main * free_compute_per_token(**kw))


def test_without_a_table_free_is_left_out_and_quality_is_one():
    no_free = screen(HW, PTable.paper(), PlanSpace(max_devices=2, d_bars=(20,), ks=(1,),
                                                   workloads=("SQuAD",)), 40)  # fmt: skip
    assert "free" not in set(no_free.method) and (no_free.quality == 1.0).all()


def test_profile_hardware_prices_free_as_validate_does():
    """A measured profile: FREE's costs keep the profile's own k-row knots (linear beyond)."""
    from ppdmodel import DecodeCosts

    base = DecodeCosts(layer_s=1e-3, candidate_layer_s_by_k={2: 1.2e-3, 4: 1.5e-3},
                       early_head_s=5e-3, final_head_s=5e-3)  # fmt: skip
    hw = ProfileHardware(base, ModelShape.from_name("smollm2-135m"))
    costs = plan_free_costs(hw, tp=1, head="shared")
    assert costs.candidate_layer_s_by_k == base.candidate_layer_s_by_k


@pytest.mark.parametrize("min_quality", [1.0, 0.5, 0.0])
def test_min_quality_filters_the_recommendation(min_quality):
    result = plan(HW, PTable.paper(), SPACE, d=40, confirm_n=4, min_quality=min_quality)
    front = result.frontier
    assert "quality" in front and (front.method == "free").any()  # FREE is always shown
    rec = front[front.recommended]
    assert len(rec) == 2 and (rec.quality >= min_quality).all()
    assert (front[front.pareto].quality >= min_quality).all()
    assert (result.by_devices.quality >= min_quality).all()
    free = front[front.method == "free"]
    assert free.agrees.all()  # the closed form within the simulation's error
    if min_quality == 1.0:  # exact methods only: FREE shown, never recommended
        assert set(rec.method) <= {"ppd", "greedy", "early-exit"}
        shown = result.by_devices[result.by_devices.method == "free"]
        assert set(shown.threshold) == {1.01}  # quality 1.0: never exits, so allowed
    if min_quality == 0.0:  # threshold 0.5 exits 80 % of the tokens: the fastest here
        assert set(rec.method) == {"free"} and set(rec.threshold) == {0.5}
        assert "approximate: quality 0.300" in result.recommendations["SQuAD"]


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_bad_min_quality_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="min_quality"):
        plan(HW, PTable.paper(), SPACE, d=40, confirm_n=0, min_quality=bad)


def test_free_exit_layer_beyond_the_model_is_refused():
    deep = TABLE.assign(exit_layer=[20, 40, 30])
    space = PlanSpace(max_devices=1, d_bars=(20,), ks=(1,), workloads=("SQuAD",), free_table=deep)
    with pytest.raises(ValueError, match="exit_layer 40"):
        screen(HW, PTable.paper(), space, 40)


def test_three_axis_pareto_keeps_a_slower_point_of_higher_quality():
    lat, comp, qual = np.array([1.0, 2.0, 2.0, 1.0]), np.ones(4), np.array([0.3, 0.6, 0.5, 0.3])
    assert list(pareto_front(lat, comp, qual)) == [True, True, False, False]
    rng = np.random.default_rng(0)
    for _ in range(20):
        lat, comp, qual = rng.random(30), rng.random(30), rng.random(30)
        front = pareto_front(lat, comp, qual)
        for i in np.flatnonzero(front):
            better = (lat <= lat[i]) & (comp <= comp[i]) & (qual >= qual[i])
            strictly = (lat < lat[i]) | (comp < comp[i]) | (qual > qual[i])
            assert not np.any(better & strictly)
