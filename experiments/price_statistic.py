"""Would another statistic of the profile's samples predict the runs better than the median?

For every validation folder given (``ppd validate`` output with ``profile.json``, and
``profile_interleaved.json`` where ``--interleave-probes`` ran), each profile's compute figures
are re-priced from their kept samples with another statistic in place of the median (the mean;
the mean of the fastest 90 %; the mean with the slowest 10 % capped), by the profile's own rule
(``measure.profile.profile.reprice``; the pair factors and the ``dist`` host time, means
already, are kept), and every PPD row and greedy is predicted again from the runs' own match
sequences (``traces.jsonl``). Nothing is re-timed. It prints, per folder, profile and
statistic, the median |error| of the PPD rows, their median signed error and greedy's errors,
then over all folders the median |error| and the spread (standard deviation) of the median
signed error from one validation to the next: the run-to-run term no statistic can remove.

Usage: python experiments/price_statistic.py FOLDER [FOLDER ...]   (e.g. OUT/run*/*/ of
experiments/cpu_validate.sh)
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from measure.eval.predict import predict_greedy, predict_ppd
from measure.eval.repeat import PPDConfig
from measure.profile.profile import load_profile, reprice
from measure.profile.stats import Spread

STATISTICS = ("median", "mean", "trimmed", "capped")
KEPT = ("pair_", "dist_host")
"""Figures priced by their means already (kept as they are)."""


def statistic(name: str, samples) -> float:
    """``name`` of ``samples``: median, mean, trimmed (mean of the fastest 90 %) or capped
    (mean with every sample above the 90th percentile set to it)."""
    v = np.sort(np.asarray(samples, dtype=float))
    if name == "median":
        return float(np.median(v))
    if name == "mean":
        return float(v.mean())
    if name == "trimmed":
        return float(v[: max(1, round(0.9 * v.size))].mean())
    if name == "capped":
        return float(np.minimum(v, np.quantile(v, 0.9)).mean())
    raise ValueError(f"statistic must be one of {STATISTICS}, got {name!r}")


def repriced(profile, name: str):
    """``profile`` with every compute figure's price taken as ``name`` of its samples."""
    model = profile.data["model"]
    shapes = {k: model[k] for k in ("hidden_size", "kv_heads", "head_dim", "element_bytes")}
    figures = {}
    for backend, entries in profile.data["figures"].items():
        figures[backend] = {}
        for figure, entry in entries.items():
            s = Spread.from_dict(entry)
            if s.samples and not figure.startswith(KEPT):
                s = Spread(statistic(name, s.samples), s.q1, s.q3, s.n, s.samples)
            figures[backend][figure] = s
    return reprice(profile, figures, shapes=shapes, device=torch.device("cpu"), note=name)


def folder_errors(folder: Path) -> dict:
    """(profile file, statistic) -> (PPD rows' signed errors, greedy's errors)."""
    measured = {(r["method"], r["backend"]): float(r["measured_s"])
                for r in csv.DictReader(open(folder / "validation.csv"))}  # fmt: skip
    runs = {}
    for line in open(folder / "traces.jsonl"):
        r = json.loads(line)
        if r.get("k") is not None:
            key = (r["backend"], r["d_bar"], r["k"], r["early_head"])
            runs.setdefault(key, []).append(SimpleNamespace(m=r["m"], tokens=r["tokens"]))
    limit = json.loads((folder / "run.json").read_text())["max_new_tokens"]
    out = {}
    for file in ("profile.json", "profile_interleaved.json"):
        if not (folder / file).exists():
            continue
        base = load_profile(folder / file)
        for name in STATISTICS:
            profile = repriced(base, name)
            errors, greedy = [], []
            for (backend, d_bar, k, head), rs in sorted(runs.items()):
                config = PPDConfig(d_bar=d_bar, k=k, early_head=head, backend=backend)
                pred = predict_ppd(profile, rs, config, max_new_tokens=limit).closed_form_s
                errors.append(pred / measured[(config.label, backend)] - 1)
            for backend in dict.fromkeys(key[0] for key in runs):
                rs = next(v for key, v in runs.items() if key[0] == backend)
                pred = predict_greedy(profile, rs, backend).closed_form_s
                greedy.append(pred / measured[("greedy", backend)] - 1)
            out[(file, name)] = (np.array(errors), greedy)
    return out


def main(folders) -> None:
    pooled: dict = {}
    for folder in map(Path, folders):
        for (file, name), (errors, greedy) in folder_errors(folder).items():
            pooled.setdefault((file, name), []).append(errors)
            mae, signed = 100 * np.median(np.abs(errors)), 100 * np.median(errors)
            greedy = " ".join(f"{100 * g:+.1f}" for g in greedy)
            print(f"{folder}  {file:26s} {name:8s} median |error| {mae:5.1f} %, signed "
                  f"{signed:+5.1f} %; greedy {greedy}")  # fmt: skip
    print("over all folders: median of the median |error|; median signed error: median, sd")
    for (file, name), errors in sorted(pooled.items()):
        abs_med = [np.median(np.abs(e)) for e in errors]
        signed = [np.median(e) for e in errors]
        mae, mid, sd = (100 * np.median(abs_med), 100 * np.median(signed),
                        100 * np.std(signed))  # fmt: skip
        print(f"  {file:26s} {name:8s} {len(errors)} folders: {mae:.1f} %; {mid:+.1f} %, sd "
              f"{sd:.1f} points")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
