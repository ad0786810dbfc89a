"""Modelled hardware: GPU datasheet numbers and inter-process links, with their sources."""

from __future__ import annotations

from dataclasses import dataclass

from ppdmodel.costs import link_seconds
from ppdmodel.validation import as_real, check_instance


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
