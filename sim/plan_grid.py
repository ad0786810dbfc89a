"""The planner's screening: every configuration of PPD and its alternatives, in closed form.

Rows are configurations; columns say what each is (``method``, hardware, devices, d_bar, k,
early head, head, draft length, exit layer) and what the closed form predicts for it: seconds
per token (``latency_s``), busy device-seconds per token (``compute_s``, every device of a
tensor-parallel group counted) and, for PPD, the break-even p. Methods:

* ``ppd``: main on ``tp_main`` devices; the k-row candidate batch on ``tp_candidates`` more, or
  sharing main's (``tp_candidates`` 0), ``ppdmodel.cost_grid`` over all rows at once;
* ``greedy``: greedy decoding, tensor parallel over ``tp_main`` devices (1: the baseline);
* ``early-exit``: self-speculative decoding drafting with the first ``exit_layer`` layers,
  acceptance a = p_correct(exit_layer, k = 1) of the row's head, ``ppdmodel.alternatives``;
* ``draft-model``: speculative decoding with a separate draft of the given acceptance and
  cost (a fraction of a greedy token), on main's devices;
* ``free``: FREE's shallow-deep early exit at the exit rates of a measured FREE table
  (``space.free_table``; ``sim.plan_free``), the one approximate method.

``quality`` is each row's output quality against greedy decoding's: ``EXACT_QUALITY`` (1.0)
for every exact method, the table's measured figure for FREE.

Each method is one registration of ``PLANNER_METHODS`` (``PlannerMethod``): its rows here,
its label and its confirmation by simulation (``sim.plan_cells``, ``sim.plan_free``); the
screen, ``sim.plan.label`` and the confirmation loop over the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ppdmodel.alternatives import (
    EXACT_QUALITY,
    early_exit_step_seconds,
    speculative_tokens_per_step,
)
from ppdmodel.cost_grid import DecodeCostsGrid, ppd_grid_per_token
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS
from ppdmodel.defaults import default_d_bar
from ppdmodel.validation import (
    as_int,
    as_real,
    check_columns,
    check_instance,
    check_name,
    check_names,
)
from sim.formats import validate_free_table
from sim.hardware_costs import HardwareModel, check_hardware, early_head_cost, one_process_host_s
from sim.plan_cells import (
    FREE_CELL_KEYS,
    SCHEDULE_CELL_KEYS,
    SPECULATIVE_CELL_KEYS,
    _draft_model_label,
    _early_exit_label,
    _free_work,
    _greedy_cell,
    _greedy_label,
    _ppd_cell,
    _ppd_label,
    _schedule_work,
    _simulate_schedule,
    _simulate_speculative,
    _speculative_cell,
    _speculative_work,
)
from sim.plan_free import (
    _check_free_depth,
    _confirm_free,
    _free_cell,
    _free_label,
    _free_rows,
)
from sim.ptable import PTable


@dataclass(frozen=True)
class DraftModel:
    """A separate draft model for speculative decoding (Leviathan et al. 2023)."""

    acceptance: float
    """Per-token acceptance rate a in [0, 1]."""
    cost_ratio: float
    """A draft token's device time as a fraction of one greedy token of the target (>= 0)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "acceptance", as_real("acceptance", self.acceptance,
                                                       maximum=1.0))  # fmt: skip
        object.__setattr__(self, "cost_ratio", as_real("cost_ratio", self.cost_ratio))


@dataclass(frozen=True)
class PlanSpace:
    """What the planner searches, and the device constraint."""

    max_devices: int = 8
    """Devices available (tensor-parallel groups and the candidate side count)."""
    d_bars: tuple[int, ...] | None = None
    """Early-prediction layers (None: every layer in [d/2, d))."""
    ks: tuple[int, ...] | None = None
    """Candidates (None: 1 .. the p-table's largest k)."""
    early_heads: tuple[str, ...] = EARLY_HEAD_PLACEMENTS
    """Early-head placements."""
    heads: tuple[str, ...] | None = None
    """Early heads (None: every head of the p-table)."""
    workloads: tuple[str, ...] | None = None
    """Workloads (None: every workload of the p-table); each gets its own frontier."""
    ell: int = 128
    """Generated tokens per sequence."""
    draft_lengths: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)
    """Draft lengths g of the speculative methods."""
    exit_layers: tuple[int, ...] | None = None
    """Draft exit layers of early-exit decoding (None: every layer 1 .. d - 1)."""
    reuse_draft_layers: tuple[bool, ...] = (False, True)
    """Early-exit verification with the whole model, or reusing the draft's first layers."""
    draft_model: DraftModel | None = None
    """A separate draft model to compare with (None: left out)."""
    alternatives: bool = True
    """Screen greedy-TP, early-exit and draft-model rows too (and FREE's, given a table)."""
    include_ppd: bool = True
    """Screen PPD's rows (False: the alternatives only, as the planner's draws re-price them)."""
    free_table: pd.DataFrame | None = field(default=None, compare=False, repr=False)
    """A FREE table (``sim.formats.read_free_table``: exit layer, threshold, measured exit rate
    and quality); None: FREE is left out (no quality is assumed for it)."""

    def __post_init__(self) -> None:
        as_int("max_devices", self.max_devices, limit=4096)
        as_int("ell", self.ell, minimum=2, limit=10**7)
        for name in ("d_bars", "ks", "exit_layers", "draft_lengths"):
            values = getattr(self, name)
            if values is None and name != "draft_lengths":
                continue
            if (
                isinstance(values, str | bytes)
                or not isinstance(values, tuple | list)
                or not (values)
                or not all(
                    isinstance(v, int | np.integer) and not isinstance(v, bool) and 1 <= v <= 10**5
                    for v in values
                )
            ):
                raise ValueError(f"{name} must be a non-empty tuple of integers in [1, 10^5], "
                                 f"got {values!r:.60}")  # fmt: skip
        for name in ("heads", "workloads", "early_heads"):
            values = getattr(self, name)
            if values is None and name != "early_heads":
                continue  # None: every one the p-table has
            if (
                isinstance(values, str)
                or not isinstance(values, tuple | list)
                or not values
                or not all(isinstance(v, str) for v in values)
            ):
                raise ValueError(f"{name} must be a non-empty tuple of names, got "
                                 f"{values!r:.60}")  # fmt: skip
        if (
            not isinstance(self.reuse_draft_layers, tuple | list)
            or not all(isinstance(v, bool) for v in self.reuse_draft_layers)
            or not (self.reuse_draft_layers)
        ):
            raise ValueError(f"reuse_draft_layers must be a tuple of True/False, got "
                             f"{self.reuse_draft_layers!r:.60}")  # fmt: skip
        if self.draft_model is not None and not isinstance(self.draft_model, DraftModel):
            raise ValueError(f"draft_model must be a DraftModel or None, got "
                             f"{type(self.draft_model).__name__}")  # fmt: skip
        if not isinstance(self.alternatives, bool):
            raise ValueError(f"alternatives must be True or False, got {self.alternatives!r}")
        if not isinstance(self.include_ppd, bool):
            raise ValueError(f"include_ppd must be True or False, got {self.include_ppd!r}")
        for placement in self.early_heads:
            if placement not in EARLY_HEAD_PLACEMENTS:
                raise ValueError(
                    f"early_heads must be in {EARLY_HEAD_PLACEMENTS}, got {placement!r}"
                )
        if self.free_table is not None:
            check_instance("free_table", self.free_table, pd.DataFrame)
            table = validate_free_table(self.free_table, source="free_table")
            object.__setattr__(self, "free_table", table)


_NOT_NEEDED = object()


def _check_inputs(hw, space, d, pgrid=_NOT_NEEDED, **layers) -> int:
    """Check a screening helper's inputs (``screen`` passes checked ones); return d."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    check_instance("space", space, PlanSpace)
    d = as_int("d", d, limit=10**5)
    layers_given = set(layers)
    names = check_names("heads", layers.pop("heads", ("shared",)))
    if not names:
        raise ValueError("heads must be a non-empty sequence of head names, got none")
    if pgrid is not _NOT_NEEDED:
        if not (isinstance(pgrid, np.ndarray) and pgrid.ndim == 4 and pgrid.shape[2] == d + 1):
            raise ValueError(f"pgrid must be PTable.grid(d)'s array, got {type(pgrid).__name__}")
        if "heads" in layers_given and len(names) != pgrid.shape[1]:
            raise ValueError(f"heads must name pgrid's {pgrid.shape[1]} heads, got {names!r:.60}")
        for name, values in layers.items():
            try:
                arr = np.asarray(values)
            except (ValueError, TypeError):  # ragged nesting
                arr = np.asarray(None)
            top = pgrid.shape[3] if name == "ks" else pgrid.shape[2]
            if arr.ndim != 1 or arr.dtype.kind not in "iu" or not ((arr >= 1) & (arr < top)).all():
                raise ValueError(f"{name} must be integers in [1, {top}), got {values!r:.60}")
    return d


def mesh_of(
    rows: pd.DataFrame, hw, space: PlanSpace, heads, n_workloads: int, *, name: str = "rows"
) -> dict:
    """``_mesh``'s arrays for the PPD configurations of ``rows`` on ``hw`` (``ppd_rows(only=)``;
    computed once for many draws of the same hardware); errors name ``name``."""
    check_name(name)
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    check_instance("space", space, PlanSpace)
    heads = check_names("heads", heads)
    n_workloads = as_int("n_workloads", n_workloads, limit=10**6)
    check_columns(name, rows, ("tp_main", "tp_candidates", "d_bar", "k", "early_head",
                               "head_kind", "w"))  # fmt: skip
    return _mesh_of(rows, hw, space, heads, n_workloads, name=name)


def _mesh_of(rows, hw, space, heads, n_workloads, *, name="rows") -> dict:
    """``mesh_of`` on checked inputs (the planner's draws)."""
    pairs = np.array(hw.tp_pairs(space.max_devices), dtype=int).reshape(-1, 2)
    placements = np.array(space.early_heads)
    pair = pd.MultiIndex.from_arrays(pairs.T.tolist()).get_indexer(
        pd.MultiIndex.from_arrays([rows.tp_main.astype(int), rows.tp_candidates.astype(int)])
    )
    eh = pd.Index(placements).get_indexer(rows.early_head)
    head = pd.Index(list(heads)).get_indexer(rows.head_kind)
    w = rows.w.to_numpy().astype(int)
    outside = (pair < 0) | (eh < 0) | (head < 0) | (w < 0) | (w >= n_workloads)
    if outside.any():
        raise ValueError(f"{name} holds a configuration outside the space (devices, early head, "
                         "heads or n_workloads)")  # fmt: skip
    return {"pair": pair, "d_bar": rows.d_bar.to_numpy().astype(int),
            "k": rows.k.to_numpy().astype(int), "eh": eh, "head": head, "w": w}  # fmt: skip


def _mesh(**axes) -> dict[str, np.ndarray]:
    """Every combination of the named 1-d axes, as flat arrays of equal length."""
    grids = np.meshgrid(*(np.asarray(v) for v in axes.values()), indexing="ij")
    return {name: g.ravel() for name, g in zip(axes, grids, strict=True)}


def _head_seconds(hw: HardwareModel, tp, head_index, heads) -> np.ndarray:
    """Early-head seconds per row: the head named by ``heads[head_index]`` on ``tp`` devices."""
    out = np.empty(np.shape(tp))
    for j, head in enumerate(heads):
        mask = head_index == j
        out[mask] = early_head_cost(hw, tp[mask], head)
    return out


def ppd_rows(hw, hw_index, pgrid, d, space, d_bars, ks, heads, *, only=None) -> pd.DataFrame:
    """Screen every PPD configuration on one hardware model (the closed form, vectorised);
    ``only``: just these configurations (a frame with ``tp_main``, ``tp_candidates``,
    ``d_bar``, ``k``, ``early_head``, ``head_kind`` and ``w``, the workload's index in
    pgrid, or its ``mesh_of``), in their order (the planner's draws price a few rows)."""
    hw_index = as_int("hw_index", hw_index, minimum=0)
    d = _check_inputs(hw, space, d, pgrid, d_bars=d_bars, ks=ks, heads=heads)
    if np.any(np.asarray(d_bars) * 2 < d):  # (_check_inputs: each < d)
        raise ValueError(f"d_bars must lie in [d/2, d) = [{d / 2}, {d}), got {d_bars!r:.60}")
    if only is not None:
        only = only if isinstance(only, dict) else mesh_of(only, hw, space, heads,
                                                           pgrid.shape[0], name="only")  # fmt: skip
        if set(only) != {"pair", "d_bar", "k", "eh", "head", "w"}:
            raise ValueError("only must be a frame of configurations or its mesh_of")
    return _ppd_rows(hw, hw_index, pgrid, d, space, d_bars, ks, heads, only=only)


def _ppd_rows(hw, hw_index, pgrid, d, space, d_bars, ks, heads, *, only=None) -> pd.DataFrame:
    """``ppd_rows`` on checked inputs (``only``: None or a ``mesh_of``)."""
    pairs = np.array(hw.tp_pairs(space.max_devices), dtype=int).reshape(-1, 2)
    if not len(pairs):
        return pd.DataFrame()
    placements = np.array(space.early_heads)
    if only is None:
        g = _mesh(pair=np.arange(len(pairs)), d_bar=d_bars, k=ks, eh=np.arange(len(placements)),
                  head=np.arange(len(heads)), w=np.arange(pgrid.shape[0]))  # fmt: skip
    else:
        g = only
    tp_main, tp_cand = pairs[g["pair"], 0], pairs[g["pair"], 1]
    shared = tp_cand == 0
    tp_side = np.where(shared, tp_main, tp_cand)
    on_main = placements[g["eh"]] == "main"
    gap = d - g["d_bar"]
    # a dist profile's pair factors at k, for the row's early-head placement
    s_main, s_cand = hw.device_slowdowns(shared, g["k"], placements[g["eh"]])
    costs = DecodeCostsGrid(
        layer_s=hw.layer_seconds(tp_main, 1),
        candidate_layer_s=hw.candidate_layer_seconds(tp_side, g["k"]),
        embedding_s=hw.embedding_seconds(tp_main),
        early_head_s=_head_seconds(hw, np.where(on_main, tp_main, tp_side), g["head"], heads),
        final_head_s=hw.final_head_seconds(tp_main),
        candidate_dispatch_s=hw.dispatch_seconds(tp_side, g["k"], gap, "main", shared),
        hidden_dispatch_s=hw.dispatch_seconds(tp_side, g["k"], gap, "candidates", shared),
        handoff_s=hw.handoff_seconds(tp_side, gap, shared),
        host_s=hw.host_s,
        shared_device_slowdown=s_main,
        candidate_device_slowdown=s_cand,
        serial_device=hw.serial_device(shared),
    )
    p = pgrid[g["w"], g["head"], g["d_bar"], g["k"]]
    latency, compute, break_even, slope = (np.empty(p.size) for _ in range(4))
    for placement in np.unique(placements[g["eh"]]):
        rows = placements[g["eh"]] == placement
        sub = DecodeCostsGrid(**{f: _take(getattr(costs, f), rows) for f in _FIELDS})
        out = ppd_grid_per_token(d=d, d_bar=g["d_bar"][rows], k=g["k"][rows], p=p[rows],
                                 ell=space.ell, costs=sub, early_head=str(placement),
                                 devices_main=tp_main[rows],
                                 devices_candidates=tp_side[rows])  # fmt: skip
        latency[rows], compute[rows], break_even[rows], slope[rows] = (
            out.latency_s, out.compute_s, out.break_even_p, out.latency_per_p_s,
        )  # fmt: skip
    return pd.DataFrame({
        "method": "ppd", "hardware": hw_index, "w": g["w"],
        "tp_main": tp_main, "tp_candidates": tp_cand, "devices": tp_main + tp_cand,
        "d_bar": g["d_bar"], "k": g["k"], "early_head": placements[g["eh"]],
        "head_kind": np.asarray(heads)[g["head"]], "g": 0, "exit_layer": 0, "reuse": False,
        "p": p, "break_even_p": break_even, "latency_s": latency, "compute_s": compute,
        "latency_per_p_s": slope,
    })  # fmt: skip


_FIELDS = (
    "layer_s", "candidate_layer_s", "embedding_s", "early_head_s", "final_head_s",
    "candidate_dispatch_s", "hidden_dispatch_s", "handoff_s", "host_s", "shared_device_slowdown",
    "candidate_device_slowdown", "serial_device",
)  # fmt: skip


def _take(value, rows):
    return value[rows] if np.ndim(value) else value  # a scalar or None as it is


def greedy_rows(hw, hw_index, n_workloads, d, space) -> pd.DataFrame:
    """Greedy decoding, tensor parallel over each degree within the device budget."""
    hw_index = as_int("hw_index", hw_index, minimum=0)
    d = _check_inputs(hw, space, d)
    n_workloads = as_int("n_workloads", n_workloads, limit=10**4)
    return _greedy_rows(hw, hw_index, n_workloads, d, space)


def _greedy_rows(hw, hw_index, n_workloads, d, space) -> pd.DataFrame:
    g = _mesh(tp=[t for t in hw.tp_degrees() if t <= space.max_devices],
              w=np.arange(n_workloads))  # fmt: skip
    device = hw.embedding_seconds(g["tp"]) + d * hw.layer_seconds(g["tp"], 1)
    device = device + hw.final_head_seconds(g["tp"])
    host = one_process_host_s(hw)
    return _rows("greedy", hw_index, g, latency=device + host, compute=g["tp"] * device)


def _rows(method, hw_index, axes, *, latency, compute, **extra) -> pd.DataFrame:
    n = np.size(latency)
    base = {"method": method, "hardware": hw_index, "w": axes["w"], "tp_main": axes["tp"],
            "tp_candidates": 0, "devices": axes["tp"], "d_bar": 0, "k": 0, "early_head": "",
            "head_kind": "", "g": 0, "exit_layer": 0, "reuse": False, "p": np.nan,
            "break_even_p": np.nan}  # fmt: skip
    base.update(extra)
    frame = pd.DataFrame({key: np.broadcast_to(v, n) if np.ndim(v) == 0 else v
                          for key, v in base.items()})  # fmt: skip
    frame["latency_s"], frame["compute_s"] = latency, compute
    return frame


def early_exit_rows(hw, hw_index, pgrid, d, space, heads) -> pd.DataFrame:
    """Self-speculative early-exit decoding over exit layer, draft length, head and reuse."""
    hw_index = as_int("hw_index", hw_index, minimum=0)
    d = _check_inputs(hw, space, d)  # space first: the layers below read it
    _check_inputs(hw, space, d, pgrid, exit_layers=space.exit_layers or [1], heads=heads)
    return _early_exit_rows(hw, hw_index, pgrid, d, space, heads)


def _early_exit_rows(hw, hw_index, pgrid, d, space, heads) -> pd.DataFrame:
    exits = space.exit_layers or tuple(range(1, d))
    g = _mesh(tp=[t for t in hw.tp_degrees() if t <= space.max_devices], exit_layer=exits,
              g=space.draft_lengths, head=np.arange(len(heads)),
              reuse=np.array(space.reuse_draft_layers), w=np.arange(pgrid.shape[0]))  # fmt: skip
    a = pgrid[g["w"], g["head"], g["exit_layer"], 1]
    costs = DecodeCostsGrid(
        layer_s=hw.layer_seconds(g["tp"], 1),
        candidate_layer_s=hw.layer_seconds(g["tp"], g["g"] + 1),
        embedding_s=hw.embedding_seconds(g["tp"]),
        early_head_s=_head_seconds(hw, g["tp"], g["head"], heads),
        final_head_s=hw.final_head_seconds(g["tp"]),
        host_s=one_process_host_s(hw),
    )
    latency, compute = (np.empty(a.size) for _ in range(2))
    for reuse in np.unique(g["reuse"]):
        rows = g["reuse"] == reuse
        sub = DecodeCostsGrid(**{f: _take(getattr(costs, f), rows) for f in _FIELDS})
        draft, verify = early_exit_step_seconds(d=d, exit_layer=g["exit_layer"][rows],
                                                g=g["g"][rows], costs=sub,
                                                reuse_draft_layers=bool(reuse))  # fmt: skip
        tokens = speculative_tokens_per_step(a=a[rows], g=g["g"][rows])
        step = g["g"][rows] * draft + verify
        busy = step - (g["g"][rows] + 1) * costs.host_s
        latency[rows], compute[rows] = step / tokens, g["tp"][rows] * busy / tokens
    return _rows("early-exit", hw_index, g, latency=latency, compute=compute, p=a,
                 head_kind=np.asarray(heads)[g["head"]], g=g["g"], exit_layer=g["exit_layer"],
                 reuse=g["reuse"], k=1)  # fmt: skip


def draft_model_rows(hw, hw_index, n_workloads, d, space) -> pd.DataFrame:
    """Speculative decoding with a separate draft (``space.draft_model``) on main's devices."""
    hw_index = as_int("hw_index", hw_index, minimum=0)
    d = _check_inputs(hw, space, d)
    n_workloads = as_int("n_workloads", n_workloads, limit=10**4)
    if space.draft_model is None:
        raise ValueError("space.draft_model must be a DraftModel for draft-model rows, got None")
    return _draft_model_rows(hw, hw_index, n_workloads, d, space)


def _draft_model_rows(hw, hw_index, n_workloads, d, space) -> pd.DataFrame:
    draft_model = space.draft_model
    g = _mesh(tp=[t for t in hw.tp_degrees() if t <= space.max_devices], g=space.draft_lengths,
              w=np.arange(n_workloads))  # fmt: skip
    token = hw.embedding_seconds(g["tp"]) + d * hw.layer_seconds(g["tp"], 1)
    token = token + hw.final_head_seconds(g["tp"])
    verify = hw.embedding_seconds(g["tp"]) + d * hw.layer_seconds(g["tp"], g["g"] + 1)
    verify = verify + hw.final_head_seconds(g["tp"])
    tokens = speculative_tokens_per_step(a=draft_model.acceptance, g=g["g"])
    busy = g["g"] * draft_model.cost_ratio * token + verify
    step = busy + (g["g"] + 1) * one_process_host_s(hw)
    return _rows("draft-model", hw_index, g, latency=step / tokens,
                 compute=g["tp"] * busy / tokens, p=draft_model.acceptance, g=g["g"],
                 draft_cost_ratio=draft_model.cost_ratio)  # fmt: skip


def screen(hardware: list, ptable, space: PlanSpace, d: int, *, pgrid=None) -> pd.DataFrame:
    """Every configuration of every method on every hardware model, in closed form.

    Columns: see the module docstring; ``workload`` and ``hardware_name`` name the indices.
    ``pgrid``: p to use instead of ``ptable.grid`` (a draw of ``PTable.p_draws`` over the
    space's workloads and heads; the lower bound of p is then left out), or one such array per
    hardware model stacked on a first axis (the planner's draws screened in one call).
    """
    d, grid = check_screen(hardware, ptable, space, d, pgrid=pgrid)
    return _screen(hardware, ptable, space, d, grid, given=pgrid is not None)


def check_screen(hardware: list, ptable, space: PlanSpace, d: int, *, pgrid=None):
    """Check ``screen``'s inputs: (d as an int, the p grid: ``pgrid`` or ``ptable.grid``).
    ValueError naming the argument: hardware models whose shape has ``d`` layers, the space's
    d_bars in [d/2, d), its ks within the p-table's measured range, ``pgrid``'s shape."""
    check_instance("ptable", ptable, PTable)
    for hw in check_hardware(hardware):
        d = _check_inputs(hw, space, d)
    check_instance("space", space, PlanSpace)
    if pgrid is not None:
        shape = (len(space.workloads or ptable.workloads), len(space.heads or ptable.heads),
                 d + 1, ptable.max_k + 1)  # fmt: skip
        ok = isinstance(pgrid, np.ndarray) and pgrid.shape in (shape, (len(hardware), *shape))
        if not ok:
            got = pgrid.shape if isinstance(pgrid, np.ndarray) else type(pgrid).__name__
            raise ValueError(f"pgrid must be an array of shape {shape} (PTable.grid's), or one "
                             f"per hardware model, got {got}")  # fmt: skip
    return d, _check_space(ptable, space, d, pgrid)


def _check_space(ptable, space: PlanSpace, d: int, pgrid=None) -> np.ndarray:
    """The space's d_bars and ks against ``d`` and the p-table, and its FREE table's exit
    layers below ``d`` (``check_screen``; the other inputs checked); the p grid (``pgrid``,
    or ``ptable.grid``)."""
    if pgrid is None:
        pgrid = ptable.grid(d, space.workloads or ptable.workloads, space.heads or ptable.heads)
    d_bars, ks = _d_bars_ks(ptable, space, d)
    if d_bars.min() * 2 < d or d_bars.max() >= d:
        raise ValueError(f"d_bars must lie in [d/2, d) = [{d / 2}, {d})")
    if ks.min() < 1 or ks.max() > ptable.max_k or np.isnan(pgrid[..., ks]).any():
        raise ValueError(f"ks must lie in the p-table's measured range [1, {ptable.max_k}]")
    if space.alternatives and space.free_table is not None:
        _check_free_depth(space.free_table, d)
    return pgrid


def _d_bars_ks(ptable, space: PlanSpace, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The early-prediction layers and candidate counts a screen covers."""
    d_bars = np.asarray(space.d_bars or range(default_d_bar(d), d))
    ks = np.asarray(space.ks or range(1, ptable.max_k + 1))
    return d_bars, ks


@dataclass(frozen=True)
class ScreenCall:
    """What a method's rows are built from: one hardware model of a checked screen."""

    hw: HardwareModel
    """The hardware model."""
    hw_index: int
    """Its index in the screen's hardware list (the rows' ``hardware``)."""
    pgrid: np.ndarray
    """p over (workload, head, layer, k): ``PTable.grid``'s, or a draw of it."""
    d: int
    """The model's layers."""
    space: PlanSpace
    """What the planner searches."""
    d_bars: np.ndarray
    """Early-prediction layers screened (PPD)."""
    ks: np.ndarray
    """Candidate counts screened (PPD)."""
    heads: tuple[str, ...]
    """Early heads screened, in pgrid's order."""
    workloads: tuple[str, ...]
    """Workloads screened, in pgrid's order (the rows' ``w`` indexes them)."""


@dataclass(frozen=True)
class PlannerMethod:
    """One decoding method in the planner, a registration of ``PLANNER_METHODS``: its rows in
    the screen, a row in words, and the confirmation of a row by simulation (a task's cell,
    its simulation and work; ``sim.plan_cells``)."""

    method: str
    """The rows' ``method`` (``METHODS``)."""
    applies: Callable[[PlanSpace], bool]
    """Whether a space screens the method."""
    build_rows: Callable[[ScreenCall], pd.DataFrame]
    """Its rows on one hardware model (columns: the module docstring's)."""
    label_row: Callable[[object], str]
    """A row in a few words (``sim.plan.label``)."""
    build_cell: Callable[..., dict]
    """(row, hw, ell, d) -> the method's keys of a confirmation cell, JSON-ready."""
    cell_keys: tuple[str, ...]
    """Those keys (``sim.plan_limits.check_cell``)."""
    simulate_cell: Callable[..., tuple]
    """(cell, seed) -> seconds and busy device-seconds per token of cell["n"] sequences."""
    cell_work: Callable[[dict], float]
    """Work units of simulating one sequence of a cell (``sim.plan_limits.confirm_work``)."""

    def __post_init__(self) -> None:
        check_instance("method", self.method, str)
        check_names("cell_keys", self.cell_keys)
        for name in ("applies", "build_rows", "label_row", "build_cell", "simulate_cell",
                     "cell_work"):  # fmt: skip
            if not callable(getattr(self, name)):
                raise ValueError(f"{name} must be callable, got {getattr(self, name)!r:.60}")


def _ppd_screen(c: ScreenCall) -> pd.DataFrame:
    return _ppd_rows(c.hw, c.hw_index, c.pgrid, c.d, c.space, c.d_bars, c.ks, c.heads)


def _greedy_screen(c: ScreenCall) -> pd.DataFrame:
    """Greedy on every tensor-parallel degree; without alternatives, the baseline alone
    (greedy on one device, always screened)."""
    space = c.space if c.space.alternatives else replace(c.space, max_devices=1)
    return _greedy_rows(c.hw, c.hw_index, len(c.workloads), c.d, space)


def _early_exit_screen(c: ScreenCall) -> pd.DataFrame:
    return _early_exit_rows(c.hw, c.hw_index, c.pgrid, c.d, c.space, c.heads)


def _draft_model_screen(c: ScreenCall) -> pd.DataFrame:
    return _draft_model_rows(c.hw, c.hw_index, len(c.workloads), c.d, c.space)


def _free_screen(c: ScreenCall) -> pd.DataFrame:
    return _free_rows(c.hw, c.hw_index, c.space.free_table, c.workloads, c.d,
                      max_devices=c.space.max_devices, ell=c.space.ell)  # fmt: skip


PLANNER_METHODS = (
    PlannerMethod("ppd", lambda space: space.include_ppd, _ppd_screen, _ppd_label, _ppd_cell,
                  SCHEDULE_CELL_KEYS, _simulate_schedule, _schedule_work),
    PlannerMethod("greedy", lambda space: True, _greedy_screen, _greedy_label, _greedy_cell,
                  SCHEDULE_CELL_KEYS, _simulate_schedule, _schedule_work),
    PlannerMethod("early-exit", lambda space: space.alternatives, _early_exit_screen,
                  _early_exit_label, _speculative_cell, SPECULATIVE_CELL_KEYS,
                  _simulate_speculative, _speculative_work),
    PlannerMethod("draft-model", lambda space: space.alternatives and space.draft_model is not None,
                  _draft_model_screen, _draft_model_label, _speculative_cell,
                  SPECULATIVE_CELL_KEYS, _simulate_speculative, _speculative_work),
    PlannerMethod("free", lambda space: space.alternatives and space.free_table is not None,
                  _free_screen, _free_label, lambda row, hw, ell, d: _free_cell(row, hw, d),
                  FREE_CELL_KEYS, _confirm_free, _free_work),
)  # fmt: skip
"""The planner's methods, in the order their rows are screened (per hardware model): a new
method adds its module (rows, label, cell, simulation) and one registration here."""
METHODS = tuple(m.method for m in PLANNER_METHODS)
"""Decoding methods the planner compares."""
METHOD_OF = {m.method: m for m in PLANNER_METHODS}
"""Each registered method by name."""


def _screen(hardware, ptable, space, d, pgrid, *, given: bool) -> pd.DataFrame:
    """``screen`` on checked inputs (``check_screen``): ``pgrid`` the p grid (or one per
    hardware model), ``given``: drawn rather than the table's own (no lower bound of p)."""
    workloads = tuple(space.workloads or ptable.workloads)
    heads = tuple(space.heads or ptable.heads)
    per_hw = pgrid.ndim == 5
    d_bars, ks = _d_bars_ks(ptable, space, d)
    lower = None if given else ptable.lower_bound_column
    p_low = None if lower is None else ptable.grid(d, workloads, heads, column=lower)
    screens = [m for m in PLANNER_METHODS if m.applies(space)]
    frames = []
    for i, hw in enumerate(hardware):
        call = ScreenCall(hw, i, pgrid[i] if per_hw else pgrid, d, space, d_bars, ks, heads,
                          workloads)  # fmt: skip
        frames += [m.build_rows(call) for m in screens]
    out = pd.concat(frames, ignore_index=True)
    out["quality"] = out.get("quality", pd.Series(np.nan, index=out.index)).fillna(EXACT_QUALITY)
    out["p_low"] = np.nan  # the lower end of p's 95 % interval, where the table gives one
    if p_low is not None:
        rows = out.method.isin(("ppd", "early-exit")).to_numpy()
        w = out.w.to_numpy()[rows]
        h = pd.Index(heads).get_indexer(out.head_kind[rows])
        layer = np.where(out.method[rows] == "ppd", out.d_bar[rows], out.exit_layer[rows])
        out.loc[rows, "p_low"] = p_low[w, h, layer.astype(int), out.k[rows].astype(int)]
    out.insert(1, "workload", np.asarray(workloads)[out.pop("w").to_numpy()])
    out.insert(2, "hardware_name", np.asarray([hw.name for hw in hardware])[out["hardware"]])
    return out
