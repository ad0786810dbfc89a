"""``ppd measure atlas``: a p_correct atlas with intervals, a figure and a provenance record."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

from measure.cli.common import (
    MODEL_HELP,
    add_prompt_format_args,
    check_match_rate_options,
    command_line,
    degenerate_warnings,
    honours_no_progress,
    prompt_selection,
    read_prompts,
)
from ppdmodel.cli_args import (
    existing_dir,
    existing_file,
    nonnegative_int,
    output_dir,
    positive_int,
)

MATCH_DIR = "match"
"""Sub-directory of ``--out`` holding the match-rate run behind the atlas."""
DEFAULT_LAYERS_SHOWN = (8, 15, 22, 26, 28)
"""Layers printed by default (of 30; scaled to d): the atlas CSV holds every probed layer."""


def register_measure(subparsers) -> None:
    """Add ``atlas`` to the ``ppd measure`` sub-commands."""
    p = subparsers.add_parser(
        "atlas",
        help="p_correct atlas: rate, n and 95%% intervals per prompt set, head, layer and k",
        description="Measures match rates (as `ppd measure match-rate`, into OUT/match; "
        "resumable) or reads an existing run (--records), then writes atlas.csv (per prompt "
        "set, i.e. each category and 'all', head, layer and k: p_correct, n tokens, n prompts, "
        "Wilson and bootstrap-over-prompts 95%% intervals), atlas_positions.csv (the same per "
        "token-position bin), atlas.png (p_correct against layer/d with bands, the paper's "
        "Vicuna-13B Table 2 overlaid at layer/40) and atlas.json (provenance). The bootstrap "
        "resamples whole prompts (stratified by category), so it respects the correlation of "
        "matches within a sequence; it is the interval to quote.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="MODEL", help=MODEL_HELP)
    source.add_argument(
        "--records",
        type=existing_dir,
        metavar="RUN_DIR",
        help="an existing `ppd measure match-rate` output dir",
    )
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--prompts", type=existing_file, metavar="FILE", help="prompts file (with --model)"
    )
    add_prompt_format_args(p)
    p.add_argument(
        "--layers", type=positive_int, nargs="+", default=None, help="default all 1..d-1"
    )
    p.add_argument("--ks", type=positive_int, nargs="+", default=[1, 3, 5], help="k values (1 3 5)")
    p.add_argument(
        "--max-new-tokens", type=positive_int, default=64, help="ell per prompt (default 64)"
    )
    p.add_argument(
        "--head-dir",
        type=existing_dir,
        default=None,
        help="trained heads (a dir, or a dir of them)",
    )
    p.add_argument("--resume", action="store_true", help="continue an interrupted run")
    p.add_argument("--wait-lock", action="store_true", help="wait for another run using OUT/match")
    p.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples (1000)")
    p.add_argument("--bin-width", type=positive_int, default=8, help="tokens per position bin (8)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="bootstrap seed (0)")
    p.add_argument(
        "--show-layers", type=positive_int, nargs="+", default=None, help="layers printed"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=honours_no_progress(_atlas))


def _atlas(args) -> int:
    out = Path(args.out)
    if args.records is None:
        if args.prompts is None:
            raise ValueError("--prompts is required with --model")
        run_dir = _measure(args, out / MATCH_DIR)
    else:
        run_dir = Path(args.records)
    return _write_atlas(args, run_dir, out)


def _measure(args, run_dir: Path) -> Path:
    import torch

    from measure.match.records import run_match_rate

    check_match_rate_options(args, read_prompts(args), run_dir)  # before any weight is read
    if args.threads:
        torch.set_num_threads(args.threads)
    with degenerate_warnings("measure atlas"):
        result = run_match_rate(
            args.model,
            args.prompts,
            run_dir,
            fmt=args.format,
            **prompt_selection(args),
            chat_template=not args.no_chat_template,
            layers=args.layers,
            ks=args.ks,
            max_new_tokens=args.max_new_tokens,
            head_dir=args.head_dir,
            dtype=args.dtype,
            device=args.device,
            resume=args.resume,
            wait_lock=args.wait_lock,
            progress=not args.no_progress,
        )
    if result.records is None:
        raise ValueError(f"{run_dir}: {result.n_done}/{result.n_prompts} prompts done")
    return run_dir


def _write_atlas(args, run_dir: Path, out: Path) -> int:
    from measure.match.atlas import atlas, atlas_positions, format_atlas
    from measure.match.atlas_plot import plot_atlas
    from measure.match.records import SIDECAR, read_records

    meta = json.loads((run_dir / SIDECAR).read_text(encoding="utf-8"))
    if "records" not in meta:
        raise ValueError(f"--records {run_dir}: the run is not finished (no merged records)")
    df = read_records(run_dir / meta["records"])
    d = int(meta["d"])
    beyond = [layer for layer in args.show_layers or () if layer > d]
    if beyond:
        raise ValueError(f"--show-layers {beyond}: the model has d = {d} layers")
    categories = _categories(meta)
    options = dict(categories=categories, n_boot=args.n_boot, seed=args.seed)
    table = atlas(df, d, **options)
    positions = atlas_positions(df, d, bin_width=args.bin_width, **options)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "atlas.csv", index=False)
    positions.to_csv(out / "atlas_positions.csv", index=False)
    fig = plot_atlas(table, title=f"p_correct atlas: {Path(meta['model']).name} (d = {d})")
    fig.savefig(out / "atlas.png", dpi=120)
    record = provenance(args, meta, run_dir)
    (out / "atlas.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shown = args.show_layers or [round(x * d / 30) for x in DEFAULT_LAYERS_SHOWN]
    print(f"p_correct [95% bootstrap-over-prompts interval] n=tokens, d = {d}:")
    for prompt_set in dict.fromkeys(table["prompt_set"]):
        print(f"\nprompt set {prompt_set}:")
        print(format_atlas(table, prompt_set=prompt_set, layers=shown))
    degenerate = meta.get("degenerate", {})
    bad = len(degenerate.get("ended_at_once", [])) + len(degenerate.get("repetition", []))
    print(f"\n{bad} of {degenerate.get('n_prompts', '?')} prompts degenerate (see atlas.json)")
    for name in ("atlas.csv", "atlas_positions.csv", "atlas.png", "atlas.json"):
        print(f"wrote {out / name}")
    return 0


def _categories(meta: dict) -> dict[str, str] | None:
    """prompt id -> category, from the run's prompts file (None when it has none)."""
    from measure.datasets import load_prompts

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


def provenance(args, meta: dict, run_dir: Path) -> dict:
    """The atlas's record: command, model and prompts (with hashes), heads, date, versions."""
    import numpy as np
    import pandas as pd

    model_dir = Path(meta["model"])
    config = {}
    if (model_dir / "config.json").is_file():
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    gguf = (config.get("quantization_config") or {}).get("gguf_file")
    return {
        "command": command_line(args, "measure atlas"),
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
            "bootstrap": f"percentile, {args.n_boot} resamples of whole prompts, stratified by "
            f"category, seed {args.seed}",
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
    from measure.train.heads import CONFIG_NAME

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
