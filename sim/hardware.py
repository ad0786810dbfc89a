"""Modelled hardware: GPU datasheet numbers, inter-process links and execution engines (how a
real engine issues a decode step: ``sim.engine``), with their sources."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppdmodel.costs import link_seconds
from ppdmodel.validation import as_real, check_choice, check_instance


@dataclass(frozen=True)
class GPUSpec:
    """Peak throughput of one GPU, as printed on its datasheet (dense, no sparsity)."""

    name: str
    """Preset name (``a100-80gb``, ``h100-sxm``, ``h200``, ...) or a user label."""
    peak_flops_bf16: float
    """Peak dense bf16 tensor-core throughput, FLOP/s."""
    hbm_bytes_per_s: float
    """Peak HBM bandwidth, bytes/s."""

    def __post_init__(self) -> None:
        check_instance("GPUSpec.name", self.name, str)
        for field_name in ("peak_flops_bf16", "hbm_bytes_per_s"):
            as_real(f"GPUSpec.{field_name}", getattr(self, field_name), strict=True)

    @classmethod
    def from_name(cls, name: str) -> GPUSpec:
        """A datasheet preset; raises ValueError listing the known names."""
        try:
            return GPU_PRESETS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"gpu name must be one of {sorted(GPU_PRESETS)}, got {name!r}"
            ) from None


GPU_PRESETS: dict[str, GPUSpec] = {
    # NVIDIA A100 Tensor Core GPU datasheet (2021), A100 80GB SXM column:
    # BFLOAT16 Tensor Core 312 TFLOPS (624 with sparsity); GPU memory bandwidth 2,039 GB/s.
    "a100-80gb": GPUSpec("a100-80gb", peak_flops_bf16=312e12, hbm_bytes_per_s=2039e9),
    # NVIDIA A100 datasheet, A100 80GB PCIe column: BF16 312 TFLOPS; bandwidth 1,935 GB/s.
    "a100-80gb-pcie": GPUSpec("a100-80gb-pcie", peak_flops_bf16=312e12, hbm_bytes_per_s=1935e9),
    # NVIDIA A100 datasheet, A100 40GB SXM column: BF16 312 TFLOPS; bandwidth 1,555 GB/s.
    "a100-40gb": GPUSpec("a100-40gb", peak_flops_bf16=312e12, hbm_bytes_per_s=1555e9),
    # NVIDIA A10 Tensor Core GPU datasheet (2021): BF16 125 TFLOPS (250 with sparsity);
    # GDDR6 600 GB/s. AWS's A10G (g5 instances) has the same memory system.
    "a10g": GPUSpec("a10g", peak_flops_bf16=125e12, hbm_bytes_per_s=600e9),
    # NVIDIA L40S datasheet (2023): BF16 362.05 TFLOPS (733 with sparsity); 864 GB/s.
    "l40s": GPUSpec("l40s", peak_flops_bf16=362.05e12, hbm_bytes_per_s=864e9),
    # NVIDIA H100 Tensor Core GPU datasheet (2023), H100 SXM column:
    # BF16 Tensor Core 1,979 TFLOPS *with sparsity* -> 989.5e12 dense; memory bandwidth 3.35 TB/s.
    "h100-sxm": GPUSpec("h100-sxm", peak_flops_bf16=989.5e12, hbm_bytes_per_s=3.35e12),
    # NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column:
    # BF16 Tensor Core 1,979 TFLOPS *with sparsity* -> 989.5e12 dense; memory bandwidth 4.8 TB/s.
    "h200": GPUSpec("h200", peak_flops_bf16=989.5e12, hbm_bytes_per_s=4.8e12),
}


@dataclass(frozen=True)
class Link:
    """A point-to-point link between two processes: a fixed latency plus bytes over bandwidth.

    Transfers do not contend with each other (full-duplex, one link per process pair).
    """

    name: str
    """Preset name (``nvlink3``, ``nvlink4``, ``pcie4-x16``, ...) or a user label."""
    latency_s: float
    """Fixed cost of one message, seconds."""
    bandwidth_bytes_per_s: float
    """Sustained one-direction bandwidth, bytes/s."""

    def __post_init__(self) -> None:
        check_instance("Link.name", self.name, str)
        as_real("Link.latency_s", self.latency_s)
        as_real("Link.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s, strict=True)

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes``: ``ppdmodel.link_seconds``, the one transfer-time formula."""
        return link_seconds(
            latency_s=self.latency_s,
            nbytes=as_real("nbytes", nbytes),
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
        )

    @classmethod
    def from_name(cls, name: str) -> Link:
        """A link preset; raises ValueError listing the known names."""
        try:
            return LINK_PRESETS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"link name must be one of {sorted(LINK_PRESETS)}, got {name!r}"
            ) from None


LINK_PRESETS: dict[str, Link] = {
    # NVLink 4 (H100 SXM datasheet: "NVLink 900 GB/s" total, both directions over 18 links)
    # -> 450 GB/s per direction. Latency: a few microseconds is the small-message NCCL
    # latency reported over NVLink; 5 us is an assumption to calibrate with measure/.
    "nvlink4": Link("nvlink4", latency_s=5e-6, bandwidth_bytes_per_s=450e9),
    # NVLink 3 (A100 SXM datasheet: "NVLink 600 GB/s" total, both directions over 12 links)
    # -> 300 GB/s per direction. Latency as for NVLink 4 (assumption).
    "nvlink3": Link("nvlink3", latency_s=5e-6, bandwidth_bytes_per_s=300e9),
    # PCIe Gen4 x16 (PCI-SIG PCIe 4.0 base spec): 16 GT/s x 16 lanes x 128b/130b encoding
    # = 31.5 GB/s per direction. Latency: ~10 us for a small GPU-to-GPU message through
    # the host bridge (assumption; calibrate with measure/).
    "pcie4-x16": Link("pcie4-x16", latency_s=10e-6, bandwidth_bytes_per_s=31.5e9),
    # PCIe Gen5 x16 (PCI-SIG PCIe 5.0 base spec): 32 GT/s x 16 lanes x 128b/130b
    # = 63.0 GB/s per direction. Latency as for Gen4 (assumption).
    "pcie5-x16": Link("pcie5-x16", latency_s=10e-6, bandwidth_bytes_per_s=63.0e9),
    # Loopback between CPU processes on one host (torch.distributed gloo over TCP on
    # 127.0.0.1): tens of microseconds per message and a few GB/s of memcpy-bound
    # throughput are typical; 50 us and 5 GB/s are assumptions to calibrate with measure/.
    "loopback": Link("loopback", latency_s=50e-6, bandwidth_bytes_per_s=5e9),
}


LAUNCH_MODES = ("eager", "graphs")
"""How an engine issues a step: every kernel from Python, or one CUDA-graph launch."""


@dataclass(frozen=True)
class Engine:
    """An execution regime's host and device costs (``sim.engine`` explains how they combine);
    SI units."""

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
        check_choice("Engine.launch", self.launch, LAUNCH_MODES)
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
    # torch.distributed backend (docs/validate.md, "What decides agreement"); an eager multi-process
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
