"""``ppd run`` (real, exact PPD with a Table-3-like report) and ``ppd validate`` (three-way)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from measure.cli.common import (
    add_drift_floor,
    add_model_args,
    add_prompt_format_args,
    honours_no_progress,
    model_facts,
    read_prompts,
)
from measure.decode.settings import DEFAULT_SETTINGS, TURNS
from measure.degenerate import summarize
from measure.eval.profile_check import (
    CHECK_ROUNDS,
    CHECK_SECONDS,
    IF_STALE,
    check_profile,
    check_scales,
    checked_columns,
    checked_summary,
    stale_note,
)
from measure.eval.turn_speedup import TARGET_HALF_WIDTH
from measure.profile.probes import DecodeProbe
from ppdmodel.cli_args import (
    default_d_bar,
    existing_dir,
    existing_file,
    int_at_least,
    nonnegative_float,
    nonnegative_int,
    output_dir,
    positive_float,
    positive_int,
    probability,
)
from ppdmodel.cost_profile import ACCEPT_WIDE_FLAG, check_wide_prices
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS


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
    run.add_argument(
        "--k", type=positive_int, nargs="+", default=[1, 3], help="candidates (default 1 3)"
    )
    run.add_argument("--no-assistant", action="store_true", help="skip the HF early-exit rows")
    run.add_argument(
        "--early-head",
        default="main",
        choices=EARLY_HEAD_PLACEMENTS,
        help="where PPD runs the early head: on main's critical path (main, the paper's "
        "Algorithm 2) or on the candidate side, from main's layer-d_bar hidden state "
        "(candidates); default main",
    )
    _add_robust_timing(
        run,
        "cost profile (ppd measure profile): the verdict then names the largest cost term "
        "and says how well the profile predicted the run",
    )
    _add_profile_check(run, ("warn", "refuse"))
    run.set_defaults(func=honours_no_progress(_run))
    validate = subparsers.add_parser(
        "validate",
        help="predict greedy and PPD latency from a cost profile, then measure them",
        description="Predict, then measure. With a cost profile measured beforehand "
        "(--profile, from `ppd measure profile`; without it one is measured first and saved "
        "as OUT/profile.json), time greedy and every PPD configuration (each --d-bar x --k x "
        "--early-head x --backend) over --repeats interleaved rounds, predict each from the "
        "profile and the runs' own match outcomes (closed form and simulator; nothing is "
        "fitted on the judged runs), and report predicted vs measured median (IQR), the "
        "relative error, a waterfall from Theorem 4.1 to the prediction and a verdict per "
        "configuration, which block of a pass departs most from the profile in the runs, and "
        "how the runs' fresh and resumed passes compare with the closed form's. "
        "Writes validation.csv, waterfalls.csv, terms.csv, passes.csv, traces.jsonl, "
        "waterfall.png, "
        "predicted_vs_measured.png and layer_times.png (each block's time in the runs beside "
        "the profile's price). --early-exit L --draft-tokens G adds "
        "HF self-speculative early exit (constant draft length g, no confidence stop) to the "
        "rounds, predicted from the profile and the layer-L match sequences. --free L_S "
        "--threshold X|auto adds FREE (approximate: quality against greedy is reported), "
        "predicted from the profile and each run's exit sequence.",
    )
    _add_common(validate, grid=True)
    validate.add_argument(
        "--k", type=positive_int, nargs="+", default=[1], help="candidates (default 1)"
    )
    validate.add_argument(
        "--early-head",
        nargs="+",
        choices=EARLY_HEAD_PLACEMENTS,
        default=["main"],
        help="where the early head runs (default main)",
    )
    _add_robust_timing(
        validate,
        "cost profile measured beforehand (ppd measure profile); default: measure one first",
    )
    validate.add_argument(
        "--profile-repeats",
        type=positive_int,
        default=20,
        help="rounds of the profile measured when --profile is not given (default 20)",
    )
    add_drift_floor(validate, " (only the profile ppd validate measures itself)")
    validate.add_argument(
        ACCEPT_WIDE_FLAG,
        action="store_true",
        help="predict from a profile whose prices are marked too wide (each prediction says so)",
    )
    validate.add_argument(
        "--early-exit",
        type=positive_int,
        nargs="+",
        default=[],
        metavar="L",
        help="also time HF self-speculative early exit (generate(assistant_early_exit=L)) "
        "with each exit layer L in [1, d - 1], a constant draft length from --draft-tokens "
        "and no confidence stop, in the same rounds; predicted from the profile and the "
        "layer-L match sequence of the same prompts (default: none)",
    )
    validate.add_argument(
        "--draft-tokens",
        type=positive_int,
        nargs="+",
        default=[],
        metavar="G",
        help="draft lengths g of --early-exit (each L x each g; required with --early-exit)",
    )
    validate.add_argument(
        "--free",
        type=positive_int,
        nargs="+",
        default=[],
        metavar="L_S",
        help="also time FREE (measure.free: shallow-deep early exit, synchronized parallel "
        "decoding) with each shallow depth L_S in [1, d - 1] and each --threshold, in the same "
        "rounds; predicted from the profile and each run's exit sequence (default: none)",
    )
    validate.add_argument(
        "--threshold",
        type=free_threshold,
        nargs="+",
        default=[],
        metavar="X|auto",
        help="FREE's exit thresholds (required with --free): a number (above 1: never exit) or "
        "auto (Algorithm 1's Beta mixture, calibrated first on --calibration-sentences prompts)",
    )
    validate.add_argument(
        "--calibration-sentences",
        type=positive_int,
        default=1,
        help="prompts --threshold auto calibrates on, untimed, before the rounds (default 1)",
    )
    validate.add_argument(
        "--interleave-probes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run the profile's cost probes (the same pieces ppd measure profile times) "
        "between the judged rounds, never derived from the judged runs, build a second profile "
        "from them and predict every configuration from both profiles. On by default: the "
        "interleaved prediction is the one of record, as it saw the runs' machine (a profile "
        "taken beforehand follows the machine's drift since); --no-interleave-probes: the "
        "profile's prediction alone, about a quarter less time",
    )
    validate.add_argument(
        "--probe-rounds",
        type=positive_int,
        default=None,
        help="probe rounds before every judged round of the interleaved probes (default 2)",
    )
    _add_profile_check(validate, IF_STALE)
    validate.set_defaults(func=honours_no_progress(_validate))


_TURNS_NOTE = {"prompts": "turns by prompt", "runs": "turns by run"}
"""How the printed header names ``--turns``."""


def _add_robust_timing(p: argparse.ArgumentParser, profile_help: str) -> None:
    """``--repeats`` (interleaved rounds), ``--turns`` (their order), ``--profile`` (a cost
    profile), ``--no-progress``."""
    repeats = DEFAULT_SETTINGS.repeats
    p.add_argument(
        "--repeats",
        type=positive_int,
        default=repeats,
        help=f"interleaved rounds (default {repeats})",
    )
    p.add_argument(
        "--turns",
        choices=TURNS,
        default=DEFAULT_SETTINGS.turns,
        help="within a round, the methods take turns prompt by prompt (prompts, the default: "
        "each method's round spans the whole round) or decode all prompts in one turn (runs)",
    )
    p.add_argument("--profile", type=existing_file, metavar="FILE", default=None, help=profile_help)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_profile_check(p: argparse.ArgumentParser, choices) -> None:
    """``--check-seconds`` and ``--if-stale`` (``choices``): is a given profile still this
    machine's (``measure.eval.profile_check``)?"""
    p.add_argument(
        "--check-seconds",
        type=nonnegative_float,
        default=CHECK_SECONDS,
        help=f"seconds of greedy steps (at least {CHECK_ROUNDS} per backend) that re-time the "
        "profile's price of a greedy token, and read other work's CPUs, before the runs (a given "
        "--profile) and after them: is the profile still this machine's? (0: no check; "
        f"default {CHECK_SECONDS:g})",
    )
    p.add_argument(
        "--if-stale",
        choices=choices,
        default="warn",
        help="when the check before the runs finds a given --profile stale (its price of a "
        "greedy token outside its 95 %% interval, or other work busier by half a CPU or more): "
        "warn and go on (the default)"
        + (", remeasure (a new profile, saved in --out)" if "remeasure" in choices else "")
        + " or refuse (exit 2 before the runs)",
    )


def _add_common(p: argparse.ArgumentParser, grid: bool = False) -> None:
    add_model_args(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", metavar="TEXT", help="a prompt (repeatable)")
    src.add_argument(
        "--prompts",
        type=existing_file,
        metavar="FILE",
        help="prompts file (measure.datasets formats)",
    )
    add_prompt_format_args(p)
    many = {"nargs": "+"} if grid else {}
    p.add_argument(
        "--d-bar",
        type=positive_int,
        default=None,
        help="early layer (default: the head's layer, else the smallest layer >= d/2)",
        **many,
    )
    p.add_argument(
        "--head-dir",
        type=existing_dir,
        default=None,
        metavar="DIR",
        help="a trained early head (ppd measure train-head: full or translator) used at d_bar",
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=128, help="ell (default 128)")
    backend_default = ["single"] if grid else "single"
    p.add_argument("--backend", default=backend_default, choices=("single", "dist"), **many)
    world, timeout = DEFAULT_SETTINGS.world_size, DEFAULT_SETTINGS.timeout_s
    p.add_argument(
        "--world-size", type=int_at_least(2), default=world, help=f"dist ranks (default {world})"
    )
    p.add_argument(
        "--timeout-s",
        type=positive_float,
        default=timeout,
        help=f"dist watchdog (default {timeout:g})",
    )
    p.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads in this process"
    )
    p.add_argument("--out", required=True, type=output_dir, metavar="DIR", help="output directory")
    _add_sampling(p)


def _add_sampling(p: argparse.ArgumentParser) -> None:
    """Sampled decoding (paper Appendix B): main samples as ``model.generate`` does."""
    group = p.add_argument_group(
        "sampling (paper Appendix B)",
        "main samples its token exactly as model.generate(do_sample=True, ...) does (the "
        "model's generation config and transformers' defaults apply, e.g. top_k 50); a match is "
        "the sampled token among the k candidates; the baseline samples with the same draws",
    )
    group.add_argument("--do-sample", action="store_true", help="sample instead of greedy")
    group.add_argument("--temperature", type=positive_float, default=None, help="temperature > 0")
    group.add_argument("--top-k", type=nonnegative_int, default=None, help="top-k sampling")
    group.add_argument("--top-p", type=probability, default=None, help="top-p in (0, 1]")
    group.add_argument(
        "--seed",
        type=nonnegative_int,
        default=0,
        help="prompt i is seeded with measure.decode.sampling.prompt_seed(SEED, its id), as "
        "`ppd measure match-rate --seed` seeds it (default 0)",
    )


def _check_sampling_flags(args) -> None:
    """Refuse a sampling option without --do-sample (it would be ignored)."""
    given = [f"--{n.replace('_', '-')}" for n in ("temperature", "top_k", "top_p")
             if getattr(args, n) is not None]  # fmt: skip
    if given and not args.do_sample:
        raise ValueError(f"{', '.join(given)}: sampling options need --do-sample")


def _sampling(args, names):
    """(Decoding, seeds per prompt or None) from the sampling flags; ValueError if misused."""
    from measure.decode.sampling import Decoding, prompt_seed

    _check_sampling_flags(args)
    if not args.do_sample:
        return Decoding(), None
    decoding = Decoding(True, args.temperature, args.top_k, args.top_p)
    return decoding, [prompt_seed(args.seed, name) for name in names]


def check_world_size(args) -> None:
    """Refuse a --world-size no k can use (dist runs k + 1 ranks at most); warn for the k it
    does not fit (they run on k + 1 ranks)."""
    backends = args.backend if isinstance(args.backend, list) else [args.backend]
    if "dist" not in backends:
        return
    ks = args.k if isinstance(args.k, list) else [args.k]
    if args.world_size > max(ks) + 1:
        raise ValueError(f"--world-size {args.world_size} is above k + 1 = {max(ks) + 1} (a dist "
                         "run has one rank for main and at most one per candidate)")  # fmt: skip
    fewer = [k for k in ks if args.world_size > k + 1]
    if fewer:
        print(f"ppd: warning: --world-size {args.world_size}: k = {fewer} run on k + 1 ranks",
              file=sys.stderr)  # fmt: skip


def run_settings(args, *, eos_token_id=None, decoding=None):
    """The one ``RunSettings`` of a ``ppd run`` / ``ppd validate`` invocation, from its options,
    the model's stop tokens and the sampling flags' rule (ValueError naming the setting when
    one is out of range)."""
    from measure.decode.settings import RunSettings

    return RunSettings(
        eos_token_id=eos_token_id,
        decoding=decoding or DEFAULT_SETTINGS.decoding,
        world_size=args.world_size,
        timeout_s=args.timeout_s,
        model_dir=args.model,  # the dist ranks load the model from it
        repeats=args.repeats,
        turns=args.turns,
        threads=args.threads,
        progress=not args.no_progress,
    )


def _values(value) -> list:
    """An option's values as a list (``ppd validate`` takes several, ``ppd run`` one)."""
    return value if isinstance(value, list) else [value]


def _d_bars(args, d: int) -> list[int]:
    """The --d-bar values, or the default one: the --head-dir head's layer, else
    ``default_d_bar(d)`` (read before any weight is)."""
    from measure.train.head_io import saved_head_layer

    given = [b for b in _values(args.d_bar) if b is not None]
    if given:
        return given
    return [default_d_bar(d) if args.head_dir is None else saved_head_layer(args.head_dir)]


def _check_before_loading(args, facts) -> None:
    """The checks of ``ppd run`` / ``ppd validate`` options that need the model's config.json
    or the head's head_config.json but not their weights: d_bar in [d/2, d) and the head's
    layer (the default d_bar: the head's layer, else ``default_d_bar``), k within the
    vocabulary, the sampling flags."""
    from measure.checks import check_ppd_args, check_trained_layer
    from measure.train.head_io import saved_head_layer

    d_bars = _d_bars(args, facts.d)
    if args.head_dir is not None:
        for d_bar in d_bars:
            check_trained_layer(saved_head_layer(args.head_dir), d_bar)
    for d_bar in d_bars:
        for k in _values(args.k):
            check_ppd_args(facts.d, d_bar, k, facts.vocab_size, args.max_new_tokens)
    _check_sampling_flags(args)


@dataclass(frozen=True)
class Loaded:
    """What ``_load`` returns: the model and what the command needs beside it."""

    model: object
    ids: list
    """Token ids of each prompt."""
    names: list
    """Each prompt's name (sequence id)."""
    d_bar: object
    """--d-bar (the head's layer, or ``default_d_bar(d)``, when not given)."""
    eos: list
    """Token ids that end a generation."""
    head: object
    """The --head-dir head, or None."""
    profile: object
    """The --profile (a CostProfile, its depth checked), or None."""


def _load(args, check=None) -> Loaded:
    """The model and prompts of ``ppd run`` / ``ppd validate``; every option that needs no
    weight is checked before any is read (``_check_before_loading``, then ``check(args,
    facts, profile)`` for the command's own)."""
    import torch

    check_world_size(args)  # before the model loads

    from measure.checks import check_context, eos_token_ids
    from measure.hf.loading import load_causal_lm
    from measure.profile.profile import load_profile
    from measure.train.head_io import load_head

    if args.prompt:
        texts, names = args.prompt, [str(i) for i in range(len(args.prompt))]
    else:
        loaded = read_prompts(args)
        texts, names = [p.text for p in loaded], [p.id for p in loaded]
    if not texts:
        raise ValueError("--prompts: no prompts selected")
    facts = model_facts(args.model)
    ids = facts.encode(texts, chat_template=not args.no_chat_template)
    if any(len(x) == 0 for x in ids):
        raise ValueError("--prompt/--prompts: every prompt must encode to at least one token")
    check_context(facts.config, [len(x) for x in ids], args.max_new_tokens, names=names)
    _check_before_loading(args, facts)
    profile = None if args.profile is None else load_profile(args.profile, d=facts.d)
    if check is not None:
        check(args, facts, profile)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_causal_lm(args.model, dtype=args.dtype, device=args.device)
    tokenizer = facts.tokenizer
    head = None if args.head_dir is None else load_head(args.head_dir, model, device=model.device)
    d = model.config.get_text_config().num_hidden_layers
    d_bar = args.d_bar
    if d_bar is None:
        d_bar = default_d_bar(d) if head is None else head.config.layer
    eos = sorted(set(eos_token_ids(model)) | {tokenizer.eos_token_id} - {None})
    return Loaded(model, ids, names, d_bar, eos, head, profile)


def _warn_degenerate(command: str, names, greedy, eos) -> None:
    """Print which prompts' greedy generations ended at once or fell into repetition."""
    text = summarize({n: g.tokens for n, g in zip(names, greedy, strict=True)}, eos).message()
    if text is not None:
        print(f"ppd {command}: warning: {text}", file=sys.stderr)


def _run(args) -> int:
    from measure.eval.report import format_table, table3
    from sim.formats import write_traces

    loaded = _load(args)
    model, ids, names, d_bar, eos, head = (loaded.model, loaded.ids, loaded.names,
                                           loaded.d_bar, loaded.eos, loaded.head)  # fmt: skip
    decoding, seeds = _sampling(args, names)
    settings = run_settings(args, eos_token_id=eos, decoding=decoding)
    out = Path(args.out)
    checker = ProfileChecker(args, model, [args.backend])
    checked = loaded.profile is not None and args.backend in loaded.profile.backends
    if checked:
        checker.before(loaded.profile, out)
    report = table3(
        model,
        ids,
        d_bar=d_bar,
        ks=list(dict.fromkeys(args.k)),  # repeated values would repeat rows
        max_new_tokens=args.max_new_tokens,
        backend=args.backend,
        early_head=args.early_head,
        assistant=not args.no_assistant,
        settings=settings,
        head=head,
        sequences=names,
        seeds=seeds,
    )
    _warn_degenerate("run", names, report.greedy, eos)
    if checked:
        checker.after(loaded.profile)
    out.mkdir(parents=True, exist_ok=True)
    report.table.to_csv(out / "report.csv", index=False)
    write_traces(out / "traces.jsonl", [r.trace for runs in report.ppd.values() for r in runs])
    print(
        f"d = {model.config.get_text_config().num_hidden_layers}, d_bar = {d_bar}, "
        f"{len(ids)} prompts, max {args.max_new_tokens} new tokens, backend {args.backend}, "
        f"early head on {args.early_head}, {decoding.label}"
        + (
            f" (seed {args.seed}; 'greedy' in verdicts: the sampled baseline)"
            if decoding.do_sample
            else ""
        )
    )
    print(format_table(report.table))
    print(f"{args.repeats} interleaved round(s) ({_TURNS_NOTE[args.turns]}); "
          f"{report.timing.load.describe()}")  # fmt: skip
    for line in report.verdicts(loaded.profile):
        print("verdict: " + line)
    print(f"wrote {out / 'report.csv'} and {out / 'traces.jsonl'}")
    inexact = report.table[report.table["exact"] == False]  # noqa: E712 (None = not run)
    return 1 if len(inexact) else 0


def _early_exit_configs(args) -> list:
    """The --early-exit x --draft-tokens methods (checked before any model is loaded)."""
    from measure.eval.hf_early_exit import EarlyExitConfig

    if args.do_sample and args.early_exit:
        raise ValueError("--do-sample: --early-exit times greedy decoding only")
    if bool(args.early_exit) != bool(args.draft_tokens):
        raise ValueError("--early-exit and --draft-tokens must be given together")
    return [
        EarlyExitConfig(exit_layer=L, g=g)
        for L in dict.fromkeys(args.early_exit)
        for g in dict.fromkeys(args.draft_tokens)
    ]


def free_threshold(text: str):
    """A --threshold value: "auto" or a number >= 0."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or auto, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or auto, got {text!r}")
    return value


def _free_configs(args) -> list:
    """The --free x --threshold methods (checked before any model is loaded)."""
    from measure.eval.free_eval import FreeConfig

    if bool(args.free) != bool(args.threshold):
        raise ValueError("--free and --threshold must be given together")
    return [
        FreeConfig(exit_layer=L, threshold=t, calibration_sentences=args.calibration_sentences)
        for L in dict.fromkeys(args.free)
        for t in dict.fromkeys(args.threshold)
    ]


def _probe_rounds(args) -> int:
    """Probe rounds per gap of the interleaved probes (0 with --no-interleave-probes); checked
    before loading."""
    from measure.eval.interleaved import PROBE_ROUNDS

    if args.probe_rounds is not None and args.interleave_probes is False:
        raise ValueError("--probe-rounds sets the interleaved probes' rounds, which "
                         "--no-interleave-probes turns off: give one of the two")  # fmt: skip
    if args.interleave_probes is False:
        return 0
    return PROBE_ROUNDS if args.probe_rounds is None else args.probe_rounds


def _probes_for(args, profile, probe_rounds: int) -> int:
    """The probe rounds once the profile is known: a profile that records no context length
    (older than the probes) cannot be probed at the runs' context, so the default falls back to
    its prediction alone, with a note; an explicit --interleave-probes refuses it."""
    from measure.eval.interleaved import probe_context

    if not probe_rounds or probe_context(profile) is not None:
        return probe_rounds
    if args.interleave_probes:
        raise ValueError("--interleave-probes: the profile records no context length to probe "
                         "at (measure a new one with ppd measure profile)")  # fmt: skip
    print("ppd validate: the profile records no context length to probe at, so no interleaved "
          "probes: its prediction alone (measure a new one with ppd measure profile)",
          file=sys.stderr)  # fmt: skip
    return 0


def _profile_threads(args, profile) -> None:
    """Greedy and the ``single`` backend run at the thread count the profile timed them at:
    ``--threads`` defaults to it (a run at another count meets other prices: a loaded 2-core
    machine read +7 to +28 % from that alone); a different ``--threads`` is run but warned of."""
    threads = profile.data.get("backends", {}).get("single", {}).get("threads")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        return
    if args.threads is None:
        args.threads = threads
        print(f"ppd validate: {threads} torch thread(s), as the profile timed its single "
              "backend (--threads to change)", file=sys.stderr)  # fmt: skip
    elif args.threads != threads:
        print(f"warning: --threads {args.threads}, but the profile timed its single backend at "
              f"{threads} thread(s): greedy and single-backend PPD are predicted at {threads}",
              file=sys.stderr)  # fmt: skip


def _validate(args) -> int:
    if args.profile is not None and args.drift_floor:
        raise ValueError("--drift-floor applies to the profile ppd validate measures itself; a "
                         "given --profile keeps the floor it was measured with (ppd measure "
                         "profile --drift-floor)")  # fmt: skip
    early_exit = _early_exit_configs(args)
    free = _free_configs(args)
    probe_rounds = _probe_rounds(args)
    from measure.eval.free_eval import free_table
    from measure.eval.plots import (
        block_times,
        plot_block_times,
        plot_predicted_vs_measured,
        plot_waterfalls,
    )
    from measure.eval.text import (
        format_early_exit,
        format_gaps,
        format_passes,
        format_table,
        format_waterfall,
    )
    from measure.eval.validate import check_configs, validate
    from measure.profile.profile import write_profile
    from measure.profile.report import plot_layer_times
    from sim.formats import write_free_table, write_traces

    def check(args, facts, profile) -> None:  # before any weight is read
        d = facts.d
        for option, methods in (("--early-exit", early_exit), ("--free", free)):
            for m in methods:
                if not 1 <= m.exit_layer <= d - 1:
                    raise ValueError(f"{option}: {m.exit_layer} is not in [1, d - 1] = "
                                     f"[1, {d - 1}]")  # fmt: skip
        if profile is not None:
            check_wide_prices(profile, accept=args.accept_wide_prices)
            check_configs(profile, _ppd_configs(args, _d_bars(args, d)))
            _profile_threads(args, profile)

    loaded = _load(args, check)
    model, ids, names, d_bar, eos, head = (loaded.model, loaded.ids, loaded.names,
                                           loaded.d_bar, loaded.eos, loaded.head)  # fmt: skip
    decoding, seeds = _sampling(args, names)
    settings = run_settings(args, eos_token_id=eos, decoding=decoding)
    d = model.config.get_text_config().num_hidden_layers
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_run_sidecar(out, args, d)
    profile = _validation_profile(args, loaded.profile, model, ids, out)
    configs = _ppd_configs(args, _values(d_bar))
    checker = ProfileChecker(args, model, [c.backend for c in configs])
    profile = checker.before(profile, out, given=loaded.profile is not None)
    probe_rounds = _probes_for(args, profile, probe_rounds)
    result = validate(
        model, ids, profile=profile, configs=configs, early_exit=early_exit, free=free,
        max_new_tokens=args.max_new_tokens, settings=settings, head=head, names=names, seeds=seeds,
        interleave_probes=probe_rounds,
    )  # fmt: skip
    probed = result.interleaved_profile is not None
    _warn_degenerate("validate", names, result.timing.greedy.runs, eos)
    checker.after(profile)
    table = checked_columns(result.table, checker.checks)
    table.to_csv(out / "validation.csv", index=False)
    result.waterfalls.to_csv(out / "waterfalls.csv", index=False)
    result.terms.to_csv(out / "terms.csv", index=False)
    result.passes.to_csv(out / "passes.csv", index=False)
    result.turn_table().to_csv(out / "turns.csv", index=False)
    summary = {**result.summary(), **checker.summary(), **checked_summary(table)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if probed:
        write_profile(out / "profile_interleaved.json", result.interleaved_profile)
        result.sentinel_table().to_csv(out / "sentinel.csv", index=False)
    if result.free:  # what ppd plan --free-table reads
        write_free_table(out / "free_table.csv", free_table(result.free))
    traces = [r.trace for m in result.timing.ppd.values() for r in m.runs]
    write_traces(out / "traces.jsonl", traces)
    plot_waterfalls(result, out / "waterfall.png")
    plot_predicted_vs_measured(result, out / "predicted_vs_measured.png")
    if block_times(result).empty:  # no block timed in the runs: the profile's layers alone
        plot_layer_times(profile, out / "layer_times.png")
    else:
        plot_block_times(result, out / "layer_times.png")
    print(
        f"d = {profile.d}, {len(ids)} prompts, max {args.max_new_tokens} new tokens, "
        f"{args.repeats} interleaved rounds ({_TURNS_NOTE[args.turns]}), {decoding.label}"
        + (
            f" (seed {args.seed}; 'greedy' rows: the sampled baseline)"
            if decoding.do_sample
            else ""
        )
        + f"; {result.timing.load.describe()}"
    )
    print(format_table(result))
    print("waterfall per token (predicted from the profile; measured beside it):")
    for r in result.results:
        print("  " + format_waterfall(r))
    print("largest gap between a block timed in the runs and the profile's price:")
    for line in format_gaps(result):
        print("  " + line)
    print(
        "passes timed in the runs against the closed form's time of their kind (x measured /"
        " predicted; the gap per token; fresh: after a miss, resumed: after a match):"
    )
    for line in format_passes(result):
        print("  " + line)
    for line in format_early_exit(result):
        print(line)
    for o in result.free:
        print("FREE (approximate; quality against greedy's tokens): " + o.describe())
    for line in result.verdicts():
        print("verdict: " + line)
    print(
        (
            "from the profile taken beforehand (what ppd plan prices; it follows the machine's "
            "drift since): "
            if probed
            else "predicted vs measured: "
        )
        + f"median |error| {100 * summary['median_abs_rel_err']:.1f} %, "
        f"worst {100 * summary['worst_abs_rel_err']:.1f} % over "
        f"{summary['configurations']} configuration(s); greedy "
        + ", ".join(
            f"{100 * err:+.1f} % (priced on {backend})"
            for backend, err in summary["greedy_rel_err_by_backend"].items()
        )
        + "; 0 parameters fitted on these runs; measured median inside the predicted 95 % "
        f"interval for {summary['inside_interval']} of {summary['with_interval']} "
        f"configuration(s) with one (profile cost replicates{_drift_note(summary)})"
    )
    if "checked_median_abs_rel_err" in summary:
        print(checked_line(summary, checker.checks))
    if "speedup_median_abs_rel_err" in summary:
        print(
            "speed-ups over greedy (a drift of the whole machine leaves them): median |error| "
            f"{100 * summary['speedup_median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary['speedup_worst_abs_rel_err']:.1f} %"
        )
    if "speedup_turns_median_abs_rel_err" in summary:
        print(turns_line(summary, args.repeats))
    if probed:
        print(result.probe_note)
        print(
            "from the interleaved probes (the prediction of record: its prices were timed "
            "beside the runs): median |error| "
            f"{100 * summary['interleaved_median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary['interleaved_worst_abs_rel_err']:.1f} %; greedy "
            + ", ".join(f"{100 * err:+.1f} % (on {backend})" for backend, err in
                        summary["interleaved_greedy_rel_err_by_backend"].items())
            + f"; inside its interval for {summary['interleaved_inside_interval']} "
            f"configuration(s){_drift_note(summary, 'interleaved_')}"
        )  # fmt: skip
        paired = [
            f"{name} median |error| {100 * summary[f'{key}median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary[f'{key}worst_abs_rel_err']:.1f} %"
            for name, key in (("profile", "paired_"), ("interleaved", "interleaved_paired_"))
            if f"{key}median_abs_rel_err" in summary
        ]
        if paired:
            print(f"paired with the sentinel ({_sentinel_note(summary)}): " + "; ".join(paired))
    print(
        f"wrote {out}/validation.csv, summary.json, waterfalls.csv, terms.csv, passes.csv, "
        "turns.csv, "
        "traces.jsonl, "
        "waterfall.png, predicted_vs_measured.png, layer_times.png"
        + (", profile_interleaved.json, sentinel.csv" if probed else "")
    )
    inexact = [r for r in result.results + result.early_exit if not r.exact]
    return 1 if inexact else 0


def _ppd_configs(args, d_bars) -> list:
    """The PPD configurations of ``ppd validate``: each --backend x --early-head x d_bar x --k."""
    from measure.eval.repeat import PPDConfig

    return [
        PPDConfig(d_bar=b, k=k, early_head=h, backend=backend)
        for backend in dict.fromkeys(args.backend)
        for h in dict.fromkeys(args.early_head)
        for b in dict.fromkeys(d_bars)
        for k in dict.fromkeys(args.k)
    ]


def write_run_sidecar(out: Path, args, d: int) -> Path:
    """``OUT/run.json``: the model and prompts a validation ran on, as ``ppd measure
    match-rate``'s names them (``ppd plan --table OUT`` checks the model against its profile)."""
    path = out / "run.json"
    meta = {"command": "validate", "model": str(args.model), "d": d, "prompts": args.prompts,
            "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
            "turns": args.turns}  # fmt: skip
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return path


CONTEXT_TOLERANCE = 0.25
"""Relative gap between a given profile's context and the prompts' that ``ppd validate`` warns
about."""


def context_warning(profile, context: int) -> str | None:
    """Why ``profile`` may misprice prompts of ``context`` cached positions on average (its
    own context differs by more than ``CONTEXT_TOLERANCE``), or None."""
    profiled = profile.data.get("model", {}).get("context_tokens")
    if not isinstance(profiled, int) or abs(profiled - context) <= CONTEXT_TOLERANCE * context:
        return None
    return (
        f"measured at {profiled} cached positions, these prompts average {context} (prompt + "
        f"half the new tokens); attention grows with the context, so profile at "
        f"--context-tokens {context}"
    )


def _validation_profile(args, given, model, ids, out: Path):
    """The --profile (``given``, read and checked before the model loaded), or a profile
    measured now and saved."""
    context = round(sum(map(len, ids)) / len(ids) + args.max_new_tokens / 2)
    if given is not None:
        profile = given
        when = profile.provenance.get("date_utc", "an unknown date")
        print(f"profile {args.profile}: {profile.model_name}, measured {when}")
        for warning in profile.warnings:
            print(f"profile warning: {warning}")
        warning = context_warning(profile, context)
        if warning:
            print(f"profile warning: {warning}")
        for note in check_wide_prices(profile, accept=args.accept_wide_prices):
            print(note)
        return profile
    print(
        "no --profile given: measuring one first (context "
        f"{context} tokens, backends {sorted(set(args.backend))}, k {sorted(set(args.k))})"
    )
    return _measure_now(args, model, context, out, drift_floor=args.drift_floor / 100)


def _measure_now(args, model, context: int, out: Path, *, drift_floor: float):
    """A profile of ``model`` measured now at ``context`` cached positions (``--backend``,
    ``--k``, ``--profile-repeats``), saved as ``out/profile.json`` and printed."""
    import torch

    from measure.profile.profile import measure_profile, write_profile
    from measure.profile.report import format_profile

    profile = measure_profile(
        model,
        model_dir=args.model,
        backends=args.backend,
        ks=sorted(set(args.k)),
        threads=torch.get_num_threads(),
        context_tokens=context,
        repeats=args.profile_repeats,
        progress=not args.no_progress,
        drift_floor=drift_floor,
    )
    path = write_profile(out / "profile.json", profile)
    print(format_profile(profile))
    print(f"wrote {path}")
    for note in check_wide_prices(profile, accept=True):  # measured now: said, not refused
        print(note)
    return profile


class ProfileChecker:
    """The profile check of ``ppd validate`` and ``ppd run`` (``measure.eval.profile_check``):
    a greedy token priced now beside the profile's price, before the judged runs (acting on a
    given profile found stale by ``--if-stale``) and after them; each check printed and kept
    for summary.json and the checked prediction."""

    def __init__(self, args, model, backends):
        self.args, self.model = args, model
        self.backends = list(dict.fromkeys(backends))
        self.checks = []
        """The checks of the profile in use."""
        self.stale = []
        """The checks that found a given profile stale, where a new one replaced it."""
        self.skipped = None
        self._probe = None

    def _check(self, profile, when: str) -> list:
        if not self.args.check_seconds or self.skipped:
            return []
        context = profile.data.get("model", {}).get("context_tokens")
        if not isinstance(context, int):
            self.skipped = "the profile records no context length to re-time it at"
            print(f"profile check: skipped ({self.skipped})")
            return []
        if self._probe is None or self._probe.position != context - 1:
            self._probe = DecodeProbe(self.model, context_tokens=context)
        checks = check_profile(self.model, profile, self.backends, when=when,
                               seconds=self.args.check_seconds, probe=self._probe)  # fmt: skip
        self.checks += checks
        for c in checks:
            print("profile check: " + c.describe())
        return checks

    def before(self, profile, out: Path, *, given: bool = True):
        """``profile``, or, ``given`` (a --profile, not one measured just now) and found stale,
        a new one measured now with ``--if-stale remeasure`` (checked in turn); ValueError (exit
        2) with ``--if-stale refuse``."""
        note = stale_note(self._check(profile, "before"))
        if note is None:
            return profile
        if not given or self.args.if_stale == "warn":
            print(f"profile warning: {note}")
            return profile
        if self.args.if_stale == "refuse":
            raise ValueError(f"--if-stale refuse: {note}")
        print(f"profile check: {note}; --if-stale remeasure: measuring a new profile")
        machine = profile.data.get("machine") or {}
        floor = machine.get("floor_log_sd", 0.0)  # the given profile's floor, kept
        context = profile.data["model"]["context_tokens"]
        self.stale, self.checks = self.checks, []  # the checks of the profile in use follow
        fresh = _measure_now(self.args, self.model, context, out,
                             drift_floor=floor if isinstance(floor, float) else 0.0)  # fmt: skip
        self._check(fresh, "before")
        return fresh

    def after(self, profile) -> None:
        note = stale_note(self._check(profile, "after"))
        if note:
            print(f"profile warning: {note}")

    def summary(self) -> dict:
        """summary.json's ``profile_check`` (each check of the profile in use),
        ``profile_remeasured`` and ``profile_check_stale`` (the checks of the given profile a
        new one replaced; empty where none did)."""
        return {"profile_check": [c.to_dict() for c in self.checks],
                "profile_remeasured": bool(self.stale),
                "profile_check_stale": [c.to_dict() for c in self.stale]}  # fmt: skip


def checked_line(summary: dict, checks) -> str:
    """'the profile scaled by its check (single x1.07, dist x1.11: ...): median |error| ...'."""
    scales = ", ".join(f"{b} x{s:.3g}" for b, s in check_scales(checks).items())
    by_backend = summary["checked_greedy_rel_err_by_backend"]
    greedy = ", ".join(f"{100 * e:+.1f} % ({b})" for b, e in by_backend.items())
    return (
        f"the profile scaled by its check ({scales}: the geometric mean of the checks' ratios, "
        "greedy steps of its own before and after the runs, not the runs): median |error| "
        f"{100 * summary['checked_median_abs_rel_err']:.1f} %, worst "
        f"{100 * summary['checked_worst_abs_rel_err']:.1f} %; greedy {greedy}"
    )


def _sentinel_note(summary: dict) -> str:
    """'85 windows; the runs' machine 1.10x the profile's; each prompt's own windows weighted
    0.20' (``measure.eval.paired``)."""
    level = summary.get("sentinel_level_over_profile")
    return (
        f"{summary['sentinel_windows']} windows"
        + ("" if level is None else f"; the runs' machine {level:.3g}x the profile's step time")
        + f"; each prompt's own windows weighted {summary['sentinel_weight']:.2f}"
    )


MOVED_ROUNDS_FACTOR = 8
"""Advice for more than this many times the rounds run reads as a moving machine, not as a
count to run (``turns_line``)."""


def turns_line(summary: dict, repeats: int) -> str:
    """The speed-ups judged turn by turn (``measure.eval.turn_speedup``), in one line."""
    needed = summary["speedup_turns_rounds_for_target"]
    coverage = summary["speedup_turns_coverage"]
    if needed is None:
        width = (f"too few turns for a 95 % interval (the measured range covers "
                 f"{100 * coverage:.0f} %: 6 turns or more reach 95 %)")  # fmt: skip
    else:
        width = f"measured to +-{100 * summary['speedup_turns_half_width_max']:.1f} % at worst"
        if needed > MOVED_ROUNDS_FACTOR * repeats:  # not a count of rounds worth suggesting
            width += (" (turns this far apart mean the machine moved during the rounds: run "
                      f"again when it is quiet; pinning every one to +-{100 * TARGET_HALF_WIDTH:g}"
                      f" % would take about --repeats {needed})")  # fmt: skip
        elif needed > repeats:
            width += (f" (about --repeats {needed} would pin every one to +-"
                      f"{100 * TARGET_HALF_WIDTH:g} %)")  # fmt: skip
    repeat = summary.get("speedup_turns_repeat_bound")
    if repeat is not None:  # measure.eval.run_to_run
        width += (f"; a repeat (same prompts, fresh profile) would move a configuration's error "
                  f"by up to {repeat:.1f} points by chance alone (95 %)")  # fmt: skip
    return (
        "speed-ups judged turn by turn (each prompt's run against greedy's beside it and its "
        f"own prediction): median |error| {100 * summary['speedup_turns_median_abs_rel_err']:.1f}"
        f" %, worst {100 * summary['speedup_turns_worst_abs_rel_err']:.1f} %; predicted inside "
        f"the measured interval for {summary['speedup_turns_inside']} of "
        f"{summary['speedup_turns_with_interval']}, the two intervals overlapping for "
        f"{summary['speedup_intervals_overlap']} (the predicted one from the profile's cost "
        f"replicates); {width}"
    )


def _drift_note(summary: dict, prefix: str = "") -> str:
    """ ", with the machine's drift while timed: log-sd 15.9 %" where the profile recorded one."""
    sd = summary.get(f"{prefix}machine_drift_log_sd")
    floor = summary.get(f"{prefix}machine_drift_floor_log_sd")
    if sd is None:
        return ""
    note = f", with the machine's drift while timed: log-sd {100 * sd:.1f} %"
    if floor is not None and floor > sd:
        note += f" (the intervals carry the machine's floor, {100 * floor:.1f} %)"
    return note
