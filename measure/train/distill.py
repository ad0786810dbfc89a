"""Early heads trained on a model's own greedy continuations, from cached hidden states (CPU).

Data the toolkit reaches offline: the model's greedy continuations of any prompts. One batched
greedy generation (`collect_states`) records, for every pass of the generation (the prompt's
last position, which produces x_1, and each generated token x_1..x_{ell-1}, which produces the
next), the hidden state after each wanted layer and after the last layer. A head is then fitted
to the final layer's distribution (``lens(final)``, the model's own output) by the KL
divergence KL(p_final || q_head), as the tuned lens is (Belrose et al. 2023); the model's layers
never run again, so training heads for several layers and kinds costs one generation plus
head-sized matrix products (`fit_head`).

Positions match the match-rate definition (``measure.match.rate``): the head at layer L reads
the hidden state of the pass over x_{j-1} and should predict x_j, the final layer's argmax.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from measure.checks import (
    as_prompt_ids,
    check_context,
    check_model,
    check_prompt_ids,
    eos_set,
    eos_token_ids,
    int_list,
)
from measure.hf.layer_split import LayerSplitModel
from measure.train.heads import TrainedHead
from measure.train.translator import TranslatorConfig, TranslatorHead
from ppdmodel.validation import as_int, check_flag, check_instance, items_of

DEFAULT_LR = {"translator": 3e-3, "full": 3e-3}
"""Peak learning rate per head kind (chosen on held-out SmolLM2 continuations at layer 15:
1e-4 barely moves a full head, 1e-3 and 3e-3 both work)."""
DEFAULT_EPOCHS = {"translator": 4, "full": 2}
"""Epochs per head kind: a full head (vocab x hidden parameters) overfits a few thousand
continuations sooner and costs about twice a translator's step."""


@dataclass
class GreedyStates:
    """Hidden states of every generation pass, stacked over sequences: [N, H] float32 (CPU)."""

    hidden: dict[int, torch.Tensor]
    """layer -> hidden state after that many decoder layers, [N, H]."""
    final: torch.Tensor
    """Hidden state after the last decoder layer (before the final norm), [N, H]."""
    generated: torch.Tensor
    """[N] bool: True for a generation pass (the pass over x_{j-1} that makes x_j), False for
    an earlier prompt position kept as extra context (``prompt_positions``)."""
    n_sequences: int
    """Prompts generated from."""
    n_generated: int
    """Generated tokens (each sequence's EOS included)."""
    seconds: float
    """Wall-clock seconds of the generation."""
    sequences: list[list[int]] = dataclasses.field(default_factory=list)
    """Generated token ids per prompt (prompt excluded), for the record."""

    @property
    def n_positions(self) -> int:
        return int(self.final.shape[0])


@dataclass(frozen=True)
class DistillConfig:
    """How `fit_head` trains (AdamW on KL(p_final || q_head), linear warm-up and decay)."""

    lr: float = 3e-3
    """Peak AdamW learning rate."""
    epochs: int = 4
    """Passes over the cached positions."""
    batch_tokens: int = 128
    """Positions per optimizer step."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_ratio: float = 0.05
    """Fraction of steps with linear warm-up; then linear decay to 0."""
    seed: int = 0
    """Seed of the per-epoch shuffle."""
    max_seconds: float | None = None
    """Stop fitting after this many wall-clock seconds (None: run every epoch)."""

    def __post_init__(self) -> None:
        checks = {
            "lr": (self.lr > 0, "> 0"),
            "epochs": (isinstance(self.epochs, int) and self.epochs >= 1, "an integer >= 1"),
            "batch_tokens": (
                isinstance(self.batch_tokens, int) and self.batch_tokens >= 1,
                "an integer >= 1",
            ),
            "weight_decay": (self.weight_decay >= 0, ">= 0"),
            "warmup_ratio": (0 <= self.warmup_ratio < 1, "in [0, 1)"),
            "max_seconds": (self.max_seconds is None or self.max_seconds > 0, "None or > 0"),
        }
        for name, (ok, allowed) in checks.items():
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@contextmanager
def _capture(blocks: dict[int, nn.Module]):
    """Forward hooks appending each block's output [B, S, H] per model call, by layer."""
    seen: dict[int, list[torch.Tensor]] = {layer: [] for layer in blocks}

    def hook(layer):
        def fn(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            seen[layer].append(out.detach().float().cpu())

        return fn

    handles = [block.register_forward_hook(hook(layer)) for layer, block in blocks.items()]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def collect_states(
    model,
    prompts: Sequence[Sequence[int]],
    layers: Iterable[int],
    *,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    batch_size: int = 8,
    max_batch_tokens: int = 8192,
    prompt_positions: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> GreedyStates:
    """Greedy-generate from every prompt (token ids) and keep each pass's hidden states.

    Prompts are generated in batches (left-padded, grouped by length) of at most
    ``batch_size`` prompts and ``max_batch_tokens`` padded prompt tokens (a long prompt
    still gets a batch of its own), so padding wastes little prefill. For
    each prompt the kept positions are its generation's passes (the last prompt token and
    generated tokens x_1..x_{ell-1}) plus its ``prompt_positions`` prompt positions before
    those. layers: 1..d-1 (1-based counts of decoder layers run). Batched padded generation
    can differ from one-prompt greedy decoding in the last bits; for training data that is
    immaterial.
    """
    lsm = LayerSplitModel(model)
    d = lsm.num_layers
    layers = sorted(set(int_list("layers", layers, low=1)))
    if not layers or layers[-1] >= d:
        raise ValueError(f"layers must hold integers in [1, {d}), got {layers}")
    for name, value, low in (
        ("max_new_tokens", max_new_tokens, 1),
        ("batch_size", batch_size, 1),
        ("max_batch_tokens", max_batch_tokens, 1),
        ("prompt_positions", prompt_positions, 0),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    items = items_of(prompts)
    if not items or any(_empty(p) for p in items):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    vocab = model.config.get_text_config().vocab_size
    prompts = [as_prompt_ids(p, "cpu", f"prompts[{i}]")[0].tolist() for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        check_prompt_ids(torch.tensor(p), vocab, f"prompts[{i}]")
    names = [f"prompts[{i}]" for i in range(len(prompts))]
    check_context(model.config, [len(p) for p in prompts], max_new_tokens, names=names)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be None or a callable, got {progress!r:.60}")
    eos = _eos_list(model, eos_token_id)
    if any(e >= vocab for e in eos):
        raise ValueError(f"eos_token_id must be token ids in [0, {vocab}), got {eos}")
    if pad_token_id is not None:
        pad_token_id = as_int("pad_token_id", pad_token_id, minimum=0, limit=vocab - 1)
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    blocks = {layer: lsm.layers[layer - 1] for layer in layers} | {d: lsm.layers[d - 1]}
    results: dict[int, tuple[list[int], dict[int, torch.Tensor]]] = {}
    start = time.perf_counter()
    for members in _batches([len(p) for p in prompts], batch_size, max_batch_tokens):
        batch = [list(prompts[i]) for i in members]
        rows = _generate_batch(lsm, batch, blocks, max_new_tokens, eos, pad, prompt_positions)
        results.update(zip(members, rows, strict=True))
        if progress is not None:
            progress(len(results), len(prompts))
    ordered = [results[i] for i in range(len(prompts))]  # back in the prompts' order
    sequences = [tokens for tokens, _ in ordered]
    flags = [  # the last len(tokens) positions of a prompt are its generation passes
        torch.arange(states[d].shape[0]) >= states[d].shape[0] - len(tokens)
        for tokens, states in ordered
    ]
    return GreedyStates(
        hidden={layer: torch.cat([st[layer] for _, st in ordered]) for layer in layers},
        final=torch.cat([st[d] for _, st in ordered]),
        generated=torch.cat(flags),
        n_sequences=len(prompts),
        n_generated=sum(map(len, sequences)),
        seconds=time.perf_counter() - start,
        sequences=sequences,
    )


def _batches(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Prompt indices in batches by increasing length: <= batch_size, <= max_tokens padded."""
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        last = batches[-1] if batches else None
        if last and len(last) < batch_size and (len(last) + 1) * lengths[i] <= max_tokens:
            last.append(i)
        else:
            batches.append([i])
    return batches


def _empty(prompt) -> bool:
    """True for a prompt of no token (a sized value of length 0; not a scalar)."""
    try:
        return len(prompt) == 0
    except TypeError:  # a number, or a 0-d tensor or array
        return False


def _eos_list(model, eos_token_id) -> list[int]:
    if eos_token_id is None:
        return eos_token_ids(model)
    return sorted(eos_set(eos_token_id))


def _generate_batch(lsm, batch, blocks, max_new_tokens, eos, pad, prompt_positions):
    """[(generated tokens, {layer: kept states [n, H]})] for one left-padded batch."""
    width = max(map(len, batch))
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, prompt in enumerate(batch):
        ids[r, width - len(prompt) :] = torch.tensor(prompt)
        mask[r, width - len(prompt) :] = 1
    device = lsm.device
    kwargs = dict(
        attention_mask=mask.to(device),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        pad_token_id=pad,
        eos_token_id=eos or None,
    )
    if not eos:
        kwargs["min_new_tokens"] = max_new_tokens
    with _capture(blocks) as seen:
        out = lsm.model.generate(ids.to(device), **kwargs)
    generated = out[:, width:].cpu()
    rows = []
    for r, prompt in enumerate(batch):
        tokens = generated[r].tolist()
        ell = next((j + 1 for j, t in enumerate(tokens) if t in eos), len(tokens))
        tokens = tokens[:ell]
        first = width - min(len(prompt), 1 + prompt_positions)  # prompt positions kept
        states = {}
        for layer, calls in seen.items():
            parts = [calls[0][r, first:]]  # prefill: [P', H]; its last position makes x_1
            parts += [calls[s][r] for s in range(1, ell)]  # pass over x_s makes x_{s+1}
            states[layer] = torch.cat(parts)
        rows.append((tokens, states))
    return rows


def new_head(model, kind: str, layer: int) -> nn.Module:
    """An untrained head of ``kind`` ("full" or "translator") for ``layer`` of ``model``.

    Both start as the logit lens: the full head as a copy of the final norm and LM head, the
    translator as the identity map before the model's own ones.
    """
    if not isinstance(kind, str) or kind not in ("full", "translator"):
        raise ValueError(f"kind must be 'full' or 'translator', got {kind!r:.60}")
    check_model(model)
    if kind == "translator":
        return TranslatorHead(TranslatorConfig.for_model(model, layer), model)
    return TrainedHead.from_model(model, layer)


@contextmanager
def frozen(model):
    """The model's parameters with requires_grad off (restored afterwards)."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield model
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def fit_head(
    head: nn.Module,
    model,
    states: GreedyStates,
    config: DistillConfig | None = None,
    *,
    progress: bool = False,
) -> dict:
    """Fit ``head`` (reading layer ``head.config.layer``) to the final layer by KL; in place.

    The target is the model's own output distribution at the same position, softmax of
    ``lens(final)`` (final norm + LM head), computed per batch under no_grad. The model is
    frozen throughout (a translator back-propagates through its final norm and LM head).
    Returns the training record (steps, seconds, first/last loss, config); the per-step mean
    KL is appended to ``head.train_losses``.
    """
    from tqdm.auto import tqdm

    if not isinstance(head, TrainedHead | TranslatorHead):
        raise ValueError(f"head must be a TrainedHead or TranslatorHead (new_head), got "
                         f"{type(head).__name__}")  # fmt: skip
    check_model(model)
    check_instance("states", states, GreedyStates)
    if config is not None:
        check_instance("config", config, DistillConfig)
    check_flag("progress", progress)
    config = config or DistillConfig()
    layer = head.config.layer
    if layer not in states.hidden:
        raise ValueError(f"states hold layers {sorted(states.hidden)}, not the head's {layer}")
    lens = LayerSplitModel(model).logits
    device = next(head.parameters()).device
    x_all, y_all = states.hidden[layer], states.final
    n = x_all.shape[0]
    steps_per_epoch = math.ceil(n / config.batch_tokens)
    total = config.epochs * steps_per_epoch
    warmup = math.ceil(config.warmup_ratio * total)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _lr_factor(step, warmup, total)
    )
    generator = torch.Generator().manual_seed(config.seed)
    dtype = next(model.parameters()).dtype
    losses, start, stopped = [], time.perf_counter(), "epochs"
    head.train()
    name = getattr(head, "name", "head")
    bar = tqdm(total=total, desc=f"fit {name} @ layer {layer}", disable=not progress)
    with frozen(model):
        for _epoch in range(config.epochs):
            for idx in torch.randperm(n, generator=generator).split(config.batch_tokens):
                x, y = x_all[idx].to(device), y_all[idx].to(device)
                with torch.no_grad():
                    log_p = F.log_softmax(lens(y.to(dtype)).float(), dim=-1)  # [b, V]
                log_q = F.log_softmax(head(x).float(), dim=-1)
                loss = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                losses.append(loss.item())
                bar.update(1)
                if config.max_seconds and time.perf_counter() - start > config.max_seconds:
                    stopped = "max_seconds"
                    break
            if stopped != "epochs":
                break
    bar.close()
    head.eval()
    head.train_losses.extend(losses)
    if isinstance(head, TrainedHead):  # its config records the settings actually used
        head.config = dataclasses.replace(
            head.config,
            loss="kl",
            lr=config.lr,
            epochs=config.epochs,
            weight_decay=config.weight_decay,
            warmup_ratio=config.warmup_ratio,
            seed=config.seed,
        )
    return {
        "objective": "KL(final || head) on greedy continuations (measure.train.distill)",
        "config": config.to_dict(),
        "positions": n,
        "sequences": states.n_sequences,
        "steps": len(losses),
        "stopped_by": stopped,
        "seconds": time.perf_counter() - start,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }


def _lr_factor(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


@torch.no_grad()
def mean_kl(head: nn.Module, model, states: GreedyStates, batch_tokens: int = 256) -> float:
    """Mean KL(p_final || q_head) per position over ``states`` (lower is better)."""
    lens = LayerSplitModel(model).logits
    layer, dtype = head.config.layer, next(model.parameters()).dtype
    device = next(head.parameters()).device
    total, n = 0.0, states.hidden[layer].shape[0]
    for lo in range(0, n, batch_tokens):
        x = states.hidden[layer][lo : lo + batch_tokens].to(device)
        y = states.final[lo : lo + batch_tokens].to(device)
        log_p = F.log_softmax(lens(y.to(dtype)).float(), dim=-1)
        log_q = F.log_softmax(head(x).float(), dim=-1)
        total += float(F.kl_div(log_q, log_p, log_target=True, reduction="sum"))
    return total / n
