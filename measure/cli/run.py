"""``ppd run`` (real, exact PPD with a Table-3-like report) and ``ppd validate`` (three-way):
their options and the checks of them that need no model.

Torch-free, so ``ppd --help`` and the closed-form commands build this parser without the
``measure`` extra; the work is ``measure.cli.run_commands``, imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys

from measure.cli.common import (
    add_drift_floor,
    add_model_args,
    add_prompt_format_args,
    honours_no_progress,
)
from measure.decode.settings import CHECK_ROUNDS, CHECK_SECONDS, DEFAULT_SETTINGS, IF_STALE, TURNS
from measure.eval.turn_speedup import TARGET_HALF_WIDTH
from ppdmodel.cli import deferred
from ppdmodel.cli_args import (
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
from ppdmodel.cost_profile import ACCEPT_WIDE_FLAG
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
    run.set_defaults(func=honours_no_progress(deferred("measure.cli.run_commands:run_command")))
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
        help="draft lengths g of --early-exit and --spec-draft (each L or draft x each g; "
        "required with either)",
    )
    validate.add_argument(
        "--spec-draft",
        type=draft_model,
        nargs="+",
        default=[],
        metavar="MODEL",
        help="also time draft-model speculative decoding (the draft proposes g tokens greedily, "
        "the model verifies them in one pass, exact) with each draft: a model folder, .gguf "
        "file or known name sharing the model's tokenizer, or self:N (the model's first N "
        "layers with its final norm and LM head), at each --draft-tokens g, in the same rounds; "
        "predicted from the profile, the draft's own profile (measured first, untimed) and "
        "each run's steps (default: none)",
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
    validate.set_defaults(
        func=honours_no_progress(deferred("measure.cli.run_commands:validate_command"))
    )


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


def _early_exit_configs(args) -> list:
    """The --early-exit x --draft-tokens methods (checked before any model is loaded)."""
    from measure.eval.hf_early_exit import EarlyExitConfig

    if args.do_sample and args.early_exit:
        raise ValueError("--do-sample: --early-exit times greedy decoding only")
    if bool(args.early_exit) != bool(args.draft_tokens) and not args.spec_draft:
        raise ValueError("--early-exit and --draft-tokens must be given together")
    if args.early_exit and not args.draft_tokens:
        raise ValueError("--early-exit and --draft-tokens must be given together")
    return [
        EarlyExitConfig(exit_layer=L, g=g)
        for L in dict.fromkeys(args.early_exit)
        for g in dict.fromkeys(args.draft_tokens)
    ]


def _spec_methods(args) -> list:
    """The --spec-draft x --draft-tokens methods (checked before any model is loaded)."""
    from measure.eval.methods import method_of
    from measure.eval.methods.speculative import SpecConfig

    if not args.spec_draft:
        return []
    if args.do_sample:
        raise ValueError("--do-sample: --spec-draft times greedy decoding only")
    if not args.draft_tokens:
        raise ValueError("--spec-draft and --draft-tokens must be given together")
    rows = max(args.draft_tokens) + 1  # the verify's positions, priced as a k-row batch
    if args.profile is None and rows > max(args.k):
        raise ValueError(f"--spec-draft verifies up to {rows} positions at once: add --k {rows} so "
                         "the profile measured now prices that batch")  # fmt: skip
    return [
        method_of(SpecConfig(draft=m, g=g))
        for m in dict.fromkeys(args.spec_draft)
        for g in dict.fromkeys(args.draft_tokens)
    ]


def draft_model(text: str) -> str:
    """A --spec-draft value: not blank (a path, a known name or self:N, read when the method is
    built: ``measure.eval.methods.speculative.SpecConfig``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a model folder, .gguf file, known name or "
                                         "self:N, got an empty value")  # fmt: skip
    return text


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
