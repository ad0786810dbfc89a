"""What ``ppd run`` and ``ppd validate`` do with their settings (one ``RunRequest``): read the
prompts and the model's config, check every setting against them before any weight is read,
load the model, check the profile against this machine, decode, predict, judge and write the
result files. The commands print what ``run_report`` and ``validate_run`` return.

Notes on the way (a profile read or measured, its check, a warning) are printed as they
happen, as the runs take minutes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from measure.checks import (
    check_context,
    check_ppd_args,
    check_trained_layer,
    eos_token_ids,
    model_facts,
)
from measure.datasets import load_prompts
from measure.decode.sampling import prompt_seed
from measure.decode.settings import MethodSettings, RunRequest, RunSettings
from measure.degenerate import summarize
from measure.eval.interleaved import probe_context
from measure.eval.profile_check import check_profile, checked_columns, checked_summary, stale_note
from measure.eval.repeat import PPDConfig
from measure.hf import loading
from measure.profile.probes import DecodeProbe
from measure.profile.profile import load_profile, measure_profile, write_profile
from measure.profile.report import format_profile
from measure.train.head_io import load_head, saved_head_layer
from ppdmodel.cli_args import default_d_bar, reading
from ppdmodel.cost_profile import check_wide_prices

CONTEXT_TOLERANCE = 0.25
"""Relative gap between a given profile's context and the prompts' that ``ppd validate`` warns
about."""


def early_exit_configs(m: MethodSettings) -> list:
    """The --early-exit x --draft-tokens methods."""
    from measure.eval.hf_early_exit import EarlyExitConfig

    pairs = [(L, g) for L in dict.fromkeys(m.early_exit) for g in dict.fromkeys(m.draft_tokens)]
    return [EarlyExitConfig(exit_layer=L, g=g) for L, g in pairs]


def spec_methods(m: MethodSettings) -> list:
    """The --spec-draft x --draft-tokens methods."""
    from measure.eval.methods import method_of
    from measure.eval.methods.speculative import SpecConfig

    pairs = [(d, g) for d in dict.fromkeys(m.spec_draft) for g in dict.fromkeys(m.draft_tokens)]
    return [method_of(SpecConfig(draft=d, g=g)) for d, g in pairs]


def free_configs(m: MethodSettings) -> list:
    """The --free x --threshold methods."""
    from measure.eval.free_eval import FreeConfig

    return [
        FreeConfig(exit_layer=L, threshold=t, calibration_sentences=m.calibration_sentences)
        for L in dict.fromkeys(m.free)
        for t in dict.fromkeys(m.threshold)
    ]


def ppd_configs(m: MethodSettings, d_bars) -> list[PPDConfig]:
    """The PPD configurations: each backend x early head x d_bar x k."""
    return [
        PPDConfig(d_bar=b, k=k, early_head=h, backend=backend)
        for backend in dict.fromkeys(m.backend)
        for h in dict.fromkeys(m.early_head)
        for b in dict.fromkeys(d_bars)
        for k in dict.fromkeys(m.k)
    ]


def d_bars(m: MethodSettings, d: int) -> list[int]:
    """The --d-bar values, or the default one: the --head-dir head's layer, else
    ``default_d_bar(d)`` (read before any weight is)."""
    if m.d_bar:
        return list(m.d_bar)
    return [default_d_bar(d) if m.head_dir is None else saved_head_layer(m.head_dir)]


def warn_world_size(request: RunRequest) -> None:
    """Warn for the k a dist --world-size does not fit (they run on k + 1 ranks; a size no k
    can use is refused by ``RunRequest``)."""
    m, world = request.methods, request.timing.world_size
    fewer = [k for k in m.k if world > k + 1]
    if "dist" in m.backend and fewer:
        print(f"ppd: warning: --world-size {world}: k = {fewer} run on k + 1 ranks",
              file=sys.stderr)  # fmt: skip


def check_before_loading(m: MethodSettings, facts) -> None:
    """The checks of the methods that need the model's config.json or the head's
    head_config.json but not their weights: d_bar in [d/2, d) and the head's layer, k within
    the vocabulary, max_new_tokens."""
    bars = d_bars(m, facts.d)
    if m.head_dir is not None:
        for d_bar in bars:
            check_trained_layer(saved_head_layer(m.head_dir), d_bar)
    for d_bar in bars:
        for k in m.k:
            check_ppd_args(facts.d, d_bar, k, facts.vocab_size, m.max_new_tokens)


@dataclass(frozen=True)
class Loaded:
    """The model and what a command needs beside it (``load``)."""

    model: object
    ids: list
    """Token ids of each prompt."""
    names: list
    """Each prompt's name (sequence id)."""
    d_bars: list
    """--d-bar (the head's layer, or ``default_d_bar(d)``, when not given)."""
    eos: list
    """Token ids that end a generation."""
    head: object
    """The --head-dir head, or None."""
    profile: object
    """The --profile (a CostProfile, its depth checked), or None."""
    settings: RunSettings
    """What every run shares: the timing options, stop tokens, decoding rule, model dir."""
    seeds: list | None
    """Each prompt's seed (sampled decoding), or None."""

    @property
    def d(self) -> int:
        return self.model.config.get_text_config().num_hidden_layers


def load(request: RunRequest, check=None) -> Loaded:
    """The model and prompts of ``request``; every setting that needs no weight is checked
    before any is read (``check_before_loading``, then ``check(request, facts, profile)``,
    which may return the run settings changed, for the command's own)."""
    warn_world_size(request)
    p, m = request.prompts, request.methods
    if p.prompt:
        texts, names = list(p.prompt), [str(i) for i in range(len(p.prompt))]
    else:
        with reading("--prompts", p.prompts):
            loaded = load_prompts(p.prompts, p.format, limit=p.limit, category=p.category,
                                  split=p.split)  # fmt: skip
        texts, names = [x.text for x in loaded], [x.id for x in loaded]
    if not texts:
        raise ValueError("--prompts: no prompts selected")
    facts = model_facts(request.model.model)
    ids = facts.encode(texts, chat_template=p.chat_template)
    if any(len(x) == 0 for x in ids):
        raise ValueError("--prompt/--prompts: every prompt must encode to at least one token")
    check_context(facts.config, [len(x) for x in ids], m.max_new_tokens, names=names)
    check_before_loading(m, facts)
    given = request.profile.profile
    profile = None if given is None else load_profile(given, d=facts.d)
    timing = request.timing
    if check is not None:
        timing = check(request, facts, profile) or timing
    if timing.threads:
        torch.set_num_threads(timing.threads)
    model = loading.load_causal_lm(request.model.model, dtype=request.model.dtype,
                                   device=request.model.device)  # fmt: skip
    head = None if m.head_dir is None else load_head(m.head_dir, model, device=model.device)
    d = model.config.get_text_config().num_hidden_layers
    bars = list(m.d_bar) if m.d_bar else [default_d_bar(d) if head is None else head.config.layer]
    eos = sorted(set(eos_token_ids(model)) | {facts.tokenizer.eos_token_id} - {None})
    s = request.sampling
    seeds = [prompt_seed(s.seed, name) for name in names] if s.do_sample else None
    settings = replace(request.run_settings(eos_token_id=eos), threads=timing.threads)
    return Loaded(model, ids, names, bars, eos, head, profile, settings, seeds)


def warn_degenerate(command: str, names, greedy, eos) -> None:
    """Print which prompts' greedy generations ended at once or fell into repetition."""
    text = summarize({n: g.tokens for n, g in zip(names, greedy, strict=True)}, eos).message()
    if text is not None:
        print(f"ppd {command}: warning: {text}", file=sys.stderr)


@dataclass(frozen=True)
class RunOutcome:
    """What ``ppd run`` found (``run_report``)."""

    request: RunRequest
    loaded: Loaded
    report: object
    """``measure.eval.report.table3``'s report."""

    @property
    def exact(self) -> bool:
        table = self.report.table
        return not len(table[table["exact"] == False])  # noqa: E712 (None = not run)


def run_report(request: RunRequest) -> RunOutcome:
    """``ppd run``: greedy, PPD at each k and HF early exit timed and checked against greedy
    (``measure.eval.report.table3``); writes report.csv and traces.jsonl to the output.
    ``request``: a ``ReportRequest`` holds ``ppd run``'s defaults (k 1 and 3)."""
    from measure.eval.report import table3
    from sim.formats import write_traces

    loaded = load(request)
    m = request.methods
    (backend,) = m.backend
    (early_head,) = m.early_head
    out = Path(request.output.out)
    checker = ProfileChecker(request, loaded.model, [backend])
    checked = loaded.profile is not None and backend in loaded.profile.backends
    if checked:
        checker.before(loaded.profile, out)
    report = table3(
        loaded.model, loaded.ids, d_bar=loaded.d_bars[0], ks=list(dict.fromkeys(m.k)),
        max_new_tokens=m.max_new_tokens, backend=backend, early_head=early_head,
        assistant=not m.no_assistant, settings=loaded.settings, head=loaded.head,
        sequences=loaded.names, seeds=loaded.seeds,
    )  # fmt: skip
    warn_degenerate("run", loaded.names, report.greedy, loaded.eos)
    if checked:
        checker.after(loaded.profile)
    out.mkdir(parents=True, exist_ok=True)
    report.table.to_csv(out / "report.csv", index=False)
    write_traces(out / "traces.jsonl", [r.trace for runs in report.ppd.values() for r in runs])
    return RunOutcome(request, loaded, report)


@dataclass(frozen=True)
class ValidationOutcome:
    """What ``ppd validate`` found (``validate_run``)."""

    request: RunRequest
    loaded: Loaded
    result: object
    """``measure.eval.validate.ProfileValidation``."""
    profile: object
    """The profile the runs were predicted from (given, or measured now)."""
    summary: dict
    """summary.json."""
    checks: list
    """The profile checks (``measure.eval.profile_check``)."""

    @property
    def probed(self) -> bool:
        return self.result.interleaved_profile is not None

    @property
    def exact(self) -> bool:
        r = self.result
        return all(x.exact or x.approximate for x in r.results + r.others)


def validate_run(request: RunRequest) -> ValidationOutcome:
    """``ppd validate``: every method timed in the same interleaved rounds, predicted from the
    profile (given, or measured first) and judged (``measure.eval.validate.validate``); writes
    the result files to the output."""
    from measure.eval.free_eval import free_table
    from measure.eval.plots import (
        block_times,
        plot_block_times,
        plot_predicted_vs_measured,
        plot_waterfalls,
    )
    from measure.eval.validate import check_configs, validate
    from measure.profile.report import plot_layer_times
    from sim.formats import write_free_table, write_traces

    m = request.methods
    early_exit, methods, free = early_exit_configs(m), spec_methods(m), free_configs(m)

    def check(request, facts, profile) -> RunSettings | None:  # before any weight is read
        d = facts.d
        for option, configs in (("--early-exit", early_exit), ("--free", free)):
            for c in configs:
                if not 1 <= c.exit_layer <= d - 1:
                    raise ValueError(f"{option}: {c.exit_layer} is not in [1, d - 1] = "
                                     f"[1, {d - 1}]")  # fmt: skip
        if profile is None:
            return None
        check_wide_prices(profile, accept=request.profile.accept_wide_prices)
        check_configs(profile, ppd_configs(m, d_bars(m, d)))
        for method in methods:
            method.check(d, profile)
        return profile_threads(request.timing, profile)

    loaded = load(request, check)
    out = Path(request.output.out)
    out.mkdir(parents=True, exist_ok=True)
    write_run_sidecar(out, request, loaded.d)
    profile = validation_profile(request, loaded, out)
    configs = ppd_configs(m, loaded.d_bars)
    checker = ProfileChecker(request, loaded.model, [c.backend for c in configs])
    profile = checker.before(profile, out, given=loaded.profile is not None)
    rounds = probes_for(request.profile.interleave_probes, profile, request.profile.rounds)
    result = validate(
        loaded.model, loaded.ids, profile=profile, configs=configs, early_exit=early_exit,
        free=free, methods=methods, max_new_tokens=m.max_new_tokens, settings=loaded.settings,
        head=loaded.head, names=loaded.names, seeds=loaded.seeds, interleave_probes=rounds,
    )  # fmt: skip
    warn_degenerate("validate", loaded.names, result.timing.greedy.runs, loaded.eos)
    checker.after(profile)
    table = checked_columns(result.table, checker.checks)
    table.to_csv(out / "validation.csv", index=False)
    result.waterfalls.to_csv(out / "waterfalls.csv", index=False)
    result.terms.to_csv(out / "terms.csv", index=False)
    result.passes.to_csv(out / "passes.csv", index=False)
    result.turn_table().to_csv(out / "turns.csv", index=False)
    summary = {**result.summary(), **checker.summary(), **checked_summary(table)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    if result.interleaved_profile is not None:
        write_profile(out / "profile_interleaved.json", result.interleaved_profile)
        result.sentinel_table().to_csv(out / "sentinel.csv", index=False)
    if result.free:  # what ppd plan --free-table reads
        write_free_table(out / "free_table.csv", free_table(result.free))
    write_traces(
        out / "traces.jsonl", [r.trace for x in result.timing.ppd.values() for r in x.runs]
    )
    plot_waterfalls(result, out / "waterfall.png")
    plot_predicted_vs_measured(result, out / "predicted_vs_measured.png")
    if block_times(result).empty:  # no block timed in the runs: the profile's layers alone
        plot_layer_times(profile, out / "layer_times.png")
    else:
        plot_block_times(result, out / "layer_times.png")
    return ValidationOutcome(request, loaded, result, profile, summary, checker.checks)


def probes_for(asked: bool | None, profile, rounds: int) -> int:
    """The probe rounds once the profile is known: a profile that records no context length
    (older than the probes) cannot be probed at the runs' context, so the default (``asked``
    None) falls back to its prediction alone, with a note; an explicit --interleave-probes
    refuses it."""
    if not rounds or probe_context(profile) is not None:
        return rounds
    if asked:
        raise ValueError("--interleave-probes: the profile records no context length to probe "
                         "at (measure a new one with ppd measure profile)")  # fmt: skip
    print("ppd validate: the profile records no context length to probe at, so no interleaved "
          "probes: its prediction alone (measure a new one with ppd measure profile)",
          file=sys.stderr)  # fmt: skip
    return 0


def profile_threads(timing: RunSettings, profile) -> RunSettings:
    """Greedy and the ``single`` backend run at the thread count the profile timed them at:
    ``--threads`` defaults to it (a run at another count meets other prices: a loaded 2-core
    machine read +7 to +28 % from that alone); a different ``--threads`` is run but warned of."""
    threads = profile.data.get("backends", {}).get("single", {}).get("threads")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        return timing
    if timing.threads is None:
        print(f"ppd validate: {threads} torch thread(s), as the profile timed its single "
              "backend (--threads to change)", file=sys.stderr)  # fmt: skip
        return replace(timing, threads=threads)
    if timing.threads != threads:
        print(f"warning: --threads {timing.threads}, but the profile timed its single backend "
              f"at {threads} thread(s): greedy and single-backend PPD are predicted at {threads}",
              file=sys.stderr)  # fmt: skip
    return timing


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


def write_run_sidecar(out: Path, request: RunRequest, d: int) -> Path:
    """``OUT/run.json``: the model and prompts a validation ran on, as ``ppd measure
    match-rate``'s names them (``ppd plan --table OUT`` checks the model against its profile)."""
    path = out / "run.json"
    meta = {"command": "validate", "model": str(request.model.model), "d": d,
            "prompts": request.prompts.prompts,
            "max_new_tokens": request.methods.max_new_tokens,
            "repeats": request.timing.repeats, "turns": request.timing.turns}  # fmt: skip
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return path


def validation_profile(request: RunRequest, loaded: Loaded, out: Path):
    """The --profile (read and checked before the model loaded), or a profile measured now
    and saved."""
    ids, m = loaded.ids, request.methods
    context = round(sum(map(len, ids)) / len(ids) + m.max_new_tokens / 2)
    if loaded.profile is not None:
        profile = loaded.profile
        when = profile.provenance.get("date_utc", "an unknown date")
        print(f"profile {request.profile.profile}: {profile.model_name}, measured {when}")
        for warning in profile.warnings:
            print(f"profile warning: {warning}")
        warning = context_warning(profile, context)
        if warning:
            print(f"profile warning: {warning}")
        for note in check_wide_prices(profile, accept=request.profile.accept_wide_prices):
            print(note)
        return profile
    print(
        "no --profile given: measuring one first (context "
        f"{context} tokens, backends {sorted(set(m.backend))}, k {sorted(set(m.k))})"
    )
    return measure_now(request, loaded.model, context, out,
                       drift_floor=request.drift.drift_floor / 100)  # fmt: skip


def measure_now(request: RunRequest, model, context: int, out: Path, *, drift_floor: float):
    """A profile of ``model`` measured now at ``context`` cached positions (the methods'
    backends and k, ``--profile-repeats``), saved as ``out/profile.json`` and printed."""
    m = request.methods
    profile = measure_profile(
        model, model_dir=request.model.model, backends=list(m.backend), ks=sorted(set(m.k)),
        threads=torch.get_num_threads(), context_tokens=context,
        repeats=request.profile.profile_repeats, progress=request.output.progress,
        drift_floor=drift_floor,
    )  # fmt: skip
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

    def __init__(self, request: RunRequest, model, backends):
        self.request, self.model = request, model
        self.settings = request.profile
        self.backends = list(dict.fromkeys(backends))
        self.checks = []
        """The checks of the profile in use."""
        self.stale = []
        """The checks that found a given profile stale, where a new one replaced it."""
        self.skipped = None
        self._probe = None

    def _check(self, profile, when: str) -> list:
        if not self.settings.check_seconds or self.skipped:
            return []
        context = profile.data.get("model", {}).get("context_tokens")
        if not isinstance(context, int):
            self.skipped = "the profile records no context length to re-time it at"
            print(f"profile check: skipped ({self.skipped})")
            return []
        if self._probe is None or self._probe.position != context - 1:
            self._probe = DecodeProbe(self.model, context_tokens=context)
        checks = check_profile(self.model, profile, self.backends, when=when,
                               seconds=self.settings.check_seconds, probe=self._probe)  # fmt: skip
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
        if not given or self.settings.if_stale == "warn":
            print(f"profile warning: {note}")
            return profile
        if self.settings.if_stale == "refuse":
            raise ValueError(f"--if-stale refuse: {note}")
        print(f"profile check: {note}; --if-stale remeasure: measuring a new profile")
        machine = profile.data.get("machine") or {}
        floor = machine.get("floor_log_sd", 0.0)  # the given profile's floor, kept
        context = profile.data["model"]["context_tokens"]
        self.stale, self.checks = self.checks, []  # the checks of the profile in use follow
        fresh = measure_now(self.request, self.model, context, out,
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


__all__ = ["ProfileChecker", "RunOutcome", "ValidationOutcome", "run_report", "validate_run"]
