"""The planner's methods behind one seam: ``sim.plan_grid.PLANNER_METHODS`` registers each
method's rows, label and confirmation; the screen, ``label``, the confirmation cells and
their work loop over it, and a new method is one registration."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

import sim.plan_grid as plan_grid
from sim.plan import label, plan
from sim.plan_grid import METHODS, PLANNER_METHODS, PlannerMethod, ScreenCall, screen
from sim.plan_limits import check_cell, confirm_work
from sim.ptable import PTable
from tests.sim.test_plan_checks_once import HW, SPACE

GREEDY = next(m for m in PLANNER_METHODS if m.method == "greedy")


def test_the_registry_names_every_method_in_screen_order():
    assert METHODS == ("ppd", "greedy", "early-exit", "draft-model", "free")
    assert tuple(m.method for m in PLANNER_METHODS) == METHODS
    assert plan_grid.METHOD_OF["free"].cell_keys == ("d", "exit_layer", "q", "costs")


def test_the_screen_follows_the_registry():
    rows = screen(HW, PTable.paper(), SPACE, 40)
    assert tuple(dict.fromkeys(rows.method)) == METHODS
    alone = screen(HW, PTable.paper(), replace(SPACE, alternatives=False), 40)
    assert set(alone.method) == {"ppd", "greedy"}
    assert set(alone.devices[alone.method == "greedy"]) == {1}


def _toy_rows(call: ScreenCall):
    """Greedy's rows, 10 % faster: a method the planner has never seen."""
    assert call.d == 40 and call.workloads == SPACE.workloads
    greedy = GREEDY.build_rows(call)
    return greedy[greedy.tp_main == 1].assign(method="toy", latency_s=greedy.latency_s * 0.9)


def _toy_simulation(cell, seed):
    lat, comp = GREEDY.simulate_cell(cell, seed)
    return lat * 0.9, comp


TOY = PlannerMethod("toy", lambda space: space.alternatives, _toy_rows,
                    lambda row: f"toy, TP{int(row.tp_main)}", GREEDY.build_cell, GREEDY.cell_keys,
                    _toy_simulation, GREEDY.cell_work)  # fmt: skip


def test_a_new_method_is_one_registration(monkeypatch):
    monkeypatch.setattr(plan_grid, "PLANNER_METHODS", (*PLANNER_METHODS, TOY))
    monkeypatch.setitem(plan_grid.METHOD_OF, "toy", TOY)
    rows = screen(HW, PTable.paper(), SPACE, 40)
    assert rows.method.iloc[-1] == "toy"
    assert label(rows.iloc[-1]) == "toy, TP1"
    with ThreadPoolExecutor(1) as pool:
        result = plan(HW, PTable.paper(), SPACE, d=40, confirm_n=4, executor=pool, draws=0)
    toy = result.frontier[result.frontier.method == "toy"]
    assert len(toy) == 2  # on each workload's frontier (greedy's, 10 % faster), confirmed:
    assert toy.sim_latency_s.to_numpy() == pytest.approx(toy.latency_s.to_numpy())
    cell = {"row": 0, "method": "toy", "n": 2, "ell": 8, "tp_main": 1, "tp_candidates": 0}
    with pytest.raises(ValueError, match="config"):
        check_cell(cell)  # the toy's keys are greedy's


def test_a_cell_of_an_unknown_method_is_refused():
    cell = {"row": 0, "method": "nope", "n": 2, "ell": 8, "tp_main": 1, "tp_candidates": 0}
    with pytest.raises(ValueError, match="method"):
        confirm_work([cell])


def test_a_registration_is_checked():
    with pytest.raises(ValueError, match="build_rows"):
        replace(TOY, build_rows="not a function")
