"""Work limits of the planner: refuse a plan whose screening or confirmation would not end.

Both are estimated before the work starts, from what the planner will build: rows of the
closed-form screen (``screen_rows``; about 200 bytes each in memory) and simulation work units
of about 1 us of one core (``confirm_work``; ``sim.config.estimated_work`` per sequence).
"""

from __future__ import annotations

import numpy as np

from ppdmodel.validation import as_int, check_instance
from sim.config import RUN_OVERHEAD, SimConfig, estimated_work
from sim.hardware_costs import HardwareModel
from sim.plan_grid import PlanSpace
from sim.ptable import PTable

MAX_SCREEN_ROWS = 2 * 10**7
"""Largest closed-form screen (rows; about 4 GB of frames at most)."""
MAX_CONFIRM_N = 10**6
"""Largest ``confirm_n`` (simulated sequences per frontier point)."""
MAX_CONFIRM_WORK = 3.6e9
"""Largest confirmation, in work units of about 1 us of one core: one hour of simulation."""
MAX_D = 10**5
"""Largest model depth the planner screens (layers)."""


def check_plan_args(hardware, ptable, space, d, confirm_n) -> tuple[int, int]:
    """Check the planner's inputs and the screen's size; return (d, confirm_n) as ints."""
    d = as_int("d", d, limit=MAX_D)
    confirm_n = as_int("confirm_n", confirm_n, minimum=0, limit=MAX_CONFIRM_N)
    if isinstance(hardware, str | bytes) or not isinstance(hardware, list | tuple):
        raise ValueError(f"hardware must be a list of hardware models, got "
                         f"{type(hardware).__name__}")  # fmt: skip
    if not hardware:
        raise ValueError("hardware must name at least one hardware model, got an empty list")
    for i, hw in enumerate(hardware):
        check_instance(f"hardware[{i}]", hw, HardwareModel,
                       "RooflineHardware or ProfileHardware")  # fmt: skip
    check_instance("space", space, PlanSpace)
    check_instance("ptable", ptable, PTable)
    rows = screen_rows(hardware, ptable, space, d)
    if rows > MAX_SCREEN_ROWS:
        raise ValueError(
            f"the screen would hold {rows:,} configurations, above the limit of "
            f"{MAX_SCREEN_ROWS:,} (sim.plan_limits.MAX_SCREEN_ROWS): narrow d_bars, ks, heads, "
            "workloads, exit_layers, draft_lengths or max_devices"
        )
    return d, confirm_n


def screen_rows(hardware, ptable, space: PlanSpace, d: int) -> int:
    """Rows ``sim.plan_grid.screen`` builds for these inputs (Python ints: no overflow)."""
    workloads = len(space.workloads or ptable.workloads)
    heads = len(space.heads or ptable.heads)
    d_bars = len(space.d_bars) if space.d_bars else d - (d + 1) // 2
    ks = len(space.ks) if space.ks else int(ptable.max_k)
    exits = len(space.exit_layers) if space.exit_layers else d - 1
    drafts = len(space.draft_lengths)
    total = 0
    for hw in hardware:
        tps = len([t for t in hw.tp_degrees() if t <= space.max_devices])
        pairs = len(hw.tp_pairs(space.max_devices))
        total += pairs * d_bars * ks * len(space.early_heads) * heads * workloads + tps * workloads
        if space.alternatives:
            total += tps * exits * drafts * heads * len(space.reuse_draft_layers) * workloads
            if space.draft_model is not None:
                total += tps * drafts * workloads
    return total


def confirm_work(cells: list[dict]) -> float:
    """Work units of simulating ``cells`` (``sim.plan.confirm``'s tasks)."""
    total = 0.0
    for cell in cells:
        if "config" in cell:
            per_sequence = estimated_work(SimConfig.from_dict(cell["config"]))
        else:  # a speculative Monte Carlo: ell verify steps, vectorised
            per_sequence = RUN_OVERHEAD + cell["ell"]
        total += float(cell["n"]) * per_sequence
    return total


def check_confirm_work(cells: list[dict], n: int) -> None:
    """Refuse a confirmation above ``MAX_CONFIRM_WORK``, naming ``confirm_n`` and the limit."""
    work = confirm_work(cells)
    if not np.isfinite(work) or work > MAX_CONFIRM_WORK:
        raise ValueError(
            f"confirm_n = {n} sequences at each of {len(cells)} frontier points is about "
            f"{work / 1e6:,.0f} s of simulation, above the limit of {MAX_CONFIRM_WORK / 1e6:,.0f}"
            " s (sim.plan_limits.MAX_CONFIRM_WORK): reduce confirm_n"
        )
