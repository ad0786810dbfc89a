"""A latency/throughput report like the paper's Table 3: greedy, PPD k=1/3, HF early exit.

Every method decodes the same prompts and is checked token for token against greedy.
Greedy and PPD time the decode passes only (prefill excluded); the Hugging Face rows time
whole ``generate`` calls (prefill included) and are compared with HF greedy ``generate``.
``latency_128_s`` = 128 / tokens_per_s, ``tokens_per_s`` = generated tokens / seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from measure.decode.backends import ppd_many
from measure.decode.checks import as_prompt_ids, check_context
from measure.decode.greedy import greedy_generate

REPORT_COLUMNS = ("method", "k", "p_correct", "latency_128_s", "tokens_per_s", "exact", "note")
LATENCY_TOKENS = 128
"""Table 3 reports the time to generate 128 tokens."""


@dataclass
class Table3Report:
    """The report table plus the runs behind it."""

    table: pd.DataFrame
    """One row per method (``REPORT_COLUMNS``)."""
    greedy: list = field(default_factory=list)
    """GreedyResult per prompt."""
    ppd: dict = field(default_factory=dict)
    """k -> list of PPDResult per prompt."""


def run_greedy(model, prompts, *, max_new_tokens, eos_token_id=None) -> list:
    """Greedy decoding of every prompt (one warm-up decode first)."""
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    check_context(model.config, lengths, max_new_tokens)  # before any decoding
    greedy_generate(model, prompts[0], max_new_tokens=2)  # warm-up, not timed
    return [
        greedy_generate(model, p, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        for p in prompts
    ]


def run_hf(model, prompts, *, max_new_tokens, eos_token_id=None, **generate_kwargs):
    """``model.generate`` (greedy, optionally with ``assistant_early_exit``): tokens, seconds."""
    import torch

    tokens, seconds = [], 0.0
    for p in prompts:
        ids = torch.tensor([p], device=model.device)
        kwargs = dict(
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=0,
            **generate_kwargs,
        )
        if eos_token_id is not None:
            kwargs["eos_token_id"] = eos_token_id
        else:
            kwargs["min_new_tokens"] = max_new_tokens
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        seconds += time.perf_counter() - start
        tokens.append(out[0, len(p) :].tolist())
    return tokens, seconds


def _row(method, k, p, tokens, seconds, exact, note="") -> dict:
    rate = tokens / seconds if seconds > 0 else float("nan")
    return dict(
        method=method,
        k=k,
        p_correct=p,
        latency_128_s=LATENCY_TOKENS / rate,
        tokens_per_s=rate,
        exact=exact,
        note=note,
    )


def hf_rows(model, prompts, *, d_bar, max_new_tokens, eos_token_id=None) -> list[dict]:
    """HF greedy ``generate`` and HF self-speculative early exit (``assistant_early_exit``)."""
    rows = []
    ref, ref_s = run_hf(model, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    n_ref = sum(map(len, ref))
    rows.append(_row("hf generate (greedy)", None, None, n_ref, ref_s, True, "prefill included"))
    try:
        got, got_s = run_hf(
            model,
            prompts,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            assistant_early_exit=d_bar,
        )
    except Exception as exc:  # architectures without early-exit support fail inside generate
        arch = model.config.model_type
        rows.append(
            _row(
                "hf assistant_early_exit",
                None,
                None,
                0,
                0.0,
                None,
                f"not supported for {arch}: {type(exc).__name__}: {exc}"[:120],
            )
        )
        return rows
    rows.append(
        _row(
            "hf assistant_early_exit",
            None,
            None,
            sum(map(len, got)),
            got_s,
            got == ref,
            f"exit at layer {d_bar}; prefill included; vs hf greedy",
        )
    )
    return rows


def table3(
    model,
    prompts,
    *,
    d_bar,
    ks=(1, 3),
    max_new_tokens=LATENCY_TOKENS,
    backend="single",
    world_size=2,
    eos_token_id=None,
    assistant=True,
    timeout_s=300.0,
    sequences=None,
    model_dir=None,
    head=None,
    early_head="main",
) -> Table3Report:
    """Greedy vs PPD (each k) vs HF early exit on the same prompts; all checked exact.

    ``early_head``: where PPD runs the early head (``main`` or ``candidates``, see
    ``measure.decode.backends.ppd_generate``)."""
    if not prompts:
        raise ValueError("prompts must not be empty")
    greedy = run_greedy(model, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    ref = [g.tokens for g in greedy]
    rows = [
        _row(
            "greedy",
            None,
            None,
            sum(map(len, ref)),
            sum(g.wall_s for g in greedy),
            True,
            "decode only",
        )
    ]
    report = Table3Report(table=pd.DataFrame(), greedy=greedy)
    for k in ks:
        runs = ppd_many(
            model,
            prompts,
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            backend=backend,
            world_size=min(world_size, k + 1),
            eos_token_id=eos_token_id,
            timeout_s=timeout_s,
            head=head,
            sequences=[f"{s}-k{k}" for s in (sequences or range(len(prompts)))],
            model_dir=model_dir,
            early_head=early_head,
        )
        report.ppd[k] = runs
        ms = [x for r in runs for x in r.m]
        rows.append(
            _row(
                "ppd",
                k,
                sum(ms) / len(ms) if ms else float("nan"),
                sum(len(r.tokens) for r in runs),
                sum(r.wall_s for r in runs),
                [r.tokens for r in runs] == ref,
                f"backend {backend}"
                + ("" if early_head == "main" else f", early head on {early_head}"),
            )
        )
    if assistant:
        rows += hf_rows(
            model, prompts, d_bar=d_bar, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
        )
    report.table = pd.DataFrame(rows, columns=list(REPORT_COLUMNS))
    return report


def format_table(table: pd.DataFrame) -> str:
    """The report as aligned text."""
    shown = table.copy()
    shown["p_correct"] = shown["p_correct"].map(
        lambda p: "-" if p is None or p != p else f"{100 * p:.2f} %"
    )
    shown["k"] = shown["k"].map(lambda k: "-" if k is None or k != k else str(int(k)))
    return shown.to_string(index=False, float_format=lambda x: f"{x:.4g}")
