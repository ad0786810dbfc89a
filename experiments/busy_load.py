"""A documented background load for timing checks on a busy machine (issue 24, item 9).

Starts ``--procs`` processes (default: one per core) that each spin for ``--seconds`` (bounded)
doing either pure-Python arithmetic (``cpu``: takes a core, little memory traffic) or sums over
a 64 MiB array (``memory``: takes a core and memory bandwidth, as a second model would), then
exits; Ctrl-C or SIGTERM stops them all. Usage::

    python experiments/busy_load.py --kind cpu --seconds 900 &
    ppd validate ... --profile quiet_profile.json --interleave-probes --out ...
    kill %1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time

import numpy as np

MEMORY_BYTES = 64 * 2**20
"""Array size of the ``memory`` load: well beyond any last-level cache here."""


def spin(kind: str, seconds: float) -> None:
    """Keep one core busy for ``seconds``."""
    end = time.monotonic() + seconds
    if kind == "memory":
        data = np.ones(MEMORY_BYTES // 8)
        while time.monotonic() < end:
            data.sum()
    else:
        x = 0
        while time.monotonic() < end:
            for i in range(10_000):
                x = (x + i * i) % 1_000_003


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("cpu", "memory"), default="cpu")
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    if not 1 <= args.procs <= 64:
        parser.error(f"--procs must be in [1, 64], got {args.procs}")
    if not 0 < args.seconds <= 4 * 3600:
        parser.error(f"--seconds must be in (0, 14400], got {args.seconds}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # exit ends the daemonic children
    procs = [mp.Process(target=spin, args=(args.kind, args.seconds)) for _ in range(args.procs)]
    for p in procs:
        p.daemon = True  # they end with this process
        p.start()
    try:
        for p in procs:
            p.join()
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
