"""A latency/throughput report like the paper's Table 3: greedy, PPD k=1/3, HF early exit.

Every method decodes the same prompts and is checked token for token against greedy.
Greedy and PPD time the decode passes only (prefill excluded), over ``settings.repeats``
interleaved rounds (``measure.eval.repeat``); the Hugging Face rows time whole ``generate``
calls (prefill included), as many times each, and are compared with HF greedy ``generate``.
Sampled decoding (``decoding``, paper Appendix B): the "greedy" row is plain decoding with the
same sampler and seeds, PPD is checked against it, and the HF row is ``generate(do_sample=True,
...)`` seeded per prompt the same way (its ``exact``: the same tokens as that baseline); HF
early exit is greedy only and is left out.
``seconds`` is the median over rounds of the decode seconds of all prompts (quartiles in
``seconds_q1``/``seconds_q3``, ``noisy`` when IQR/median > 10 %); ``tokens_per_s`` =
generated tokens / seconds and ``latency_128_s`` = 128 / tokens_per_s.
``n_tokens`` is the number of generated tokens behind a row's speed and ``n_m`` the number of
m_t (t = 2..ell of every prompt) behind its p_correct; a rate or speed with n = 0 is undefined
and shows as "n/a", never as 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from measure.checks import as_prompt_ids, check_max_new_tokens, check_model, int_list
from measure.decode.backends import check_backend
from measure.decode.sampling import check_seed
from measure.decode.settings import DEFAULT_SETTINGS, RunSettings
from measure.eval.repeat import PPDConfig, RepeatedTiming, time_repeated
from measure.eval.repeat import run_greedy as run_greedy  # re-exported (notebooks, bench)
from measure.eval.verdict import verdict_line
from measure.profile.stats import Spread
from measure.train.head_io import head_name
from ppdmodel.validation import as_int, check_flag, check_instance, items_of, refused_as

REPORT_COLUMNS = (
    "method",
    "k",
    "p_correct",
    "n_m",
    "latency_128_s",
    "tokens_per_s",
    "n_tokens",
    "seconds",
    "seconds_q1",
    "seconds_q3",
    "rounds",
    "noisy",
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
    """k -> list of PPDResult per prompt (first round)."""
    timing: RepeatedTiming | None = None
    """Every round of greedy and PPD."""
    max_new_tokens: int = LATENCY_TOKENS

    def verdicts(self, profile=None) -> list[str]:
        """One verdict line per method timed beside greedy; with a cost profile
        (``CostProfile``) also the largest cost term and how well the profile predicted the
        measured median (the method's own ``closed_form`` of its runs)."""
        lines = []
        greedy = self.timing.greedy.spread
        for method in self.timing.methods.values():
            terms = rel_err = None
            if profile is not None:
                bound = self.timing.bound[method.label]
                predicted = bound.closed_form(profile, method.runs)
                terms = predicted.terms()
                rel_err = predicted.closed_form_s / method.spread.median - 1
            lines.append(
                verdict_line(method.label, greedy, method.spread, tokens=method.tokens,
                             terms=terms, rel_err=rel_err, load=self.timing.load)
            )  # fmt: skip
        return lines


def run_hf(model, prompts, *, max_new_tokens, eos_token_id=None, seeds=None, **generate_kwargs):
    """``model.generate`` (greedy, optionally with ``assistant_early_exit``; sampled with
    ``do_sample=True``, prompt i after ``torch.manual_seed(seeds[i])``): tokens, seconds."""
    import torch

    tokens, seconds = [], 0.0
    for i, p in enumerate(prompts):
        ids = torch.tensor([p], device=model.device)
        kwargs = dict(
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            pad_token_id=0,
        )
        kwargs.update(generate_kwargs)
        if seeds is not None and seeds[i] is not None:
            torch.manual_seed(seeds[i])
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


def _row(method, k, p, tokens, seconds: Spread | None, exact, note="", n_m=None) -> dict:
    median = seconds.median if seconds is not None else 0.0
    rate = tokens / median if median > 0 and tokens > 0 else float("nan")
    return dict(
        method=method,
        k=k,
        p_correct=p,
        n_m=n_m,
        latency_128_s=LATENCY_TOKENS / rate,
        tokens_per_s=rate,
        n_tokens=tokens,
        seconds=median if seconds is not None else float("nan"),
        seconds_q1=seconds.q1 if seconds is not None else float("nan"),
        seconds_q3=seconds.q3 if seconds is not None else float("nan"),
        rounds=seconds.n if seconds is not None else 0,
        noisy=seconds.noisy if seconds is not None else None,
        exact=exact,
        note=note,
    )


def _repeated_hf(model, prompts, repeats, **kwargs):
    """(tokens of the first call, Spread of the seconds) of ``repeats`` ``run_hf`` calls."""
    runs = [run_hf(model, prompts, **kwargs) for _ in range(repeats)]
    return runs[0][0], Spread.of([s for _, s in runs])


def hf_sampled_row(model, prompts, reference, *, decoding, seeds, repeats=1, **kwargs) -> dict:
    """HF ``generate(do_sample=True, ...)`` seeded per prompt, timed ``repeats`` times; exact
    when its tokens are ``reference``'s (the sampled baseline PPD is checked against)."""
    got, got_s = _repeated_hf(model, prompts, repeats, seeds=seeds, **decoding.generate_kwargs(),
                              **kwargs)  # fmt: skip
    label = f"hf generate ({decoding.label})"
    return _row(label, None, None, sum(map(len, got)), got_s, got == reference,
                "prefill included; vs the sampled baseline")  # fmt: skip


def hf_rows(model, prompts, *, d_bar, max_new_tokens, eos_token_id=None, repeats=1) -> list[dict]:
    """HF greedy ``generate`` and HF self-speculative early exit (``assistant_early_exit``),
    each timed ``repeats`` times."""
    rows = []
    kwargs = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    ref, ref_s = _repeated_hf(model, prompts, repeats, **kwargs)
    n_ref = sum(map(len, ref))
    rows.append(_row("hf generate (greedy)", None, None, n_ref, ref_s, True, "prefill included"))
    try:
        got, got_s = _repeated_hf(model, prompts, repeats, assistant_early_exit=d_bar, **kwargs)
    except Exception as exc:  # architectures without early-exit support fail inside generate
        arch = model.config.model_type
        rows.append(
            _row(
                "hf assistant_early_exit",
                None,
                None,
                0,
                None,
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
    early_head: str = "main",
    assistant=True,
    settings: RunSettings = DEFAULT_SETTINGS,
    head=None,
    sequences=None,
    seeds=None,
) -> Table3Report:
    """Greedy vs PPD (each k) vs HF early exit on the same prompts; all checked exact.

    Greedy and PPD are timed over ``settings.repeats`` interleaved rounds; the rows give the
    median. ``settings.decoding`` and ``seeds`` (one per prompt): sampled decoding (module
    docstring).
    """
    check_model(model)
    items = items_of(prompts)
    if not items:
        raise ValueError(f"prompts must be a non-empty list of prompts, got {prompts!r:.80}")
    prompts = [as_prompt_ids(p, "cpu", f"prompts[{i}]")[0].tolist() for i, p in enumerate(items)]
    d_bar = as_int("d_bar", d_bar, minimum=1)
    vocab = model.config.get_text_config().vocab_size
    ks = int_list("ks", ks, low=1, high=vocab)
    if not ks:
        raise ValueError("ks must hold at least one k")
    max_new_tokens = check_max_new_tokens(max_new_tokens)
    check_backend(backend)
    check_flag("assistant", assistant)
    check_instance("settings", settings, RunSettings)
    if sequences is not None:
        sequences = items_of(sequences)
        if sequences is None or len(sequences) != len(prompts):
            raise ValueError(f"sequences must be None or one name per prompt ({len(prompts)}), "
                             f"got {sequences!r:.80}")  # fmt: skip
    if seeds is not None:
        seeds = items_of(seeds)
        if seeds is None or len(seeds) != len(prompts):
            raise ValueError(f"seeds must be None or one seed per prompt ({len(prompts)})")
        for i, seed in enumerate(seeds):
            with refused_as(f"seeds[{i}]"):
                check_seed(seed, None)
    configs = [PPDConfig(d_bar=d_bar, k=k, early_head=early_head, backend=backend) for k in ks]
    names = [str(s) for s in sequences] if sequences else None
    timing = time_repeated(model, prompts, configs, max_new_tokens=max_new_tokens,
                           settings=settings, head=head, names=names, seeds=seeds)  # fmt: skip
    decoding, eos = settings.decoding, settings.eos_token_id
    greedy = timing.greedy
    baseline = "greedy" if not decoding.do_sample else decoding.label
    rows = [_row(baseline, None, None, greedy.tokens, greedy.spread, True, "decode only")]
    report = Table3Report(
        table=pd.DataFrame(),
        greedy=greedy.runs,
        timing=timing,
        max_new_tokens=max_new_tokens,
    )
    for config in configs:
        method = timing.ppd[config]
        report.ppd[config.k] = method.runs
        ms = [x for r in method.runs for x in r.m]
        rows.append(
            _row(
                "ppd",
                config.k,
                sum(ms) / len(ms) if ms else float("nan"),
                method.tokens,
                method.spread,
                timing.exact[config],
                f"backend {backend}"
                + ("" if early_head == "main" else f", head on {early_head}")
                + ("" if head is None else f", {head_name(head)} head"),
                n_m=len(ms),
            )
        )
    if assistant and decoding.do_sample:
        reference = [g.tokens for g in greedy.runs]
        rows.append(
            hf_sampled_row(
                model,
                prompts,
                reference,
                decoding=decoding,
                seeds=seeds,
                repeats=settings.repeats,
                max_new_tokens=max_new_tokens,
                eos_token_id=eos,
            )
        )
    elif assistant:
        rows += hf_rows(
            model,
            prompts,
            d_bar=d_bar,
            max_new_tokens=max_new_tokens,
            repeats=settings.repeats,
            eos_token_id=eos,
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
    shown["noisy"] = shown["noisy"].map(lambda n: "NOISY" if n is True else "")
    return shown.to_string(index=False, float_format=lambda x: f"{x:.4g}")
