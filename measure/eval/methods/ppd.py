"""PPD through the method interface: decoded by ``measure.decode.backends.ppd_many`` (either
backend, checked token for token against greedy), predicted from the profile and each run's match
outcomes (``measure.eval.predict``: closed form and simulator), and judged with the per-block
and per-pass checks and the turn-by-turn speed-up (``ConfigResult``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from measure.decode.backends import ppd_many
from measure.decode.dist import task_ranks
from measure.decode.settings import RunSettings
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import JudgeInputs, RunInputs, TimedMethod, picked
from measure.eval.pass_check import pass_check
from measure.eval.ppd_config import PPDConfig
from measure.eval.predict import Prediction, predict_ppd, predicted_ratios, speedup_interval
from measure.eval.terms import term_check
from measure.eval.turn_speedup import TurnReading, read_turns, turn_log_errors
from measure.profile.stats import Spread
from ppdmodel.cost_profile import CostProfile


@dataclass
class ConfigResult(JudgedResult):
    """One PPD configuration: measured spread, predictions and greedy's."""

    config: PPDConfig
    measured: Spread
    predicted: Prediction
    greedy_measured: Spread
    greedy_predicted: Prediction
    exact: bool
    terms: pd.DataFrame | None = None
    """Each block of a pass, priced by the profile and timed in the runs (``term_check``)."""
    interleaved: Prediction | None = None
    """The prediction from the probes interleaved with the rounds (``--interleave-probes``)."""
    interleaved_greedy: Prediction | None = None
    """Greedy's, from the same probes."""
    turns: TurnReading | None = None
    """Measured over predicted speed-up, turn by turn (``measure.eval.turn_speedup``)."""
    passes: pd.DataFrame | None = None
    """Fresh and resumed passes, timed in the runs, beside the closed form's time of their
    kind (``measure.eval.pass_check``), priced by the profile and (``priced_by``
    ``interleaved``) by the interleaved probes."""

    @property
    def speedup_band(self):
        """The predicted speed-up's interval (``measure.eval.predict.speedup_interval``)."""
        return speedup_interval(self.greedy_predicted, self.predicted)

    @property
    def predicted_s(self) -> float:
        """The closed form's seconds."""
        return self.predicted.closed_form_s

    @property
    def simulated_s(self) -> float:
        return self.predicted.simulated_s

    @property
    def greedy_predicted_s(self) -> float:
        return self.greedy_predicted.closed_form_s

    def waterfall_rows(self) -> list[dict]:
        """The per-token waterfall (seconds) and the measured per-token median beside it."""
        rows = [dict(method=self.config.label, term=k, seconds_per_token=v)
                for k, v in self.predicted.terms().items()]  # fmt: skip
        rows.append(
            dict(
                method=self.config.label,
                term="measured",
                seconds_per_token=self.measured.median / self.predicted.tokens,
            )
        )
        return rows

    def cost_terms(self) -> dict:
        return self.predicted.terms()


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
        return ppd_many(
            self.model, picked(self.prompts, indices), **asdict(c),
            sequences=[f"{run.names[i]}-k{c.k}" for i in indices], settings=run.settings,
            ranks=run.ranks, warmup=warmup, max_new_tokens=run.max_new_tokens, head=run.head,
            seeds=picked(run.seeds, indices),
        )  # fmt: skip

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> ConfigResult:
        """Closed form and simulator from the profile (and from the interleaved probes), the
        block and pass checks, and the speed-up judged turn by turn."""
        c, profile, greedy = self.config, inputs.profile, inputs.greedy
        limit = inputs.max_new_tokens
        predicted = predict_ppd(profile, timed.runs, c, max_new_tokens=limit)
        greedy_predicted = inputs.greedy_predicted[c.backend]
        again = {}
        if inputs.probed is not None:
            again = dict(
                interleaved=predict_ppd(inputs.probed, timed.runs, c, max_new_tokens=limit),
                interleaved_greedy=inputs.probed_greedy[c.backend],
            )
        turns = turn_log_errors(greedy.results, timed.results,
                                predicted_ratios(greedy_predicted, predicted))  # fmt: skip
        return ConfigResult(
            config=c, measured=timed.spread, predicted=predicted,
            greedy_measured=greedy.spread, greedy_predicted=greedy_predicted,
            exact=inputs.exact[c], terms=term_check(profile, c, timed.runs),
            passes=_passes(profile, inputs.probed, c, timed.runs), turns=read_turns(turns),
            **again,
        )  # fmt: skip
