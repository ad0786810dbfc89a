"""Hardware as the planner sees it: seconds per part of a decode step, per tensor-parallel degree.

Two sources play the role ``HardwareModel`` declares:

* ``RooflineHardware``: a model shape on a datasheet GPU (``sim.hardware.GPU_PRESETS``) and a
  link (``LINK_PRESETS``). A layer split over n devices takes one shard's roofline time
  (``RooflineCost(tensor_parallel=n)``) plus two ring all-reduces of the [rows, hidden]
  activations per layer (Megatron-LM; ``ppdmodel.alternatives.ring_allreduce_seconds``); the
  vocabulary-parallel LM head adds one small all-reduce (the top-k). Messages between main and
  the candidate side carry a hidden row and the KV entries of one token in the d - d_bar
  layers the other side ran (``ModelShape.handoff_bytes``), each shard's 1/n over its own link;
  on one shared device they cost nothing. Two streams sharing one GPU are memory-bound and
  split its bandwidth: ``shared_device_slowdown`` 2 (assumption; measure it where you can).
* ``ProfileHardware``: one backend of a measured cost profile (``ppd measure profile``):
  tensor parallelism 1, the candidates on main's device (``single``: layout ``shared``) or in
  a second process (``dist``: layout ``separate``, the planner's ``tp_candidates`` 1; on a CPU
  both ranks share the machine); its measured times, message growth per candidate layer and
  slowdown as they are. A CPU ``dist`` profile's pair factors price each k as ``ppd validate``
  does: main's and the batch's own factor at k, or the nearest measured k
  (``BackendCosts.sharing``, applied by ``SharingFactors.applied_to``).

``decode_costs`` turns either into the ``DecodeCosts`` of one PPD configuration, and
``greedy_costs`` into greedy decoding's; the planner builds the same terms for a whole grid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ppdmodel.alternatives import ring_allreduce_seconds
from ppdmodel.cost_profile import (
    PROFILE_FORMAT,
    BackendCosts,
    parse_cost_profile,
    read_profile_data,
)
from ppdmodel.costs import DecodeCosts, check_early_head
from ppdmodel.validation import (
    as_int,
    as_real,
    check_broadcast,
    check_choice,
    check_instance,
    check_nonnegative,
    check_positive,
    check_positive_int,
)
from sim.cost import RooflineCost
from sim.hardware import GPUSpec, Link
from sim.shape import SHAPE_PRESETS, TOKEN_ID_BYTES, ModelShape

MAX_ROWS = 2**20
"""Largest tensor-parallel degree or batch of rows the cost functions model."""
SHARED_GPU_SLOWDOWN = 2.0
"""Assumed slowdown of two memory-bound decode streams on one GPU (they split its bandwidth)."""


@runtime_checkable
class HardwareModel(Protocol):
    """What the planner needs from hardware: seconds per part, vectorised over arrays."""

    name: str
    shape: ModelShape
    shared_device_slowdown: float
    host_s: float

    def tp_degrees(self) -> tuple[int, ...]:
        """Tensor-parallel degrees this hardware can model."""

    def tp_pairs(self, max_devices: int) -> list[tuple[int, int]]:
        """PPD layouts (tp_main, tp_candidates), 0 candidates' devices meaning main's shared."""

    def device_slowdowns(self, shared, k, early_head=None):
        """(s_m, s_c): the slowdown of main and of the k-row candidate batch while both
        compute (1 where they do not contend), arrays of the broadcast shape; ``early_head``
        (None, a placement or an array of them, broadcast like k): the early head's placement,
        which a profile's pair factors may depend on."""

    def serial_device(self, shared):
        """True where main and candidates run one after the other (``serial_device``)."""

    def layer_seconds(self, tp, batch):
        """One decoder layer for ``batch`` rows on ``tp`` devices, seconds."""

    def candidate_layer_seconds(self, tp, batch):
        """One decoder layer of the candidate batch (``batch`` = k rows) on ``tp`` devices,
        seconds (a measured profile prices it apart from main's layer, k = 1 included)."""

    def embedding_seconds(self, tp):
        """The token embedding, seconds."""

    def early_head_seconds(self, tp):
        """The shared LM head on one row at layer d_bar, with its top-k, seconds."""

    def final_head_seconds(self, tp):
        """The final norm and LM head on one row, seconds."""

    def dispatch_seconds(self, tp, k, gap, early_head: str, shared):
        """The message that starts the candidates (``gap`` = d - d_bar), seconds."""

    def handoff_seconds(self, tp, gap, shared):
        """One accepted hand-off to main, seconds."""


@dataclass(frozen=True)
class RooflineHardware:
    """A model shape on a datasheet GPU and link (module docstring), as ``HardwareModel``."""

    shape: ModelShape
    """Model dimensions and context length."""
    gpu: GPUSpec
    """Datasheet peak numbers of one device."""
    link: Link
    """Link between devices (tensor-parallel all-reduces, dispatch and hand-off)."""
    max_tp: int = 8
    """Largest tensor-parallel degree modelled (powers of two up to it)."""
    flops_efficiency: float = 0.6
    """Fraction of peak FLOP/s reached (assumption, as ``RooflineCost``)."""
    bandwidth_efficiency: float = 0.8
    """Fraction of peak HBM bandwidth reached (assumption, as ``RooflineCost``)."""
    shared_device_slowdown: float = SHARED_GPU_SLOWDOWN
    """Slowdown of main and candidates sharing one GPU (assumption; >= 1)."""
    host_s: float = 0.0
    """Host time per generated token, seconds."""
    name: str = field(default="")
    """Label; default ``gpu+link``."""

    def __post_init__(self) -> None:
        check_instance("shape", self.shape, ModelShape)
        check_instance("gpu", self.gpu, GPUSpec)
        check_instance("link", self.link, Link)
        if not check_instance("name", self.name, str):
            object.__setattr__(self, "name", f"{self.gpu.name}+{self.link.name}")
        if isinstance(self.max_tp, bool) or not isinstance(self.max_tp, int) or self.max_tp < 1:
            raise ValueError(f"max_tp must be a positive integer, got {self.max_tp!r}")
        DecodeCosts(host_s=self.host_s, shared_device_slowdown=self.shared_device_slowdown)

    def tp_degrees(self) -> tuple[int, ...]:
        return tuple(2**i for i in range(self.max_tp.bit_length()) if 2**i <= self.max_tp)

    def tp_pairs(self, max_devices: int) -> list[tuple[int, int]]:
        return tp_pairs(self.tp_degrees(), max_devices)

    def device_slowdowns(self, shared, k, early_head=None):
        return one_factor(np.where(check_shared(shared), self.shared_device_slowdown, 1.0), k)

    def serial_device(self, shared):
        return np.zeros(np.shape(check_shared(shared)), dtype=bool)  # two streams overlap

    @cache  # noqa: B019 (frozen, hashable instances; a handful of degrees)
    def _roofline(self, tp: int) -> RooflineCost:
        return RooflineCost(
            self.shape, self.gpu, self.flops_efficiency, self.bandwidth_efficiency, int(tp)
        )

    def _allreduce(self, tp, nbytes):
        return ring_allreduce_seconds(
            n=tp,
            nbytes=nbytes,
            latency_s=self.link.latency_s,
            bandwidth_bytes_per_s=self.link.bandwidth_bytes_per_s,
        )

    def layer_seconds(self, tp, batch):
        row = self.shape.hidden_size * self.shape.dtype_bytes
        shard = _table(lambda n, b: self._roofline(n).block_seconds(1, 1, b), tp, batch)
        rows = np.multiply(np.asarray(batch, dtype=float), row)  # float64: no int8 wrap-around
        return shard + 2.0 * np.asarray(self._allreduce(tp, rows))

    def candidate_layer_seconds(self, tp, batch):
        return self.layer_seconds(tp, batch)

    def embedding_seconds(self, tp):
        return _table(lambda n: self._roofline(n).embed_seconds(1), tp)

    def final_head_seconds(self, tp):
        head = _table(lambda n: self._roofline(n).head_seconds(1), tp)
        return head + np.asarray(self._allreduce(tp, 64))

    early_head_seconds = final_head_seconds

    def _message(self, tp, nbytes, shared):
        return message_seconds(self.link.latency_s, self.link, tp, nbytes, shared)

    def dispatch_seconds(self, tp, k, gap, early_head: str, shared):
        return self._message(tp, dispatch_bytes(self.shape, k, gap, early_head), shared)

    def handoff_seconds(self, tp, gap, shared):
        return self._message(tp, self.shape.handoff_bytes(1, _check_gap(gap)), shared)


def one_factor(slowdown, k):
    """(s_m, s_c) of hardware with one factor for both sides: ``slowdown`` twice, broadcast
    with the rows' candidate counts ``k``."""
    k = check_positive_int("k", k, limit=MAX_ROWS)
    slowdown = check_positive("slowdown", slowdown)
    check_broadcast(slowdown=np.shape(slowdown), k=np.shape(k))
    main = np.zeros(np.broadcast_shapes(np.shape(slowdown), np.shape(k))) + slowdown
    return main, main.copy()


def dispatch_bytes(shape: ModelShape, k, gap, early_head: str):
    """Bytes of the message that starts the candidates: k token ids (early head on main) or
    main's layer-d_bar hidden state (on the candidate side), plus the KV entries of the ``gap``
    layers the candidate side lacks."""
    check_instance("shape", shape, ModelShape)
    k, gap = check_positive_int("k", k, limit=MAX_ROWS), _check_gap(gap)
    check_broadcast(k=np.shape(k), gap=np.shape(gap))
    kv = np.multiply(gap, shape.kv_bytes_per_token_layer())
    if check_early_head(early_head) == "main":
        return np.multiply(k, TOKEN_ID_BYTES) + kv
    return shape.hidden_size * shape.dtype_bytes + kv


PROFILE_LAYOUTS = ("shared", "separate")
"""How a profiled backend places the candidate batch: on main's device (``single``: one CPU
process) or on a second one (``dist``: two ranks on two cores)."""


@dataclass(frozen=True)
class ProfileHardware:
    """One backend of a measured cost profile (tensor parallelism 1), as ``HardwareModel``.

    ``base`` holds the measured DecodeCosts with the message terms at zero candidate layers;
    each grows by ``per_candidate_layer_s[field]`` per candidate layer e = d - d_bar (the KV
    entries of layers [0, e) travel with it), as ``ppd measure profile`` writes them.
    Per-layer times, heads, host time and the slowdown are the measured ones; with ``entry``
    (``load_profile``), a configuration's sharing factors are those the profile gives its k.
    """

    base: DecodeCosts
    """The measured DecodeCosts (message terms at e = 0)."""
    shape: ModelShape
    """The model's shape (the planner reads d and the layer size from it)."""
    layout: str = "shared"
    """``shared`` (candidates on main's device) or ``separate`` (on a second device)."""
    per_candidate_layer_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds each message term grows per candidate layer (missing: 0)."""
    name: str = "profile"
    """Label."""
    entry: BackendCosts | None = field(default=None, repr=False)
    """The profile's entry for this backend (None: a bare DecodeCosts file): its pair factors
    price each k's sharing (``device_slowdowns``)."""

    def __post_init__(self) -> None:
        check_instance("base", self.base, DecodeCosts)
        check_instance("shape", self.shape, ModelShape)
        check_instance("per_candidate_layer_s", self.per_candidate_layer_s, Mapping)
        if self.entry is not None:
            check_instance("entry", self.entry, BackendCosts)
        check_choice("layout", self.layout, PROFILE_LAYOUTS)
        check_instance("name", self.name, str)
        object.__setattr__(self, "per_candidate_layer_s", dict(self.per_candidate_layer_s))

    def __hash__(self) -> int:
        return hash((self.base, self.shape, self.layout, self.name))

    @property
    def shared_device_slowdown(self) -> float:
        return self.base.shared_device_slowdown

    @property
    def host_s(self) -> float:
        return self.base.host_s

    def tp_degrees(self) -> tuple[int, ...]:
        return (1,)

    def tp_pairs(self, max_devices: int) -> list[tuple[int, int]]:
        max_devices = as_int("max_devices", max_devices, limit=MAX_ROWS)
        if self.layout == "shared":
            return [(1, 0)]
        return [(1, 1)] if max_devices >= 2 else []

    def device_slowdowns(self, shared, k, early_head=None):
        """The base costs' factors (the same with or without ``shared``: a profiled backend
        has one layout), or, for the k and early-head placement of a row, the factors
        ``entry.sharing(k, early_head)`` gives (the profile's pair factors at k or the nearest
        measured k, the candidates placement's own where measured, as ``ppd validate``
        applies). ``early_head``: None (main's placement's factors), a placement or an array
        of them broadcast like k."""
        k = check_positive_int("k", k, limit=MAX_ROWS)
        heads = np.asarray("main" if early_head is None else early_head).astype(str)
        for value in np.unique(heads):
            check_early_head(str(value))
        shape = np.broadcast_shapes(np.shape(check_shared(shared)), np.shape(k), heads.shape)
        main = np.full(shape, self.base.shared_device_slowdown)
        cand = np.full(shape, self.base.candidate_slowdown)
        if self.entry is None or not self.entry.pair_slowdowns:
            return main, cand
        for value in np.unique(k):
            for head in np.unique(heads):
                costs = self.entry.sharing(int(value), str(head)).applied_to(self.base)
                rows = np.broadcast_to((np.asarray(k) == value) & (heads == head), shape)
                main[rows], cand[rows] = costs.shared_device_slowdown, costs.candidate_slowdown
        return main, cand

    def serial_device(self, shared):
        return np.logical_and(check_shared(shared), self.base.serial_device)  # single backend

    def _check_tp(self, tp) -> None:
        if np.any(np.asarray(check_tp(tp)) != 1):
            raise ValueError("a measured profile models tensor parallelism 1 only (tp=1)")

    def layer_seconds(self, tp, batch):
        self._check_tp(tp)
        batch = check_positive_int("batch", batch, limit=MAX_ROWS)
        batched = np.asarray(self.base.candidate_layer_seconds(np.maximum(batch, 1)))
        return np.where(np.asarray(batch) == 1, self.base.layer_s, batched)

    def candidate_layer_seconds(self, tp, batch):
        """The profile's batch price at k = ``batch`` where it measured one (k = 1 too: the
        candidate side's one-row batch, as ``CostProfile.costs`` prices it), else
        ``layer_seconds``."""
        layer = self.layer_seconds(tp, batch)
        one_row = dict(self.base.candidate_layer_s_by_k).get(1)
        return layer if one_row is None else np.where(np.asarray(batch) == 1, one_row, layer)

    def _constant(self, tp, seconds: float):
        self._check_tp(tp)
        return np.zeros(np.shape(tp)) + seconds

    def embedding_seconds(self, tp):
        return self._constant(tp, self.base.embedding_s)

    def early_head_seconds(self, tp):
        return self._constant(tp, self.base.early_head_s)

    def final_head_seconds(self, tp):
        return self._constant(tp, self.base.final_head_s)

    def _grown(self, name: str, gap):
        return getattr(self.base, name) + np.multiply(gap, self.per_candidate_layer_s.get(name, 0))

    def dispatch_seconds(self, tp, k, gap, early_head: str, shared):
        self._check_tp(tp)
        k, gap = check_positive_int("k", k, limit=MAX_ROWS), _check_gap(gap)
        name = "candidate_dispatch_s" if check_early_head(early_head) == "main" else (
            "hidden_dispatch_s")  # fmt: skip
        shared = check_shared(shared)
        zeros = np.zeros(check_broadcast(tp=np.shape(tp), k=np.shape(k), gap=np.shape(gap),
                                         shared=np.shape(shared)))  # fmt: skip
        return zeros + self._grown(name, gap)

    def handoff_seconds(self, tp, gap, shared):
        self._check_tp(tp)
        gap, shared = _check_gap(gap), check_shared(shared)
        zeros = np.zeros(check_broadcast(tp=np.shape(tp), gap=np.shape(gap),
                                         shared=np.shape(shared)))  # fmt: skip
        return zeros + self._grown("handoff_s", gap)


def check_hardware(hardware) -> list:
    """``hardware``: a non-empty list (or tuple) of ``HardwareModel``s, as a list."""
    if isinstance(hardware, str | bytes) or not isinstance(hardware, list | tuple):
        raise ValueError(f"hardware must be a list of hardware models, got "
                         f"{type(hardware).__name__}")  # fmt: skip
    if not hardware:
        raise ValueError("hardware must name at least one hardware model, got an empty list")
    for i, hw in enumerate(hardware):
        check_instance(f"hardware[{i}]", hw, HardwareModel,
                       "RooflineHardware or ProfileHardware")  # fmt: skip
    return list(hardware)


def check_tp(tp):
    """Tensor-parallel degrees: a positive integer <= ``MAX_ROWS`` or an array of them."""
    return check_positive_int("tp", tp, limit=MAX_ROWS, as_float=False)


def check_shared(shared):
    """``shared`` flags (candidates on main's device): booleans or 0/1, or an array of them,
    as booleans."""
    try:
        flags = np.asarray(shared)
    except (ValueError, TypeError):  # ragged nesting
        flags = np.asarray(None)
    ok = flags.dtype.kind == "b" or (
        flags.dtype.kind in "iuf" and bool(np.all((flags == 0) | (flags == 1))))  # fmt: skip
    if not ok:
        raise ValueError(f"shared must be booleans (or 0/1), got {shared!r:.60}")
    return flags.astype(bool)


def tp_pairs(degrees: tuple[int, ...], max_devices) -> list[tuple[int, int]]:
    """PPD layouts (tp_main, tp_candidates) of the tensor-parallel ``degrees`` on at most
    ``max_devices`` devices (0 candidates' devices: on main's)."""
    max_devices = as_int("max_devices", max_devices, limit=MAX_ROWS)
    if not isinstance(degrees, tuple | list):
        raise ValueError(f"degrees must be a tuple of tensor-parallel degrees, got {degrees!r:.60}")
    tps = [as_int(f"degrees[{i}]", t, limit=MAX_ROWS) for i, t in enumerate(degrees)]
    tps = [t for t in tps if t <= max_devices]
    return [(m, c) for m in tps for c in (0, *tps) if m + c <= max_devices]


def message_seconds(fixed_s: float, link: Link, tp, nbytes, shared):
    """One message between the sides: ``fixed_s`` + nbytes / tp over ``link`` (the bytes
    split over ``tp`` devices), 0 where ``shared`` (one device: nothing travels)."""
    fixed_s = as_real("fixed_s", fixed_s)
    check_instance("link", link, Link)
    tp, shared = check_tp(tp), check_shared(shared)
    nbytes = check_nonnegative("nbytes", nbytes)
    check_broadcast(tp=np.shape(tp), nbytes=np.shape(nbytes), shared=np.shape(shared))
    seconds = fixed_s + np.divide(nbytes, tp) / link.bandwidth_bytes_per_s
    return np.where(shared, 0.0, seconds)


def _check_gap(gap):
    """Candidate layers e = d - d_bar: an integer in [0, MAX_ROWS] (float64)."""
    gap = check_nonnegative("gap", gap)
    if np.any(np.asarray(gap) > MAX_ROWS) or np.any(np.asarray(gap) != np.floor(gap)):
        raise ValueError(f"gap (d - d_bar) must be a whole number of layers <= {MAX_ROWS}")
    return gap


def _table(fn, *args):
    """Evaluate the scalar ``fn`` once per distinct combination of the integer ``args``
    (tensor-parallel degrees and batch rows: positive integers, checked)."""
    args = [check_positive_int("tp" if i == 0 else "batch", a, limit=MAX_ROWS, as_float=False)
            for i, a in enumerate(args)]  # fmt: skip
    check_broadcast(**{"tp" if i == 0 else "batch": np.shape(a) for i, a in enumerate(args)})
    arrays = np.broadcast_arrays(*(np.asarray(a).astype(np.int64) for a in args))
    keys = np.stack([a.ravel() for a in arrays], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    values = np.array([fn(*map(int, row)) for row in unique], dtype=float)
    return values[inverse.ravel()].reshape(arrays[0].shape)


def translator_extra_seconds(hw: HardwareModel, tp):
    """Extra early-head time of an affine translator (an h x h matrix before the LM head):
    one layer's time scaled by h^2 / the layer's weights (memory-bound; same rule for any
    hardware)."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    h = hw.shape.hidden_size
    return np.asarray(hw.layer_seconds(tp, 1)) * (h * h / hw.shape.layer_params())


HEAD_EXTRA = {"translator": translator_extra_seconds}
"""Early heads that cost more than the LM head (by name); any other head (the shared LM head,
a trained full head of the same size) costs the LM head."""


def early_head_cost(hw: HardwareModel, tp, head: str):
    """Seconds of the early head ``head`` on ``tp`` devices."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    check_instance("head", head, str)
    base = np.asarray(hw.early_head_seconds(tp))
    extra = HEAD_EXTRA.get(head)
    return base if extra is None else base + extra(hw, tp)


def decode_costs(
    hw: HardwareModel, *, d_bar: int, k: int, early_head: str, head: str = "shared",
    tp_main: int = 1, tp_candidates: int | None = None,
) -> DecodeCosts:  # fmt: skip
    """The DecodeCosts of one PPD configuration: main on ``tp_main`` devices, the candidate
    batch on ``tp_candidates`` more (None: on main's devices, slowed by sharing them)."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    check_early_head(early_head)
    check_instance("head", head, str)
    d_bar = as_int("d_bar", d_bar, limit=hw.shape.num_layers - 1)
    k, tp_main = as_int("k", k, limit=MAX_ROWS), as_int("tp_main", tp_main, limit=MAX_ROWS)
    if tp_candidates is not None:
        tp_candidates = as_int("tp_candidates", tp_candidates, limit=MAX_ROWS)
    shared = tp_candidates is None
    tp_c = tp_main if shared else tp_candidates
    gap = hw.shape.num_layers - d_bar
    head_tp = tp_main if early_head == "main" else tp_c
    s_main, s_cand = hw.device_slowdowns(shared, k, early_head)
    return DecodeCosts(
        layer_s=float(hw.layer_seconds(tp_main, 1)),
        candidate_layer_s_by_k={k: float(hw.candidate_layer_seconds(tp_c, k))},
        embedding_s=float(hw.embedding_seconds(tp_main)),
        early_head_s=float(early_head_cost(hw, head_tp, head)),
        final_head_s=float(hw.final_head_seconds(tp_main)),
        candidate_dispatch_s=float(hw.dispatch_seconds(tp_c, k, gap, "main", shared)),
        hidden_dispatch_s=float(hw.dispatch_seconds(tp_c, k, gap, "candidates", shared)),
        handoff_s=float(hw.handoff_seconds(tp_c, gap, shared)),
        host_s=hw.host_s,
        shared_device_slowdown=float(s_main),
        candidate_device_slowdown=None if s_cand == s_main else float(s_cand),
        serial_device=bool(hw.serial_device(shared)),
    )


def one_process_host_s(hw) -> float:
    """Host time per step of a decode loop in one process (greedy, early exit, FREE, a draft
    model) on ``hw``: a ``dist`` profile's own greedy figure where it records one (its
    ``host_s`` is PPD's main rank's, messages and waits included: milliseconds where greedy
    spends tens of microseconds), else ``hw.host_s``. ``ppd validate`` prices greedy alike
    (``CostProfile.greedy_costs``)."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    entry = getattr(hw, "entry", None)
    greedy = None if entry is None else entry.greedy_host_s
    return hw.host_s if greedy is None else float(greedy)


def greedy_costs(hw: HardwareModel, *, tp: int = 1) -> DecodeCosts:
    """Greedy decoding's DecodeCosts on ``tp`` devices (batch-1 layers, heads, host time)."""
    check_instance("hw", hw, HardwareModel, "RooflineHardware or ProfileHardware")
    tp = as_int("tp", tp, limit=MAX_ROWS)
    return DecodeCosts(
        layer_s=float(hw.layer_seconds(tp, 1)),
        embedding_s=float(hw.embedding_seconds(tp)),
        final_head_s=float(hw.final_head_seconds(tp)),
        early_head_s=float(hw.early_head_seconds(tp)),
        host_s=one_process_host_s(hw),
    )


def profile_model(path: str | Path, *, context_len: int | None = None) -> tuple[ModelShape, str]:
    """The shape of the model a cost profile was measured on, and its name.

    From the ``config.json`` in the profile's ``model.path`` when it is there, else from the
    shape preset that the profile's ``model.name`` names (``smollm2`` -> ``smollm2-135m``);
    ValueError otherwise (give the shape or config yourself). ``context_len``: None takes
    the profile's ``model.context_tokens``.
    """
    model = read_profile_data(path).get("model")
    if not isinstance(model, dict):
        raise ValueError(f"profile {str(path)!r} names no model: give --shape or --config")
    name = str(model.get("name", ""))
    context = context_len if context_len is not None else int(model.get("context_tokens", 1024))
    directory = model.get("path")
    if directory and (Path(directory) / "config.json").is_file():
        shape = ModelShape.from_hf_config(directory, context_len=context)
    elif name in PROFILE_SHAPES or name in SHAPE_PRESETS:
        shape = ModelShape.from_name(PROFILE_SHAPES.get(name, name)).with_context(context)
    else:
        raise ValueError(f"profile model {name!r}: no config.json at {directory!r} and no shape "
                         "preset of that name; give --shape or --config")  # fmt: skip
    if shape.num_layers != model.get("d", shape.num_layers):
        raise ValueError(f"profile model {name!r} has d = {model.get('d')} but its shape "
                         f"{shape.num_layers} layers")  # fmt: skip
    return shape, name


PROFILE_SHAPES = {"smollm2": "smollm2-135m"}
"""Model names ``ppd measure profile`` writes -> shape presets."""


def load_profile(path: str | Path, shape: ModelShape) -> list[ProfileHardware]:
    """The backends of a measured cost profile (JSON) as ProfileHardware, one per backend.

    Reads the layout ``ppd measure profile`` writes (``format: ppd-cost-profile``; its
    ``single`` backend is the shared layout, ``dist`` the separate one; the model's depth must
    be ``shape``'s), or a bare ``DecodeCosts.to_dict()`` object (also under ``"decode_costs"``
    or ``"costs"``), taken as one shared device.
    """
    check_instance("shape", shape, ModelShape)
    data = read_profile_data(path)
    if data.get("format") == PROFILE_FORMAT:
        profile = parse_cost_profile(data, d=shape.num_layers)
        return [
            ProfileHardware(backend.base, shape, "shared" if name == "single" else "separate",
                            backend.per_candidate_layer_s, name=f"{profile.model_name}:{name}",
                            entry=backend)
            for name, backend in profile.backends.items()
        ]  # fmt: skip
    for key in ("decode_costs", "costs"):
        if isinstance(data.get(key), dict):
            data = data[key]
            break
    return [ProfileHardware(DecodeCosts.from_dict(data), shape, name=Path(path).stem)]
