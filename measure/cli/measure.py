"""``ppd measure``: match rates and per-layer times of real models (plus train-head etc.)."""

from __future__ import annotations

import os
import sys

from measure.cli.atlas import register_measure as register_atlas
from measure.cli.common import (
    add_drift_floor,
    add_model_args,
    add_prompt_format_args,
    check_candidate_rows,
    check_match_rate_options,
    check_prompts_fit,
    degenerate_warnings,
    honours_no_progress,
    model_facts,
    prompt_selection,
    read_prompts,
)
from measure.cli.train import register_measure as register_train
from measure.datasets import Prompt
from measure.profile.stats import RANK_REPEATS, REMEASURE_ROUNDS, WIDE_REL_IQR
from ppdmodel.cli_args import (
    existing_dir,
    existing_file,
    nonnegative_int,
    output_dir,
    output_file,
    positive_float,
    positive_int,
    usage,
)


def register(subparsers) -> None:
    """Add ``measure`` with sub-commands match-rate, timing, profile, train-head,
    reference-model, atlas."""
    parser = subparsers.add_parser(
        "measure",
        help="measure real Hugging Face models: match rates, per-layer times, heads",
        description="Measure a local Hugging Face causal LM (nothing is downloaded).",
    )
    parser.set_defaults(func=lambda args: usage(parser))
    measure_subparsers = parser.add_subparsers(dest="measure_command", metavar="SUBCOMMAND")
    _add_match_rate(measure_subparsers)
    _add_timing(measure_subparsers)
    _add_profile(measure_subparsers)
    register_train(measure_subparsers)
    register_atlas(measure_subparsers)


def _add_match_rate(subparsers) -> None:
    p = subparsers.add_parser(
        "match-rate",
        help="p_correct: is the final token among the early top-k? (paper Table 2)",
        description="One generation per prompt records, for every probed layer and k, whether "
        "the generated token was among the early head's top-k (positions 1..ell). Writes "
        "records (CSV/Parquet), a run.json sidecar and traces.jsonl for `ppd simulate --trace`. "
        "Resumable (--resume); under torchrun each rank takes every WORLD_SIZE-th prompt.",
    )
    add_model_args(p)
    p.add_argument(
        "--prompts", required=True, type=existing_file, metavar="FILE", help="prompts file"
    )
    add_prompt_format_args(p)
    p.add_argument(
        "--layers",
        type=positive_int,
        nargs="+",
        default=None,
        help="1-based layers to probe (default: all 1..d-1)",
    )
    p.add_argument(
        "--ks", type=positive_int, nargs="+", default=[1, 3, 5], help="k values (default 1 3 5)"
    )
    p.add_argument(
        "--max-new-tokens", type=positive_int, default=16, help="ell per prompt (default 16)"
    )
    p.add_argument(
        "--head-dir", type=existing_dir, default=None, help="trained head dir (or a dir of them)"
    )
    p.add_argument("--sampling", default=None, help="top_k=50 | top_p=0.9 (default greedy)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="sampling seed (default 0)")
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="output directory")
    p.add_argument("--records-format", default="csv", choices=("csv", "parquet"))
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument(
        "--wait-lock",
        action="store_true",
        help="if another process is using --out, wait for it (default: fail at once)",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the per-prompt check against the model's own forward pass",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=honours_no_progress(_match_rate))


def _add_timing(subparsers) -> None:
    p = subparsers.add_parser(
        "timing",
        help="per-layer decode times and greedy latency, as the CSV the simulator reads",
        description="Times embedding, every decoder layer and the head per decode step (CUDA "
        "events on GPU, perf_counter on CPU; warm-up excluded), plus whole greedy steps.",
    )
    add_model_args(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--prompts", type=existing_file, metavar="FILE", help="prompts file (its first prompt)"
    )
    source.add_argument("--prompt-text", help="the prompt text itself")
    add_prompt_format_args(p, limit=False)
    p.add_argument(
        "--n-tokens", type=positive_int, default=16, help="timed decode steps (default 16)"
    )
    p.add_argument(
        "--warmup", type=nonnegative_int, default=2, help="untimed warm-up steps (default 2)"
    )
    p.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1], help="rows per step")
    p.add_argument(
        "--out", required=True, type=output_file, metavar="CSV", help="per-layer times CSV to write"
    )
    p.set_defaults(func=_timing)


def _add_profile(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure every cost term of the latency model on this machine (profile JSON)",
        description="Times, in interleaved rounds with warm-up excluded, the per-layer time at "
        "batch 1 and of the k-row candidate batch, the embedding, the early and final heads, "
        "the hand-off copy, host time per token and, for --backends dist, the link between two "
        "gloo ranks by message size and the slowdown of two decode streams at once. Writes one "
        "JSON profile (median and IQR of every figure, provenance, warnings) that `ppd latency "
        "--costs`, `ppd validate --profile` and measure.profile.load_profile read, and a bar "
        "chart of the per-layer times with their spread (FILE-layers.png).",
    )
    add_model_args(p)
    p.add_argument(
        "--out", required=True, type=output_file, metavar="FILE.json", help="profile file to write"
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=["single"],
        choices=("single", "dist"),
        help="backends to profile (default single; dist also runs two gloo ranks)",
    )
    p.add_argument("--ks", type=positive_int, nargs="+", default=[1, 3], help="batch sizes k")
    p.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (single backend)"
    )
    p.add_argument(
        "--context-tokens",
        type=positive_int,
        default=128,
        help="cached positions while timing (default 128: about a prompt plus half the new tokens)",
    )
    p.add_argument("--repeats", type=positive_int, default=20, help="timed rounds (default 20)")
    p.add_argument(
        "--warmup", type=nonnegative_int, default=2, help="untimed rounds first (default 2)"
    )
    p.add_argument(
        "--calls",
        type=positive_int,
        default=3,
        help="back-to-back calls a sample averages (default 3)",
    )
    p.add_argument(
        "--rank-repeats",
        type=positive_int,
        default=RANK_REPEATS,
        help=f"two-rank rounds (default {RANK_REPEATS})",
    )
    p.add_argument(
        "--max-spread",
        type=positive_float,
        default=100 * WIDE_REL_IQR,
        metavar="PCT",
        help=f"a price whose IQR/median exceeds PCT %% is re-measured (up to "
        f"{REMEASURE_ROUNDS} times), then marked too wide to predict from "
        f"(default {100 * WIDE_REL_IQR:g})",
    )
    add_drift_floor(p)
    p.set_defaults(func=_profile)


def _profile(args) -> int:
    from measure.hf.loading import load_causal_lm
    from measure.profile.profile import check_profile_path, measure_profile, write_profile
    from measure.profile.report import format_profile, plot_layer_times

    check_profile_path(args.out)  # before minutes of measuring
    check_candidate_rows("--ks", args.ks)
    facts = model_facts(args.model)  # config.json: checked before any weight is read
    check_candidate_rows("--ks", args.ks, facts.vocab_size)
    if facts.context is not None and args.context_tokens > facts.context:
        raise ValueError(f"--context-tokens must be <= the model's context of {facts.context} "
                         f"positions, got {args.context_tokens}")  # fmt: skip
    model = load_causal_lm(args.model, dtype=args.dtype, device=args.device)
    check_candidate_rows("--ks", args.ks, _vocab_size(model))
    profile = measure_profile(
        model,
        model_dir=args.model,
        backends=args.backends,
        ks=args.ks,
        threads=args.threads,
        context_tokens=args.context_tokens,
        repeats=args.repeats,
        warmup=args.warmup,
        calls=args.calls,
        rank_repeats=args.rank_repeats,
        progress=True,
        max_spread=args.max_spread / 100,
        drift_floor=args.drift_floor / 100,
    )
    path = write_profile(args.out, profile)
    plot = path.with_name(f"{path.stem}-layers.png")
    plot_layer_times(profile, plot)
    print(format_profile(profile))
    print(f"wrote {path} and {plot}")
    return 0


def _match_rate(args) -> int:
    from measure.match.rate import MeasureOOMError
    from measure.match.records import read_records, run_match_rate
    from measure.match.tables import format_table2

    check_match_rate_options(args, read_prompts(args), args.out)  # before any weight is read
    created = _init_distributed(args.device)
    try:
        with degenerate_warnings("measure match-rate"):
            result = run_match_rate(
                args.model,
                args.prompts,
                args.out,
                fmt=args.format,
                **prompt_selection(args),
                chat_template=not args.no_chat_template,
                layers=args.layers,
                ks=args.ks,
                max_new_tokens=args.max_new_tokens,
                head_dir=args.head_dir,
                sampling=args.sampling,
                seed=args.seed,
                dtype=args.dtype,
                device=_rank_device(args.device),
                records_format=args.records_format,
                resume=args.resume,
                wait_lock=args.wait_lock,
                verify=not args.no_verify,
                progress=not args.no_progress,
            )
    except MeasureOOMError as exc:
        print(f"ppd measure match-rate: error: {exc}", file=sys.stderr)
        return 3
    finally:
        _destroy_distributed(created)
    if result.records is None:
        when = "by rank 0" if result.n_done == result.n_prompts else "once every shard is done"
        print(f"{result.n_done}/{result.n_prompts} prompts done; {result.out_dir} is merged {when}")
        return 0
    print("p_correct by layer (n = generated tokens behind each rate):")
    print(format_table2(read_records(result.records)))
    print(f"records: {result.records}\ntraces: {result.traces}\nmetadata: {result.sidecar}")
    return 0


def _timing(args) -> int:
    import pandas as pd
    import torch

    from measure.hf.loading import load_causal_lm
    from measure.profile.timing import time_greedy, time_layers
    from sim.formats import write_layer_times

    if args.prompt_text is not None:
        prompt = Prompt(id="--prompt-text", text=args.prompt_text)
    else:
        prompt = read_prompts(args, 1)[0]
    check_candidate_rows("--batch-sizes", args.batch_sizes)
    facts = model_facts(args.model)  # config.json and tokenizer: checked before any weight
    check_candidate_rows("--batch-sizes", args.batch_sizes, facts.vocab_size)
    (ids,) = check_prompts_fit(facts, [prompt], args.warmup + args.n_tokens,
                               chat_template=not args.no_chat_template,
                               what="warmup + n_tokens", named=False)  # fmt: skip
    model = load_causal_lm(args.model, dtype=args.dtype, device=args.device)
    check_candidate_rows("--batch-sizes", args.batch_sizes, _vocab_size(model))
    input_ids = torch.tensor([ids], device=next(model.parameters()).device)
    layers = time_layers(
        model,
        input_ids,
        n_tokens=args.n_tokens,
        warmup=args.warmup,
        batch_sizes=tuple(args.batch_sizes),
    )
    greedy = time_greedy(model, input_ids, n_tokens=args.n_tokens, warmup=args.warmup)
    path = write_layer_times(args.out, pd.concat([layers, greedy], ignore_index=True))
    one = layers[(layers["component"] == "layer") & (layers["batch"] == layers["batch"].min())]
    token = greedy["seconds"].mean()
    print(
        f"prompt tokens: {input_ids.shape[1]}; sum of layer times {one['seconds'].sum():.6g} s, "
        f"greedy step {token:.6g} s; wrote {path}"
    )
    return 0


def _vocab_size(model) -> int | None:
    """The model's vocabulary: the rows of its output embedding (None if it has none)."""
    head = model.get_output_embeddings()
    return None if head is None else int(head.weight.shape[0])


def _init_distributed(device: str) -> bool:
    """Join the torchrun process group (gloo on CPU, NCCL on CUDA) when WORLD_SIZE > 1."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return True


def _rank_device(device: str) -> str:
    """Under torchrun, plain ``cuda`` means this rank's GPU ``cuda:LOCAL_RANK``."""
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device


def _destroy_distributed(created: bool) -> None:
    if created:
        import torch.distributed as dist

        dist.destroy_process_group()
