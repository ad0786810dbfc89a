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
from dataclasses import dataclass, field
from functools import partial

import torch

from measure.checks import as_prompt_ids, check_context
from measure.decode.rank_group import RankGroup
from measure.decode.settings import DEFAULT_SETTINGS, RunSettings
from measure.eval.hf_early_exit import EarlyExitConfig
from measure.eval.methods.base import RunInputs, TimedMethod
from measure.eval.methods.greedy import Greedy
from measure.eval.methods.greedy import run_greedy as run_greedy  # re-exported
from measure.eval.methods.hf_early_exit import HFEarlyExit
from measure.eval.methods.ppd import PPD
from measure.eval.ppd_config import PPDConfig
from measure.profile.progress import Progress
from measure.profile.stats import LoadMonitor, LoadReading

__all__ = ["PPDConfig", "RepeatedTiming", "TimedMethod", "run_greedy", "time_repeated"]


@dataclass
class RepeatedTiming:
    """Greedy and every other method, timed over the same rounds; each kind of method is read
    by its config's type (``ppd``, ``early_exit``, ``others``), never by a list of its own."""

    greedy: TimedMethod
    methods: dict
    """Every method but greedy, by config, in the order given."""
    load: LoadReading
    exact: dict
    """True when every round of the configuration reproduced greedy's tokens."""
    bound: dict = field(default_factory=dict)
    """Each method bound to the model and prompts (``Method.bind``), by label, greedy's
    included: what judges its runs."""

    @property
    def ppd(self) -> dict[PPDConfig, TimedMethod]:
        """PPD's configurations."""
        return {c: m for c, m in self.methods.items() if isinstance(c, PPDConfig)}

    @property
    def early_exit(self) -> dict:
        """HF self-speculative early exit (``measure.eval.early_exit``)."""
        return {c: m for c, m in self.methods.items() if isinstance(c, EarlyExitConfig)}

    @property
    def others(self) -> dict:
        """Further methods timed in the same rounds (FREE, speculative decoding, ...)."""
        kinds = (PPDConfig, EarlyExitConfig)
        return {c: m for c, m in self.methods.items() if not isinstance(c, kinds)}


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


def _rank_group(model, methods, settings: RunSettings) -> RankGroup | None:
    """One group for every method that runs on ranks, of the most ranks any uses; None if
    none does."""
    size = max((m.ranks(settings) for m in methods), default=0)
    if not size:
        return None
    return RankGroup(settings.model_dir or model, world_size=size, timeout_s=settings.timeout_s)


class _Prebound:
    """A (config, runner) pair of ``time_repeated``'s ``others``, as a bound whole-run method
    (the runner: a no-argument call returning one result per prompt)."""

    by_prompt = False
    backend = "single"

    def __init__(self, config, runner):
        self.config, self.runner = config, runner
        self.label = config.label

    def ranks(self, settings: RunSettings) -> int:
        return 0

    def bind(self, model, prompts, run):
        return self

    def decode(self, indices=None, warmup: bool = True) -> list:
        return self.runner()

    def judge(self, timed, inputs):
        return None


def time_repeated(
    model,
    prompts,
    configs=(),
    *,
    methods=(),
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
    """Time greedy and each method ``settings.repeats`` times, interleaved (module doc).

    ``methods``: ``measure.eval.methods.base.Method``s, each bound (``bind``, untimed) before
    the rounds; ``configs`` (``PPDConfig``s), ``early_exit`` (``EarlyExitConfig``s: HF
    ``assistant_early_exit``, constant draft length; their ``wall_s`` starts after the first
    step, see ``measure.eval.early_exit``) and ``others`` ((config, runner) pairs, each config
    with a ``label`` and each runner a no-argument callable returning one result per prompt)
    are methods too, timed first, in that order. ``head``: a trained early head
    (``measure.train.heads.TrainedHead``) or None (the LM head); ``settings``: stop tokens,
    decoding, rounds, ``dist`` settings, threads (for the load reading) and progress;
    ``settings.decoding`` and ``seeds`` (one per prompt): sampled decoding (module docstring);
    ``between_rounds``: called before every round, untimed, with the methods' shared
    ``RankGroup`` (or None) (the interleaved cost probes of ``measure.eval.interleaved``);
    ``before_run``: called once per round and method, untimed, with the method's config (None
    for greedy), before its run or, turning by prompt, before its piece at the turn of its
    place in the rotation (their per-run probes); ``before_prompt``: called, untimed, before
    every prompt of the methods decoded prompt by prompt with (config, prompt index) (the
    sentinel windows paired with each prompt, ``measure.eval.paired``). Those methods decode
    one prompt per call when turning by prompt or with ``before_prompt``, only prompt 0 warming
    up in each round.
    """
    repeats = settings.repeats
    if not prompts:
        raise ValueError("prompts must not be empty")
    methods = [
        Greedy(),
        *map(PPD, dict.fromkeys(configs)),
        *map(HFEarlyExit, dict.fromkeys(early_exit)),
        *(_Prebound(c, r) for c, r in others),
        *methods,
    ]
    methods = list({m.label: m for m in methods}.values())  # each method once
    if seeds is not None and len(seeds) != len(prompts):
        raise ValueError(f"seeds must hold one seed per prompt ({len(prompts)}), got {len(seeds)}")
    if names is not None and len(names) != len(prompts):
        raise ValueError(f"names must hold one name per prompt ({len(prompts)}), got {len(names)}")
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    check_context(model.config, lengths, max_new_tokens)  # every prompt, before any decoding
    timed = [TimedMethod(m.label, m.config) for m in methods]
    with _rank_group(model, methods, settings) or nullcontext() as ranks:
        run = RunInputs(
            max_new_tokens=max_new_tokens, settings=settings,
            names=tuple(names or [str(i) for i in range(len(prompts))]), head=head,
            seeds=None if seeds is None else tuple(seeds), ranks=ranks,
        )  # fmt: skip
        bound = {m.label: m.bind(model, prompts, run) for m in methods}  # untimed preparations
        split = {m.label: bound[m.label].decode for m in methods if m.by_prompt}
        whole = {m.label: bound[m.label].decode for m in methods if not m.by_prompt}
        if settings.turns == "runs":  # every method whole; the split ones by prompt with the hook
            keys = {m.label: m.config for m in methods}
            whole.update({
                label: partial(_by_prompt, call, keys[label], before_prompt, len(prompts))
                if before_prompt is not None else call for label, call in split.items()
            })  # fmt: skip
            split = {}
        plan = [_round_plan(timed, split or None, len(prompts), r) for r in range(repeats)]
        steps = {m.label: len(prompts) if m.label not in split else 1 for m in timed}
        progress = Progress(repeats * len(prompts) * len(timed), enabled=settings.progress)
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
    greedy, rest = timed[0], timed[1:]
    reference = [[g.tokens for g in runs] for runs in greedy.results]
    exact = {
        m.config: all([x.tokens for x in runs] == reference[0] for runs in m.results) for m in rest
    }
    return RepeatedTiming(greedy, {m.config: m for m in rest}, monitor.reading(), exact, bound)
