"""What ``ppd run`` and ``ppd validate`` do once their options are parsed (``measure.cli.run``):
load the model and prompts, check the profile against this machine, decode, predict, report.

Imported when one of the two commands runs (it needs the ``measure`` extra: torch).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from measure.cli.common import model_facts, read_prompts
from measure.cli.run import (
    _check_sampling_flags,
    _early_exit_configs,
    _free_configs,
    _probe_rounds,
    _probes_for,
    _profile_threads,
    _spec_methods,
    _values,
    check_world_size,
    context_warning,
    run_settings,
    turns_line,
)
from measure.degenerate import summarize
from measure.eval.profile_check import (
    check_profile,
    check_scales,
    checked_columns,
    checked_summary,
    stale_note,
)
from measure.profile.probes import DecodeProbe
from ppdmodel.cli_args import default_d_bar
from ppdmodel.cost_profile import check_wide_prices

_TURNS_NOTE = {"prompts": "turns by prompt", "runs": "turns by run"}
"""How the printed header names ``--turns``."""


def _sampling(args, names):
    """(Decoding, seeds per prompt or None) from the sampling flags; ValueError if misused."""
    from measure.decode.sampling import Decoding, prompt_seed

    _check_sampling_flags(args)
    if not args.do_sample:
        return Decoding(), None
    decoding = Decoding(True, args.temperature, args.top_k, args.top_p)
    return decoding, [prompt_seed(args.seed, name) for name in names]


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


def run_command(args) -> int:
    """``ppd run``."""
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


def validate_command(args) -> int:
    """``ppd validate``."""
    if args.profile is not None and args.drift_floor:
        raise ValueError("--drift-floor applies to the profile ppd validate measures itself; a "
                         "given --profile keeps the floor it was measured with (ppd measure "
                         "profile --drift-floor)")  # fmt: skip
    early_exit = _early_exit_configs(args)
    methods = _spec_methods(args)
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
            for m in methods:
                m.check(d, profile)
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
        methods=methods, max_new_tokens=args.max_new_tokens, settings=settings, head=head,
        names=names, seeds=seeds, interleave_probes=probe_rounds,
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
    for o in result.others:
        for line in o.report_lines():
            print(line)
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
    inexact = [r for r in result.results + result.others if not (r.exact or r.approximate)]
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
