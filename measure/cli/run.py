"""``ppd run`` (real, exact PPD with a Table-3-like report) and ``ppd validate`` (three-way)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from measure.cli.common import add_model_args, add_prompt_format_args, prompt_selection
from ppdmodel.cli_args import default_d_bar


def register(subparsers) -> None:
    """Add ``run`` and ``validate``."""
    run = subparsers.add_parser(
        "run",
        help="real PPD decoding (exact greedy output) with a Table-3-like report",
        description="Decode the prompts with greedy, PPD at each k and HF assistant_early_exit; "
        "check every method against greedy; print tokens/s, latency for 128 tokens and the "
        "measured p-hat; write report.csv and traces.jsonl (the simulator's replay format).",
    )
    _add_common(run)
    run.add_argument("--k", type=int, nargs="+", default=[1, 3], help="candidates (default 1 3)")
    run.add_argument("--no-assistant", action="store_true", help="skip the HF early-exit rows")
    run.set_defaults(func=_run)
    validate = subparsers.add_parser(
        "validate",
        help="closed form vs simulator vs measured PPD latency, side by side",
        description="Measure greedy and PPD on the prompts and per-layer times; fit the "
        "simulator's overheads on half of the prompts; compare the closed form (measured "
        "p-hat), the simulator (trace replay) and the measurement on the other half. Writes "
        "validation.csv, summary.csv, calibration.json, layer_times.csv, traces.jsonl and "
        "validation.png.",
    )
    _add_common(validate)
    validate.add_argument("--k", type=int, default=1, help="candidates (default 1)")
    validate.set_defaults(func=_validate)


def _add_common(p: argparse.ArgumentParser) -> None:
    add_model_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable)")
    src.add_argument("--prompts", metavar="FILE", help="prompts file (measure.datasets formats)")
    add_prompt_format_args(p)
    p.add_argument(
        "--d-bar",
        type=int,
        default=None,
        help="early layer (default: the head's layer, else the smallest layer >= d/2)",
    )
    p.add_argument(
        "--head-dir",
        default=None,
        metavar="DIR",
        help="a trained early head (ppd measure train-head: full or translator) used at d_bar",
    )
    p.add_argument("--max-new-tokens", type=int, default=128, help="ell (default 128)")
    p.add_argument("--backend", default="single", choices=("single", "dist"))
    p.add_argument("--world-size", type=int, default=2, help="dist ranks (default 2)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="dist watchdog (default 600)")
    p.add_argument("--threads", type=int, default=None, help="torch threads in this process")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")


def _load(args):
    """(model, prompt ids, names, d_bar, eos, head) from the CLI arguments."""
    import torch

    from measure.chat import encode_prompts
    from measure.hf.loading import load_model
    from measure.match.rate import eos_token_ids
    from measure.train.head_io import load_head

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
    if args.prompt:
        texts, names = args.prompt, [str(i) for i in range(len(args.prompt))]
    else:
        from measure.datasets import load_prompts

        loaded = load_prompts(args.prompts, args.format, **prompt_selection(args))
        texts, names = [p.text for p in loaded], [p.id for p in loaded]
    if not texts:
        raise ValueError("--prompts: no prompts selected")
    if tokenizer is None:
        raise ValueError(f"--model {args.model} has no tokenizer to encode the prompts")
    ids = encode_prompts(tokenizer, texts, chat_template=not args.no_chat_template)
    head = None if args.head_dir is None else load_head(args.head_dir, model, device=model.device)
    d = model.config.get_text_config().num_hidden_layers
    d_bar = args.d_bar
    if d_bar is None:
        d_bar = default_d_bar(d) if head is None else head.config.layer
    eos = sorted(set(eos_token_ids(model)) | {tokenizer.eos_token_id} - {None})
    return model, ids, names, d_bar, eos, head


def _warn_degenerate(command: str, names, greedy, eos) -> None:
    """Print which prompts' greedy generations ended at once or fell into repetition."""
    import sys

    from measure.degenerate import summarize

    text = summarize({n: g.tokens for n, g in zip(names, greedy, strict=True)}, eos).message()
    if text is not None:
        print(f"ppd {command}: warning: {text}", file=sys.stderr)


def _run(args) -> int:
    from measure.eval.report import format_table, table3
    from sim.formats import write_traces

    model, ids, names, d_bar, eos, head = _load(args)
    report = table3(
        model,
        ids,
        d_bar=d_bar,
        ks=list(dict.fromkeys(args.k)),  # repeated values would repeat rows
        max_new_tokens=args.max_new_tokens,
        backend=args.backend,
        world_size=args.world_size,
        eos_token_id=eos,
        assistant=not args.no_assistant,
        timeout_s=args.timeout_s,
        sequences=names,
        model_dir=args.model if args.backend == "dist" else None,
        head=head,
    )
    _warn_degenerate("run", names, report.greedy, eos)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.table.to_csv(out / "report.csv", index=False)
    write_traces(out / "traces.jsonl", [r.trace for runs in report.ppd.values() for r in runs])
    print(
        f"d = {model.config.get_text_config().num_hidden_layers}, d_bar = {d_bar}, "
        f"{len(ids)} prompts, max {args.max_new_tokens} new tokens, backend {args.backend}"
    )
    print(format_table(report.table))
    print(f"wrote {out / 'report.csv'} and {out / 'traces.jsonl'}")
    inexact = report.table[report.table["exact"] == False]  # noqa: E712 (None = not run)
    return 1 if len(inexact) else 0


def _validate(args) -> int:
    from measure.decode.backends import ppd_many
    from measure.eval.report import run_greedy
    from measure.eval.validate import model_shape, plot_validation, validate_results
    from measure.profile.timing import time_layers
    from sim.formats import write_layer_times, write_traces

    model, ids, names, d_bar, eos, head = _load(args)
    greedy = run_greedy(model, ids, max_new_tokens=args.max_new_tokens, eos_token_id=eos)
    _warn_degenerate("validate", names, greedy, eos)
    ppd = ppd_many(
        model,
        ids,
        d_bar=d_bar,
        k=args.k,
        max_new_tokens=args.max_new_tokens,
        backend=args.backend,
        world_size=args.world_size,
        eos_token_id=eos,
        timeout_s=args.timeout_s,
        sequences=names,
        model_dir=args.model if args.backend == "dist" else None,
        head=head,
    )
    if [r.tokens for r in ppd] != [g.tokens for g in greedy]:
        raise ValueError("PPD output differs from greedy: refusing to validate timings")
    batches = (1,) if args.k == 1 else (1, args.k)
    layer_times = time_layers(model, ids[0], n_tokens=16, batch_sizes=batches)
    n_gpus = min(args.world_size, args.k + 1) if args.backend == "dist" else 2
    context = max(map(len, ids)) + args.max_new_tokens
    report = validate_results(ppd, greedy, layer_times, model_shape(model.config, context), n_gpus)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.table.to_csv(out / "validation.csv", index=False)
    report.summary.to_csv(out / "summary.csv", index=False)
    write_layer_times(out / "layer_times.csv", layer_times)
    write_traces(out / "traces.jsonl", [r.trace for r in ppd])
    (out / "calibration.json").write_text(
        json.dumps(
            {**report.calibration.to_dict(), "held_out": report.held_out}, indent=2, default=str
        ),
        encoding="utf-8",
    )
    plot_validation(report.summary, out / "validation.png")
    print(
        f"calibrated on {'one half' if report.held_out else 'all'} of the prompts, "
        f"compared on {'the other half' if report.held_out else 'the same prompts'}"
    )
    print(json.dumps(report.calibration.to_dict(), indent=1, default=str))
    print(report.summary.to_string(index=False, float_format=lambda x: f"{x:.4g}", na_rep="n/a"))
    print(f"wrote {out}/validation.csv, summary.csv, calibration.json, validation.png")
    return 0
