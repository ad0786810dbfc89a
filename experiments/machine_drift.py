"""How this machine's speed moves over minutes: the profile's sentinel, timed in blocks.

Times ``DecodeProbe.step`` (a greedy step's layers, as ``measure.profile.drift`` does) in
blocks of ``--block`` steps for ``--seconds`` seconds, and reports each block's median, how far
the medians of windows of 10-80 s spread, and the lag-1 autocorrelation of the blocks. A
machine whose windows spread by more than a few percent cannot price a run from a profile taken
minutes before it to better than that (``ppd validate --interleave-probes`` re-times the prices
beside the runs instead).

    python experiments/machine_drift.py --model smollm2 --seconds 300 --out drift
    -> drift/blocks.csv, drift/drift.png, the summary on stdout
    python experiments/machine_drift.py --blocks drift/blocks.csv   # the summary again

It also prints the ``--drift-floor`` for profiles on this machine (``measure.profile.drift``):
the log-sd of the medians of its 80 s windows. The summary's last line is what pairing a run
with the sentinel beside it leaves (``measure.eval.paired``): a run of ``PAIR_RUN`` blocks,
repeated ``PAIR_ROUNDS`` times ``PAIR_SPACING`` blocks apart (a validation's rounds), its
median against the median of the blocks around its runs (as interleaved probes price it), and
paired: each run against the geometric mean of the blocks just before and after it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

WINDOWS_S = (10, 20, 40, 80)
FLOOR_WINDOW_S = 80
"""The window whose medians' spread is the machine's drift floor (about a profile's length)."""
PAIR_RUN, PAIR_ROUNDS, PAIR_SPACING = 3, 3, 44
"""Blocks per run, rounds, and blocks between a run's rounds in the pairing line (blocks of 20
SmolLM2 steps last about 1.5 s: a 4-5 s run, rounds about a minute apart)."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a model name or directory")
    parser.add_argument("--seconds", type=float, default=300.0, help="span to time (> 0)")
    parser.add_argument("--block", type=int, default=20, help="steps per block (>= 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (>= 1)")
    parser.add_argument("--context", type=int, default=80, help="cached positions (>= 2)")
    parser.add_argument("--out", type=Path, default=None, help="folder for blocks.csv, drift.png")
    parser.add_argument("--blocks", type=Path, default=None,
                        help="summarise this blocks.csv instead of timing")  # fmt: skip
    args = parser.parse_args(argv)
    if args.blocks is not None:
        if not args.blocks.is_file():
            parser.error(f"--blocks: no file {args.blocks}")
        print(summary(pd.read_csv(args.blocks), args))
        return 0
    if not args.seconds > 0 or args.block < 1 or args.threads < 1 or args.context < 2:
        parser.error("--seconds must be > 0, --block and --threads >= 1, --context >= 2")

    from measure.hf.loading import load_model
    from measure.profile.probes import DecodeProbe

    torch.set_num_threads(args.threads)
    model, _ = load_model(args.model)
    probe = DecodeProbe(model, context_tokens=args.context)
    for _ in range(3):
        probe.step()
    rows, start = [], time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        steps = [probe.step()["layers_s"] for _ in range(args.block)]
        rows.append({"t_s": time.perf_counter() - start, "median_s": float(np.median(steps)),
                     "q1_s": float(np.percentile(steps, 25)),
                     "q3_s": float(np.percentile(steps, 75))})  # fmt: skip
    blocks = pd.DataFrame(rows)
    print(summary(blocks, args))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        blocks.to_csv(args.out / "blocks.csv", index=False)
        plot(blocks, args, args.out / "drift.png")
        print(f"wrote {args.out / 'blocks.csv'} and {args.out / 'drift.png'}")
    return 0


def summary(blocks: pd.DataFrame, args) -> str:
    med = blocks["median_s"].to_numpy() * 1e3
    lines = [
        f"{args.model}: {len(med)} blocks of {args.block} greedy steps at {args.threads} "
        f"thread(s) over {blocks['t_s'].iloc[-1]:.0f} s",
        f"block medians: min {med.min():.2f} ms, median {np.median(med):.2f} ms, "
        f"max {med.max():.2f} ms ({100 * (med.max() / med.min() - 1):.0f} % apart)",
    ]
    for window in WINDOWS_S:
        index = (blocks["t_s"] // window).astype(int)
        full = [g for _, g in blocks.groupby(index) if len(g) >= 2]
        if len(full) >= 2:
            w = np.array([np.median(g["median_s"]) for g in full]) * 1e3
            lines.append(f"{window:3d} s windows: {len(w)}, medians {w.min():.2f}-{w.max():.2f} "
                         f"ms, sd/mean {100 * w.std(ddof=1) / w.mean():.1f} %")  # fmt: skip
    floor = drift_floor(blocks)
    if floor is not None:
        lines.append(f"--drift-floor for a profile on this machine: {100 * floor:.1f} (log-sd of "
                     f"the {FLOOR_WINDOW_S} s windows' medians, in %)")  # fmt: skip
    if len(med) > 2:
        x = med - med.mean()
        lines.append(f"lag-1 autocorrelation of the blocks: {np.corrcoef(x[:-1], x[1:])[0, 1]:.2f}")
    pooled, paired = pairing(np.log(med))
    if len(pooled):
        lines.append(
            f"a {PAIR_RUN}-block run's median over {PAIR_ROUNDS} rounds {PAIR_SPACING} blocks "
            f"apart ({len(pooled)} placements), off the blocks around its runs: log-sd "
            f"{pooled.std():.3f}; paired with the blocks just before and after each run: "
            f"{paired.std():.3f}"
        )
    return "\n".join(lines)


def drift_floor(blocks: pd.DataFrame) -> float | None:
    """The log-sd of the medians of ``FLOOR_WINDOW_S``-second windows (at least 3 of them):
    how far the machine's level moves between a profile and runs minutes later
    (``measure.profile.drift``), or None for too short a record."""
    index = (blocks["t_s"] // FLOOR_WINDOW_S).astype(int)
    full = [g for _, g in blocks.groupby(index) if len(g) >= 2]
    if len(full) < 3:
        return None
    return float(np.std(np.log([np.median(g["median_s"]) for g in full]), ddof=1))


def pairing(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every placement of PAIR_ROUNDS runs of PAIR_RUN blocks, PAIR_SPACING apart: the log
    of the runs' median over the pooled neighbouring blocks' median, and the median over runs of
    each run's log over its own neighbours' mean (``measure.eval.paired``)."""
    pooled, paired = [], []
    last = len(logs) - (PAIR_ROUNDS - 1) * PAIR_SPACING - PAIR_RUN - 1
    for i in range(1, last):
        starts = [i + r * PAIR_SPACING for r in range(PAIR_ROUNDS)]
        runs = np.array([logs[j : j + PAIR_RUN].mean() for j in starts])
        near = np.array([(logs[j - 1] + logs[j + PAIR_RUN]) / 2 for j in starts])
        sides = [logs[j - 1] for j in starts] + [logs[j + PAIR_RUN] for j in starts]
        pooled.append(np.median(runs) - np.median(sides))
        paired.append(np.median(runs - near))
    return np.array(pooled), np.array(paired)


def plot(blocks: pd.DataFrame, args, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4))
    ax = fig.subplots()
    t = blocks["t_s"]
    ax.fill_between(t, blocks["q1_s"] * 1e3, blocks["q3_s"] * 1e3, alpha=0.3, label="block IQR")
    ax.plot(t, blocks["median_s"] * 1e3, marker=".", lw=1, label="block median")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("greedy step, layers only (ms)")
    ax.set_title(f"{args.model}: blocks of {args.block} greedy steps at {args.threads} thread(s)",
                 fontsize=10)  # fmt: skip
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
