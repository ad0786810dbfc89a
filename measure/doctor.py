"""``ppd doctor``'s self-check: on a tiny random model, is every transformers internal the toolkit
uses where it expects it, does layer-split decoding reproduce the model's own logits, and does
PPD decode exactly what greedy decoding and ``model.generate`` do? A few seconds on a CPU.

Each check is a record (name, ok, detail, seconds); a failure names the part that failed, so a
user can paste the output into a bug report.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from measure.decode.backends import ppd_generate
from measure.decode.greedy import greedy_generate
from measure.hf.compat import check_internals
from measure.hf.layer_split import LayerSplitModel, verify_layout

NEW_TOKENS = 12
"""Tokens decoded by the PPD == greedy check."""


@dataclass(frozen=True)
class Check:
    """One self-check's outcome."""

    name: str
    ok: bool
    detail: str
    seconds: float

    def line(self) -> str:
        """``ok   name: detail (0.12 s)`` or ``FAIL name: ...``."""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail} ({self.seconds:.2f} s)"


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    """A 4-layer random Llama (vocabulary 128), built from its config: nothing is downloaded."""
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=0.2,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def _internals(_model) -> str:
    problems = check_internals()
    if problems:
        raise AssertionError("; ".join(problems))
    return "cache classes, generation-config fields and GGUF loading found"


def _layer_split(model) -> str:
    split = LayerSplitModel(model, verify=False)
    diff = verify_layout(split)
    keyword = split.spec.cache_arg
    return f"logits equal the model's own (max difference {diff:.1e}, cache keyword {keyword!r})"


def _ppd_equals_greedy(model) -> str:
    ids = [5, 17, 42, 9]
    greedy = greedy_generate(model, ids, max_new_tokens=NEW_TOKENS).tokens
    hf = model.generate(
        torch.tensor([ids]), do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS
    )[0, len(ids) :].tolist()
    if greedy != hf:
        raise AssertionError(f"greedy decoding {greedy} differs from model.generate {hf}")
    for head in ("main", "candidates"):
        out = ppd_generate(model, ids, d_bar=2, k=2, max_new_tokens=NEW_TOKENS, early_head=head)
        if out.tokens != greedy:
            raise AssertionError(f"PPD (early head on {head}) gave {out.tokens}, greedy {greedy}")
    return (
        f"{NEW_TOKENS} tokens equal greedy decoding and model.generate (both early-head placements)"
    )


CHECKS: tuple[tuple[str, Callable], ...] = (
    ("transformers internals", _internals),
    ("layer-split decoding", _layer_split),
    ("PPD == greedy", _ppd_equals_greedy),
)
"""The self-checks in order: (name, function of the tiny model returning a detail line)."""


def self_check() -> list[Check]:
    """Run every check on a fresh tiny model; a check that raises is a FAIL naming the error."""
    model = tiny_llama()
    out = []
    for name, fn in CHECKS:
        t0 = time.perf_counter()
        try:
            detail, ok = fn(model), True
        except Exception as exc:  # noqa: BLE001 - a self-check reports every failure
            where = traceback.extract_tb(exc.__traceback__)[-1]
            detail = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
            ok = False
        out.append(Check(name, ok, detail, time.perf_counter() - t0))
    return out
