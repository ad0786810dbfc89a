"""How the cost of two processes sharing this machine moves over minutes: the pair probe, in blocks.

A ``dist`` prediction prices main's suffix and the candidate batch run at once with the pair
probe's factors (``measure.profile.ranks``: each side's seconds with both ranks computing over
its seconds alone). This script keeps two ranks alive (``RankGroup``) and runs the pair probe
(``pair_samples_on``) in blocks of ``--rounds`` rounds for ``--seconds`` seconds, and reports
each block's factors, how far they spread, their lag-1 autocorrelation, and how far a profile's
factor (``STRETCH_ROUNDS`` consecutive rounds, mean both over mean alone, as
``measure.profile.profile.pair_slowdowns``) moves between stretches of the record.

    python experiments/sharing_drift.py --model smollm2 --seconds 480 --out sharing
    -> sharing/blocks.csv, sharing/sharing.png, the summary on stdout
    python experiments/sharing_drift.py --blocks sharing/blocks.csv   # the summary again
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

SIDES = ("main", "cand")
STRETCH_ROUNDS = (8, 16, 32)
"""Rounds of the stretches whose factors' spread the summary prints (a profile's probe)."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a model name or directory")
    parser.add_argument("--seconds", type=float, default=480.0, help="span to time (> 0)")
    parser.add_argument("--rounds", type=int, default=2, help="pair rounds per block (>= 1)")
    parser.add_argument("--k", type=int, default=1, help="candidate batch rows (>= 1)")
    parser.add_argument("--context", type=int, default=80, help="cached positions (>= 2)")
    parser.add_argument("--out", type=Path, default=None, help="folder for blocks.csv, sharing.png")
    parser.add_argument("--blocks", type=Path, default=None,
                        help="summarise this blocks.csv instead of timing")  # fmt: skip
    args = parser.parse_args(argv)
    if args.blocks is not None:
        if not args.blocks.is_file():
            parser.error(f"--blocks: no file {args.blocks}")
        print(summary(pd.read_csv(args.blocks)))
        return 0
    if not args.seconds > 0 or args.rounds < 1 or args.k < 1 or args.context < 2:
        parser.error("--seconds must be > 0, --rounds and --k >= 1, --context >= 2")

    from measure.decode.rank_group import RankGroup
    from measure.hf.loading import load_model
    from measure.profile.ranks import pair_samples_on
    from ppdmodel.defaults import default_d_bar

    model, _ = load_model(args.model)
    d_bar = default_d_bar(model.config.get_text_config().num_hidden_layers)
    probe = dict(ks=(args.k,), d_bar=d_bar, context_tokens=args.context,
                 placements=("main",))  # fmt: skip
    rows = []
    with RankGroup(model, world_size=2) as group:
        pair_samples_on(group, repeats=1, **probe)  # warm-up
        start = time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            samples = pair_samples_on(group, repeats=args.rounds, **probe)
            row = {"t_s": time.perf_counter() - start, "rounds": args.rounds}
            for side in SIDES:
                alone = np.mean(samples[f"pair_{side}_alone_s[{args.k}]"])
                both = np.mean(samples[f"pair_{side}_both_s[{args.k}]"])
                row |= {f"{side}_alone_s": alone, f"{side}_both_s": both,
                        f"{side}_factor": both / alone}  # fmt: skip
            rows.append(row)
            if args.out is not None:  # nothing lost if stopped midway
                args.out.mkdir(parents=True, exist_ok=True)
                pd.DataFrame(rows).to_csv(args.out / "blocks.csv", index=False)
    blocks = pd.DataFrame(rows)
    print(summary(blocks))
    if args.out is not None:
        plot(blocks, args.out / "sharing.png")
        print(f"wrote {args.out / 'blocks.csv'} and {args.out / 'sharing.png'}")
    return 0


def summary(blocks: pd.DataFrame) -> str:
    if blocks.empty:
        return "no blocks"
    per_block = int(blocks["rounds"].iloc[0]) if "rounds" in blocks else 2
    lines = [f"{len(blocks)} blocks of {per_block} rounds over {blocks['t_s'].iloc[-1]:.0f} s"]
    for side in SIDES:
        f = blocks[f"{side}_factor"].to_numpy()
        alone = blocks[f"{side}_alone_s"].to_numpy() * 1e3
        line = (f"{side}: factor median {np.median(f):.3f}, range {f.min():.3f}-{f.max():.3f}, "
                f"IQR {np.percentile(f, 25):.3f}-{np.percentile(f, 75):.3f}; alone "
                f"{alone.min():.1f}-{alone.max():.1f} ms")  # fmt: skip
        x = f - f.mean()
        if len(f) > 2 and np.any(x):  # (a constant factor has no autocorrelation)
            line += f"; lag-1 autocorrelation {np.corrcoef(x[:-1], x[1:])[0, 1]:.2f}"
        lines.append(line + f"; block log-sd {100 * np.std(np.log(f), ddof=1):.1f} %")
        a, b = blocks[f"{side}_alone_s"].to_numpy(), blocks[f"{side}_both_s"].to_numpy()
        for rounds in STRETCH_ROUNDS:
            n = max(1, rounds // per_block)
            means = [b[i : i + n].sum() / a[i : i + n].sum() for i in range(0, len(a) - n + 1, n)]
            medians = [np.median(b[i : i + n]) / np.median(a[i : i + n])
                       for i in range(0, len(a) - n + 1, n)]  # fmt: skip
            if len(means) >= 3:
                lines.append(
                    f"  {side}, stretches of {n * per_block} rounds ({len(means)}): log-sd "
                    f"{100 * np.std(np.log(means), ddof=1):.1f} % as mean over mean, "
                    f"{100 * np.std(np.log(medians), ddof=1):.1f} % as median over median "
                    "(of the blocks)"
                )
    return "\n".join(lines)


def plot(blocks: pd.DataFrame, path: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.4))
    ax = fig.subplots()
    for side in SIDES:
        ax.plot(blocks["t_s"], blocks[f"{side}_factor"], marker=".", lw=1,
                label=f"{side}: both / alone")  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("seconds with both ranks / alone")
    ax.set_title("the pair probe's sharing factors, block by block", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
