"""A latency/throughput report like the paper's Table 3: greedy, PPD k=1/3, HF early exit.

Every method decodes the same prompts and is checked token for token against greedy.
Greedy and PPD time the decode passes only (prefill excluded); the Hugging Face rows time
whole ``generate`` calls (prefill included) and are compared with HF greedy ``generate``.
``latency_128_s`` = 128 / tokens_per_s, ``tokens_per_s`` = generated tokens / seconds.
``n_tokens`` is the number of generated tokens behind a row's speed and ``n_m`` the number of
m_t (t = 2..ell of every prompt) behind its p_correct; a rate or speed with n = 0 is undefined
and shows as "n/a", never as 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from measure.decode.backends import ppd_many
from measure.decode.greedy import greedy_generate
from measure.train.head_io import head_name

REPORT_COLUMNS = (
    "method",
    "k",
    "p_correct",
    "n_m",
    "latency_128_s",
    "tokens_per_s",
    "n_tokens",
    "exact",
    "note",
)
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


def _row(method, k, p, tokens, seconds, exact, note="", n_m=None) -> dict:
    rate = tokens / seconds if seconds > 0 and tokens > 0 else float("nan")
    return dict(
        method=method,
        k=k,
        p_correct=p,
        n_m=n_m,
        latency_128_s=LATENCY_TOKENS / rate,
        tokens_per_s=rate,
        n_tokens=tokens,
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
) -> Table3Report:
    """Greedy vs PPD (each k) vs HF early exit on the same prompts; all checked exact."""
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
                f"backend {backend}" + ("" if head is None else f", {head_name(head)} head"),
                n_m=len(ms),
            )
        )
    if assistant:
        rows += hf_rows(
            model, prompts, d_bar=d_bar, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
        )
    report.table = pd.DataFrame(rows, columns=list(REPORT_COLUMNS))
    return report


def format_table(table: pd.DataFrame) -> str:
    """The report as aligned text: "-" where a column does not apply, "n/a" where n = 0."""
    shown = table.copy()

    def rate(p, n) -> str:
        if n is None or n != n:
            return "-"
        return "n/a" if n == 0 or p is None or p != p else f"{100 * p:.2f} %"

    shown["p_correct"] = [rate(p, n) for p, n in zip(table["p_correct"], table["n_m"], strict=True)]
    for column in ("k", "n_m"):
        shown[column] = shown[column].map(lambda x: "-" if x is None or x != x else str(int(x)))
    for column in ("latency_128_s", "tokens_per_s"):
        shown[column] = [
            "n/a" if not n else f"{x:.4g}"
            for x, n in zip(table[column], table["n_tokens"], strict=True)
        ]
    return shown.to_string(index=False)
