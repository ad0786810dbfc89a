"""``sim.plan.plan`` checks its inputs once, at its entry: the helpers it calls trust them
(issue 44: a plan's inputs were checked again in plan_limits, screen, per hardware and in
plan_intervals). Counted with cProfile on a small plan with every method."""

from __future__ import annotations

import cProfile
import pstats
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from sim.hardware import GPUSpec, Link
from sim.hardware_costs import RooflineHardware
from sim.plan import plan
from sim.plan_grid import DraftModel, PlanSpace
from sim.ptable import PTable
from sim.shape import ModelShape

SHAPE = ModelShape.from_name("vicuna-13b")
HW = [RooflineHardware(SHAPE, GPUSpec.from_name("h100-sxm"), Link.from_name("nvlink4"),
                       host_s=2e-5)]  # fmt: skip
TABLE = pd.DataFrame({"exit_layer": [20, 30], "threshold": [0.5, 1.01], "exit_rate": [0.8, 0.0],
                      "quality": [0.3, 1.0], "quality_metric": "rouge_l_vs_greedy"})  # fmt: skip
SPACE = PlanSpace(max_devices=2, d_bars=(20, 30), ks=(1, 3), workloads=("SQuAD", "WMT"),
                  draft_lengths=(1, 3), exit_layers=(10, 20), free_table=TABLE,
                  draft_model=DraftModel(0.6, 0.05))  # fmt: skip
PLANNER = {"plan.py", "plan_grid.py", "plan_free.py", "plan_intervals.py", "plan_limits.py"}
"""The planner's modules (sim/plan*.py) whose checks are counted."""
ENTRY = {"plan", "__post_init__"}
"""Where a plan's checks may run: its entry (and a new ``PlanSpace``'s own construction)."""
LIMITS = {"_check_confirm_work"}
"""Work limits (not input checks): the confirmation's size is known once its cells are built."""
CALLED_BY_THE_DECISION = {"rival_of", "against_greedy"}
"""Public helpers ``sim.plan_summary.decide`` calls (checking, as any public call does)."""


def _is_check(name: str) -> bool:
    if name in LIMITS:
        return False
    return name.startswith(("check_", "_check")) or name in ("as_int", "as_real")


def _planner(path: str) -> bool:
    return Path(path).parent.name == "sim" and Path(path).name in PLANNER


@pytest.fixture(scope="module")
def stats():
    profile = cProfile.Profile()
    with ThreadPoolExecutor(1) as pool:
        profile.runcall(plan, HW, PTable.paper(), SPACE, d=40, confirm_n=4, executor=pool,
                        draws=2, seed=1)  # fmt: skip
    return pstats.Stats(profile).stats


def _calls(stats, name: str) -> int:
    return sum(s[1] for (_, _, fn), s in stats.items() if fn == name)


def test_the_entry_checks_once(stats):
    assert _calls(stats, "check_plan_args") == 1
    assert _calls(stats, "_check_space") == 1
    for helper_check in ("_check_inputs", "check_screen", "screen_rows", "check_cell",
                         "_check_free_row", "check_points", "validate_flags"):  # fmt: skip
        assert _calls(stats, helper_check) == 0, helper_check


def test_no_helper_of_the_planner_checks_again(stats):
    again = {}  # checks called by a planner function that is neither the entry nor a check
    for (_, _, fn), (_, _, _, _, callers) in stats.items():
        if not _is_check(fn):
            continue
        for (caller_path, _, caller), caller_stats in callers.items():
            exempt = ENTRY | CALLED_BY_THE_DECISION
            if _planner(caller_path) and caller not in exempt and not _is_check(caller):
                again[f"{caller} -> {fn}"] = caller_stats[1]
    assert again == {}
    for (path, _, fn), (_, _, _, _, callers) in stats.items():
        if _planner(path) and fn in CALLED_BY_THE_DECISION:
            assert {Path(p).name for p, _, _ in callers} == {"plan_summary.py"}, fn
