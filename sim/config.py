"""SimConfig: everything one simulated PPD (or greedy) sequence depends on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import pandas as pd

from ppdmodel.costs import DecodeCosts, check_early_head
from ppdmodel.validation import as_int, as_real, check_flag, check_instance, check_keys
from sim.cost import CostModel, MeasuredCost, RooflineCost, UniformCost
from sim.hardware import GPUSpec, Link
from sim.matches import (
    MAX_ELL,
    Bernoulli,
    MatchSource,
    PerPosition,
    Replay,
    match_source_from_dict,
    match_source_to_dict,
)
from sim.shape import ModelShape

SCHEDULES = ("ppd", "greedy")
MAX_K = 2**18
"""Largest k: 262,144 candidates, above the largest vocabularies in use (256k)."""
MAX_GPUS = 4096
"""Largest n_gpus (modelled GPUs); more candidates are batched on fewer GPUs."""
MAX_WORK = 5 * 10**6
"""Largest ``estimated_work`` of one simulated sequence (about 5 s on one core)."""
RUN_OVERHEAD = 200
"""Work units of setting up one simulated sequence (measured: ~150 us fast path, ~500 us
on a shared GPU for 3 tokens)."""
SHARED_GPU_WEIGHT = 40
"""Work units per block when main and sub-processes share one GPU (SimPy resources and
processes, ~40 us a block) instead of ~1 us on the fast path."""


def estimated_work(config: SimConfig) -> int:
    """Rough cost of simulating one sequence of ``config`` in work units of about 1 us.

    Blocks per token: main's prefix and suffix, one speculation per GPU and a hand-off,
    ell * (n_gpus + 2) in all (times d with per_layer_events), each weighted
    ``SHARED_GPU_WEIGHT`` on a shared GPU, plus ``RUN_OVERHEAD``.
    """
    check_instance("config", config, SimConfig)
    blocks = config.ell * (config.n_gpus + 2) * (config.d if config.per_layer_events else 1)
    shared = config.n_gpus == 1 and config.schedule == "ppd"
    return RUN_OVERHEAD + blocks * (SHARED_GPU_WEIGHT if shared else 1)


@dataclass
class SimConfig:
    """One simulated decode of ell tokens: model depth, PPD parameters, hardware, overheads."""

    d: int
    """Number of decoder layers."""
    d_bar: int
    """Layer of the early prediction, d/2 <= d_bar < d (below d/2 only with allow_below_half)."""
    k: int
    """Number of early candidates, one sub-process each."""
    ell: int
    """Generated tokens (prefill excluded)."""
    matches: MatchSource = field(default_factory=lambda: Bernoulli(0.5))
    """Where m_t comes from: Bernoulli(p), PerPosition(p_t) or Replay(m)."""
    cost: CostModel = field(default_factory=UniformCost)
    """Per-layer time model: UniformCost, RooflineCost or MeasuredCost."""
    n_gpus: int | None = None
    """Modelled GPUs, 1..k+1 (None: k+1, one per process). GPU 0 runs the main process;
    sub-processes are dealt round-robin over GPUs 1..n_gpus-1 (all on GPU 0 when n_gpus = 1);
    sub-processes on the same GPU run as one batch."""
    link: Link | None = None
    """Link carrying hand-offs and candidate dispatch (None: free and instantaneous)."""
    shape: ModelShape | None = None
    """Model shape giving hand-off bytes (needed when a link is set; default: the roofline's)."""
    per_token_overhead_s: float = 0.0
    """Fixed host-side cost added after each generated token, seconds."""
    per_handoff_overhead_s: float = 0.0
    """Fixed cost of each accepted early prediction (hand-off), seconds."""
    schedule: str = "ppd"
    """``ppd`` (Algorithm 2) or ``greedy`` (the baseline: d layers per token on GPU 0)."""
    allow_below_half: bool = False
    """Simulate d_bar < d/2 as this project's extension (outside Theorem 4.1), not refuse it."""
    per_layer_events: bool = False
    """Log (and simulate) every layer as its own event instead of one event per block."""
    costs: DecodeCosts | None = None
    """Every cost term in seconds (``ppdmodel.DecodeCosts``; this project's extension), priced
    in place of ``cost`` (``sim.step_costs``): the k candidates as one batch on GPU 1
    (``n_gpus`` 2, the default) or on main's GPU 0 (``n_gpus`` 1, the default when
    ``costs.shared_device``: a slowdown > 1, or a serial device); ``cost``, ``link`` and the
    two overheads must then keep their defaults."""
    early_head: str = "main"
    """Where the early LM head runs with ``costs``: ``main`` (on main's critical path) or
    ``candidates`` (main hands its layer-d_bar hidden state over and keeps going)."""

    def __post_init__(self) -> None:
        self.d = as_int("d", self.d)
        self.d_bar = as_int("d_bar", self.d_bar)
        self.k = as_int("k", self.k, limit=MAX_K)
        self.ell = as_int("ell", self.ell, limit=MAX_ELL)
        check_early_head(self.early_head)
        if self.costs is not None:
            self._check_costs()
        if not self.d_bar < self.d:
            raise ValueError(
                f"d_bar must be in [d/2, d) = [{self.d / 2}, {self.d}), got {self.d_bar}"
            )
        self.allow_below_half = check_flag("allow_below_half", self.allow_below_half)
        self.per_layer_events = check_flag("per_layer_events", self.per_layer_events)
        if 2 * self.d_bar < self.d and not self.allow_below_half:
            raise ValueError(
                f"d_bar = {self.d_bar} < d/2 = {self.d / 2} (d = {self.d}) is outside Algorithm 2 "
                "and Theorem 4.1"
                "; "
                "pass allow_below_half=True to simulate it as an extension"
            )
        if self.n_gpus is None:
            if self.k + 1 > MAX_GPUS:
                raise ValueError(
                    f"n_gpus defaults to k + 1 = {self.k + 1}, above the limit {MAX_GPUS} "
                    "modelled GPUs: pass n_gpus (sub-processes on one GPU run as one batch)"
                )
            self.n_gpus = self.k + 1
        self.n_gpus = as_int("n_gpus", self.n_gpus, limit=MAX_GPUS)
        if not 1 <= self.n_gpus <= self.k + 1:
            raise ValueError(f"n_gpus must be in [1, k+1] = [1, {self.k + 1}], got {self.n_gpus}")
        for name in ("per_token_overhead_s", "per_handoff_overhead_s"):
            setattr(self, name, as_real(name, getattr(self, name)))
        if not isinstance(self.schedule, str) or self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not isinstance(self.matches, Bernoulli | PerPosition | Replay):
            raise ValueError("matches must be a Bernoulli, PerPosition or Replay")
        if isinstance(self.matches, Replay) and self.matches.ell != self.ell:
            raise ValueError(f"ell = {self.ell} but matches (Replay) has ell = {self.matches.ell}")
        if isinstance(self.matches, PerPosition) and len(self.matches.p_t) < self.ell - 1:
            raise ValueError(f"matches (PerPosition) p_t needs ell - 1 = {self.ell - 1} values")
        if not isinstance(self.cost, UniformCost | RooflineCost | MeasuredCost):
            raise ValueError("cost must be a UniformCost, RooflineCost or MeasuredCost")
        if isinstance(self.cost, MeasuredCost) and self.cost.num_layers != self.d:
            raise ValueError(
                f"cost (MeasuredCost) holds per-layer times of a {self.cost.num_layers}-layer "
                f"model, but d = {self.d}"
            )
        if self.link is not None:
            check_instance("link", self.link, Link, "e.g. Link.from_name('nvlink4')")
        if self.shape is not None:
            check_instance("shape", self.shape, ModelShape, "e.g. ModelShape.from_name(...)")
        if self.shape is None and isinstance(self.cost, RooflineCost):
            self.shape = self.cost.shape
        if self.link is not None and self.shape is None:
            raise ValueError("shape is required with a link (it sets the hand-off bytes)")
        work = estimated_work(self)
        if work > MAX_WORK:
            raise ValueError(
                f"ell = {self.ell} tokens with n_gpus = {self.n_gpus}"
                + (f", d = {self.d} per-layer events" if self.per_layer_events else "")
                + f" is about {work / 1e6:.3g} s of simulation, above the limit of "
                f"{MAX_WORK / 1e6:.3g} s (sim.config.MAX_WORK): reduce ell or n_gpus"
            )

    def _check_costs(self) -> None:
        """``costs`` excludes the per-layer ``cost`` model, links and overheads; sets n_gpus."""
        if not isinstance(self.costs, DecodeCosts):
            raise ValueError(f"costs must be a ppdmodel.DecodeCosts, got {self.costs!r}")
        clashes = {
            "cost": self.cost != UniformCost(),
            "link": self.link is not None,
            "per_token_overhead_s": self.per_token_overhead_s != 0,
            "per_handoff_overhead_s": self.per_handoff_overhead_s != 0,
            "allow_below_half": self.allow_below_half,
        }
        named = [name for name, clash in clashes.items() if clash]
        if named:
            raise ValueError(
                f"costs (DecodeCosts) holds every cost term; leave {named} at their defaults"
            )
        if self.n_gpus is None:
            self.n_gpus = 1 if self.costs.shared_device else 2
        if self.n_gpus not in (1, 2):
            raise ValueError(f"n_gpus must be 1 (shared) or 2 with costs, got {self.n_gpus}")
        if self.n_gpus == 2 and self.costs.shared_device:
            raise ValueError(
                "costs with a slowdown > 1 (shared_device_slowdown, candidate_device_slowdown) "
                "or serial_device model one shared device: n_gpus must be 1"
            )

    @property
    def spec_layers(self) -> int:
        """Layers a sub-process runs per token: d - d_bar (or d_bar below d/2, the extension)."""
        return min(self.d - self.d_bar, self.d_bar)

    @property
    def extension(self) -> bool:
        """True when d_bar < d/2: outside the paper, simulated as this project's extension."""
        return 2 * self.d_bar < self.d

    def to_dict(self) -> dict:
        """A JSON-ready dict (``from_dict`` inverts it)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["matches"] = match_source_to_dict(self.matches)
        data["cost"] = _cost_to_dict(self.cost)
        data["link"] = None if self.link is None else asdict(self.link)
        data["shape"] = None if self.shape is None else asdict(self.shape)
        data["costs"] = None if self.costs is None else self.costs.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> SimConfig:
        check_instance("data", data, dict)
        data = dict(data)
        parsers = {"matches": match_source_from_dict, "cost": _cost_from_dict,
                   "link": lambda d: Link(**check_instance("link", d, dict)),
                   "shape": lambda d: ModelShape(**check_instance("shape", d, dict)),
                   "costs": DecodeCosts.from_dict}  # fmt: skip
        for key, parse in parsers.items():
            if data.get(key) is not None or key in ("matches", "cost") and key in data:
                try:
                    data[key] = parse(data[key])
                except (TypeError, ValueError) as err:  # named by the key it came from
                    raise ValueError(f"data[{key!r}]: {err}") from None
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})


def _cost_to_dict(cost: CostModel) -> dict:
    if isinstance(cost, UniformCost):
        return {"type": "uniform", "seconds_per_layer": cost.seconds_per_layer}
    if isinstance(cost, RooflineCost):
        return {
            "type": "roofline",
            "shape": asdict(cost.shape),
            "gpu": asdict(cost.gpu),
            "flops_efficiency": cost.flops_efficiency,
            "bandwidth_efficiency": cost.bandwidth_efficiency,
            "tensor_parallel": cost.tensor_parallel,
        }
    return {"type": "measured", "rows": cost.df.to_dict("records")}


def _cost_from_dict(data: dict) -> CostModel:
    kind = check_keys("cost", data, ("type",))["type"]
    if kind == "uniform":
        return UniformCost(check_keys("cost", data, ("seconds_per_layer",))["seconds_per_layer"])
    if kind == "roofline":
        check_keys("cost", data, ("shape", "gpu", "flops_efficiency", "bandwidth_efficiency"))
        return RooflineCost(
            ModelShape(**data["shape"]),
            GPUSpec(**data["gpu"]),
            data["flops_efficiency"],
            data["bandwidth_efficiency"],
            data.get("tensor_parallel", 1),
        )
    if kind == "measured":
        return MeasuredCost(pd.DataFrame(check_keys("cost", data, ("rows",))["rows"]))
    raise ValueError(f"cost type must be uniform, roofline or measured, got {kind!r}")
