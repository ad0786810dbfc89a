"""Trained per-layer LM heads: the paper's "Y" rows (a classifier trained for one layer).

A `TrainedHead` is a copy of the model's final norm (+ OPT's project_out) and LM head that is
fine-tuned to read the hidden state after decoder layer ``layer``, with the model frozen.
Defaults follow the paper's Table 4 (AdamW, lr 2e-5, warm-up ratio 0.04, 3 epochs,
cross-entropy on the next token, weight decay 0, sequences of up to 2048 tokens); the loss
can also be the KL divergence to the final layer's distribution.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from measure.chat import check_tokenizer
from measure.checks import as_prompt_ids, check_model
from measure.hf.arch import arch_spec, get_module
from measure.hf.lens import LensFingerprint, LogitLens, resolve_head
from ppdmodel.validation import (
    MissingPath,
    as_int,
    as_real,
    check_choice,
    check_flag,
    check_instance,
    items_of,
)

WEIGHTS_NAME = "head.safetensors"
CONFIG_NAME = "head_config.json"
LOSSES = ("ce", "kl")
NORMS = ("rms", "layer", "none")


@dataclass(frozen=True)
class HeadConfig:
    """Shape of a per-layer head and how to train it (defaults: the paper's Table 4)."""

    layer: int
    """Hidden state read by the head: output of decoder layer ``layer`` (1-based count of
    layers run, i.e. ``hidden_states[layer]``); 0 is the embedding output."""
    vocab_size: int
    """Number of logits (LM head rows)."""
    hidden_size: int
    """Width of the hidden state the head reads."""
    loss: str = "ce"
    """"ce": cross-entropy on the next token; "kl": KL(final-layer dist || head dist)."""
    lr: float = 2e-5
    """Peak AdamW learning rate (Table 4)."""
    warmup_ratio: float = 0.04
    """Fraction of optimizer steps with linear warm-up; then linear decay to 0 (Table 4)."""
    epochs: int = 3
    """Passes over the training blocks (Table 4)."""
    batch_size: int = 128
    """Sequences per optimizer step (Table 4); reached by gradient accumulation."""
    micro_batch_size: int = 8
    """Sequences per forward pass of the frozen model (memory knob, no effect on the math)."""
    max_seq_len: int = 2048
    """Training block length in tokens (Table 4), capped by the model's context length."""
    weight_decay: float = 0.0
    """AdamW weight decay (Table 4)."""
    seed: int = 0
    """Seed of the per-epoch shuffle of training blocks."""
    train_norm: bool = True
    """Also train the head's copy of the final norm (else only the LM head)."""
    norm: str = "rms"
    """Kind of the copied final norm: "rms" (Llama family), "layer" (GPT-2, OPT) or "none"."""
    norm_eps: float = 1e-6
    """Epsilon of the copied final norm."""
    project_dim: int | None = None
    """Output width of OPT's project_out, copied into the head; None where there is none."""
    lm_head_bias: bool = False
    """Whether the LM head has a bias."""
    model_type: str = ""
    """``config.model_type`` of the model the head was made from (for the record)."""

    def __post_init__(self) -> None:
        """Check every field (ValueError naming it); integral floats are stored as ints."""
        ints = {"layer": 0, "vocab_size": 1, "hidden_size": 1, "epochs": 1, "batch_size": 1,
                "micro_batch_size": 1, "max_seq_len": 2, "seed": 0}  # fmt: skip
        for name, low in ints.items():
            object.__setattr__(self, name, as_int(name, getattr(self, name), minimum=low))
        if self.project_dim is not None:
            object.__setattr__(self, "project_dim", as_int("project_dim", self.project_dim))
        as_real("lr", self.lr, strict=True)
        as_real("weight_decay", self.weight_decay)
        as_real("norm_eps", self.norm_eps)
        if as_real("warmup_ratio", self.warmup_ratio, maximum=1.0) == 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        check_flag("train_norm", self.train_norm)
        check_flag("lm_head_bias", self.lm_head_bias)
        check_instance("model_type", self.model_type, str)
        check_choice("loss", self.loss, LOSSES)
        check_choice("norm", self.norm, NORMS)

    @classmethod
    def for_model(cls, model, layer: int, **overrides) -> HeadConfig:
        """A config whose shape fields describe ``model``'s final norm and LM head."""
        check_model(model)
        layer = as_int("layer", layer, minimum=0)
        spec = arch_spec(model)
        num_layers = len(get_module(model, spec.layers))
        if not 0 <= layer < num_layers:
            raise ValueError(
                f"layer must be in [0, {num_layers}) for this {num_layers}-layer model "
                f"(layer {num_layers} is the final layer, whose head is the model's own), "
                f"got {layer}"
            )
        norm = get_module(model, spec.final_norm)
        project_out = get_module(model, spec.project_out)
        lm_head = get_module(model, spec.lm_head)
        shape = dict(
            layer=layer,
            vocab_size=lm_head.out_features,
            hidden_size=model.config.hidden_size,
            norm=_norm_kind(norm),
            norm_eps=_norm_eps(norm),
            project_dim=None if project_out is None else project_out.out_features,
            lm_head_bias=lm_head.bias is not None,
            model_type=spec.model_type,
        )
        return cls(**{**shape, **overrides})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HeadConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown HeadConfig fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


def _norm_kind(norm: nn.Module | None) -> str:
    if norm is None:
        return "none"
    if isinstance(norm, nn.LayerNorm):
        return "layer"
    if hasattr(norm, "variance_epsilon"):  # LlamaRMSNorm, MistralRMSNorm, Qwen2RMSNorm
        return "rms"
    raise ValueError(f"final norm {type(norm).__name__} is not supported (LayerNorm or RMSNorm)")


def _norm_eps(norm: nn.Module | None) -> float:
    if norm is None:
        return 0.0
    return float(getattr(norm, "eps", getattr(norm, "variance_epsilon", 0.0)))


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed exactly as the Llama/Mistral/Qwen2 implementations."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        dtype = h.dtype
        h = h.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def _make_norm(config: HeadConfig) -> nn.Module:
    if config.norm == "rms":
        return RMSNorm(config.hidden_size, config.norm_eps)
    if config.norm == "layer":
        return nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
    return nn.Identity()


class TrainedHead(nn.Module):
    """Early-prediction head for one layer: h [B, S, H] -> logits [B, S, V], fp32 weights."""

    name = "trained"
    """Value of the ``head`` column of match records and traces (the paper's "Y" rows)."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        check_instance("config", config, HeadConfig)
        self.config = config
        self.norm = _make_norm(config)
        self.project_out = (
            nn.Linear(config.hidden_size, config.project_dim, bias=False)
            if config.project_dim is not None
            else None
        )
        in_features = config.project_dim or config.hidden_size
        self.lm_head = nn.Linear(in_features, config.vocab_size, bias=config.lm_head_bias)
        self.train_losses: list[float] = []
        """Mean loss of every optimizer step of `train_head` (empty for an untrained head)."""
        self.train_record: dict = {}
        """How it was trained when not by `train_head` (``measure.train.distill``), saved."""
        self.trained_against: LensFingerprint | None = None
        """The LM head it was made from (`from_model`; None: read from a file without one)."""
        self.source: Path | None = None
        """The directory it was loaded from (named when refused on another model)."""

    @property
    def layer(self) -> int:
        """The layer whose hidden state it reads (``config.layer``)."""
        return self.config.layer

    @classmethod
    def from_model(cls, model, layer: int, config: HeadConfig | None = None) -> TrainedHead:
        """A head for ``layer`` initialised with copies of the model's final norm and LM head."""
        spec = arch_spec(model)
        config = config or HeadConfig.for_model(model, layer)
        reference = HeadConfig.for_model(model, layer)
        shape_fields = ("vocab_size", "hidden_size", "norm", "project_dim", "lm_head_bias")
        for name in ("layer", *shape_fields):
            if getattr(config, name) != getattr(reference, name):
                raise ValueError(
                    f"config.{name}={getattr(config, name)!r} does not match the model "
                    f"({getattr(reference, name)!r}); build it with HeadConfig.for_model"
                )
        head = cls(config)
        parts = {"norm": spec.final_norm, "project_out": spec.project_out, "lm_head": spec.lm_head}
        with torch.no_grad():
            for name, path in parts.items():
                source = get_module(model, path)
                if source is not None:
                    for key, value in getattr(head, name).state_dict().items():
                        value.copy_(source.state_dict()[key].float())
        head.trained_against = LogitLens(model).fingerprint()
        return head.to(_device(model))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # h: [B, S, H] -> [B, S, V]
        h = self.norm(h.to(self.lm_head.weight.dtype))
        if self.project_out is not None:
            h = self.project_out(h)
        return self.lm_head(h)

    def save(self, directory: str | Path) -> Path:
        """Write ``head.safetensors`` and ``head_config.json`` into ``directory``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, directory / WEIGHTS_NAME)
        record = {
            "kind": "full",
            "config": self.config.to_dict(),
            **head_record(self),
            "train": self.train_record,
            "train_losses": self.train_losses,
        }
        (directory / CONFIG_NAME).write_text(json.dumps(record, indent=2) + "\n")
        return directory

    @classmethod
    def load(
        cls, directory: str | Path, *, device: str | torch.device = "cpu", model=None
    ) -> TrainedHead:
        """Read a head written by `save`; with ``model``, refuse it unless it was trained
        against that model's LM head (``measure.hf.lens.resolve_head``)."""
        from safetensors.torch import load_file

        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (directory / name).is_file():
                raise MissingPath(f"directory {str(directory)!r}: no {name} in this head directory")
        record = json.loads((directory / CONFIG_NAME).read_text())
        if record.get("kind", "full") != "full":
            raise ValueError(f"{directory} holds a {record['kind']!r} head, not a full head")
        head = cls(HeadConfig.from_dict(record["config"]))
        try:
            head.load_state_dict(load_file(directory / WEIGHTS_NAME))
        except RuntimeError as exc:  # shapes or names other than its head_config.json's
            raise ValueError(f"{directory}: weights do not fit its {CONFIG_NAME}: {exc}") from None
        head.train_losses = list(record.get("train_losses", []))
        head.train_record = dict(record.get("train", {}))
        read_fingerprint(head, record, directory)
        if model is not None:
            resolve_head(head, LogitLens(model))
        return head.to(device)


def head_record(head) -> dict:
    """The fingerprint keys a head file records (none for a head without one)."""
    recorded = head.trained_against
    return {} if recorded is None else recorded.to_record()


def read_fingerprint(head, record: dict, directory: Path) -> None:
    """Set ``head.trained_against`` and ``head.source`` from a head_config.json record; a
    UserWarning for a file written before heads recorded their LM head."""
    head.source = directory
    head.trained_against = LensFingerprint.from_record(record)
    if head.trained_against is None:
        warnings.warn(
            f"head file {directory / CONFIG_NAME} records no LM head hash (written before "
            "head files recorded one), so it cannot be checked against this model's LM head; "
            "train it again, or record the LM head of the model you know it was trained on "
            "(docs/measure.md, Early heads)",
            UserWarning,
            stacklevel=3,
        )


def _device(model) -> torch.device:
    return next(model.parameters()).device


def encode_texts(data, tokenizer) -> torch.Tensor | Sequence[Sequence[int]]:
    """``data`` unchanged, or its texts encoded with ``tokenizer`` (EOS appended to each)."""
    if not isinstance(data, torch.Tensor) and items_of(data) is None:
        raise ValueError(f"data must be an id tensor [N, S], token id sequences or texts, got "
                         f"{type(data).__name__}")  # fmt: skip
    if isinstance(data, torch.Tensor) or not any(isinstance(item, str) for item in data):
        return data
    if tokenizer is None:
        raise ValueError("tokenizer is required when data holds texts")
    check_tokenizer(tokenizer)
    eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    return [tokenizer(text)["input_ids"] + eos for text in data]


def token_blocks(data, max_seq_len: int) -> torch.Tensor:
    """Training blocks [N, S]: a 2-D id tensor as is, or 1-D sequences packed end to end.

    Packing concatenates the sequences and cuts the stream into blocks of ``max_seq_len``
    tokens, dropping the tail (kept as one block when the stream is shorter than a block).
    """
    if isinstance(data, torch.Tensor) and data.dim() == 2:
        if data.dtype == torch.bool or data.dtype.is_floating_point or data.dtype.is_complex:
            raise ValueError(f"data must hold integer token ids, got dtype {data.dtype}")
        return data[:, :max_seq_len].long()
    sequences = [data] if isinstance(data, torch.Tensor) else items_of(data)
    if not sequences:
        raise ValueError("data must hold at least one sequence of token ids")
    stream = torch.cat([as_prompt_ids(seq, "cpu", f"data[{i}]")[0]
                        for i, seq in enumerate(sequences)])  # fmt: skip
    if stream.numel() < 2:
        raise ValueError(f"training data must hold at least 2 tokens, got {stream.numel()}")
    n_blocks = stream.numel() // max_seq_len
    if n_blocks == 0:
        return stream[None, :]
    return stream[: n_blocks * max_seq_len].reshape(n_blocks, max_seq_len)


def _lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up to 1, then linear decay to 0 (the Hugging Face "linear" schedule)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


class _StopForward(Exception):
    """Raised by a forward hook to skip the layers after the one a head reads."""


def hidden_at_layer(model, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """``hidden_states[layer]`` of ``model(ids)`` without running layers ``layer``..d-1.

    ids: [b, S] -> h: [b, S, H]. A forward hook on decoder layer ``layer - 1`` captures its
    output and stops the forward pass, so a head at d/2 costs half a forward.
    """
    if layer == 0:
        with torch.no_grad():
            return model(input_ids=ids, output_hidden_states=True).hidden_states[0]
    captured = []

    def hook(_module, _inputs, output):
        captured.append(output[0] if isinstance(output, tuple) else output)
        raise _StopForward

    block = get_module(model, arch_spec(model).layers)[layer - 1]
    handle = block.register_forward_hook(hook)
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    except _StopForward:
        pass
    finally:
        handle.remove()
    return captured[0]


def _head_loss(head, model, ids: torch.Tensor, config: HeadConfig) -> torch.Tensor:
    """Summed loss over the next-token positions of ``ids`` [b, S]."""
    if config.loss == "ce":  # only layers 0..layer-1 are needed
        h = hidden_at_layer(model, ids, config.layer)[:, :-1]  # h: [b, S-1, H]
        log_q = F.log_softmax(head(h).float(), dim=-1).flatten(0, 1)  # [b*(S-1), V]
        return F.nll_loss(log_q, ids[:, 1:].reshape(-1), reduction="sum")
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
    h = out.hidden_states[config.layer][:, :-1]
    log_q = F.log_softmax(head(h).float(), dim=-1).flatten(0, 1)
    log_p = F.log_softmax(out.logits[:, :-1].float(), dim=-1).flatten(0, 1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="sum")


def train_head(
    model,
    layer: int,
    data: torch.Tensor | Sequence[Sequence[int]] | Sequence[str],
    config: HeadConfig | None = None,
    *,
    tokenizer=None,
    progress: bool = False,
) -> TrainedHead:
    """Train a head for ``layer`` on ``data``, model frozen.

    data: ids [N, S], token id sequences, or texts (encoded with ``tokenizer``, EOS after
    each). The model only runs forward under ``no_grad``; its weights are never touched.
    Returns the head (fp32, on the model's device); ``train_losses`` holds each step's mean.
    """
    check_model(model)
    layer = as_int("layer", layer, minimum=0)
    check_flag("progress", progress)
    if config is not None:
        check_instance("config", config, HeadConfig)
    data = encode_texts(data, tokenizer)
    config = config or HeadConfig.for_model(model, layer)
    if config.layer != layer:
        raise ValueError(f"config.layer={config.layer} differs from layer={layer}")
    head = TrainedHead.from_model(model, layer, config)
    head.norm.requires_grad_(config.train_norm)
    max_len = min(config.max_seq_len, getattr(model.config, "max_position_embeddings", 1 << 30))
    blocks = token_blocks(data, max_len)
    steps_per_epoch = math.ceil(len(blocks) / config.batch_size)
    total_steps = config.epochs * steps_per_epoch
    warmup_steps = math.ceil(config.warmup_ratio * total_steps)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, warmup_steps, total_steps)
    )
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(config.seed)
    bar = _progress_bar(total_steps, layer, progress)
    try:
        for _epoch in range(config.epochs):
            order = torch.randperm(len(blocks), generator=generator)
            for batch in order.split(config.batch_size):
                loss = _optimizer_step(head, model, blocks[batch], config, optimizer)
                scheduler.step()
                head.train_losses.append(loss)
                bar.update(1)
                bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
    finally:
        bar.close()
        model.train(was_training)
    return head.eval()


def _optimizer_step(head, model, batch: torch.Tensor, config: HeadConfig, optimizer) -> float:
    """One AdamW step on ``batch`` [b, S] with gradient accumulation; mean loss per token."""
    device = _device(model)
    n_tokens = batch.shape[0] * (batch.shape[1] - 1)
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for micro in batch.split(config.micro_batch_size):
        loss = _head_loss(head, model, micro.to(device), config) / n_tokens
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def _progress_bar(total: int, layer: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=f"train head @ layer {layer}", disable=not enabled)
