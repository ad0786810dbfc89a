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
Main and candidates sharing one device slow each other by ``shared_slowdown``: from one host
thread (one process, two CUDA streams) their launches serialize, from two processes only the
device is shared.

``EngineHardware`` is a ``sim.hardware_costs.HardwareModel``: ``ppd plan --engine NAME`` and
``sim.published`` (published measurements against these predictions) use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

from ppdmodel.costs import check_early_head
from ppdmodel.validation import as_int, as_real, check_instance
from sim.cost import RooflineCost
from sim.hardware import GPUSpec, Link
from sim.hardware_costs import TOKEN_ID_BYTES, _table
from sim.shape import ModelShape

LAUNCH_MODES = ("eager", "graphs")
"""How an engine issues a step: every kernel from Python, or one CUDA-graph launch."""
HEAD_KERNELS = 8
"""Kernels of the final norm, LM head and argmax/top-k in an eager step (RMSNorm is ~6 ops)."""
ALLREDUCE_HEAD_BYTES = 64
"""Bytes all-reduced after a vocabulary-parallel LM head (the top-k ids and values)."""


@dataclass(frozen=True)
class Engine:
    """An execution regime's host and device costs (module docstring); SI units."""

    name: str
    """Preset name or a user label."""
    launch: str
    """``eager`` (Python issues every kernel) or ``graphs`` (one launch per step)."""
    host_per_layer_s: float
    """Host time to issue one decoder layer's kernels (eager; 0 under graphs), seconds."""
    launch_s: float
    """Host time of one extra kernel launch (all-reduce, head kernels; eager), seconds."""
    host_per_step_s: float
    """Host time per generated token outside the layers (eager: the generate loop; graphs:
    replay, sampling and sync), seconds."""
    bandwidth_efficiency: float
    """Fraction of the GPU's peak HBM bandwidth its batch-1 kernels reach, in (0, 1]."""
    flops_efficiency: float
    """Fraction of the GPU's peak FLOP/s its kernels reach, in (0, 1]."""
    allreduce_s: float
    """One all-reduce of a batch-1 activation on two devices, seconds (latency-dominated)."""
    allreduce_per_device_s: float
    """Seconds each further device adds to one all-reduce."""
    message_s: float
    """Fixed cost of one PPD message between processes (dispatch or hand-off), seconds."""
    lm_head_tensor_parallel: bool = True
    """Whether tensor parallelism shards the LM head (Megatron-LM) or replicates it."""
    shared_host: bool = True
    """Whether main and candidates on one device are issued from one host thread."""
    source: str = ""
    """Where the numbers come from."""

    def __post_init__(self) -> None:
        check_instance("Engine.name", self.name, str)
        if self.launch not in LAUNCH_MODES:
            raise ValueError(f"Engine.launch must be one of {LAUNCH_MODES}, got {self.launch!r}")
        for name in ("host_per_layer_s", "launch_s", "host_per_step_s", "allreduce_s",
                     "allreduce_per_device_s", "message_s"):  # fmt: skip
            as_real(f"Engine.{name}", getattr(self, name), maximum=10.0)
        for name in ("bandwidth_efficiency", "flops_efficiency"):
            as_real(f"Engine.{name}", getattr(self, name), strict=True, maximum=1.0)
        for name in ("lm_head_tensor_parallel", "shared_host"):
            check_instance(f"Engine.{name}", getattr(self, name), bool)

    @property
    def eager(self) -> bool:
        """True when Python issues every kernel (the host can bound the step)."""
        return self.launch == "eager"

    def with_overrides(self, **values) -> Engine:
        """This engine with the given fields replaced (None leaves a field as it is)."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})

    @classmethod
    def from_name(cls, name: str) -> Engine:
        """A preset; ValueError listing the known names."""
        try:
            return ENGINE_PRESETS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"engine name must be one of {sorted(ENGINE_PRESETS)}, got {name!r}"
            ) from None


ENGINE_PRESETS: dict[str, Engine] = {
    # Hugging Face transformers, eager PyTorch, batch 1 (also the toolkit's own decoder).
    # Host: a LlamaDecoderLayer issues about 40 kernels at batch 1 (two RMSNorms of ~6 ops,
    # q/k/v/o, ~10 rotary ops, 2 cache updates, attention and its reshapes, a 5-op MLP, 2
    # residual adds) at ~18 us of dispatch and launch each, plus Python: 0.78 ms per layer,
    # calibrated on the 7B rows of the two Hugging Face sources in
    # ppdmodel/data/published_decode.csv (Medusa's Vicuna-7B, 22.2 ms, and h2oGPT's
    # Llama-2-7B, 30.8 ms, on A100-80GB: their geometric mean, 26.2 ms, less the step and
    # head). Per step 1 ms: the generate loop (input preparation, logits processors, stopping
    # check with its host-device sync); an assumption inside that calibration. Device: an
    # unfused eager step streams weights at 53 % of peak bandwidth (calibrated on the one
    # bandwidth-bound row, Llama-7B on an A10G at a 1,100-token context, 43.2 ms;
    # fxmarty/accelerated-pytorch-transformers-generation README). Collectives: NCCL from
    # eager Python, 30 us + 5 us per further device (assumption). Messages between PPD's
    # processes: 1 ms, the host time per pass measured on this project's own two-rank
    # torch.distributed backend (README, "What decides agreement"); an eager multi-process
    # implementation that copies KV caches through Python pays far more (the paper's Table 3
    # implementation: ~28 ms per hand-off, ``ppdmodel.overheads``).
    "hf-eager": Engine(
        "hf-eager",
        "eager",
        host_per_layer_s=0.78e-3,
        launch_s=18e-6,
        host_per_step_s=1.0e-3,
        bandwidth_efficiency=0.53,
        flops_efficiency=0.5,
        allreduce_s=30e-6,
        allreduce_per_device_s=5e-6,
        message_s=1.0e-3,
        lm_head_tensor_parallel=True,
        shared_host=True,
        source="calibrated on Medusa (Cai et al. 2024, Fig.) Vicuna-7B, h2oGPT perf.md "
        "Llama-2-7B (A100-80GB) and fxmarty A10G Llama-7B; see published_decode.csv",
    ),
    # torch.compile(mode="reduce-overhead") with CUDA graphs: gpt-fast (pytorch-labs/gpt-fast,
    # README "Benchmarks", A100-80GB power-limited to 330 W, bf16, batch 1). Least squares on
    # its Llama-2 rows (7B on 1, 2, 4, 8 GPUs; 70B on 2, 4, 8): weights at 74 % of the
    # datasheet's 2,039 GB/s (the README: "peak bandwidth is about 1700 GB/s" at that cap),
    # 0.5 ms per step (graph replay, sampling), one all-reduce 13.8 us on two GPUs + 1.1 us
    # per further GPU (gpt-fast's intra-node all-reduce, ENABLE_INTRA_NODE_COMM=1); gpt-fast's
    # tp.py shards attention and MLP only, not the LM head. Messages: one NCCL point-to-point
    # send/recv, 15 us (assumption: NCCL's small-message latency over NVLink plus a launch).
    "torch-compiled": Engine(
        "torch-compiled",
        "graphs",
        host_per_layer_s=0.0,
        launch_s=0.0,
        host_per_step_s=0.5e-3,
        bandwidth_efficiency=0.74,
        flops_efficiency=0.6,
        allreduce_s=13.8e-6,
        allreduce_per_device_s=1.1e-6,
        message_s=15e-6,
        lm_head_tensor_parallel=False,
        shared_host=True,
        source="calibrated on gpt-fast README Llama-2 rows (A100-80GB, 330 W, 1-8 GPUs); "
        "see published_decode.csv",
    ),
}
"""Engine presets (``ppd plan --engine NAME``), each number with its source above."""


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
        object.__setattr__(self, "max_tp", as_int("max_tp", self.max_tp, limit=1024))
        if not self.name:
            object.__setattr__(self, "name", f"{self.gpu.name}+{self.link.name}/{self.engine.name}")

    @property
    def host_s(self) -> float:
        """Host time per token outside the layers (the engine's step cost)."""
        return self.engine.host_per_step_s

    @property
    def shared_device_slowdown(self) -> float:
        """Slowdown of main and candidates sharing one device (at tensor parallelism 1)."""
        return float(self.device_slowdown(True))

    def tp_degrees(self) -> tuple[int, ...]:
        heads = self.shape.num_attention_heads
        return tuple(2**i for i in range(self.max_tp.bit_length())
                     if 2**i <= self.max_tp and heads % 2**i == 0)  # fmt: skip

    def tp_pairs(self, max_devices: int) -> list[tuple[int, int]]:
        tps = [t for t in self.tp_degrees() if t <= max_devices]
        return [(m, c) for m in tps for c in (0, *tps) if m + c <= max_devices]

    @cache  # noqa: B019 (frozen, hashable instances; a handful of degrees)
    def _roofline(self, tp: int) -> RooflineCost:
        e = self.engine
        return RooflineCost(self.shape, self.gpu, e.flops_efficiency, e.bandwidth_efficiency, tp)

    def allreduce_seconds(self, tp, nbytes):
        """One all-reduce of ``nbytes`` over ``tp`` devices (0 on one), seconds."""
        tp = np.asarray(tp, dtype=float)
        e = self.engine
        fixed = e.allreduce_s + e.allreduce_per_device_s * np.maximum(tp - 2, 0)
        volume = 2 * (tp - 1) / tp * np.asarray(nbytes) / self.link.bandwidth_bytes_per_s
        return np.where(tp > 1, fixed + volume, 0.0)

    def _host(self, tp, layer: bool, kernels: int = 0):
        """Host time of a layer (with two all-reduce launches under tensor parallelism) or of
        ``kernels`` launches; 0 under CUDA graphs."""
        if not self.engine.eager:
            return np.zeros(np.shape(tp))
        allreduce_launches = np.where(np.asarray(tp) > 1, 2, 0) if layer else 0
        base = self.engine.host_per_layer_s if layer else kernels * self.engine.launch_s
        return base + allreduce_launches * self.engine.launch_s + np.zeros(np.shape(tp))

    def device_layer_seconds(self, tp, batch):
        """One decoder layer on the device: a shard's roofline plus two all-reduces."""
        row = self.shape.hidden_size * self.shape.dtype_bytes
        shard = _table(lambda n, b: self._roofline(n).block_seconds(1, 1, b), tp, batch)
        return shard + 2.0 * self.allreduce_seconds(tp, np.multiply(batch, row))

    def host_layer_seconds(self, tp):
        """Host time to issue one decoder layer on ``tp`` devices (0 under CUDA graphs)."""
        return self._host(tp, layer=True)

    def _combine(self, host, device):
        """Asynchronous launches: the slower of the two pipelines."""
        return np.maximum(host, device)

    def layer_seconds(self, tp, batch):
        return self._combine(self.host_layer_seconds(tp), self.device_layer_seconds(tp, batch))

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
        host = float(self.host_layer_seconds(1))
        device = float(self.device_layer_seconds(1, 1))
        both_host = host * (2 if self.engine.shared_host else 1)
        sigma = max(both_host, 2 * device) / max(host, device)
        return np.where(shared, sigma, 1.0)

    def _message(self, tp, nbytes, shared):
        seconds = self.engine.message_s + np.divide(nbytes, tp) / self.link.bandwidth_bytes_per_s
        return np.where(shared, 0.0, seconds)

    def dispatch_seconds(self, tp, k, gap, early_head: str, shared):
        kv = np.multiply(gap, self.shape.kv_bytes_per_token_layer())
        if check_early_head(early_head) == "main":
            nbytes = np.multiply(k, TOKEN_ID_BYTES) + kv
        else:
            nbytes = self.shape.hidden_size * self.shape.dtype_bytes + kv
        return self._message(tp, nbytes, shared)

    def handoff_seconds(self, tp, gap, shared):
        hidden = self.shape.hidden_size * self.shape.dtype_bytes
        nbytes = hidden + np.multiply(gap, self.shape.kv_bytes_per_token_layer())
        return self._message(tp, nbytes, shared)

    def greedy_token_seconds(self, tp: int = 1) -> float:
        """Greedy decoding's seconds per token on ``tp`` devices (embedding, d layers, head,
        step), as ``sim.hardware_costs.greedy_costs`` prices it."""
        d = self.shape.num_layers
        layers = d * self.layer_seconds(tp, 1)
        total = self.embedding_seconds(tp) + layers + self.final_head_seconds(tp) + self.host_s
        return float(total)

    def regime(self, tp: int = 1) -> Regime:
        """What bounds greedy decoding on ``tp`` devices, and why (``REGIMES``)."""
        tp = as_int("tp", tp, limit=1024)
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
