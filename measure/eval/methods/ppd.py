"""PPD through the method interface: decoded by ``measure.decode.backends.ppd_many`` (either
backend, checked token for token against greedy), predicted from the profile and each run's match
outcomes (``measure.eval.predict``: closed form and simulator), and judged with the per-block
and per-pass checks and the turn-by-turn speed-up (``JudgedResult``'s ``terms``, ``passes``,
``turns``)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

import sim
from measure.decode.backends import ppd_many
from measure.decode.dist import task_ranks
from measure.decode.settings import PPDRequest, RunSettings
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import JudgeInputs, RunInputs, TimedMethod, picked
from measure.eval.pass_check import pass_check
from measure.eval.ppd_config import PPDConfig
from measure.eval.predict import Prediction, predict_ppd, predicted_ratios
from measure.eval.terms import term_check
from measure.eval.turn_speedup import read_turns, turn_log_errors
from ppdmodel.cost_profile import CostProfile


def _passes(profile: CostProfile, probed: CostProfile | None, config: PPDConfig,
            runs) -> pd.DataFrame:  # fmt: skip
    """The pass check of ``runs`` priced by the profile, then by the interleaved probes."""
    priced = (("profile", profile), ("interleaved", probed))
    frames = [pass_check(p, config, runs).assign(priced_by=name)
              for name, p in priced if p is not None]  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def check_config(profile: CostProfile, c: PPDConfig) -> None:
    """ValueError unless the profile measured ``c``'s backend and k (and d_bar is in Theorem
    4.1's domain)."""
    if c.backend not in profile.backends:
        raise ValueError(
            f"the profile has no costs for backend {c.backend!r} (it has "
            f"{sorted(profile.backends)}): measure one with --backends {c.backend}"
        )
    measured = profile.backends[c.backend].measured_ks
    if c.k not in measured:
        raise ValueError(
            f"k = {c.k} was not measured in the profile (k in {list(measured)}): "
            "measure one with that k"
        )
    profile.costs(c.backend, d_bar=c.d_bar)  # d_bar inside Theorem 4.1's domain


@dataclass(frozen=True)
class PPD:
    """PPD at one configuration (``measure.eval.methods.base.Method``)."""

    config: PPDConfig
    by_prompt = True
    schedule = staticmethod(sim.simulate)
    """``sim.simulate`` with ``schedule="ppd"``, replaying each run's match outcomes."""
    plan_method = "ppd"

    @property
    def plan_keys(self) -> dict:
        c = self.config
        return dict(d_bar=c.d_bar, k=c.k, early_head=c.early_head)

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def backend(self) -> str:
        return self.config.backend

    def ranks(self, settings: RunSettings) -> int:
        if self.config.backend != "dist":
            return 0
        return task_ranks(self.config.k, settings.world_size)

    def check(self, d: int, profile: CostProfile | None) -> None:
        if profile is not None:
            check_config(profile, self.config)

    def bind(self, model, prompts, run: RunInputs) -> PPDRun:
        return PPDRun(self.config, model, prompts, run)


@dataclass(frozen=True)
class PPDRun:
    """PPD bound to a model and prompts."""

    config: PPDConfig
    model: object
    prompts: list
    run: RunInputs

    def decode(self, indices=None, warmup: bool = True) -> list:
        """``ppd_many`` on the prompts at ``indices``; ``dist`` on the shared ranks."""
        indices = range(len(self.prompts)) if indices is None else indices
        run, c = self.run, self.config
        request = PPDRequest(
            d_bar=c.d_bar, k=c.k, backend=c.backend, early_head=c.early_head,
            max_new_tokens=run.max_new_tokens, head=run.head,
            sequences=[f"{run.names[i]}-k{c.k}" for i in indices],
            seeds=picked(run.seeds, indices), warmup=warmup, settings=run.settings,
        )  # fmt: skip
        return ppd_many(self.model, picked(self.prompts, indices), request, ranks=run.ranks)

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """Closed form and simulator on each run's match outcomes (``predict_ppd``)."""
        return predict_ppd(profile, runs, self.config, max_new_tokens=self.run.max_new_tokens)

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> JudgedResult:
        """Closed form and simulator from the profile (and from the interleaved probes), the
        block and pass checks, and the speed-up judged turn by turn."""
        c, profile, greedy = self.config, inputs.profile, inputs.greedy
        predicted = self.closed_form(profile, timed.runs)
        greedy_predicted = inputs.greedy_predicted[c.backend]
        again = {}
        if inputs.probed is not None:
            again = dict(interleaved=self.closed_form(inputs.probed, timed.runs),
                         interleaved_greedy=inputs.probed_greedy[c.backend])  # fmt: skip
        turns = turn_log_errors(greedy.results, timed.results,
                                predicted_ratios(greedy_predicted, predicted))  # fmt: skip
        return JudgedResult(
            config=c, measured=timed.spread, predicted=predicted,
            greedy_measured=greedy.spread, greedy_predicted=greedy_predicted,
            exact=inputs.exact[c], terms=term_check(profile, c, timed.runs),
            passes=_passes(profile, inputs.probed, c, timed.runs), turns=read_turns(turns),
            **again,
        )  # fmt: skip
