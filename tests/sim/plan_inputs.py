"""Planner inputs for the tests: a two-backend profile with bootstrap replicates and a
validation folder whose traces give p per (d_bar, k) with few or many tokens."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

from sim.formats import MatchTrace, write_traces
from tests.ppdmodel.profiles import minimal_profile


def spread_profile(path: Path, *, name: str = "smollm2", spread: float = 0.02) -> Path:
    """A SmolLM2-shaped (d = 30) profile with ``single`` (serial) and ``dist`` backends, each
    with five replicates whose layer time moves by up to +-2 ``spread``."""
    data = minimal_profile(d=30, serial=True)
    data["model"]["name"] = name
    dist = copy.deepcopy(data["backends"]["single"])
    dist.update(serial=False)
    dist["costs"].update(shared_device_slowdown=1.1, handoff_s=0.0003)
    data["backends"]["dist"] = dist
    for entry in data["backends"].values():
        entry["cost_replicates"] = [
            {"costs": {**entry["costs"], "layer_s": entry["costs"]["layer_s"] * (1 + f),
                       "early_head_s": entry["costs"]["early_head_s"] * (1 - f)}}
            for f in spread * np.array([-2, -1, 0, 1, 2])
        ]  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def validation_folder(folder: Path, *, p: dict, tokens: int, model: str = "smollm2") -> Path:
    """A ``ppd validate``-like folder: run.json naming ``model`` and traces.jsonl where p[d_bar]
    of ``tokens`` predictable tokens match (k = 1), repeated on two backends (one sequence)."""
    folder.mkdir(parents=True, exist_ok=True)
    traces = []
    for d_bar, rate in p.items():
        hits = round(rate * tokens)
        m = [1] * hits + [0] * (tokens - hits)
        traces += [MatchTrace("q0", 30, d_bar, 1, m, "shared", "ppd_run", backend=b,
                              early_head="main") for b in ("single", "dist")]  # fmt: skip
    write_traces(folder / "traces.jsonl", traces)
    meta = {"command": "validate", "model": model, "d": 30, "prompts": "questions.jsonl"}
    (folder / "run.json").write_text(json.dumps(meta))
    return folder
