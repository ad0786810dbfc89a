"""Per-layer and whole-step decode times in the per-layer CSV schema the simulator reads.

``Laps`` timestamps component boundaries within one decode step on the one clock of ``measure``
(``measure.clock``: CUDA events on a GPU, one synchronize per token; ``perf_counter`` on
the CPU).
Warm-up steps are decoded but never timed.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pandas as pd
import torch

from measure.checks import as_prompt_ids, check_context, check_model, check_prompt_ids, int_list
from measure.clock import Clock
from measure.hf.compat import model_cache_keyword, output_cache
from measure.hf.layer_split import LayerSplitModel, expand_cache
from ppdmodel.validation import as_int
from sim.formats import LAYER_TIMES_COLUMNS, validate_layer_times


class Laps:
    """Durations between consecutive ``mark()`` calls of one decode step, in seconds."""

    def __init__(self, device: torch.device):
        self.clock = Clock(device)
        self.marks: list = []

    def mark(self) -> None:
        """Timestamp the boundary between two components (queued on the stream on CUDA)."""
        self.marks.append(self.clock.mark())

    def seconds(self) -> list[float]:
        """Lap times; on CUDA the device is synchronised once, here, before reading events."""
        self.clock.resolve()
        laps = [self.clock.seconds(a, b) for a, b in pairwise(self.marks)]
        self.marks = []
        return laps


def time_layers(model, input_ids, *, n_tokens=16, warmup=2, batch_sizes=(1,)) -> pd.DataFrame:
    """Per-component decode times: embed, each layer, head; one row each per batch size.

    After a prefill of `input_ids` ([1, S] or [S]) the model decodes ``warmup + n_tokens``
    tokens greedily with ``LayerSplitModel``; only the last `n_tokens` are timed. A batch size
    B > 1 decodes B copies of the prompt's cache together (batched candidates). ``embed``
    includes the per-step layer inputs (rotary tables, mask); ``head`` includes the argmax.
    """
    prompt, n_tokens, warmup = _check_inputs(model, input_ids, n_tokens, warmup)
    sizes = _check_batch_sizes(batch_sizes, model.config.get_text_config().vocab_size)
    split = LayerSplitModel(model)
    rows = []
    for batch in sizes:
        samples = _layer_samples(split, prompt.to(split.device), n_tokens, warmup, batch)
        names = [("embed", -1)] + [("layer", i) for i in range(split.num_layers)] + [("head", -1)]
        for (component, layer), column in zip(names, samples.T, strict=True):
            rows.append(_row(component, layer, batch, column))
    return _frame(rows)


def time_greedy(model, input_ids, *, n_tokens=16, warmup=2) -> pd.DataFrame:
    """Whole greedy decode steps (model forward with KV cache + argmax): one ``token`` row."""
    prompt, n_tokens, warmup = _check_inputs(model, input_ids, n_tokens, warmup)
    device = next(model.parameters()).device
    laps = Laps(device)
    samples = []
    with torch.inference_mode():
        out = model(input_ids=prompt.to(device), use_cache=True)
        cache, cache_kw = output_cache(out), model_cache_keyword(model)
        token = out.logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        for step in range(warmup + n_tokens):
            timed = step >= warmup
            if timed:
                laps.mark()
            out = model(input_ids=token, use_cache=True, **{cache_kw: cache})
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            if timed:
                laps.mark()
                samples.append(laps.seconds()[0])
    return _frame([_row("token", -1, 1, np.asarray(samples))])


def _layer_samples(split: LayerSplitModel, prompt, n_tokens: int, warmup: int, batch: int):
    """Lap times [n_tokens, d + 2] (embed, layers 0..d-1, head) of greedy steps at `batch`."""
    laps = Laps(split.device)
    samples = []
    with torch.inference_mode():
        cache = split.new_cache()
        logits = split.prefill(prompt, cache)  # [1, V]
        cache = expand_cache(cache, batch)
        token = logits.argmax(-1, keepdim=True).expand(batch, 1)  # [B, 1]
        position = prompt.shape[1]
        for step in range(warmup + n_tokens):
            timed = step >= warmup
            token = _timed_step(split, token, cache, position, laps if timed else None)
            if timed:
                samples.append(laps.seconds())
            position += 1
    return np.asarray(samples)


def _timed_step(split: LayerSplitModel, token, cache, position: int, laps: Laps | None):
    """One greedy step through all layers with a lap mark after each component."""
    mark = laps.mark if laps is not None else _no_mark
    mark()
    position_ids = torch.full_like(token, position)  # [B, 1]
    h = split.embed(token, position_ids)  # [B, 1, H]
    kwargs = split.layer_kwargs(h, 0, cache, position_ids)
    mark()
    for i in range(split.num_layers):
        h = split.run_layer(i, h, kwargs)
        mark()
    token = split.logits(h)[:, -1].argmax(-1, keepdim=True)  # [B, 1]
    mark()
    return token


def _no_mark() -> None:
    pass


def _row(component: str, layer: int, batch: int, seconds: np.ndarray) -> dict:
    n = len(seconds)
    std = float(np.std(seconds, ddof=1)) if n > 1 else 0.0
    return dict(
        component=component,
        layer=layer,
        batch=batch,
        seconds=float(np.mean(seconds)),
        std_seconds=std,
        n_samples=n,
    )


def _frame(rows: list[dict]) -> pd.DataFrame:
    return validate_layer_times(pd.DataFrame(rows, columns=list(LAYER_TIMES_COLUMNS)))


def _check_inputs(model, input_ids, n_tokens: int, warmup: int) -> tuple[torch.Tensor, int, int]:
    """The prompt as a [1, S] long tensor and the counts as ints, checked against the model."""
    check_model(model)
    n_tokens = as_int("n_tokens", n_tokens, minimum=1)
    warmup = as_int("warmup", warmup, minimum=0)
    prompt = as_prompt_ids(input_ids, "cpu")
    check_prompt_ids(prompt, model.config.get_text_config().vocab_size)
    check_context(model.config, prompt.shape[1], warmup + n_tokens, what="warmup + n_tokens",
                  argument="input_ids")  # fmt: skip
    return prompt, n_tokens, warmup


def _check_batch_sizes(batch_sizes, vocab_size: int) -> list[int]:
    """Distinct batch sizes in [1, vocab_size] (a batch is k candidates, k <= the vocabulary)."""
    sizes = list(int_list("batch_sizes", batch_sizes, low=1, high=vocab_size))
    if not sizes or len(set(sizes)) != len(sizes):
        raise ValueError(f"batch_sizes must be distinct integers >= 1, got {batch_sizes!r}")
    return sizes
