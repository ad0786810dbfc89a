"""Execution regimes: how a real engine turns a model's device time and its host time into seconds.

A decode step on a GPU is two pipelines: the host issues kernels, the device runs them.

* **eager** (Hugging Face transformers, plain PyTorch): Python issues every kernel of every
  layer, ``host_per_layer_s`` per layer (about 40 kernels x a launch of ~20 us, with the Python
  between them). Launches are asynchronous, so per layer the step takes max(host, device): when
  the host is slower the GPU waits for it (**launch-bound**) and neither tensor parallelism nor
  a faster GPU shortens the layer; when the device is slower the host runs ahead
  (**bandwidth-bound**, or compute-bound). Each all-reduce and each head kernel costs the host
  one more launch; the generate loop adds ``host_per_step_s`` per token.
* **graphs** (torch.compile with CUDA graphs, TensorRT-LLM, vLLM's decode graphs): one launch
  per step; the step is the device time plus a fixed ``host_per_step_s`` (graph replay,
  sampling, the host-device sync).

Device time is the roofline of ``sim.cost.RooflineCost`` at the engine's efficiencies; a
tensor-parallel layer adds two all-reduces, priced as the engine's collective runs them at
batch 1: latency-dominated, ``allreduce_s`` on two devices plus ``allreduce_per_device_s``
for each further device, plus the bytes over the link. PPD's messages (dispatch, hand-off)
cost the engine's ``message_s`` plus their bytes over the link; on one shared device none.
Main and candidates sharing one device slow each other by ``device_slowdown``: from one host
thread (one process, two CUDA streams) their launches serialize, from two processes only the
device is shared.

``EngineHardware`` is a ``sim.hardware_costs.HardwareModel``: ``ppd plan --engine NAME`` and
``sim.published`` (published measurements against these predictions) use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, cached_property

import numpy as np
import pandas as pd

from ppdmodel.validation import (
    as_int,
    check_broadcast,
    check_columns,
    check_instance,
    check_nonnegative,
)
from sim.cost import RooflineCost
from sim.hardware import Engine, GPUSpec, Link
from sim.hardware_costs import (
    HardwareModel,
    _check_gap,
    _table,
    check_hardware,
    check_shared,
    check_tp,
    dispatch_bytes,
    message_seconds,
    one_factor,
    tp_pairs,
)
from sim.shape import ModelShape

HEAD_KERNELS = 8
"""Kernels of the final norm, LM head and argmax/top-k in an eager step (RMSNorm is ~6 ops)."""
ALLREDUCE_HEAD_BYTES = 64
"""Bytes all-reduced after a vocabulary-parallel LM head (the top-k ids and values)."""


MAX_TP = 1024
"""Largest tensor-parallel degree (and device count) an engine's hardware takes."""
REGIMES = ("launch-bound", "bandwidth-bound", "compute-bound", "all-reduce-bound")
"""What bounds a decoder layer: the host's launches, HBM bandwidth, FLOP/s, or collectives."""


@dataclass(frozen=True)
class Regime:
    """What bounds one greedy configuration (``EngineHardware.regime``), per token."""

    tp: int
    """Tensor-parallel degree."""
    regime: str
    """One of ``REGIMES``."""
    token_s: float
    """Greedy seconds per token."""
    host_layer_s: float
    """Host time to issue one layer (0 under CUDA graphs)."""
    device_layer_s: float
    """Device time of one layer, all-reduces included."""
    why: str
    """The reason, in words, with the numbers."""


@dataclass(frozen=True)
class EngineHardware:
    """A model shape on a datasheet GPU and link, run by an ``Engine``: a ``HardwareModel``."""

    shape: ModelShape
    """Model dimensions and context length."""
    gpu: GPUSpec
    """Datasheet peak numbers of one device."""
    link: Link
    """Link between devices (its bandwidth carries all-reduces and messages)."""
    engine: Engine
    """The execution regime."""
    max_tp: int = 8
    """Largest tensor-parallel degree modelled (powers of two dividing the head count)."""
    name: str = field(default="")
    """Label; default ``gpu+link/engine``."""

    def __post_init__(self) -> None:
        check_instance("shape", self.shape, ModelShape)
        check_instance("gpu", self.gpu, GPUSpec)
        check_instance("link", self.link, Link)
        check_instance("engine", self.engine, Engine)
        object.__setattr__(self, "max_tp", as_int("max_tp", self.max_tp, limit=MAX_TP))
        if not check_instance("name", self.name, str):
            object.__setattr__(self, "name", f"{self.gpu.name}+{self.link.name}/{self.engine.name}")

    @property
    def host_s(self) -> float:
        """Host time per token outside the layers (the engine's step cost)."""
        return self.engine.host_per_step_s

    @cached_property
    def shared_device_slowdown(self) -> float:
        """Slowdown of main and candidates sharing one device (at tensor parallelism 1; kept:
        the ``HardwareModel`` protocol check reads it on every call)."""
        return float(self.device_slowdown(True))

    def tp_degrees(self) -> tuple[int, ...]:
        heads = self.shape.num_attention_heads
        return tuple(2**i for i in range(self.max_tp.bit_length())
                     if 2**i <= self.max_tp and heads % 2**i == 0)  # fmt: skip

    def tp_pairs(self, max_devices: int) -> list[tuple[int, int]]:
        return tp_pairs(self.tp_degrees(), max_devices)

    @cache  # noqa: B019 (frozen, hashable instances; a handful of degrees)
    def _roofline(self, tp: int) -> RooflineCost:
        e = self.engine
        return RooflineCost(self.shape, self.gpu, e.flops_efficiency, e.bandwidth_efficiency, tp)

    def allreduce_seconds(self, tp, nbytes):
        """One all-reduce of ``nbytes`` over ``tp`` devices (0 on one), seconds."""
        tp = np.asarray(check_tp(tp), dtype=float)
        nbytes = check_nonnegative("nbytes", nbytes)
        check_broadcast(tp=np.shape(tp), nbytes=np.shape(nbytes))
        e = self.engine
        fixed = e.allreduce_s + e.allreduce_per_device_s * np.maximum(tp - 2, 0)
        volume = 2 * (tp - 1) / tp * np.asarray(nbytes) / self.link.bandwidth_bytes_per_s
        return np.where(tp > 1, fixed + volume, 0.0)

    def _host(self, tp, layer: bool, kernels: int = 0):
        """Host time of a layer (with two all-reduce launches under tensor parallelism) or of
        ``kernels`` launches; 0 under CUDA graphs."""
        tp = check_tp(tp)
        if not self.engine.eager:
            return np.zeros(np.shape(tp))
        allreduce_launches = np.where(np.asarray(tp) > 1, 2, 0) if layer else 0
        base = self.engine.host_per_layer_s if layer else kernels * self.engine.launch_s
        return base + allreduce_launches * self.engine.launch_s + np.zeros(np.shape(tp))

    def device_layer_seconds(self, tp, batch):
        """One decoder layer on the device: a shard's roofline plus two all-reduces."""
        row = self.shape.hidden_size * self.shape.dtype_bytes
        shard = _table(lambda n, b: self._roofline(n).block_seconds(1, 1, b), tp, batch)
        rows = np.multiply(np.asarray(batch, dtype=float), row)  # float64: no int8 wrap-around
        return shard + 2.0 * self.allreduce_seconds(tp, rows)

    def host_layer_seconds(self, tp):
        """Host time to issue one decoder layer on ``tp`` devices (0 under CUDA graphs)."""
        return self._host(tp, layer=True)

    def _combine(self, host, device):
        """Asynchronous launches: the slower of the two pipelines."""
        return np.maximum(host, device)

    def layer_seconds(self, tp, batch):
        return self._combine(self.host_layer_seconds(tp), self.device_layer_seconds(tp, batch))

    def candidate_layer_seconds(self, tp, batch):
        return self.layer_seconds(tp, batch)

    def embedding_seconds(self, tp):
        device = _table(lambda n: self._roofline(n).embed_seconds(1), tp)
        return self._combine(self._host(tp, layer=False, kernels=1), device)

    def final_head_seconds(self, tp):
        if self.engine.lm_head_tensor_parallel:
            device = _table(lambda n: self._roofline(n).head_seconds(1), tp)
            device = device + self.allreduce_seconds(tp, ALLREDUCE_HEAD_BYTES)
        else:
            device = _table(lambda n: self._roofline(1).head_seconds(1), tp)
        return self._combine(self._host(tp, layer=False, kernels=HEAD_KERNELS), device)

    early_head_seconds = final_head_seconds

    def device_slowdown(self, shared):
        """Where ``shared``: (both sides' host and device time together) / one side's, at
        tensor parallelism 1; the host part doubles only from one host thread."""
        shared = check_shared(shared)
        host = float(self.host_layer_seconds(1))
        device = float(self.device_layer_seconds(1, 1))
        both_host = host * (2 if self.engine.shared_host else 1)
        sigma = max(both_host, 2 * device) / max(host, device)
        return np.where(shared, sigma, 1.0)

    def device_slowdowns(self, shared, k, early_head=None):
        """``device_slowdown`` for both sides (one factor; the same for every ``early_head``)."""
        return one_factor(self.device_slowdown(shared), k)

    def serial_device(self, shared):
        """Never serial: the shared-host slowdown above prices the streams' overlap."""
        return np.zeros(np.shape(check_shared(shared)), dtype=bool)

    def _message(self, tp, nbytes, shared):
        return message_seconds(self.engine.message_s, self.link, tp, nbytes, shared)

    def dispatch_seconds(self, tp, k, gap, early_head: str, shared):
        return self._message(tp, dispatch_bytes(self.shape, k, gap, early_head), shared)

    def handoff_seconds(self, tp, gap, shared):
        return self._message(tp, self.shape.handoff_bytes(1, _check_gap(gap)), shared)

    def greedy_token_seconds(self, tp: int = 1) -> float:
        """Greedy decoding's seconds per token on ``tp`` devices (embedding, d layers, head,
        step), as ``sim.hardware_costs.greedy_costs`` prices it."""
        tp = as_int("tp", tp, limit=MAX_TP)
        d = self.shape.num_layers
        layers = d * self.layer_seconds(tp, 1)
        total = self.embedding_seconds(tp) + layers + self.final_head_seconds(tp) + self.host_s
        return float(total)

    def regime(self, tp: int = 1) -> Regime:
        """What bounds greedy decoding on ``tp`` devices, and why (``REGIMES``)."""
        tp = as_int("tp", tp, limit=MAX_TP)
        host = float(self.host_layer_seconds(tp))
        device = float(self.device_layer_seconds(tp, 1))
        roof, e = self._roofline(tp), self.engine
        flops_s = roof.layer_flops(1) / (self.gpu.peak_flops_bf16 * e.flops_efficiency)
        bytes_s = roof.layer_bytes(1) / (self.gpu.hbm_bytes_per_s * e.bandwidth_efficiency)
        collective = device - max(flops_s, bytes_s)
        ms = 1e3
        if self.engine.eager and host > device:
            regime = "launch-bound"
            why = (f"the host needs {host * ms:.3g} ms to issue a layer, the GPU {device * ms:.3g}"
                   " ms to run it: the GPU waits for Python, so tensor parallelism and a faster "
                   "GPU do not shorten a layer; a second process (PPD's candidates) brings its "
                   "own host")  # fmt: skip
        elif collective > max(flops_s, bytes_s):
            regime = "all-reduce-bound"
            why = (f"two all-reduces take {collective * ms:.3g} ms of a {device * ms:.3g} ms layer:"
                   " more tensor parallelism adds more than it saves")  # fmt: skip
        else:
            regime = "compute-bound" if flops_s > bytes_s else "bandwidth-bound"
            what = "FLOPs" if flops_s > bytes_s else "streaming the weights and KV cache"
            how = (f"the host issues it in {host * ms:.3g} ms" if self.engine.eager
                   else f"one graph launch per step ({self.host_s * ms:.3g} ms)")  # fmt: skip
            why = (
                f"the GPU needs {device * ms:.3g} ms per layer ({what}) and {how}: "
                "tensor parallelism shortens the layer until its all-reduces dominate"
            )
        return Regime(tp, regime, self.greedy_token_seconds(tp), host, device, why)


def regime_table(hardware: list) -> pd.DataFrame:
    """Per ``EngineHardware`` in ``hardware`` and tensor-parallel degree: greedy ms per token,
    the host and device time of one layer, the regime and why (other hardware: no rows)."""
    hardware = check_hardware(hardware)
    rows = [
        {"hardware_name": hw.name, "tp": r.tp, "greedy_ms": r.token_s * 1e3,
         "host_ms_per_layer": r.host_layer_s * 1e3, "device_ms_per_layer": r.device_layer_s * 1e3,
         "regime": r.regime, "why": r.why}
        for hw in hardware if isinstance(hw, EngineHardware)
        for r in (hw.regime(tp) for tp in hw.tp_degrees())
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=REGIME_COLUMNS)


REGIME_COLUMNS = ("hardware_name", "tp", "greedy_ms", "host_ms_per_layer", "device_ms_per_layer",
                  "regime", "why")  # fmt: skip
"""Columns of ``regime_table``."""


ADVICE_COLUMNS = ("budget", "hardware_name", "method", "config", "latency_s")
"""Columns of ``sim.plan.best_by_devices`` that ``regime_advice`` reads."""


def regime_advice(hw, by_devices: pd.DataFrame, tp: int, devices: int) -> str:
    """One sentence for a recommendation on ``hw``: the regime of main's ``tp`` devices and,
    on ``devices`` devices, the fastest PPD against greedy with tensor parallelism
    (``by_devices``: ``sim.plan.best_by_devices`` rows of one workload); "" on hardware
    without an engine (``RooflineHardware``, a measured profile). ValueError naming the
    argument that is not a hardware model, a frame with ``ADVICE_COLUMNS``, or a count in
    [1, ``MAX_TP``]."""
    check_instance("hw", hw, HardwareModel, "a sim hardware model, e.g. EngineHardware")
    check_columns("by_devices", by_devices, ADVICE_COLUMNS)
    tp = as_int("tp", tp, limit=MAX_TP)
    devices = as_int("devices", devices, limit=MAX_TP)
    if not isinstance(hw, EngineHardware):
        return ""
    r = hw.regime(tp)
    text = f"Regime on {tp} device{'s' if tp > 1 else ''}: {r.regime} ({r.why})"
    rows = by_devices[(by_devices.budget == devices) & (by_devices.hardware_name == hw.name)]
    ppd, greedy = rows[rows.method == "ppd"], rows[rows.method == "greedy"]
    if devices > 1 and len(ppd) and len(greedy):
        p, g = ppd.iloc[0], greedy.iloc[0]
        text += (f"; on {devices} devices PPD ({p.config}) takes {p.latency_s * 1e3:.3g} ms/token "
                 f"against {g.latency_s * 1e3:.3g} for {g.config}")  # fmt: skip
    return text + "."
