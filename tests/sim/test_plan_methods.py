"""The planner's methods behind one seam: ``sim.plan_grid.SCREENS`` registers each method's
rows, the screen loops over it in order, and a new method is one registration."""

from __future__ import annotations

from dataclasses import replace

import pytest

import sim.plan_grid as plan_grid
from sim.plan_grid import METHODS, SCREENS, MethodScreen, ScreenCall, screen
from sim.ptable import PTable
from tests.sim.test_plan_checks_once import HW, SPACE


def test_the_registry_names_every_method_in_screen_order():
    assert METHODS == ("ppd", "greedy", "early-exit", "draft-model", "free")
    assert tuple(m.method for m in SCREENS) == METHODS


def test_the_screen_follows_the_registry():
    rows = screen(HW, PTable.paper(), SPACE, 40)
    assert tuple(dict.fromkeys(rows.method)) == METHODS
    alone = screen(HW, PTable.paper(), replace(SPACE, alternatives=False), 40)
    assert set(alone.method) == {"ppd", "greedy"} and set(
        alone.devices[alone.method == "greedy"]
    ) == {1}


def test_a_new_method_is_one_registration(monkeypatch):
    def toy_rows(call: ScreenCall):
        assert call.d == 40 and call.workloads == SPACE.workloads
        greedy = [m for m in SCREENS if m.method == "greedy"][0].build_rows(call)
        return greedy.assign(method="toy", latency_s=greedy.latency_s * 0.9)

    toy = MethodScreen("toy", lambda space: space.alternatives, toy_rows)
    monkeypatch.setattr(plan_grid, "SCREENS", (*SCREENS, toy))
    rows = screen(HW, PTable.paper(), SPACE, 40)
    assert rows.method.iloc[-1] == "toy"
    assert tuple(dict.fromkeys(rows.method)) == (*METHODS, "toy")


def test_a_registration_is_checked():
    with pytest.raises(ValueError, match="build_rows"):
        MethodScreen("toy", lambda space: True, "not a function")
