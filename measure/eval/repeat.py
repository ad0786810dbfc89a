"""Repeated, interleaved timing of greedy decoding and PPD configurations on the same prompts.

One *round* decodes every prompt once with every method (greedy and each PPD configuration),
in an order that rotates from round to round, so a slow spell of a shared machine falls on
all methods alike. A method's figure is the median over rounds of its total decode seconds
(prefill excluded), with the quartiles (``measure.profile.stats.Spread``); the load average
is read before and after. Every PPD run is checked token for token against greedy. The
``dist`` configurations share one ``RankGroup`` (spawned and loaded once per call, of the
largest size any of them uses); each run decodes two tokens untimed first, on either backend.

Sampled decoding (``settings.decoding``, paper Appendix B): the baseline samples too (plain
decoding with the same sampler, ``greedy_generate(decoding=...)``), every method seeds prompt i
with ``seeds[i]`` (the same draws in every round), and "greedy" in the fields below stands for
that baseline: PPD is checked token for token against it.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict, dataclass, field

import torch

from measure.checks import as_prompt_ids, check_context
from measure.decode.backends import ppd_many
from measure.decode.dist import task_ranks
from measure.decode.greedy import greedy_generate
from measure.decode.rank_group import RankGroup
from measure.decode.sampling import GREEDY, Decoding
from measure.decode.settings import DEFAULT_SETTINGS, RunSettings
from measure.eval.hf_early_exit import EarlyExitConfig, run_early_exit
from measure.profile.progress import Progress
from measure.profile.stats import LoadMonitor, LoadReading, Spread
from ppdmodel.costs import check_early_head


def run_greedy(
    model,
    prompts,
    *,
    max_new_tokens,
    eos_token_id=None,
    decoding: Decoding = GREEDY,
    seeds=None,
    warmup: bool = True,
) -> list:
    """Greedy (or ``decoding``, prompt i seeded with ``seeds[i]``) decoding of every prompt
    (with ``warmup``, one greedy warm-up decode first, which draws nothing)."""
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    check_context(model.config, lengths, max_new_tokens)  # before any decoding
    if warmup:
        greedy_generate(model, prompts[0], max_new_tokens=2)  # not timed
    seeds = [None] * len(prompts) if seeds is None else seeds
    return [
        greedy_generate(
            model,
            p,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            decoding=decoding,
            seed=seed,
        )
        for p, seed in zip(prompts, seeds, strict=True)
    ]


@dataclass(frozen=True)
class PPDConfig:
    """One PPD configuration to time (and predict)."""

    d_bar: int
    k: int
    early_head: str = "main"
    backend: str = "single"

    def __post_init__(self) -> None:
        check_early_head(self.early_head)
        if self.backend not in ("single", "dist"):
            raise ValueError(f"backend must be 'single' or 'dist', got {self.backend!r}")

    @property
    def label(self) -> str:
        """'ppd d_bar=15 k=3 main single'."""
        return f"ppd d_bar={self.d_bar} k={self.k} {self.early_head} {self.backend}"


@dataclass
class TimedMethod:
    """One method's runs over every round: ``results[r][i]`` is prompt i in round r."""

    label: str
    config: PPDConfig | EarlyExitConfig | None = None
    """None for greedy."""
    results: list[list] = field(default_factory=list)

    @property
    def totals_s(self) -> list[float]:
        """Decode seconds of all prompts, per round."""
        return [sum(r.wall_s for r in runs) for runs in self.results]

    @property
    def spread(self) -> Spread:
        """Median and quartiles of ``totals_s``."""
        return Spread.of(self.totals_s)

    @property
    def runs(self) -> list:
        """The first round's results (tokens and match outcomes are the same every round)."""
        return self.results[0]

    @property
    def tokens(self) -> int:
        """Generated tokens per round."""
        return sum(len(r.tokens) for r in self.runs)


@dataclass
class RepeatedTiming:
    """Greedy and every PPD configuration, timed over the same rounds."""

    greedy: TimedMethod
    ppd: dict[PPDConfig, TimedMethod]
    load: LoadReading
    exact: dict[PPDConfig | EarlyExitConfig, bool]
    """True when every round of the configuration reproduced greedy's tokens."""
    early_exit: dict[EarlyExitConfig, TimedMethod] = field(default_factory=dict)
    """HF self-speculative early exit, timed in the same rounds (``measure.eval.early_exit``)."""
    others: dict = field(default_factory=dict)
    """Further methods timed in the same rounds (``others`` of ``time_repeated``: FREE)."""


def _ppd_runner(model, prompts, config: PPDConfig, run: dict):
    """A call decoding the prompts at ``indices`` (default: all) with ``config``, warming up
    first with ``warmup`` (``run``: the shared inputs; ``dist`` runs on ``run["ranks"]``, at
    most k + 1 of them)."""
    common = run["common"]

    def call(indices=None, warmup=True):
        indices = range(len(prompts)) if indices is None else indices
        seeds = common["seeds"]
        return ppd_many(
            model, [prompts[i] for i in indices], **asdict(config),
            sequences=[f"{run['names'][i]}-k{config.k}" for i in indices],
            settings=run["settings"], ranks=run["ranks"], warmup=warmup,
            **{**common, "seeds": None if seeds is None else [seeds[i] for i in indices]},
        )  # fmt: skip

    return call


def _greedy_runner(model, prompts, common: dict):
    """A call decoding the prompts at ``indices`` (default: all) greedily (or with the
    sampler), warming up first with ``warmup``."""

    def call(indices=None, warmup=True):
        indices = range(len(prompts)) if indices is None else indices
        seeds = common["seeds"]
        return run_greedy(
            model, [prompts[i] for i in indices], max_new_tokens=common["max_new_tokens"],
            eos_token_id=common["eos_token_id"], decoding=common["decoding"],
            seeds=None if seeds is None else [seeds[i] for i in indices], warmup=warmup,
        )  # fmt: skip

    return call


def _by_prompt(call, config, before_prompt, count: int) -> list:
    """``call`` on each prompt alone, ``before_prompt(config, i)`` before prompt i (only the
    first warms up)."""
    out = []
    for i in range(count):
        before_prompt(config, i)
        out += call([i], warmup=i == 0)
    return out


def _rank_group(model, configs, settings: RunSettings) -> RankGroup | None:
    """One group for every ``dist`` configuration, of the most ranks any uses; None if none."""
    sizes = [task_ranks(c.k, settings.world_size) for c in configs if c.backend == "dist"]
    if not sizes:
        return None
    return RankGroup(
        settings.model_dir or model, world_size=max(sizes), timeout_s=settings.timeout_s
    )


def time_repeated(
    model,
    prompts,
    configs,
    *,
    early_exit=(),
    others=(),
    max_new_tokens: int,
    settings: RunSettings = DEFAULT_SETTINGS,
    head=None,
    names=None,
    seeds=None,
    between_rounds=None,
    before_run=None,
    before_prompt=None,
) -> RepeatedTiming:
    """Time greedy and each PPD configuration ``settings.repeats`` times, interleaved (module
    doc).

    ``head``: a trained early head (``measure.train.heads.TrainedHead``) or None (the LM
    head); ``settings``: stop tokens, decoding, rounds, ``dist`` settings, threads (for the
    load reading) and progress; ``early_exit``: ``EarlyExitConfig``s timed in the same rounds
    (HF ``assistant_early_exit``, constant draft length; their ``wall_s`` starts after the
    first step, see ``measure.eval.early_exit``); ``settings.decoding`` and ``seeds`` (one per
    prompt): sampled decoding (module docstring); ``others``: (config, runner) pairs, each
    config with a ``label`` and each runner a no-argument callable returning one result per
    prompt (with ``tokens`` and ``wall_s``), timed in the same rounds (FREE,
    ``measure.eval.free_eval``);
    ``between_rounds``: called before every round, untimed, with the ``dist`` configurations'
    ``RankGroup`` (or None) (the interleaved cost probes of ``measure.eval.interleaved``);
    ``before_run``: called before every judged run, untimed, with the method's config (None
    for greedy) (their per-run probes); ``before_prompt``: called, untimed, before every
    prompt of greedy's and the PPD configurations' runs with (config, prompt index), which
    then decode one prompt per call, only the first warming up (the sentinel windows paired
    with each prompt, ``measure.eval.paired``).
    """
    repeats, decoding = settings.repeats, settings.decoding
    if not prompts:
        raise ValueError("prompts must not be empty")
    configs = list(dict.fromkeys(configs))
    early_exit = list(dict.fromkeys(early_exit))
    if early_exit and decoding.do_sample:
        raise ValueError("early_exit: HF early exit is timed with greedy decoding only")
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"seeds must hold one seed per prompt ({len(prompts)}), got {len(seeds)}")
    if names is not None and len(names) != len(prompts):
        raise ValueError(f"names must hold one name per prompt ({len(prompts)}), got {len(names)}")
    if before_prompt is not None:  # decoded one by one: every prompt checked before any decoding
        lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
        check_context(model.config, lengths, max_new_tokens)
    common = dict(max_new_tokens=max_new_tokens, eos_token_id=settings.eos_token_id)
    greedy = TimedMethod("greedy")
    others = list(others)
    methods = [greedy] + [TimedMethod(c.label, c) for c in configs + early_exit]
    methods += [TimedMethod(c.label, c) for c, _ in others]
    with _rank_group(model, configs, settings) or nullcontext() as ranks:
        run = dict(
            names=names or [str(i) for i in range(len(prompts))],
            settings=settings,
            common=dict(max_new_tokens=max_new_tokens, head=head, seeds=seeds),
            ranks=ranks,
        )
        split = {"greedy": _greedy_runner(model, prompts, dict(common, decoding=decoding,
                                                                  seeds=seeds)),
                 **{c.label: _ppd_runner(model, prompts, c, run) for c in configs}}  # fmt: skip
        if before_prompt is not None:  # one prompt per call, the hook before each
            keys = {"greedy": None, **{c.label: c for c in configs}}
            split = {label: _bind(_by_prompt, call, keys[label], before_prompt, len(prompts))
                     for label, call in split.items()}  # fmt: skip
        runners = {
            **split,
            **{c.label: _bind(run_early_exit, model, prompts, c, **common) for c in early_exit},
            **{c.label: runner for c, runner in others},
        }
        progress = Progress(repeats * len(methods), enabled=settings.progress)
        monitor = LoadMonitor(own_threads=settings.threads or torch.get_num_threads())
        try:
            for r in range(repeats):
                if between_rounds is not None:
                    between_rounds(ranks)
                start = r % len(methods)
                for method in methods[start:] + methods[:start]:
                    label = f"round {r + 1}/{repeats}: {method.label}"
                    if before_run is not None:
                        before_run(method.config)
                    progress.begin(label)
                    method.results.append(runners[method.label]())
                    progress.finish(label)
        finally:
            progress.close()
    reference = [[g.tokens for g in runs] for runs in greedy.results]
    exact = {
        m.config: all([x.tokens for x in runs] == reference[0] for runs in m.results)
        for m in methods[1:]
    }
    ppd = {m.config: m for m in methods[1:] if isinstance(m.config, PPDConfig)}
    hf = {m.config: m for m in methods[1:] if isinstance(m.config, EarlyExitConfig)}
    extra = {m.config: m for m in methods[1 + len(configs) + len(early_exit) :]}
    return RepeatedTiming(greedy, ppd, monitor.reading(), exact, hf, extra)


def _bind(fn, *args, **kwargs):
    """``fn`` with its arguments, called later without any."""
    return lambda: fn(*args, **kwargs)
