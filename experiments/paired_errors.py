"""The paired errors of a ``ppd validate --interleave-probes`` folder, recomputed from its files.

Reads ``sentinel.csv`` (the windows and the judged pieces, in order), ``validation.csv`` (the
predictions), ``profile.json`` and ``profile_interleaved.json`` (their sentinel windows), and
applies ``measure.eval.paired`` as ``ppd validate`` does. Useful for a folder written by an
earlier rule, and to see the weight's effect: ``--weight`` replaces the windows' own (0: the
level alone; 1: each prompt paired in full with its neighbouring windows).

    python experiments/paired_errors.py OUT/run1/smollm2 [--weight W]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from measure.eval.paired import SentinelTimeline, paired_rel_err
from measure.profile.drift import MachineDrift


def timeline(table: pd.DataFrame, threads: int) -> tuple[SentinelTimeline, dict]:
    """The timeline of ``sentinel.csv`` (run keys: (method, prompt)) and each piece's seconds
    by (method, prompt) in order."""
    t = SentinelTimeline(threads)
    seconds: dict = {}
    for row in table.itertuples(index=False):
        if row.kind == "window":
            t.window(float(row.seconds))
        else:
            key = (row.method, None if pd.isna(row.prompt) else int(row.prompt))
            t.run(key)
            seconds.setdefault(key, []).append(float(row.seconds))
    return t, seconds


def errors(folder: Path, weight: float | None = None) -> pd.DataFrame:
    """Per row of validation.csv: the paired errors against the profile and the interleaved
    probes' profile."""
    machine = MachineDrift.from_dict(
        json.loads((folder / "profile.json").read_text()).get("machine")
    )
    probed = MachineDrift.from_dict(
        json.loads((folder / "profile_interleaved.json").read_text()).get("machine")
    )
    if machine is None or probed is None:
        raise ValueError(f"{folder}: a profile without sentinel windows (an older profile)")
    t, seconds = timeline(pd.read_csv(folder / "sentinel.csv"), machine.threads)
    w = t.weight if weight is None else weight
    rows = []
    for row in pd.read_csv(folder / "validation.csv").itertuples(index=False):
        prompts = sorted(p for m, p in seconds if m == row.method and p is not None)
        if not prompts:
            continue
        speeds = [t.speeds_s((row.method, p)) for p in prompts]
        rounds = {len(seconds[(row.method, p)]) for p in prompts} | {len(x) for x in speeds}
        if len(rounds) != 1:
            raise ValueError(f"{folder}: {row.method}: prompts with unequal run counts")
        runs = [[(seconds[(row.method, p)][r], speeds[i][r]) for i, p in enumerate(prompts)]
                for r in range(rounds.pop())]  # fmt: skip
        out = {"method": row.method, "backend": row.backend}
        for name, pred, ref in (("paired_rel_err", row.predicted_s, machine.median_s),
                                ("interleaved_paired_rel_err", row.interleaved_predicted_s,
                                 probed.median_s)):  # fmt: skip
            out[name] = paired_rel_err(pred, runs, ref, level_s=t.level_s, weight=w)
        rows.append(out)
    return pd.DataFrame(rows).assign(weight=w, level_over_profile=t.level_s / machine.median_s)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a ppd validate --interleave-probes --out folder")
    parser.add_argument("--weight", type=float, default=None, help="override the weight, in [0, 1]")
    args = parser.parse_args(argv)
    names = ("sentinel.csv", "validation.csv", "profile.json", "profile_interleaved.json")
    missing = [n for n in names if not (args.folder / n).is_file()]
    if missing:
        parser.error(f"{args.folder}: no {', '.join(missing)} (a --interleave-probes folder?)")
    if args.weight is not None and not 0 <= args.weight <= 1:
        parser.error(f"--weight must be in [0, 1], got {args.weight}")
    try:
        table = errors(args.folder, args.weight)
    except ValueError as e:
        parser.error(str(e))
    print(table.round(4).to_string(index=False))
    ppd = table["method"] != "greedy"
    for col in ("paired_rel_err", "interleaved_paired_rel_err"):
        every = 100 * pd.to_numeric(table[col]).abs()
        rows = every[ppd].dropna()
        print(
            f"{col}: median |error| {every.median():.1f} %, worst {every.max():.1f} % over "
            f"every row; {rows.median():.1f} / {rows.max():.1f} % over the PPD rows "
            "(summary.json's)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
