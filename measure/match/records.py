"""Long p_correct runs: per-prompt part files (resumable), rank sharding, merged outputs.

Layout of ``out_dir``:

* ``run.json``: the sidecar (model, dtype, device, library versions, prompts sha256, seed, ...);
* ``parts/part-RRRRR-of-WWWWW.jsonl``: one JSON line per finished prompt, appended and fsynced
  by rank R of W; a line is the prompt's whole result, so a prompt is either fully recorded or
  absent. A restart drops a torn last line and skips every prompt found in any part file;
* ``records.csv`` (or ``.parquet``) and ``traces.jsonl`` (sim.formats), written once every
  prompt is done, by rank 0 under torch.distributed (after a barrier) or by the finishing run,
  each to a unique temporary file renamed over the old one: readers see a whole file or none.

A run holds ``.run.lock`` (``measure.match.run_files``) from its start to its end: another run on
the same directory fails at once with DirectoryLockedError, or waits with ``wait_lock``; the
ranks of a sharded run share it and each holds its own shard's lock. Merges hold
``.merge.lock``, so concurrent merges of one directory run one after the other.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from measure.chat import uses_chat_template
from measure.checks import check_model, eos_token_ids
from measure.datasets import HOLDOUT_EVERY, load_prompts, prompts_hash
from measure.degenerate import DegenerateSummary, warn_degenerate
from measure.hf.loading import load_model
from measure.match.config import RECORD_COLUMNS, MatchRateConfig, make_config
from measure.match.rate import (
    PromptResult,
    _vocab_size,
    as_layer_split,
    check_inputs_context,
    degenerate_summary,
    empty_records,
    measure_prompt,
    prompt_inputs,
    trained_layers,
)
from measure.match.run_files import MERGE_LOCK, dir_lock, replacing, run_lock
from measure.train.head_io import group_heads, load_head
from measure.train.heads import CONFIG_NAME
from ppdmodel.positions import m_from_positions
from ppdmodel.validation import (
    MissingPath,
    as_int,
    check_choice,
    check_columns,
    check_flag,
    check_input_dir,
    check_input_file,
    check_output_dir,
    refused_as,
)
from sim.formats import MatchTrace, parse_jsonl, write_traces

SIDECAR = "run.json"
TRACES = "traces.jsonl"
RECORD_FORMATS = ("csv", "parquet")
# sidecar keys that must agree between a run and its resumption
_RESUME_KEYS = (
    "model_type",
    "d",
    "dtype",
    "prompts_sha256",
    "n_prompts",
    "prompt_selection",
    "chat_template",
    "heads",
    "config",
)
SET_BY = {
    "model_type": ("model",), "d": ("model",), "dtype": ("model", "dtype"),
    "prompts_sha256": ("prompts_path",), "n_prompts": ("prompts_path", "limit", "category",
                                                       "split"),
    "prompt_selection": ("fmt", "limit", "category", "split"),
    "chat_template": ("chat_template", "tokenizer"), "heads": ("heads", "head_dir"),
    "config": ("layers", "ks", "max_new_tokens", "sampling", "seed", "verify"),
}  # fmt: skip
"""The arguments of ``run_match_rate`` behind each of ``_RESUME_KEYS`` (named when a resumed
run differs)."""


@dataclass(frozen=True)
class RunResult:
    """What a (possibly sharded or interrupted) run left in ``out_dir``."""

    out_dir: Path
    """The run's directory."""
    sidecar: Path
    """The JSON metadata file."""
    part: Path
    """This rank's part file (one JSON line per finished prompt)."""
    records: Path | None
    """Tidy records (CSV or Parquet), or None while prompts remain undone."""
    traces: Path | None
    """MatchTrace JSONL for every (layer < d, k, head), or None while prompts remain undone."""
    n_done: int
    """Prompts finished across all part files."""
    n_prompts: int
    """Prompts in the run."""
    degenerate: DegenerateSummary | None = None
    """Prompts whose generation ended at once or fell into repetition (None until merged)."""


def run_match_rate(
    model,
    prompts_path: str | Path,
    out_dir: str | Path,
    *,
    fmt: str = "auto",
    limit: int | None = None,
    category: str | Iterable[str] | None = None,
    split: str = "all",
    chat_template: bool = True,
    tokenizer=None,
    layers: Iterable[int] | None = None,
    ks: Iterable[int] = (1, 3, 5),
    max_new_tokens: int = 16,
    heads: Mapping[int, object] | Iterable[object] | None = None,
    head_dir: str | Path | None = None,
    sampling=None,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
    records_format: str = "csv",
    resume: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    verify: bool = True,
    progress: bool = True,
    on_prompt_done: Callable[[str], None] | None = None,
    wait_lock: bool = False,
) -> RunResult:
    """Measure match rates for a prompts file into ``out_dir``; resumable and shardable.

    model: a local model directory (loaded with measure.hf.loading.load_model, ``dtype``,
    ``device``) or a loaded causal LM (pass ``tokenizer``). rank/world_size: this process's
    shard (prompts ``rank::world_size``); default from torch.distributed when initialised,
    else 0/1. resume: continue a previous run in ``out_dir`` (else it must hold none).
    on_prompt_done(prompt_id) is called after each prompt is safely on disk. Another process
    using ``out_dir`` raises DirectoryLockedError, or is waited for with ``wait_lock``.
    Prompts that do not fit max_new_tokens in the model's context are refused before any work.
    category, split: which prompts of the file (``measure.datasets.load_prompts``).
    chat_template: encode each prompt as the user turn of the tokenizer's chat template when it
    has one. heads: ``{layer: head}`` or a list of heads; head_dir adds every head saved there.
    Prompts whose generation ended at once or fell into repetition are listed in the sidecar
    and warned of.
    """
    check_choice("records_format", records_format, RECORD_FORMATS)
    for name, flag in (("chat_template", chat_template), ("resume", resume), ("verify", verify),
                       ("progress", progress), ("wait_lock", wait_lock)):  # fmt: skip
        check_flag(name, flag)
    if on_prompt_done is not None and not callable(on_prompt_done):
        raise ValueError(f"on_prompt_done must be None or a callable, got {on_prompt_done!r:.80}")
    rank, world_size = _rank_world(rank, world_size)
    check_input_file("prompts_path", prompts_path)
    out_dir = check_output_dir("out_dir", out_dir)
    with refused_as("prompts_path"):
        prompts = load_prompts(prompts_path, fmt, limit=limit, category=category, split=split)
    ids = [str(p.id) for p in prompts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"prompts file {prompts_path}: prompt ids must be unique")
    if not ids:
        raise ValueError(f"prompts file {prompts_path}: no prompts selected")
    model, tokenizer, model_name = _load(model, tokenizer, dtype, device)
    groups = group_heads(heads)
    if head_dir is not None:
        for name, by_layer in group_heads(load_heads(head_dir, model)).items():
            for layer, head in by_layer.items():
                if layer in groups.setdefault(name, {}):
                    raise ValueError(
                        f"head_dir {head_dir}: its {name!r} head for layer {layer} is also "
                        "given in heads"
                    )
                groups[name][layer] = head
    lsm = as_layer_split(model)
    config = make_config(
        lsm.num_layers,
        layers=layers,
        ks=ks,
        max_new_tokens=max_new_tokens,
        trained_layers=trained_layers(groups),
        sampling=sampling,
        seed=seed,
        verify=verify,
    )
    if config.max_k > _vocab_size(lsm):  # refuse before out_dir is touched (it stays reusable)
        raise ValueError(
            f"ks must be <= the vocabulary size {_vocab_size(lsm)}, got {config.max_k}"
        )
    inputs = list(prompt_inputs(prompts, tokenizer, lsm.device, chat_template=chat_template))
    check_inputs_context(lsm, inputs, config.max_new_tokens)
    out_dir = Path(out_dir)
    part = part_path(out_dir, rank, world_size)
    meta = sidecar(
        model,
        model_name,
        config,
        prompts_path,
        prompts_hash(prompts_path),
        len(ids),
        groups,
        head_dir,
        world_size,
    )
    meta["prompt_selection"] = {
        "format": fmt,
        "category": _categories(category),
        "split": split,
        "holdout_every": HOLDOUT_EVERY,
        "limit": limit,
    }
    meta["chat_template"] = tokenizer is not None and uses_chat_template(tokenizer, chat_template)
    shard = part.stem if world_size > 1 else None
    with run_lock(out_dir, shard=shard, wait=wait_lock):
        _prepare(out_dir, part, meta, resume, records_format)
        done = completed_prompts(out_dir, own_part=part)
        todo = [(pid, x) for pid, x in inputs[rank::world_size] if pid not in done]
        _measure_all(lsm, todo, config, groups, part, rank, progress, on_prompt_done)
        return _finish(out_dir, part, ids, config, records_format)


def _categories(category) -> list[str] | None:
    if category is None:
        return None
    return sorted({category} if isinstance(category, str) else set(category))


def _measure_all(lsm, inputs, config, groups, part, rank, progress, hook) -> None:
    from tqdm.auto import tqdm

    eos = eos_token_ids(lsm.model)
    bar = tqdm(
        inputs,
        total=len(inputs),
        desc=f"match-rate rank {rank}",
        position=rank,
        disable=not progress,
        unit="prompt",
    )
    part.parent.mkdir(parents=True, exist_ok=True)
    with part.open("a", encoding="utf-8") as fh:
        for pid, input_ids in bar:
            result = measure_prompt(lsm, input_ids, pid, config, groups, eos)
            fh.write(json.dumps(result.to_dict()) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            if hook is not None:
                hook(pid)


def _finish(out_dir, part, ids, config, records_format) -> RunResult:
    import torch.distributed as dist

    distributed = dist.is_available() and dist.is_initialized()
    if distributed:
        dist.barrier()
    done = completed_prompts(out_dir)
    n_done = sum(pid in done for pid in ids)
    records = traces = summary = None
    if n_done == len(ids) and (not distributed or dist.get_rank() == 0):
        records, traces = merge_parts(out_dir, ids, config, records_format)
        meta = json.loads((out_dir / SIDECAR).read_text(encoding="utf-8"))
        summary = DegenerateSummary(
            meta["degenerate"]["n_prompts"],
            tuple(meta["degenerate"]["ended_at_once"]),
            tuple(meta["degenerate"]["repetition"]),
        )
        warn_degenerate(summary, stacklevel=3)
    if distributed:
        dist.barrier()
    return RunResult(out_dir, out_dir / SIDECAR, part, records, traces, n_done, len(ids), summary)


def _rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is None and world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    rank = 0 if rank is None else as_int("rank", rank, minimum=0)
    world_size = 1 if world_size is None else as_int("world_size", world_size, minimum=1)
    if not rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    return rank, world_size


def _load(model, tokenizer, dtype, device):
    if isinstance(model, (str, Path)):
        with refused_as("model"):
            loaded, loaded_tokenizer = load_model(model, dtype=dtype, device=device)
        return loaded, tokenizer or loaded_tokenizer, str(model)
    check_model(model)
    return model, tokenizer, str(getattr(model.config, "name_or_path", "") or type(model).__name__)


def load_heads(head_dir: str | Path, model=None, device=None) -> list:
    """Every head saved in ``head_dir`` (one head directory, or a directory of them), sorted.

    Full heads go to ``device`` (default: the model's); translators attach to ``model``.
    Two heads of the same kind for one layer are refused.
    """
    head_dir = check_input_dir("head_dir", head_dir)
    dirs = (
        [head_dir]
        if (head_dir / CONFIG_NAME).is_file()
        else sorted(p for p in head_dir.iterdir() if (p / CONFIG_NAME).is_file())
    )
    if not dirs:
        raise MissingPath(
            f"head_dir {str(head_dir)!r}: no {CONFIG_NAME} in it or its sub-directories"
        )
    if device is None:
        device = "cpu" if model is None else next(model.parameters()).device
    heads = [load_head(path, model, device=device) for path in dirs]
    try:
        group_heads(heads)
    except ValueError as exc:
        raise ValueError(f"head_dir {head_dir}: {exc}") from None
    return heads


def sidecar(
    model,
    model_name,
    config: MatchRateConfig,
    prompts_path,
    sha256,
    n_prompts,
    groups,
    head_dir,
    world_size,
) -> dict:
    """The run's metadata: model, dtype, device, library versions, prompts hash, seed, config."""
    import numpy as np
    import torch
    import transformers

    param = next(model.parameters())
    return {
        "model": model_name,
        "model_type": model.config.model_type,
        "d": config.d,
        "dtype": str(param.dtype).removeprefix("torch."),
        "device": str(param.device),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
            "pandas": pd.__version__,
        },
        "prompts": str(prompts_path),
        "prompts_sha256": sha256,
        "n_prompts": n_prompts,
        "seed": config.seed,
        "ks": list(config.ks),
        "layers": list(config.layers),
        "max_new_tokens": config.max_new_tokens,
        "decoding": config.decoding,
        "config": config.to_dict(),
        "heads": _head_names(groups),
        "eos_token_ids": eos_token_ids(model),
        "head_dir": None if head_dir is None else str(head_dir),
        "world_size": world_size,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _head_names(groups: Mapping[str, Mapping[int, object]]) -> dict[str, str]:
    """{"15": "trained+translator", ...}: the trained heads probed at each layer."""
    names: dict[int, list[str]] = {}
    for name, by_layer in groups.items():
        for layer in by_layer:
            names.setdefault(layer, []).append(name)
    return {str(layer): "+".join(sorted(names[layer])) for layer in sorted(names)}


def part_path(out_dir: Path, rank: int, world_size: int) -> Path:
    """The part file of shard ``rank`` of ``world_size`` in ``out_dir``."""
    return Path(out_dir) / "parts" / f"part-{rank:05d}-of-{world_size:05d}.jsonl"


def check_out_dir(out_dir, part: Path, resume: bool, records_format: str) -> None:
    """Refuse an ``out_dir`` holding a previous run (this shard's ``part`` or the merged
    records) unless ``resume`` (the CLI checks it before the model loads)."""
    records = Path(out_dir) / f"records.{records_format}"
    if not resume and (part.exists() or records.exists()):
        raise ValueError(
            f"out_dir {out_dir} holds a previous run; pass resume (--resume) "
            "to continue it or choose an empty directory"
        )


def _prepare(out_dir: Path, part: Path, meta: dict, resume: bool, records_format: str) -> None:
    """Check ``out_dir`` against ``resume`` and the previous sidecar; write the sidecar."""
    path = out_dir / SIDECAR
    check_out_dir(out_dir, part, resume, records_format)
    if path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        differ = [key for key in _RESUME_KEYS if old.get(key) != meta[key]]
        if differ:
            arguments = ", ".join(dict.fromkeys(a for key in differ for a in SET_BY[key]))
            raise ValueError(
                f"out_dir {out_dir} holds a run with different {differ} (set by {arguments}); "
                "resume it with its own arguments or choose another directory"
            )
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(path, json.dumps(meta, indent=2) + "\n")


def _atomic_write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_part(path: Path, repair: bool = False) -> list[PromptResult]:
    """Finished prompts of one part file; a torn last line is ignored (cut off with repair)."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if repair and end < len(data):
        with path.open("r+b") as fh:
            fh.truncate(end)
    results = []
    for lineno, record in parse_jsonl(data[:end].decode("utf-8").splitlines(), path):
        try:
            results.append(PromptResult.from_dict(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: not a prompt record ({exc})") from exc
    return results


def part_files(out_dir: Path) -> list[Path]:
    return sorted((Path(out_dir) / "parts").glob("part-*.jsonl"))


def completed_prompts(out_dir: Path, own_part: Path | None = None) -> dict[str, PromptResult]:
    """Finished prompts across all part files (first record wins); repairs ``own_part``."""
    done: dict[str, PromptResult] = {}
    for path in part_files(out_dir):
        for result in read_part(path, repair=path == own_part):
            done.setdefault(result.prompt, result)
    return done


def merge_parts(
    out_dir: Path, ids: list[str], config: MatchRateConfig, records_format: str = "csv"
) -> tuple[Path, Path]:
    """Write the tidy records and the traces of all prompts, in prompts-file order.

    Holds ``out_dir``'s merge lock (waiting for another merge to finish); every file is written
    under a unique temporary name and renamed into place.
    """
    out_dir = Path(out_dir)
    with dir_lock(out_dir, MERGE_LOCK, wait=True):
        return _merge(out_dir, ids, config, records_format)


def _merge(out_dir: Path, ids, config, records_format) -> tuple[Path, Path]:
    done = completed_prompts(out_dir)
    results = [done[pid] for pid in ids if pid in done]
    frames = [r.to_frame(config.ks) for r in results]
    frames = [f for f in frames if len(f)]
    df = pd.concat(frames, ignore_index=True) if frames else empty_records()
    records = out_dir / f"records.{records_format}"
    with replacing(records) as tmp:
        if records_format == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_parquet(tmp, index=False)
    traces = out_dir / TRACES
    with replacing(traces) as tmp:
        write_traces(tmp, result_traces(results, config))
    meta = json.loads((out_dir / SIDECAR).read_text(encoding="utf-8"))
    meta.update(
        finished_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        n_records=len(df),
        records=records.name,
        traces=TRACES,
        degenerate=degenerate_summary(results, meta.get("eos_token_ids", [])).to_dict(),
    )
    _atomic_write_text(out_dir / SIDECAR, json.dumps(meta, indent=2) + "\n")
    return records, traces


def result_traces(results: Iterable[PromptResult], config: MatchRateConfig) -> list[MatchTrace]:
    """A MatchTrace per (prompt, head, layer < d, k), with the prompt's generated tokens.

    m_t (t = 2..ell) is the match at position t - 1 (``ppdmodel.positions``).
    """
    traces = []
    for result in results:
        for head, (layers, ranks) in result.ranks.items():
            for j, layer in enumerate(layers):
                if layer >= config.d:
                    continue  # d_bar must be < d
                for k in config.ks:
                    m = m_from_positions((ranks[:, j] < k).astype(int).tolist())
                    traces.append(
                        MatchTrace(
                            result.prompt,
                            config.d,
                            layer,
                            k,
                            m,
                            head,
                            "match_rate",
                            list(result.tokens),
                        )
                    )
    return traces


RECORD_INTEGERS = {"position": 1, "layer": 1, "k": 1, "token": 0}
"""The integer columns of records and the least value each may hold."""


def read_records(path: str | Path) -> pd.DataFrame:
    """Read records written by run_match_rate (CSV or Parquet, by extension); a file that is
    not such a table (malformed, a column missing, text or a value out of range where an
    integer or a boolean belongs) is a ValueError naming it."""
    path = Path(path)
    source = f"records {path}"
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, dtype={"prompt": str, "head": str, "decoding": str})
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' ParserError, pyarrow's errors
        raise ValueError(f"{source}: not a records table ({exc})") from None
    check_columns(source, df, RECORD_COLUMNS)
    if not len(df):
        return df.astype({**dict.fromkeys(RECORD_INTEGERS, "int64"), "match": "bool"})
    for column, least in RECORD_INTEGERS.items():
        if df[column].dtype.kind not in "iu" or (df[column] < least).any():
            raise ValueError(f"{source}: column {column} must hold integers >= {least}")
    if df["match"].dtype.kind != "b":
        raise ValueError(f"{source}: column match must hold True or False")
    return df
