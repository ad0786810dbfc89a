"""StepCosts: the seconds of every part of a decode step, the one input of ``sim.schedule``.

A ``SimConfig`` prices its schedule one of two ways, and ``step_costs`` turns either into
the same StepCosts:

* a per-layer cost model (``sim.cost``: uniform unit layers, roofline, measured per-layer
  times) with an optional link and fixed overheads: the paper's accounting. Speculation runs
  to the end of its layers even when rejected (compute = T + k(d - d_bar) ell under unit
  layers), and a GPU shared by main and sub-processes runs one block at a time, main first;
* ``ppdmodel.DecodeCosts`` (every term in seconds, early head on either side, a candidate
  batch, a shared or serial device): the real decoder's accounting. A rejected batch is
  abandoned when main moves on, and a shared device slows each stream by its own factor
  (main's ``slowdown``, the batch's ``candidate_slowdown``) while both compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppdmodel.validation import check_instance
from sim.config import SimConfig
from sim.hardware_costs import dispatch_bytes

SHARINGS = ("exclusive", "fluid", "serial")
"""How main and a candidate group share GPU 0: one block at a time with main first
(``exclusive``), both computing, slowed by ``slowdown`` (``fluid``, ``sim.device``), or main
running the whole batch itself at the split (``serial``, ``DecodeCosts.serial_device``)."""


@dataclass(frozen=True)
class Group:
    """Candidates (sub-processes) run as one batch on one GPU."""

    label: str
    """``sub1+sub3``: the sub-processes it holds."""
    gpu: int
    """The GPU it runs on (0: main's)."""
    layer_s: tuple[float, ...]
    """Seconds of layers 1..s at this batch (index 0 is layer 1)."""
    embedding_s: float
    """The embedding at this batch."""
    dispatch_s: float
    """The message that starts it (candidate ids or main's hidden state), seconds."""


@dataclass(frozen=True)
class StepCosts:
    """Seconds of each part of a PPD (or greedy) step for one configuration (module docstring)."""

    main_layer_s: tuple[float, ...]
    """Seconds of main's layers 1..d at batch 1 (index 0 is layer 1)."""
    embedding_s: float
    """Main's embedding, seconds."""
    early_head_s: float
    """The early head at d_bar (on the side ``early_head`` names), seconds."""
    final_head_s: float
    """The final norm and LM head after layer d, seconds."""
    handoff_s: float
    """One accepted hand-off to main, seconds."""
    host_s: float
    """Host time after each token, seconds."""
    groups: tuple[Group, ...]
    """The candidate groups, the accepted candidate's (sub1's) first."""
    early_head: str = "main"
    """``main`` or ``candidates``: where the early head runs."""
    sharing: str = "exclusive"
    """How a group on GPU 0 shares it with main (``SHARINGS``)."""
    slowdown: float = 1.0
    """Factor by which main slows while both compute on one device (``fluid``), and the
    candidate batch too unless ``candidate_slowdown`` is given."""
    abandon_rejected: bool = False
    """Cut a rejected candidate batch when main moves on (the real decoder) instead of letting
    it finish its layers (the paper's accounting)."""
    unit_s: float = 1.0
    """Seconds of one time unit (one layer at batch 1) for reporting."""
    candidate_slowdown: float | None = None
    """Factor by which the candidate batch slows while both compute (``fluid``); None:
    ``slowdown``."""


def step_costs(config: SimConfig) -> StepCosts:
    """The StepCosts of ``config``: from ``config.costs`` when set, else from its cost model."""
    check_instance("config", config, SimConfig)
    return _from_decode_costs(config) if config.costs is not None else _from_cost_model(config)


def _placement(config: SimConfig) -> list[tuple[str, int, int]]:
    """(label, gpu, rows) per GPU hosting sub-processes, sub1's first: sub-process j on GPU
    1 + (j - 1) % (n_gpus - 1), or on GPU 0 when n_gpus = 1."""
    by_gpu: dict[int, list[int]] = {}
    for j in range(1, config.k + 1):
        gpu = 0 if config.n_gpus == 1 else 1 + (j - 1) % (config.n_gpus - 1)
        by_gpu.setdefault(gpu, []).append(j)
    return [("+".join(f"sub{j}" for j in subs), gpu, len(subs)) for gpu, subs in by_gpu.items()]


def _from_cost_model(config: SimConfig) -> StepCosts:
    cost, link, s = config.cost, config.link, config.spec_layers

    def message_s(gpu: int, nbytes) -> float:
        return link.transfer_time(float(nbytes)) if link is not None and gpu != 0 else 0.0

    groups = tuple(
        Group(label, gpu, tuple(cost.block_seconds(i, i, rows) for i in range(1, s + 1)),
              cost.embed_seconds(rows),
              message_s(gpu, dispatch_bytes(config.shape, config.k, 0, "main")) if link else 0.0)
        for label, gpu, rows in _placement(config)
    )  # fmt: skip
    handoff = message_s(groups[0].gpu, config.shape.handoff_bytes(1, s)) if link else 0.0
    return StepCosts(
        main_layer_s=tuple(cost.block_seconds(i, i, 1) for i in range(1, config.d + 1)),
        embedding_s=cost.embed_seconds(1),
        early_head_s=cost.head_seconds(1),
        final_head_s=cost.head_seconds(1),
        handoff_s=handoff + config.per_handoff_overhead_s,
        host_s=config.per_token_overhead_s,
        groups=groups,
        unit_s=cost.unit_seconds(),
    )


def _from_decode_costs(config: SimConfig) -> StepCosts:
    costs, s = config.costs, config.spec_layers
    layer_k = float(costs.candidate_layer_seconds(config.k))
    groups = tuple(
        Group(label, gpu, (layer_k,) * s, costs.embedding_s,
              costs.dispatch_seconds(config.early_head))
        for label, gpu, _ in _placement(config)
    )  # fmt: skip
    same = ("embedding_s", "early_head_s", "final_head_s", "handoff_s", "host_s")
    return StepCosts(
        main_layer_s=(costs.layer_s,) * config.d,
        groups=groups,
        early_head=config.early_head,
        sharing="serial" if costs.serial_device else "fluid",
        slowdown=1.0 if costs.serial_device else costs.shared_device_slowdown,
        candidate_slowdown=1.0 if costs.serial_device else costs.candidate_slowdown,
        abandon_rejected=True,
        unit_s=costs.layer_s,
        **{name: getattr(costs, name) for name in same},  # DecodeCosts' terms of those names
    )
