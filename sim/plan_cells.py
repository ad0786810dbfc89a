"""Each planner method's row in words and its confirmation by simulation: the method's part of
a task's cell (JSON-ready), the simulation of n sequences of it, and its work estimate.

Registered with the method's rows in ``sim.plan_grid.PLANNER_METHODS``; ``sim.plan`` builds the
cells (``_cell``) and runs them (``confirm_cell``) through that registry:

* ``ppd`` and ``greedy``: a ``sim.SimConfig`` under the row's ``DecodeCosts``, simulated on
  the SimPy schedule (``sim.simulate``);
* ``early-exit`` and ``draft-model``: one step's seconds and busy device-seconds from the
  scalar ``DecodeCosts`` path (``ppdmodel.alternatives``), and a Monte Carlo of the verify rule;
* ``free``: ``sim.plan_free``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ppdmodel.alternatives import (
    draft_model_step_seconds,
    early_exit_step_seconds,
    sample_speculative_steps,
)
from ppdmodel.defaults import default_d_bar
from sim.config import RUN_OVERHEAD, SimConfig, estimated_work
from sim.hardware_costs import decode_costs, early_head_cost, greedy_costs
from sim.matches import Bernoulli
from sim.run import simulate

FREE_BLOCKS_PER_TOKEN = 3
"""Simulated blocks per token of a FREE sequence (shallow layers, exit head, deep layers)."""
SCHEDULE_CELL_KEYS = ("config",)
"""The method keys of a PPD or greedy cell: its ``SimConfig.to_dict()``."""
FREE_CELL_KEYS = ("d", "exit_layer", "q", "costs")
"""The method keys of a FREE cell (``sim.plan_free.free_cell``)."""
SPECULATIVE_CELL_KEYS = ("a", "g", "step_s", "busy_s")
"""The method keys of a speculative cell: acceptance, draft length, one step's seconds and
busy device-seconds."""


# -- rows in words -----------------------------------------------------------------------


def _devices(row) -> str:
    return f"{int(row.devices)} dev"


def _greedy_label(row) -> str:
    return f"greedy, TP{int(row.tp_main)} ({_devices(row)})"


def _ppd_label(row) -> str:
    side = "shared" if row.tp_candidates == 0 else f"TP{int(row.tp_candidates)}"
    return (
        f"PPD d_bar={int(row.d_bar)} k={int(row.k)} {row.head_kind} head on "
        f"{row.early_head}, main TP{int(row.tp_main)} + candidates {side} ({_devices(row)})"
    )


def _early_exit_label(row) -> str:
    reuse = ", reuse" if row.reuse else ""
    return (
        f"early-exit L={int(row.exit_layer)} g={int(row.g)} {row.head_kind} head{reuse}, "
        f"TP{int(row.tp_main)} ({_devices(row)})"
    )


def _draft_model_label(row) -> str:
    return f"draft model g={int(row.g)} a={row.p:.2f}, TP{int(row.tp_main)} ({_devices(row)})"


# -- cells -------------------------------------------------------------------------------


def _ppd_cell(row, hw, ell: int, d: int) -> dict:
    shared = row.tp_candidates == 0
    costs = decode_costs(hw, d_bar=int(row.d_bar), k=int(row.k), early_head=row.early_head,
                         head=row.head_kind, tp_main=int(row.tp_main),
                         tp_candidates=None if shared else int(row.tp_candidates))  # fmt: skip
    config = SimConfig(d=d, d_bar=int(row.d_bar), k=int(row.k), ell=ell,
                       matches=Bernoulli(float(row.p)), costs=costs, early_head=row.early_head,
                       n_gpus=1 if shared or costs.shared_device else 2)  # fmt: skip
    return {"config": config.to_dict()}


def _greedy_cell(row, hw, ell: int, d: int) -> dict:
    config = SimConfig(d=d, d_bar=default_d_bar(d), k=1, ell=ell, schedule="greedy",
                       costs=greedy_costs(hw, tp=int(row.tp_main)))  # fmt: skip
    return {"config": config.to_dict()}


def _speculative_cell(row, hw, ell: int, d: int) -> dict:
    """Step costs from the scalar DecodeCosts path (not the grid's)."""
    return {"a": float(row.p), "g": int(row.g), **_step_seconds(row, hw, d)}


def _step_seconds(row, hw, d: int) -> dict:
    """One speculative step's seconds and busy device-seconds (all tp devices counted)."""
    tp, g = int(row.tp_main), int(row.g)
    costs = replace(greedy_costs(hw, tp=tp), candidate_layer_s_by_k={g + 1: float(
        hw.layer_seconds(tp, g + 1))})  # fmt: skip
    if row.method == "early-exit":
        costs = replace(costs, early_head_s=float(early_head_cost(hw, tp, row.head_kind)))
        draft, verify = early_exit_step_seconds(d=d, exit_layer=int(row.exit_layer), g=g,
                                                costs=costs,
                                                reuse_draft_layers=bool(row.reuse))  # fmt: skip
    else:  # a separate draft model: cost_ratio of a greedy token's device time per draft
        draft, verify = draft_model_step_seconds(d=d, g=g, c=row.draft_cost_ratio, costs=costs)
    step = g * draft + verify
    return {"step_s": float(step), "busy_s": float(tp * (step - (g + 1) * costs.host_s))}


# -- simulations: per-token seconds and busy device-seconds of n sequences ---------------


def _simulate_schedule(cell: dict, seed: np.random.SeedSequence):
    n, ell = cell["n"], cell["ell"]
    config = SimConfig.from_dict(cell["config"])
    lat, comp = np.empty(n), np.empty(n)
    for i, s in enumerate(seed.spawn(n)):
        res = simulate(config, seed=s, record_events=False)
        busy = res.busy_s
        side = busy[1] * cell["tp_candidates"] if len(busy) > 1 else 0.0
        lat[i] = res.latency_s / ell
        comp[i] = (busy[0] * cell["tp_main"] + side) / ell
    return lat, comp


def _simulate_speculative(cell: dict, seed: np.random.SeedSequence):
    """ell verify steps per sequence: time per token = steps * step_s / tokens."""
    n, ell = cell["n"], cell["ell"]
    lat, comp = np.empty(n), np.empty(n)
    for i, s in enumerate(seed.spawn(n)):
        tokens = sample_speculative_steps(a=cell["a"], g=cell["g"], n_steps=ell, seed=s)
        lat[i] = ell * cell["step_s"] / tokens.sum()
        comp[i] = ell * cell["busy_s"] / tokens.sum()
    return lat, comp


# -- work per sequence, in work units of about 1 us (``sim.plan_limits.confirm_work``) ---


def _schedule_work(cell: dict) -> float:
    return estimated_work(SimConfig.from_dict(cell["config"]))


def _free_work(cell: dict) -> float:
    """Shallow layers, exit head, deep layers per token."""
    return RUN_OVERHEAD + FREE_BLOCKS_PER_TOKEN * cell["ell"]


def _speculative_work(cell: dict) -> float:
    """A speculative Monte Carlo: ell verify steps, vectorised."""
    return RUN_OVERHEAD + cell["ell"]
