"""The training workflows of ``ppd measure train-head`` (early heads with the model frozen, on
text or on the model's own greedy continuations) and ``ppd measure reference-model`` (the
offline reference model): settings checked against the model's config.json first."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from measure.checks import model_facts
from measure.cli.common import check_prompts_fit, read_prompts
from measure.cli.train_settings import (
    GreedyDataSettings,
    HeadSettings,
    HeadTrainingSettings,
    ReferenceCorpusSettings,
    ReferenceShapeSettings,
    ReferenceTrainingSettings,
    TrainPromptSettings,
    reference_config,
)
from measure.hf.loading import load_causal_lm
from measure.settings import ModelSettings, OutputSettings, ThreadSettings
from measure.train.distill import (
    DEFAULT_EPOCHS,
    DEFAULT_LR,
    DistillConfig,
    collect_states,
    fit_head,
    new_head,
)
from measure.train.heads import HeadConfig, encode_texts, train_head
from measure.train.reference_model import METADATA_NAME, train_reference_model

Report = Callable[[str], None]
"""Where a workflow reports each step as it finishes (``print`` on the command line)."""


@dataclass(frozen=True)
class ReferenceModelResult:
    """The reference model saved and its training record (reference_model.json)."""

    out: Path
    record: dict


def use_threads(threads: ThreadSettings) -> None:
    """Set torch's CPU threads (None: leave torch's own choice)."""
    if threads.threads is not None:
        torch.set_num_threads(threads.threads)


def train_heads(
    model: ModelSettings, heads: HeadSettings, data: TrainPromptSettings,
    training: HeadTrainingSettings, greedy: GreedyDataSettings, threads: ThreadSettings,
    output: OutputSettings, *, command: str, report: Report,
) -> None:  # fmt: skip
    """Train the early heads of ``heads`` with the model frozen and save them under
    ``output.out``: full heads on the text as it is, or any kind on the model's greedy
    continuations of the prompts (``command``: the command line, for each head's record)."""
    use_threads(threads)
    if heads.source == "greedy" and data.prompts is None:
        raise ValueError("--data greedy needs --prompts (the continuations start from them)")
    out = Path(output.out)
    if heads.source == "text":
        _train_full_on_text(model, heads, data, training, output, out, report)
    else:
        _train_on_greedy(model, heads, data, training, greedy, out, command, report)


def _head_path(out: Path, kinds: list[str], layers, kind: str, layer: int) -> Path:
    if len(kinds) > 1:
        return out / f"{kind}_layer_{layer}"
    return out if len(layers) == 1 else out / f"layer_{layer}"


def _check_layers(layers, d: int, *, low: int) -> None:
    """Refuse a --layer outside [low, d) (layer d is the final layer, read by the model's own
    head) before any weight is read."""
    for layer in layers:
        if not low <= layer < d:
            raise ValueError(f"--layer must be in [{low}, {d}) for this {d}-layer model (layer "
                             f"{d} is the final layer, whose head is the model's own), got "
                             f"{layer}")  # fmt: skip


def _training_texts(data: TrainPromptSettings) -> list[str]:
    if data.text is not None:
        path = Path(data.text)
        if not path.is_file():
            raise FileNotFoundError(f"text file not found: {path}")
        return [path.read_text(encoding="utf-8")]
    prompts = read_prompts(data)
    return [p.text if p.reference is None else f"{p.text} {p.reference}" for p in prompts]


def _train_full_on_text(
    model: ModelSettings, heads: HeadSettings, data: TrainPromptSettings,
    training: HeadTrainingSettings, output: OutputSettings, out: Path, report: Report,
) -> None:  # fmt: skip
    texts = _training_texts(data)
    facts = model_facts(model.model)  # config.json and tokenizer: checked before any weight
    _check_layers(heads.layer, facts.d, low=0)
    if facts.tokenizer is None:
        raise ValueError(f"model directory {model.model} has no tokenizer to encode the text")
    ids = encode_texts(texts, facts.tokenizer)
    lm = load_causal_lm(model.model, dtype=model.dtype, device=model.device)
    for layer in heads.layer:
        config = HeadConfig.for_model(lm, layer, **training.text_overrides())
        head = train_head(lm, layer, ids, config, progress=output.progress)
        target = head.save(_head_path(out, ["full"], heads.layer, "full", layer))
        losses = head.train_losses
        report(f"layer {layer}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
               f"saved {target}")  # fmt: skip


def _distill_config(training: HeadTrainingSettings, greedy: GreedyDataSettings, kind: str):
    options = {
        "lr": training.lr if training.lr is not None else DEFAULT_LR[kind],
        "epochs": training.epochs if training.epochs is not None else DEFAULT_EPOCHS[kind],
        "batch_tokens": greedy.batch_tokens,
        "weight_decay": training.weight_decay,
        "warmup_ratio": training.warmup_ratio,
        "seed": training.seed,
        "max_seconds": None if greedy.max_minutes is None else 60 * greedy.max_minutes,
    }
    return DistillConfig(**{k: v for k, v in options.items() if v is not None})


def _train_on_greedy(
    model: ModelSettings, heads: HeadSettings, data: TrainPromptSettings,
    training: HeadTrainingSettings, greedy: GreedyDataSettings, out: Path, command: str,
    report: Report,
) -> None:  # fmt: skip
    prompts = read_prompts(data)  # a malformed prompts file fails before the model loads
    if not prompts:
        raise ValueError(f"--prompts {data.prompts}: no prompts selected")
    facts = model_facts(model.model)  # config.json and tokenizer: checked before any weight
    _check_layers(heads.layer, facts.d, low=1)
    ids = check_prompts_fit(facts, prompts, greedy.new_tokens, chat_template=data.chat_template,
                            what="--new-tokens")  # fmt: skip
    lm = load_causal_lm(model.model, dtype=model.dtype, device=model.device)
    states = collect_states(
        lm,
        ids,
        list(heads.layer),
        max_new_tokens=greedy.new_tokens,
        batch_size=greedy.gen_batch_size,
        prompt_positions=greedy.prompt_positions,
    )
    selection = {"limit": data.limit, "category": _listed(data.category), "split": data.split}
    record_data = {
        "command": command,
        "prompts": str(data.prompts),
        "selection": {"format": data.format, **selection},
        "chat_template": data.chat_template,
        "new_tokens": greedy.new_tokens,
        "prompt_positions": greedy.prompt_positions,
        "generation_seconds": states.seconds,
    }
    report(f"greedy continuations of {states.n_sequences} prompts: {states.n_generated} tokens, "
           f"{states.n_positions} training positions, {states.seconds:.0f} s")  # fmt: skip
    for kind in heads.kinds:
        for layer in heads.layer:
            head = new_head(lm, kind, layer)
            record = fit_head(head, lm, states, _distill_config(training, greedy, kind))
            head.train_record = {**record, "data": record_data}
            target = head.save(_head_path(out, heads.kinds, heads.layer, kind, layer))
            report(f"{kind} head @ layer {layer}: {record['steps']} steps, KL "
                   f"{record['first_loss']:.4f} -> {record['last_loss']:.4f}, "
                   f"{record['seconds']:.0f} s; saved {target}")  # fmt: skip


def _listed(values) -> list | None:
    return None if values is None else list(values)


def train_reference(
    corpus: ReferenceCorpusSettings, shape: ReferenceShapeSettings,
    training: ReferenceTrainingSettings, threads: ThreadSettings, output: OutputSettings,
) -> ReferenceModelResult:  # fmt: skip
    """Train the offline reference model into ``output.out``
    (``measure.train.reference_model.train_reference_model``)."""
    use_threads(threads)
    config = reference_config(corpus, shape, training)
    out = train_reference_model(output.out, config, progress=output.progress)
    record = json.loads((out / METADATA_NAME).read_text())
    return ReferenceModelResult(out=out, record=record)


__all__ = ["ReferenceModelResult", "train_heads", "train_reference", "use_threads"]
