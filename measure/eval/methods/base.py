"""The one interface of a decoding method ``ppd validate`` times, predicts and judges.

A *method* (``Method``) holds one frozen config (``PPDConfig``, ``EarlyExitConfig``,
``FreeConfig``, ``SpecConfig``; greedy has none) and says how it runs: on how many ranks, whether
it decodes one prompt per call (so the rounds can take turns prompt by prompt) and which
backend's costs price it; where the models price it: its simulator schedule (``schedule``) and
its rows in ``ppd plan``'s table (``plan_method``, ``plan_keys``; ``plan_rows``). ``bind`` does
the untimed work before the rounds (a FREE threshold calibrated, HF's bookkeeping measured, a
draft model loaded and profiled) and returns the method bound to the model and prompts
(``Bound``): ``decode`` runs it, ``closed_form`` predicts its runs from the cost profile and the
runs' own traces (nothing fitted on them), ``judge`` sets that prediction beside the measured
runs and returns the one result type, ``measure.eval.judged.JudgedResult``.
``measure.eval.repeat.time_repeated`` and ``measure.eval.validate.validate`` time, bind and
judge every method through it (their tables read a kind apart by its config's type);
``measure.eval.methods`` registers them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, get_type_hints, runtime_checkable

import pandas as pd

from measure.decode.settings import RunSettings
from measure.eval.judged import JudgedResult
from measure.eval.predict import Prediction
from measure.profile.stats import Spread
from ppdmodel.cost_profile import CostProfile


@dataclass
class TimedMethod:
    """One method's runs over every round: ``results[r][i]`` is prompt i in round r."""

    label: str
    config: object = None
    """The method's frozen config; None for greedy."""
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


@dataclass(frozen=True)
class RunInputs:
    """What every method's runs share: the token budget, the run settings (stop tokens,
    decoding, ``dist``), the early head, prompt names and seeds, and the ranks."""

    max_new_tokens: int
    settings: RunSettings
    names: tuple[str, ...]
    head: object = None
    """A trained early head, or None (the LM head)."""
    seeds: tuple | None = None
    """One seed per prompt (sampled decoding), or None."""
    ranks: object = None
    """The ``RankGroup`` the ``dist`` methods share, or None."""
    shared: dict = field(default_factory=dict, compare=False, hash=False)
    """Untimed preparations methods of one kind share, measured once per call (``once``)."""

    def once(self, key, make):
        """``make()`` the first time ``key`` is asked for, the same value afterwards."""
        if key not in self.shared:
            self.shared[key] = make()
        return self.shared[key]


@dataclass(frozen=True)
class JudgeInputs:
    """What judging one method needs beside its own runs."""

    profile: CostProfile
    """The profile measured beforehand."""
    greedy: TimedMethod
    """Greedy's runs in the same rounds."""
    greedy_predicted: dict
    """Greedy's ``measure.eval.predict.Prediction`` per backend it is priced on."""
    exact: dict
    """config -> True when every round reproduced greedy's tokens."""
    max_new_tokens: int
    probed: CostProfile | None = None
    """The profile from the probes interleaved with the rounds, or None."""
    probed_greedy: dict = field(default_factory=dict)
    """Greedy's prediction per backend from ``probed``."""


@runtime_checkable
class Bound(Protocol):
    """A method bound to a model and prompts (``Method.bind``)."""

    def decode(self, indices=None, warmup: bool = True) -> list:
        """One run: a result per prompt at ``indices`` (None: all), each with ``tokens`` and
        ``wall_s``; ``warmup``: an untimed short decode first."""

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """Its ``runs`` (one result per prompt) predicted from ``profile`` and their own traces
        (match outcomes, exits, steps): the closed form, the simulator's replay where it has a
        ``schedule``, the i.i.d. form where it has one; nothing fitted on the runs."""

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> JudgedResult | None:
        """The runs predicted and judged (None for greedy, the baseline of the others)."""


@runtime_checkable
class Method(Protocol):
    """A decoding method ``ppd validate`` times beside greedy (module docstring)."""

    config: object
    """Its frozen config (hashable; what results are keyed by); None for greedy."""
    by_prompt: bool
    """True: ``decode`` takes one prompt per call (the rounds turn by prompt)."""
    schedule: Callable | None
    """The simulator entry that replays its runs (``sim.simulate`` for PPD and greedy,
    ``sim.simulate_free`` for FREE); None: none (its steps are sampled by the planner)."""
    plan_method: str
    """The ``method`` of its rows in ``ppd plan``'s table (``sim.plan_grid.METHODS``)."""

    @property
    def plan_keys(self) -> dict:
        """The columns of ``ppd plan``'s table that pick its configuration's rows."""

    @property
    def label(self) -> str:
        """A unique readable name ('ppd d_bar=15 k=3 main single')."""

    @property
    def backend(self) -> str:
        """The profile backend whose costs price it ('single' in the calling process)."""

    def ranks(self, settings: RunSettings) -> int:
        """Ranks of the shared ``RankGroup`` it needs (0: it runs in the calling process)."""

    def check(self, d: int, profile: CostProfile | None) -> None:
        """ValueError naming the setting the model of depth ``d`` or the profile refuses."""

    def bind(self, model, prompts, run: RunInputs) -> Bound:
        """The untimed preparation; the method bound to ``model`` and ``prompts``."""


def plan_rows(method: Method, table: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ppd plan``'s table (``sim.plan_grid.screen``) that price ``method``'s
    configuration: its ``plan_method``, and its ``plan_keys`` where the table has them."""
    keep = table["method"] == method.plan_method
    for column, value in method.plan_keys.items():
        if column in table:
            keep &= table[column] == value
    return table[keep]


class InProcess:
    """What a method run whole in the calling process shares (HF early exit, FREE,
    speculative decoding): a config of the type its ``config`` field is annotated with,
    checked on construction, its label, no ranks, the ``single`` backend's costs, its
    config's own check of the model's depth, no simulator schedule unless it names one, and
    its planner rows picked by the config's fields named in ``plan_fields``."""

    config: object
    argument: str
    """The argument of ``validate`` its configs come in (named when one is refused)."""
    plan_fields: tuple[tuple[str, str], ...]
    """(column of ``ppd plan``'s table, the config's field it must equal) pairs."""
    by_prompt = False
    backend = "single"
    schedule = None

    def __post_init__(self) -> None:
        kind = get_type_hints(type(self))["config"]
        if not isinstance(self.config, kind):
            raise ValueError(f"{self.argument} must hold {kind.__name__} values, got "
                             f"{self.config!r}")  # fmt: skip

    @property
    def plan_keys(self) -> dict:
        return {column: getattr(self.config, name) for column, name in self.plan_fields}

    @property
    def label(self) -> str:
        return self.config.label

    def ranks(self, settings: RunSettings) -> int:
        return 0

    def check(self, d: int, profile: CostProfile | None) -> None:
        self.config.check(d)


def picked(values, indices):
    """``values`` at ``indices`` (None stays None: no per-prompt values)."""
    return None if values is None else [values[i] for i in indices]
