"""Benchmark of the planner: closed-form screening of >= 10^5 configurations, and the
simulation of the frontier, on the machine as it is (say how loaded it was).

Run: ``python benchmarks/bench_plan.py [--repeat 5] [--confirm-n 64] [--workers 2]``. Prints:

* the size of the grid (Vicuna-13B's shape on a100-80gb, h100-sxm and h200 over nvlink4,
  pcie4-x16 and pcie5-x16, 8 devices, Table 2) and the median, min and max wall time of
  screening it (targets: >= 10^5 configurations in < 60 s on 2 cores);
* the wall time of simulating every point of every method's frontier with ``confirm_n``
  sequences each through a local process pool (target < 300 s), and how many agree;
* the 1-minute load average before and after (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from sim.hardware import GPUSpec, Link
from sim.hardware_costs import RooflineHardware
from sim.plan import frontier_of, plan
from sim.plan_grid import PlanSpace, screen
from sim.ptable import PTable
from sim.shape import ModelShape
from sim.sweep import open_executor

GPUS = ("a100-80gb", "h100-sxm", "h200")
LINKS = ("nvlink4", "pcie4-x16", "pcie5-x16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--confirm-n", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    shape = ModelShape.from_name("vicuna-13b")
    hardware = [
        RooflineHardware(shape, GPUSpec.from_name(g), Link.from_name(link))
        for g in GPUS
        for link in LINKS
    ]
    table, space = PTable.paper(), PlanSpace()
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        screened = screen(hardware, table, space, shape.num_layers)
        front = frontier_of(screened, None)
        times.append(time.perf_counter() - start)
    print(
        f"screening + frontiers: {len(screened)} configurations, {len(front)} frontier points; "
        f"median {np.median(times):.2f} s (min {min(times):.2f}, max {max(times):.2f}) "
        f"over {args.repeat} runs"
    )
    with open_executor("local", workers=args.workers) as executor:
        result = plan(hardware, table, space, d=shape.num_layers, confirm_n=args.confirm_n,
                      executor=executor)  # fmt: skip
    agree = int(result.frontier.agrees.sum())
    print(
        f"simulation of the frontiers: {len(result.frontier)} points x {args.confirm_n} "
        f"sequences in {result.confirm_s:.1f} s on {args.workers} workers; {agree} agree"
    )
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
