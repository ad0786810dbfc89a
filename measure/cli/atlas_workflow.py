"""The workflow of ``ppd measure atlas``: measure match rates (or read a finished run), then
write the atlas (p_correct per prompt set, head, layer and k with Wilson and bootstrap 95 %
intervals), its per-position table, its figure and its provenance record."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from measure.cli.match_settings import (
    AtlasSettings,
    MatchOutputSettings,
    MatchSamplingSettings,
    RecordsSettings,
)
from measure.cli.match_workflow import measure_match_rate
from measure.datasets import load_prompts
from measure.match.atlas import atlas, atlas_positions, format_atlas
from measure.match.atlas_plot import plot_atlas
from measure.match.records import SIDECAR, read_records
from measure.settings import (
    GenerationSettings,
    ModelSettings,
    ProbeSettings,
    PromptSettings,
    ThreadSettings,
)
from measure.train.heads import CONFIG_NAME

MATCH_DIR = "match"
"""Sub-directory of ``--out`` holding the match-rate run behind the atlas."""
DEFAULT_LAYERS_SHOWN = (8, 15, 22, 26, 28)
"""Layers printed by default (of 30; scaled to d): the atlas CSV holds every probed layer."""
FILES = ("atlas.csv", "atlas_positions.csv", "atlas.png", "atlas.json")
"""What an atlas writes into ``--out``."""


@dataclass(frozen=True)
class AtlasResult:
    """An atlas written: its table and what ``ppd measure atlas`` prints of it."""

    table: pd.DataFrame
    """p_correct per prompt set, head, layer and k (``measure.match.atlas.atlas``)."""
    d: int
    shown: list[int]
    """The layers printed."""
    degenerate: int
    """Prompts whose generation degenerated."""
    n_prompts: object
    """Prompts of the run ('?' when the run does not record it)."""
    out: Path


def make_atlas(
    records: RecordsSettings, model: ModelSettings | None, prompts: PromptSettings,
    probes: ProbeSettings, generation: GenerationSettings, output: MatchOutputSettings,
    atlas_settings: AtlasSettings, threads: ThreadSettings, *, command: str,
) -> AtlasResult:  # fmt: skip
    """The atlas of a finished run (``records``) or of one measured into OUT/match with
    ``model`` (``command``: the command line, for the provenance record)."""
    out = Path(output.out)
    if records.records is None:
        if prompts.prompts is None:
            raise ValueError("--prompts is required with --model")
        run_dir = out / MATCH_DIR
        if threads.threads:
            torch.set_num_threads(threads.threads)
        result = measure_match_rate(
            model, prompts, probes, generation, MatchSamplingSettings(), output,
            command="measure atlas", run_dir=run_dir, shard=False,
        )  # fmt: skip
        if result.records is None:
            raise ValueError(f"{run_dir}: {result.n_done}/{result.n_prompts} prompts done")
    else:
        run_dir = Path(records.records)
    return write_atlas(run_dir, out, atlas_settings, command=command)


def write_atlas(run_dir: Path, out: Path, settings: AtlasSettings, *, command: str) -> AtlasResult:
    """atlas.csv, atlas_positions.csv, atlas.png and atlas.json of the run in ``run_dir``."""
    meta = json.loads((run_dir / SIDECAR).read_text(encoding="utf-8"))
    if "records" not in meta:
        raise ValueError(f"--records {run_dir}: the run is not finished (no merged records)")
    df = read_records(run_dir / meta["records"])
    d = int(meta["d"])
    beyond = [layer for layer in settings.show_layers or () if layer > d]
    if beyond:
        raise ValueError(f"--show-layers {beyond}: the model has d = {d} layers")
    options = dict(categories=_categories(meta), n_boot=settings.n_boot, seed=settings.seed)
    table = atlas(df, d, **options)
    positions = atlas_positions(df, d, bin_width=settings.bin_width, **options)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "atlas.csv", index=False)
    positions.to_csv(out / "atlas_positions.csv", index=False)
    fig = plot_atlas(table, title=f"p_correct atlas: {Path(meta['model']).name} (d = {d})")
    fig.savefig(out / "atlas.png", dpi=120)
    record = provenance(command, settings, meta, run_dir)
    (out / "atlas.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    degenerate = meta.get("degenerate", {})
    bad = len(degenerate.get("ended_at_once", [])) + len(degenerate.get("repetition", []))
    shown = list(settings.show_layers or [round(x * d / 30) for x in DEFAULT_LAYERS_SHOWN])
    n_prompts = degenerate.get("n_prompts", "?")
    return AtlasResult(table=table, d=d, shown=shown, degenerate=bad, n_prompts=n_prompts, out=out)


def format_atlas_report(result: AtlasResult) -> str:
    """What ``ppd measure atlas`` prints: the atlas per prompt set at the shown layers, the
    degenerate prompts, the files written."""
    lines = [f"p_correct [95% bootstrap-over-prompts interval] n=tokens, d = {result.d}:"]
    for prompt_set in dict.fromkeys(result.table["prompt_set"]):
        shown = format_atlas(result.table, prompt_set=prompt_set, layers=result.shown)
        lines += [f"\nprompt set {prompt_set}:", shown]
    lines.append(f"\n{result.degenerate} of {result.n_prompts} prompts degenerate "
                 "(see atlas.json)")  # fmt: skip
    lines += [f"wrote {result.out / name}" for name in FILES]
    return "\n".join(lines)


def _categories(meta: dict) -> dict[str, str] | None:
    """prompt id -> category, from the run's prompts file (None when it has none)."""
    path = Path(meta["prompts"])
    selection = meta.get("prompt_selection", {})
    if not path.is_file():
        return None
    prompts = load_prompts(
        path,
        selection.get("format", "auto"),
        category=selection.get("category"),
        split=selection.get("split", "all"),
        limit=selection.get("limit"),
    )
    categories = {str(p.id): p.category for p in prompts if p.category is not None}
    return categories or None


def files_sha256(directory: Path, pattern: str = "*.safetensors") -> str | None:
    """sha256 over the bytes of the files matching ``pattern`` in ``directory`` (sorted)."""
    files = sorted(Path(directory).glob(pattern))
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def provenance(command: str, settings: AtlasSettings, meta: dict, run_dir: Path) -> dict:
    """The atlas's record: ``command``, model and prompts (with hashes), heads, date,
    versions, and the intervals of ``settings``."""
    model_dir = Path(meta["model"])
    config = {}
    if (model_dir / "config.json").is_file():
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    gguf = (config.get("quantization_config") or {}).get("gguf_file")
    return {
        "command": command,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": {
            "path": str(model_dir),
            "safetensors_sha256": files_sha256(model_dir) if model_dir.is_dir() else None,
            "model_type": meta.get("model_type"),
            "d": meta.get("d"),
            "dtype": meta.get("dtype"),
            "converted_from_gguf": gguf,
        },
        "prompts": {
            "path": meta.get("prompts"),
            "sha256": meta.get("prompts_sha256"),
            "n_prompts": meta.get("n_prompts"),
            "selection": meta.get("prompt_selection"),
            "chat_template": meta.get("chat_template"),
        },
        "generation": {
            "max_new_tokens": meta.get("max_new_tokens"),
            "decoding": meta.get("decoding"),
            "ks": meta.get("ks"),
            "layers": meta.get("layers"),
        },
        "heads": _heads_record(meta.get("head_dir")),
        "degenerate": meta.get("degenerate"),
        "intervals": {
            "bootstrap": f"percentile, {settings.n_boot} resamples of whole prompts, stratified by "
            f"category, seed {settings.seed}",
            "wilson": "Wilson score interval, tokens as independent trials",
            "level": 0.95,
        },
        "match_run": str(run_dir),
        "versions": {
            **meta.get("versions", {}),
            "numpy": np.__version__,
            "pandas": pd.__version__,
            "python": platform.python_version(),
        },
        "device": meta.get("device"),
    }


def _heads_record(head_dir) -> list[dict]:
    """Kind, layer and training record of every head in ``head_dir``."""
    if not head_dir:
        return []
    root = Path(head_dir)
    dirs = [root] if (root / CONFIG_NAME).is_file() else sorted(root.iterdir())
    record = []
    for path in dirs:
        if not (path / CONFIG_NAME).is_file():
            continue
        data = json.loads((path / CONFIG_NAME).read_text(encoding="utf-8"))
        record.append(
            {
                "path": str(path),
                "kind": data.get("kind", "full"),
                "layer": data["config"]["layer"],
                "train": data.get("train", {}),
            }
        )
    return record


__all__ = ["AtlasResult", "format_atlas_report", "make_atlas", "provenance", "write_atlas"]
