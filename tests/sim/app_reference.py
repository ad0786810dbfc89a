"""What ``sim.plan`` says for the what-if page's inputs, built by hand (not through the page's
or ``ppd plan``'s builders): the reference the page's tests compare its figures with."""

from __future__ import annotations

from functools import cache

from sim.engine import EngineHardware
from sim.hardware import Engine, GPUSpec, Link
from sim.hardware_costs import SHARED_GPU_SLOWDOWN, RooflineHardware
from sim.plan import plan
from sim.plan_grid import PlanSpace
from sim.ptable import PTable
from sim.shape import ModelShape


def reference_hardware(*, shape: str, gpu: str, devices: int, engine: str | None,
                       link: str = "nvlink4") -> list:  # fmt: skip
    """The hardware model of a shape preset on a GPU preset (the ideal engine: roofline at
    ``ppd plan``'s default efficiencies, no host time)."""
    model = ModelShape.from_name(shape).with_context(1024)
    if engine:
        return [EngineHardware(model, GPUSpec.from_name(gpu), Link.from_name(link),
                               Engine.from_name(engine), max_tp=devices)]  # fmt: skip
    return [RooflineHardware(model, GPUSpec.from_name(gpu), Link.from_name(link), max_tp=devices,
                             flops_efficiency=0.6, bandwidth_efficiency=0.8,
                             shared_device_slowdown=SHARED_GPU_SLOWDOWN, host_s=0.0)]  # fmt: skip


@cache
def reference_plan(*, shape: str = "vicuna-13b", gpu: str = "h100-sxm", devices: int = 8,
                   engine: str | None = None, workload: str = "SQuAD",
                   draws: int = 12):  # fmt: skip
    """``sim.plan.plan`` of the page's inputs on the paper's Table 2 (no simulation; kept per
    inputs: read it, never change it)."""
    hardware = reference_hardware(shape=shape, gpu=gpu, devices=devices, engine=engine)
    return plan(hardware, PTable.paper(), PlanSpace(max_devices=devices, workloads=(workload,)),
                d=hardware[0].shape.num_layers, confirm_n=0, draws=draws, keep_screened=True,
                model=shape, engines=[engine])  # fmt: skip
