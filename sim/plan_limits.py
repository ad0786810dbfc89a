"""Work limits of the planner: refuse a plan whose screening or confirmation would not end.

Both are estimated before the work starts, from what the planner will build: rows of the
closed-form screen (``screen_rows``; about 200 bytes each in memory) and simulation work units
of about 1 us of one core (``confirm_work``; ``sim.config.estimated_work`` per sequence).
"""

from __future__ import annotations

from numbers import Number

import numpy as np

from ppdmodel.defaults import default_d_bar
from ppdmodel.validation import (
    as_int,
    check_columns,
    check_flag,
    check_instance,
    check_keys,
    check_name,
    check_names,
    check_nonnegative,
    is_finite,
)
from sim.hardware_costs import check_hardware
from sim.matches import MAX_ELL
from sim.plan_cells import FREE_BLOCKS_PER_TOKEN, FREE_CELL_KEYS  # noqa: F401 (kept here too)
from sim.plan_grid import METHOD_OF, METHODS, PlanSpace
from sim.ptable import PTable

MAX_SCREEN_ROWS = 2 * 10**7
"""Largest closed-form screen (rows; about 4 GB of frames at most)."""
MAX_CONFIRM_N = 10**6
"""Largest ``confirm_n`` (simulated sequences per frontier point)."""
MAX_CONFIRM_WORK = 3.6e9
"""Largest confirmation, in work units of about 1 us of one core: one hour of simulation."""
MAX_D = 10**5
"""Largest model depth the planner screens (layers)."""


def check_plan_args(hardware, ptable, space, d, confirm_n, *, check_size: bool = True
                    ) -> tuple[int, int]:  # fmt: skip
    """Check the planner's inputs and (``check_size``) the screen's size; return (d, confirm_n)
    as ints."""
    check_flag("check_size", check_size)
    d = as_int("d", d, limit=MAX_D)
    confirm_n = as_int("confirm_n", confirm_n, minimum=0, limit=MAX_CONFIRM_N)
    hardware = check_hardware(hardware)
    check_instance("space", space, PlanSpace)
    check_instance("ptable", ptable, PTable)
    for i, hw in enumerate(hardware):
        if hw.shape.num_layers != d:
            raise ValueError(f"d={d} but hardware[{i}]'s model shape has "
                             f"{hw.shape.num_layers} layers")  # fmt: skip
    if not check_size:
        return d, confirm_n
    rows = _screen_rows(hardware, ptable, space, d)
    if rows > MAX_SCREEN_ROWS:
        raise ValueError(
            f"the screen would hold {rows:,} configurations, above the limit of "
            f"{MAX_SCREEN_ROWS:,} (sim.plan_limits.MAX_SCREEN_ROWS): narrow d_bars, ks, heads, "
            "workloads, exit_layers, draft_lengths or max_devices"
        )
    return d, confirm_n


def screen_rows(hardware, ptable, space: PlanSpace, d: int) -> int:
    """Rows ``sim.plan_grid.screen`` builds for these inputs (Python ints: no overflow)."""
    d, _ = check_plan_args(hardware, ptable, space, d, 0, check_size=False)
    return _screen_rows(hardware, ptable, space, d)


def _screen_rows(hardware, ptable, space: PlanSpace, d: int) -> int:
    workloads = len(space.workloads or ptable.workloads)
    heads = len(space.heads or ptable.heads)
    d_bars = len(space.d_bars) if space.d_bars else d - default_d_bar(d)
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
    if not isinstance(cells, list | tuple):
        raise ValueError(f"cells must be a list of confirmation cells, got {type(cells).__name__}")
    if isinstance(cells, str | bytes) or not isinstance(cells, list | tuple):
        raise ValueError(f"cells must be a list of confirmation cells, got {cells!r:.60}")
    for i, cell in enumerate(cells):
        check_cell(cell, f"cells[{i}]")
    return _confirm_work(cells)


def _confirm_work(cells: list[dict]) -> float:
    """``confirm_work`` of cells the planner built (``sim.plan._cell``): each method's work
    per sequence (``PlannerMethod.cell_work``) times its n."""
    return sum(float(c["n"]) * METHOD_OF[c["method"]].cell_work(c) for c in cells)


def check_confirm_work(cells: list[dict], n: int) -> float:
    """Refuse a confirmation above ``MAX_CONFIRM_WORK``, naming ``confirm_n`` (``plan``'s; ``n``
    of ``confirm`` and of this check) and the limit; return its work."""
    return _refuse_confirm_work(confirm_work(cells), len(cells), n)


def _check_confirm_work(cells: list[dict], n: int) -> float:
    """``check_confirm_work`` of cells the planner built (``sim.plan._cell``)."""
    return _refuse_confirm_work(_confirm_work(cells), len(cells), n)


def _refuse_confirm_work(work: float, n_cells: int, n: int) -> float:
    if not np.isfinite(work) or work > MAX_CONFIRM_WORK:
        raise ValueError(
            f"confirm_n (n) = {n} sequences at each of {n_cells} frontier points is about "
            f"{work / 1e6:,.0f} s of simulation, above the limit of {MAX_CONFIRM_WORK / 1e6:,.0f}"
            " s (sim.plan_limits.MAX_CONFIRM_WORK): reduce confirm_n"
        )
    return work


SCREEN_COLUMNS = ("workload", "method", "devices", "tp_main", "latency_s", "compute_s")
"""Columns every planner frame (screen or frontier) has, and the helpers read."""
ROW_FIELDS = ("method", "devices", "tp_main", "tp_candidates", "d_bar", "k", "g", "exit_layer",
              "early_head", "head_kind", "reuse", "p")  # fmt: skip
"""Fields a planner row has (``label`` reads them)."""
CELL_KEYS = {"row": int, "method": str, "n": int, "ell": int, "tp_main": int,
             "tp_candidates": int}  # fmt: skip
"""Keys of a confirmation cell (``sim.plan._cell``) and their types."""


def check_screened(name: str, frame) -> None:
    """Refuse anything but a planner frame (screen or frontier) with its columns."""
    check_columns(name, frame, SCREEN_COLUMNS)
    if frame.empty:
        raise ValueError(f"{name} must hold at least one configuration")
    for column in ("latency_s", "compute_s", "devices", "tp_main"):
        values = frame[column]
        if values.dtype.kind not in "iuf" or not np.isfinite(values.to_numpy(float)).all():
            raise ValueError(f"{name} column {column!r} must hold finite numbers")
    greedy = (frame.method == "greedy") & (frame.tp_main == 1)
    if not frame[greedy].groupby("workload").size().reindex(frame.workload.unique()).notna().all():
        raise ValueError(f"{name} must hold greedy on one device for every workload")


def check_row(name: str, row, extra: tuple[str, ...] = ()) -> None:
    """Refuse anything but a planner row (a DataFrame row or ``itertuples`` tuple)."""
    check_name(name)
    extra = check_names("extra", extra)
    missing = [f for f in (*ROW_FIELDS, *extra) if not hasattr(row, f)]
    if isinstance(row, str | bytes) or missing:
        raise ValueError(f"{name} must be a row of a planner frame; missing {missing}, got "
                         f"{type(row).__name__}")  # fmt: skip
    for field in ("devices", "tp_main"):
        value = getattr(row, field)
        if not isinstance(value, Number) or not np.isfinite(value):
            raise ValueError(f"{name}.{field} must be a finite number, got {value!r:.40}")


def check_cell(cell, name: str = "cell") -> None:
    """Refuse anything but a confirmation cell (``sim.plan._cell``'s dict), naming it ``name``."""
    check_keys(name, cell, CELL_KEYS)
    for key, kind in CELL_KEYS.items():
        if not isinstance(cell[key], kind) or isinstance(cell[key], bool):
            raise ValueError(f"{name}[{key!r}] must be a {kind.__name__}, got {cell[key]!r:.40}")
    as_int(f"{name}['n']", cell["n"], limit=MAX_CONFIRM_N)
    as_int(f"{name}['ell']", cell["ell"], minimum=2, limit=MAX_ELL)
    if cell["method"] not in METHOD_OF:
        raise ValueError(f"{name}['method'] must be one of {METHODS}, got {cell['method']!r:.40}")
    check_keys(name, cell, METHOD_OF[cell["method"]].cell_keys)


def check_min_quality(min_quality) -> float:
    """``min_quality`` as a float in [0, 1]; ValueError naming it otherwise."""
    ok = isinstance(min_quality, int | float | np.number) and not isinstance(min_quality, bool)
    if not (ok and is_finite(min_quality) and 0 <= min_quality <= 1):
        raise ValueError(f"min_quality must be a number in [0, 1] (quality against greedy's "
                         f"output; 1: exact methods only), got {min_quality!r}")  # fmt: skip
    return float(min_quality)


def check_points(latency, compute) -> tuple[np.ndarray, np.ndarray]:
    """Latency and compute as equal-length 1-d float arrays without NaN."""
    out = []
    for name, values in (("latency", latency), ("compute", compute)):
        arr = np.asarray(check_nonnegative(name, values), dtype=float)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-d array, got shape {arr.shape}")
        out.append(arr)
    if out[0].shape != out[1].shape:
        raise ValueError(f"latency and compute must have one length, got {out[0].size} and "
                         f"{out[1].size}")  # fmt: skip
    return out[0], out[1]
