"""The planner: screening equals the one-configuration path, Pareto sets, confirmation."""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest

import ppdmodel
from ppdmodel.alternatives import early_exit_seconds_per_token
from ppdmodel.compute_seconds import expected_compute_seconds
from sim.hardware import GPUSpec, Link
from sim.hardware_costs import RooflineHardware, decode_costs, early_head_cost, greedy_costs
from sim.plan import best_by_devices, pareto_front, plan
from sim.plan_grid import DraftModel, PlanSpace, screen
from sim.ptable import PTable
from sim.shape import ModelShape

SHAPE = ModelShape.from_name("vicuna-13b")
HW = [
    RooflineHardware(SHAPE, GPUSpec.from_name("h100-sxm"), Link.from_name("nvlink4"), host_s=2e-5)
]
SMALL = PlanSpace(
    max_devices=4,
    d_bars=(20, 30, 35),
    ks=(1, 3),
    workloads=("SQuAD", "WMT"),
    draft_lengths=(1, 3),
    exit_layers=(10, 20, 30),
    draft_model=DraftModel(0.6, 0.05),
)


@pytest.fixture(scope="module")
def screened():
    return screen(HW, PTable.paper(), SMALL, 40)


def test_pareto_front_properties():
    rng = np.random.default_rng(0)
    for _ in range(50):
        lat, comp = rng.random(40), rng.random(40)
        front = pareto_front(lat, comp)
        for i in np.flatnonzero(front):  # no frontier point is dominated
            assert not np.any(
                (lat <= lat[i]) & (comp <= comp[i]) & ((lat < lat[i]) | (comp < comp[i]))
            )
        for i in np.flatnonzero(~front):  # every other point is (weakly) dominated
            assert np.any(front & (lat <= lat[i]) & (comp <= comp[i]))


def test_screen_rows_equal_the_one_configuration_path(screened):
    rng = np.random.default_rng(1)
    hw, ell = HW[0], SMALL.ell
    ppd = screened[screened.method == "ppd"]
    for row in ppd.iloc[rng.choice(len(ppd), 40, replace=False)].itertuples():
        shared = row.tp_candidates == 0
        costs = decode_costs(
            hw,
            d_bar=row.d_bar,
            k=row.k,
            early_head=row.early_head,
            head=row.head_kind,
            tp_main=row.tp_main,
            tp_candidates=None if shared else row.tp_candidates,
        )
        args = dict(
            d=40, d_bar=row.d_bar, ell=ell, p=row.p, k=row.k, costs=costs, early_head=row.early_head
        )
        assert row.latency_s == pytest.approx(ppdmodel.expected_latency_seconds(**args) / ell)
        compute = expected_compute_seconds(
            **args,
            devices_main=row.tp_main,
            devices_candidates=row.tp_main if shared else row.tp_candidates,
        )
        assert row.compute_s == pytest.approx(compute / ell)
        be = ppdmodel.break_even_p(
            d=40, d_bar=row.d_bar, k=row.k, costs=costs, early_head=row.early_head
        )
        assert row.break_even_p == pytest.approx(be)
    for row in screened[screened.method == "greedy"].itertuples():
        costs = greedy_costs(hw, tp=row.tp_main)
        assert row.latency_s == pytest.approx(costs.greedy_token_seconds(40))
    exits = screened[screened.method == "early-exit"]
    for row in exits.iloc[rng.choice(len(exits), 20, replace=False)].itertuples():
        costs = greedy_costs(hw, tp=row.tp_main)
        costs = replace(
            costs,
            early_head_s=float(early_head_cost(hw, row.tp_main, row.head_kind)),
            candidate_layer_s_by_k={row.g + 1: float(hw.layer_seconds(row.tp_main, row.g + 1))},
        )
        expected = early_exit_seconds_per_token(
            d=40,
            exit_layer=row.exit_layer,
            g=row.g,
            a=row.p,
            costs=costs,
            reuse_draft_layers=row.reuse,
        )
        assert row.latency_s == pytest.approx(expected)


def test_screen_covers_the_space_and_respects_devices(screened):
    assert set(screened.method) == {"ppd", "greedy", "early-exit", "draft-model"}
    assert screened.devices.max() <= 4
    ppd = screened[screened.method == "ppd"]
    # (tp_main, tp_candidates) within 4 devices: (1,0) (1,1) (1,2) (2,0) (2,1) (2,2) (4,0) = 7
    assert len(ppd) == 7 * 3 * 2 * 2 * 2 * 2  # pairs, d_bar, k, placement, head, workload


def test_plan_confirms_the_frontier_and_recommends_one_per_workload():
    result = plan(
        HW, PTable.paper(), SMALL, d=40, confirm_n=12, executor=ThreadPoolExecutor(1), seed=0
    )
    front = result.frontier
    assert front.agrees.all(), front[~front.agrees]
    assert result.n_screened > len(front) > 0
    assert front.groupby("workload").recommended.sum().tolist() == [1, 1]
    for workload, rows in front.groupby("workload"):
        rec = rows[rows.recommended].iloc[0]
        assert rec.latency_s == rows.latency_s.min()
        assert workload in result.recommendations
        assert "ms/token" in result.recommendations[workload]


def test_best_by_devices_marks_the_fastest_method_per_budget(screened):
    table = best_by_devices(screened)
    assert table.groupby(["workload", "budget"]).wins.sum().eq(1).all()
    assert (table.devices <= table.budget).all()
    one = table[(table.budget == 1) & (table.method == "greedy")]
    assert np.allclose(one.speedup, 1.0)
    for _, wins in table[table.wins].groupby("workload"):
        assert wins.sort_values("budget").speedup.is_monotonic_increasing


def test_compute_budget_and_single_device():
    result = plan(HW, PTable.paper(), SMALL, d=40, max_compute=1.0, confirm_n=0)
    assert (result.frontier.compute_ratio <= 1 + 1e-9).all()
    one = plan(
        HW,
        PTable.paper(),
        PlanSpace(max_devices=1, d_bars=(20, 30), ks=(1,), workloads=("SQuAD",)),
        d=40,
        confirm_n=0,
    )
    assert (one.frontier.devices == 1).all()


def test_plan_errors():
    with pytest.raises(ValueError, match="max_compute"):
        plan(HW, PTable.paper(), SMALL, d=40, max_compute=0.5, confirm_n=0)
    with pytest.raises(ValueError, match="d=30"):
        plan(HW, PTable.paper(), SMALL, d=30, confirm_n=0)
    with pytest.raises(ValueError, match="ks must"):
        screen(HW, PTable.paper(), PlanSpace(ks=(7,)), 40)
    with pytest.raises(ValueError, match="d_bars"):
        screen(HW, PTable.paper(), PlanSpace(d_bars=(10,)), 40)
    with pytest.raises(ValueError, match="max_devices"):
        PlanSpace(max_devices=0)
    with pytest.raises(ValueError, match="acceptance"):
        DraftModel(1.5, 0.1)


def test_lower_bound_of_p_is_carried_when_the_table_has_one():
    table = PTable.paper().df.assign(boot_low=lambda df: df.p_correct * 0.9)
    atlas = PTable(table, d=40, name="with intervals")
    assert atlas.lower_bound_column == "boot_low"
    space = PlanSpace(max_devices=2, d_bars=(20, 30), ks=(1, 3), workloads=("WMT",))
    result = plan(HW, atlas, space, d=40, confirm_n=0, keep_screened=True)
    rows = result.screened[result.screened.method.isin(["ppd", "early-exit"])]
    layer = np.where(rows.method == "ppd", rows.d_bar, rows.exit_layer)
    measured = rows[np.isin(layer, (10, 20, 30, 35, 37)) & rows.k.isin((1, 3, 5)).to_numpy()]
    assert len(measured) > 0  # between measured layers both interpolate to the last layer's 1
    np.testing.assert_allclose(measured.p_low, 0.9 * measured.p, rtol=1e-12)
    assert (rows.p_low <= rows.p + 1e-12).all()
    assert result.screened[result.screened.method == "greedy"].p_low.isna().all()
    if "PPD" in result.recommendations["WMT"]:
        assert "lower bound" in result.recommendations["WMT"]
    assert PTable.paper().lower_bound_column is None


def test_plot_marks_greedy_on_one_device_and_the_recommendation():
    import matplotlib.pyplot as plt

    from sim.plan_plot import plot_plan

    result = plan(HW, PTable.paper(), SMALL, d=40, confirm_n=0, keep_screened=True)
    fig = plot_plan(result, result.screened, title="t")
    greedy_ms = 1e3 * greedy_costs(HW[0], tp=1).greedy_token_seconds(40)
    for ax in fig.axes:
        levels = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
        assert levels == [pytest.approx(greedy_ms)]
    assert len(fig.axes) == 2 and fig._suptitle.get_text() == "t"
    plt.close(fig)
