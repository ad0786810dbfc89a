"""Repeated, interleaved timing of greedy decoding and PPD configurations on the same prompts.

One *round* decodes every prompt once with every method (greedy and each PPD configuration), in
an order that rotates from round to round, so a slow spell of a shared machine falls on all
methods alike. Within a round the methods take turns prompt by prompt (``RunSettings.turns ==
"prompts"``, the default): prompt 1 with every method, then prompt 2, and so on, so each
method's round is spread over the whole round and meets the machine at as many moments as there
are prompts. On the 2-vCPU VM of this project a decode step's speed switches in spells of
seconds to minutes; with each method's prompts back to back (``"runs"``), a method's three
rounds met three moments, and in validations the configurations' errors followed the speed of
the sentinel windows beside their runs (correlation -0.45 to -0.88 over 10 configurations in 4
of 5 SmolLM2 validations). Methods that cannot be split (HF early exit, FREE) run whole, each
at the prompt turn of its place in the rotation. A method's figure is the median over rounds of
its total decode seconds (prefill excluded), with the quartiles
(``measure.profile.stats.Spread``); the load average is read before and after. Every PPD run is
checked token for token against greedy. The ``dist`` configurations share one ``RankGroup``
(spawned and loaded once per call, of the largest size any of them uses); each method decodes
two tokens untimed before its first prompt of every round (turning by prompt, only there: the
later pieces follow other methods, as a run's first prompt always did), on either backend.

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


def _picked(values, indices):
    """``values`` at ``indices`` (None stays None: no per-prompt values)."""
    return None if values is None else [values[i] for i in indices]


def _ppd_runner(model, prompts, config: PPDConfig, run: dict):
    """A call decoding the prompts at ``indices`` (default: all) with ``config``, warming up
    first with ``warmup`` (``run``: the shared inputs; ``dist`` runs on ``run["ranks"]``, at
    most k + 1 of them)."""
    common = run["common"]

    def call(indices=None, warmup=True):
        indices = range(len(prompts)) if indices is None else indices
        return ppd_many(
            model, _picked(prompts, indices), **asdict(config),
            sequences=[f"{run['names'][i]}-k{config.k}" for i in indices],
            settings=run["settings"], ranks=run["ranks"], warmup=warmup,
            **{**common, "seeds": _picked(common["seeds"], indices)},
        )  # fmt: skip

    return call


def _greedy_runner(model, prompts, common: dict):
    """A call decoding the prompts at ``indices`` (default: all) greedily (or with the
    sampler), warming up first with ``warmup``."""

    def call(indices=None, warmup=True):
        indices = range(len(prompts)) if indices is None else indices
        return run_greedy(
            model, _picked(prompts, indices), max_new_tokens=common["max_new_tokens"],
            eos_token_id=common["eos_token_id"], decoding=common["decoding"],
            seeds=_picked(common["seeds"], indices), warmup=warmup,
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


def _round_plan(methods, split, count: int, r: int) -> list[tuple]:
    """Round ``r``'s turns, in order: (method, prompt index or None for a whole run, whether
    the method's ``before_run`` comes first). The methods' order rotates by ``r``. With
    ``split`` (labels of methods decoded one prompt per call, or None: every method whole,
    back to back), prompt i's turn runs prompt i of every split method and the whole runs whose
    place in the rotation falls in turn i (place p of M: turn p * count // M); each method's
    ``before_run`` sits at that turn too, so the probes before the runs and the whole runs spread
    over the round as the pieces do."""
    start = r % len(methods)
    order = methods[start:] + methods[:start]
    if split is None:
        return [(m, None, True) for m in order]
    plan = []
    for i in range(count):
        for place, m in enumerate(order):
            mine = place * count // len(order) == i
            if m.label in split:
                plan.append((m, i, mine))
            elif mine:
                plan.append((m, None, True))
    return plan


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
    ``before_run``: called once per round and method, untimed, with the method's config (None
    for greedy), before its run or, turning by prompt, before its piece at the turn of its
    place in the rotation (their per-run probes); ``before_prompt``: called, untimed, before
    every prompt of greedy's and the PPD configurations' runs with (config, prompt index)
    (the sentinel windows paired with each prompt, ``measure.eval.paired``). Greedy and PPD
    decode one prompt per call when turning by prompt or with ``before_prompt``, only prompt 0
    warming up in each round.
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
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    check_context(model.config, lengths, max_new_tokens)  # every prompt, before any decoding
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
        whole = {
            **{c.label: _bind(run_early_exit, model, prompts, c, **common) for c in early_exit},
            **{c.label: runner for c, runner in others},
        }
        if settings.turns == "runs":  # every method whole; greedy and PPD split with the hook
            keys = {"greedy": None, **{c.label: c for c in configs}}
            whole.update({
                label: _bind(_by_prompt, call, keys[label], before_prompt, len(prompts))
                if before_prompt is not None else _bind(call) for label, call in split.items()
            })  # fmt: skip
            split = {}
        plan = [_round_plan(methods, split or None, len(prompts), r) for r in range(repeats)]
        steps = {m.label: len(prompts) if m.label not in split else 1 for m in methods}
        progress = Progress(repeats * len(prompts) * len(methods), enabled=settings.progress)
        monitor = LoadMonitor(own_threads=settings.threads or torch.get_num_threads())
        try:
            for r, turns in enumerate(plan):
                if between_rounds is not None:
                    between_rounds(ranks)
                pieces = {label: [] for label in split}
                for method, i, first in turns:
                    if first and before_run is not None:
                        before_run(method.config)
                    label = f"round {r + 1}/{repeats}: {method.label}"
                    if i is not None:
                        label += f", prompt {i + 1}/{len(prompts)}"
                        if before_prompt is not None:
                            before_prompt(method.config, i)
                    progress.begin(label)
                    if i is None:
                        method.results.append(whole[method.label]())
                    else:
                        pieces[method.label] += split[method.label]([i], warmup=i == 0)
                        if i == len(prompts) - 1:
                            method.results.append(pieces[method.label])
                    progress.finish(label, steps=steps[method.label])
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
