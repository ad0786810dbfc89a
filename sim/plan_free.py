"""FREE in the planner: rows priced from a measured FREE table, and their simulated check.

FREE (``measure.free``, ``ppdmodel.free``) is the planner's one approximate method: its
quality against greedy decoding's output depends on the threshold and is measured, never
assumed. A FREE table (``sim.formats.read_free_table``: exit layer, threshold, the exit rate
and quality measured there) gives one planner row per table row, tensor-parallel degree and
workload: seconds and busy device-seconds per token at the measured exit rate taken as i.i.d.
(``ppdmodel.alternatives.free_seconds_per_token`` / ``free_compute_per_token``; every device
of a tensor-parallel group counted), under the hardware model's costs (``plan_free_costs``),
and the table's ``quality``. Without a table the planner leaves FREE out.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ppdmodel.alternatives import free_compute_per_token, free_seconds_per_token
from ppdmodel.costs import DecodeCosts
from ppdmodel.validation import as_int, check_instance, check_keys
from sim.formats import validate_free_table
from sim.free_schedule import free_costs, simulate_free
from sim.hardware_costs import HardwareModel, ProfileHardware, early_head_cost
from sim.matches import MAX_ELL

FREE_ROW_FIELDS = ("exit_layer", "threshold", "exit_rate", "quality", "free_mode", "tp_main",
                   "devices", "head_kind")  # fmt: skip
"""Fields of a FREE planner row (``free_rows``) that its label and its cell read."""
FREE_CELL_KEYS = ("n", "ell", "tp_main", "d", "exit_layer", "q", "costs")
"""Keys of a FREE confirmation cell (``sim.plan._cell`` with ``free_cell``)."""
FREE_KNOTS = (2, 4, 8, 16, 32, 64)
"""Rows at which a device model's per-layer time is sampled for FREE's deep passes (linear
between them and beyond the last, as ``ppdmodel.free`` extends it)."""


def plan_free_costs(hw, *, tp: int, head: str) -> DecodeCosts:
    """FREE's DecodeCosts on ``hw`` at tensor parallelism ``tp`` with exit head ``head``: a
    measured profile's own k-row batch times (as ``ppd validate --free`` prices them), else the
    device model at ``FREE_KNOTS`` rows; the exit head priced as the planner's early head."""
    rows = FREE_KNOTS
    if isinstance(hw, ProfileHardware):  # its measured ks, so layer(r) extends as validate's
        rows = tuple(k for k, _ in hw.base.candidate_layer_s_by_k if k > 1) or (2,)
    costs = free_costs(hw, rows=rows, tp=tp)
    return replace(costs, early_head_s=float(early_head_cost(hw, tp, head)))


def free_rows(hw, hw_index: int, table: pd.DataFrame, workloads, d: int, *, max_devices: int,
              ell: int) -> pd.DataFrame:  # fmt: skip
    """FREE's planner rows on one hardware model (module docstring); ``table`` is a validated
    FREE table, ``workloads`` the plan's (a row with a workload applies to that one only)."""
    check_instance("hw", hw, HardwareModel)
    hw_index = as_int("hw_index", hw_index, minimum=0)
    check_instance("table", table, pd.DataFrame)
    table = validate_free_table(table)
    check_instance("workloads", workloads, (list, tuple))
    for workload in workloads:
        check_instance("workloads[...]", workload, str)
    d = as_int("d", d, minimum=2, limit=10**6)
    max_devices = as_int("max_devices", max_devices, limit=10**6)
    ell = as_int("ell", ell, minimum=2, limit=MAX_ELL)
    _check_free_depth(table, d)
    return _free_rows(hw, hw_index, table, workloads, d, max_devices=max_devices, ell=ell)


def _check_free_depth(table: pd.DataFrame, d: int) -> None:
    """ValueError when a validated FREE ``table`` exits at or below the planned model's d."""
    too_deep = table.exit_layer >= d
    if too_deep.any():
        raise ValueError(f"FREE table: exit_layer {int(table.exit_layer[too_deep].iloc[0])} is "
                         f"not below the planned model's d = {d}")  # fmt: skip


def _free_rows(hw, hw_index, table, workloads, d, *, max_devices, ell) -> pd.DataFrame:
    """``free_rows`` on checked inputs (the planner's screen)."""
    frames = []
    for tp in (t for t in hw.tp_degrees() if t <= max_devices):
        for head, part in table.groupby("head", sort=False):
            costs = plan_free_costs(hw, tp=int(tp), head=str(head))
            kw = dict(d=d, exit_layer=part.exit_layer.to_numpy(), q=part.exit_rate.to_numpy(),
                      ell=ell, costs=costs)  # fmt: skip
            latency = np.atleast_1d(free_seconds_per_token(**kw))
            compute = tp * np.atleast_1d(free_compute_per_token(**kw))
            for w, workload in enumerate(workloads):
                mine = part.workload.isin(("", workload)).to_numpy()
                if mine.any():
                    frames.append(_frame(part[mine], hw_index, w, int(tp), latency[mine],
                                         compute[mine]))  # fmt: skip
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _frame(part, hw_index, w, tp, latency, compute) -> pd.DataFrame:
    n = len(part)
    return pd.DataFrame({
        "method": "free", "hardware": hw_index, "w": w, "tp_main": tp, "tp_candidates": 0,
        "devices": tp, "d_bar": 0, "k": 0, "early_head": "",
        "head_kind": part["head"].to_numpy(), "g": 0, "exit_layer": part.exit_layer.to_numpy(),
        "reuse": False, "p": np.nan, "break_even_p": np.nan, "latency_s": latency,
        "compute_s": compute, "quality": part.quality.to_numpy(),
        "threshold": part.threshold.to_numpy(), "exit_rate": part.exit_rate.to_numpy(),
        "quality_metric": part.quality_metric.to_numpy(), "free_mode": part["mode"].to_numpy(),
    }, index=range(n))  # fmt: skip


def free_label(row) -> str:
    """'FREE L_s=24 threshold=0.5 sync, quality 0.27, TP1 (1 dev)'."""
    _check_free_row(row)
    return _free_label(row)


def _free_label(row) -> str:
    return (
        f"FREE L_s={int(row.exit_layer)} threshold={row.threshold:g} {row.free_mode}, "
        f"exit rate {row.exit_rate:.2f}, quality {row.quality:.2f}, TP{int(row.tp_main)} "
        f"({int(row.devices)} dev)"
    )


def free_cell(row, hw, d: int) -> dict:
    """What a confirmation task of a FREE row needs, JSON-ready."""
    _check_free_row(row)
    check_instance("hw", hw, HardwareModel)
    d = as_int("d", d, minimum=2, limit=10**6)
    return _free_cell(row, hw, d)


def _free_cell(row, hw, d: int) -> dict:
    costs = plan_free_costs(hw, tp=int(row.tp_main), head=str(row.head_kind))
    return {"d": d, "exit_layer": int(row.exit_layer), "q": float(row.exit_rate),
            "costs": costs.to_dict()}  # fmt: skip


def confirm_free(cell: dict, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """Seconds and busy device-seconds per token of ``cell["n"]`` simulated FREE sequences
    (``sim.simulate_free``, i.i.d. exits at the row's exit rate)."""
    check_keys("cell", cell, FREE_CELL_KEYS)
    check_instance("seed", seed, np.random.SeedSequence)
    cell = {**cell, "n": as_int("cell['n']", cell["n"], limit=10**6),
            "ell": as_int("cell['ell']", cell["ell"], minimum=2, limit=MAX_ELL),
            "tp_main": as_int("cell['tp_main']", cell["tp_main"], limit=10**6)}  # fmt: skip
    check_instance("cell['costs']", cell["costs"], dict)
    return _confirm_free(cell, seed)


def _confirm_free(cell: dict, seed: np.random.SeedSequence) -> tuple[np.ndarray, np.ndarray]:
    """``confirm_free`` on a cell the planner built (``sim.plan._cell``)."""
    n, ell, tp = cell["n"], cell["ell"], cell["tp_main"]
    costs = DecodeCosts.from_dict(cell["costs"])
    lat, comp = np.empty(n), np.empty(n)
    for i, s in enumerate(seed.spawn(n)):
        res = simulate_free(d=cell["d"], exit_layer=cell["exit_layer"], costs=costs,
                            q=cell["q"], ell=ell, seed=np.random.default_rng(s),
                            record_events=False)  # fmt: skip
        lat[i], comp[i] = res.latency_s / ell, tp * res.busy_s / ell
    return lat, comp


def _check_free_row(row) -> None:
    """Refuse anything but a FREE planner row (a DataFrame row or ``itertuples`` tuple)."""
    missing = [f for f in FREE_ROW_FIELDS if not hasattr(row, f)]
    if isinstance(row, str | bytes) or missing:
        raise ValueError(f"row must be a FREE row of a planner frame; missing {missing}, got "
                         f"{type(row).__name__}")  # fmt: skip
