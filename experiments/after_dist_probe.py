"""Is a probe round timed right after a ``dist`` run slower than one timed after a ``single`` run,
and is it after one untimed round?

``ppd validate`` times one probe round right before each judged run, cold on purpose: the run
that follows starts in the same state (``measure.eval.interleaved``;
``docs/record/cpu_validation.md``,
"Probes right after a `dist` run": with a warm-up round before every probe, five of six
validations read 2-6 % low). This script decodes one prompt as a judged run does, on one spawned
``RankGroup`` (``dist``) or in this process (``single``), and right after it times one probe
round (``probe_samples``: a greedy step's pieces, the candidate batch, the hand-off), in three
conditions, interleaved in each rep:

- ``after single``: a ``single`` run, then the round (the baseline);
- ``after dist``: a ``dist`` run, then the round, as ``ppd validate`` times it;
- ``after dist, warm-up``: a ``dist`` run, then one untimed round, then the timed one.

It prints each condition's layers (ms, the median over reps and its IQR), the median of the
per-rep ratios to the baseline, this process's CPU seconds over the wall seconds of the timed
round (near 1: nobody took the core away) and the ranks' CPU milliseconds during it (read from
``/proc``, 10 ms ticks: the ranks are idle once a run returns). Run it on a quiet machine.

Usage: python experiments/after_dist_probe.py [--model smollm2] [--reps 12] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from measure.decode.backends import ppd_many
from measure.decode.rank_group import RankGroup
from measure.hf.loading import load_model
from measure.profile.probes import DecodeProbe
from measure.profile.profile import probe_samples
from ppdmodel.defaults import default_d_bar

CONDITIONS = ("after single", "after dist", "after dist, warm-up")
PROMPT = "Translate into French: the quick brown fox jumps over the lazy dog. " * 4


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children so far (Linux ``/proc``)."""
    tick, me, total = os.sysconf("SC_CLK_TCK"), os.getpid(), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def _timed_round(probe: DecodeProbe, warmup: int) -> tuple[float, float, float]:
    """One probe round (after ``warmup`` untimed ones): its layers (s), this process's CPU over
    wall seconds, and the children's CPU seconds meanwhile."""
    children, wall, cpu = _children_cpu_s(), time.perf_counter(), time.process_time()
    got = probe_samples(probe, (1,), repeats=1, warmup=warmup)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return got["layers_s"][0], cpu / wall, _children_cpu_s() - children


def measure(model_name: str, reps: int, tokens: int) -> dict[str, list[tuple]]:
    torch.set_num_threads(1)
    model, tokenizer = load_model(model_name)
    ids = [tokenizer(PROMPT, return_tensors="pt").input_ids]
    probe = DecodeProbe(model, context_tokens=ids[0].shape[1])
    run = dict(d_bar=default_d_bar(probe.d), k=1, max_new_tokens=tokens)
    out: dict[str, list[tuple]] = {c: [] for c in CONDITIONS}
    with RankGroup(model, world_size=2) as ranks:
        ppd_many(model, ids, backend="dist", ranks=ranks, warmup=True, **run)
        probe_samples(probe, (1,), repeats=1, warmup=1)
        for rep in range(reps):
            order = CONDITIONS[rep % 3 :] + CONDITIONS[: rep % 3]  # rotate the order
            for condition in order:
                if condition == "after single":
                    ppd_many(model, ids, backend="single", **run)
                else:
                    ppd_many(model, ids, backend="dist", ranks=ranks, **run)
                out[condition].append(_timed_round(probe, int(condition.endswith("warm-up"))))
    return out


def report(out: dict[str, list[tuple]]) -> str:
    base = np.array([row[0] for row in out["after single"]])
    lines = []
    for condition, rows in out.items():
        rows = np.array(rows)
        layers = rows[:, 0] * 1e3
        q1, q3 = np.percentile(layers, [25, 75])
        ratio = np.median(rows[:, 0] / base)
        lines.append(
            f"{condition:>20}: layers {np.median(layers):6.2f} ms (IQR {q1:.2f}-{q3:.2f}), "
            f"x{ratio:.3f} the baseline (per-rep median), own CPU/wall {np.median(rows[:, 1]):.3f}"
            f", ranks' CPU {1e3 * np.median(rows[:, 2]):.0f} ms (max {1e3 * rows[:, 2].max():.0f})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2", help="a model name or directory")
    parser.add_argument("--reps", type=int, default=12, help="reps of the three conditions")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per judged run")
    parser.add_argument("--out", help="write the raw samples here (JSON)")
    args = parser.parse_args()
    if args.reps < 2 or args.tokens < 1:
        parser.error(f"--reps must be >= 2 and --tokens >= 1, got {args.reps}, {args.tokens}")
    out = measure(args.model, args.reps, args.tokens)
    print(report(out))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
