"""HF self-speculative early exit through the method interface: ``generate(assistant_early_exit=L)``
at a constant draft length (``measure.eval.hf_early_exit``), predicted from the profile and the
layer-L match sequences of the same prompts, measured before the rounds with HF's bookkeeping
(``measure.eval.early_exit``)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from measure.eval.early_exit import judge_early_exit, layer_matches, predict_early_exit
from measure.eval.hf_early_exit import (
    EarlyExitConfig,
    HFBookkeeping,
    measure_bookkeeping,
    run_early_exit,
)
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import InProcess, JudgeInputs, RunInputs, TimedMethod
from measure.eval.predict import Prediction
from ppdmodel.cost_profile import CostProfile


@dataclass(frozen=True)
class HFEarlyExit(InProcess):
    """HF early exit at one exit layer and draft length (``Method``)."""

    config: EarlyExitConfig
    argument = "early_exit"
    plan_method = "early-exit"  # no simulator schedule: ppd plan --confirm samples its steps
    plan_fields = (("exit_layer", "exit_layer"), ("g", "g"))

    def bind(self, model, prompts, run: RunInputs) -> HFEarlyExitRun:
        """HF's bookkeeping (draft lengths 1 and max(3, g), on a synthetic prompt) and the
        layer-L match sequences of the prompts, untimed, each once per exit layer."""
        if run.settings.decoding.do_sample:
            raise ValueError("early_exit: HF early exit is timed with greedy decoding only")
        layer, g = self.config.exit_layer, self.config.g
        book = run.once(("hf bookkeeping", layer, g),
                        lambda: measure_bookkeeping(model, layer, gs=(1, max(3, g))))  # fmt: skip
        matches = run.once(("layer matches", layer), lambda: layer_matches(
            model, prompts, [layer], max_new_tokens=run.max_new_tokens,
            eos_token_id=run.settings.eos_token_id))  # fmt: skip
        return HFEarlyExitRun(self.config, model, prompts, run, book, matches)


@dataclass(frozen=True)
class HFEarlyExitRun:
    """HF early exit bound to a model and prompts, with what it measured untimed."""

    config: EarlyExitConfig
    model: object
    prompts: list
    run: RunInputs
    bookkeeping: HFBookkeeping
    matches: dict

    def decode(self, indices=None, warmup: bool = True) -> list:
        """Every prompt (a whole run: HF early exit is not split by prompt)."""
        return run_early_exit(self.model, self.prompts, self.config,
                              max_new_tokens=self.run.max_new_tokens,
                              eos_token_id=self.run.settings.eos_token_id)  # fmt: skip

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """From the profile, HF's bookkeeping and the layer-L match sequences measured before
        the rounds (the runs' own steps follow from them: ``steps_agree`` checks it)."""
        return predict_early_exit(profile, self.matches[self.config.exit_layer], self.config,
                                  max_new_tokens=self.run.max_new_tokens,
                                  bookkeeping=self.bookkeeping)[0]  # fmt: skip

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> JudgedResult:
        if self.matches["tokens"] != [g.tokens for g in inputs.greedy.runs]:
            warnings.warn(
                "the layer match-rate pass did not reproduce greedy's tokens: the early-exit "
                "predictions rest on other traces",
                stacklevel=2,
            )
        return judge_early_exit(
            self.config, timed, inputs.greedy, self.matches[self.config.exit_layer],
            profile=inputs.profile, max_new_tokens=inputs.max_new_tokens,
            exact=inputs.exact[self.config], bookkeeping=self.bookkeeping,
        )  # fmt: skip
