"""FREE through the method interface (``measure.eval.free_eval``): a threshold "auto" settled by
Algorithm 1 before the rounds, untimed; predicted from the profile and each run's exit
sequence (closed form per trace, ``sim.simulate_free``); approximate, so judged on its quality
against greedy's tokens too."""

from __future__ import annotations

from dataclasses import dataclass

import sim
from measure.eval.free_eval import (
    BACKEND,
    FreeConfig,
    calibrate,
    free_costs,
    judge_free,
    predict_free,
    run_free,
)
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import InProcess, JudgeInputs, RunInputs, TimedMethod
from measure.eval.predict import Prediction
from ppdmodel.cost_profile import CostProfile


@dataclass(frozen=True)
class Free(InProcess):
    """FREE at one exit layer, threshold and mode (``Method``)."""

    config: FreeConfig
    argument = "free"
    schedule = staticmethod(sim.simulate_free)
    plan_method = "free"
    plan_fields = (("exit_layer", "exit_layer"), ("free_mode", "mode"))

    def bind(self, model, prompts, run: RunInputs) -> FreeRun:
        """The threshold the timed runs use ("auto": calibrated now, untimed)."""
        threshold = self.config.threshold
        if threshold == "auto":
            threshold = calibrate(model, prompts, self.config, max_new_tokens=run.max_new_tokens,
                                  eos_token_id=run.settings.eos_token_id,
                                  head=run.head).threshold  # fmt: skip
        return FreeRun(self.config, model, prompts, run, float(threshold))


@dataclass(frozen=True)
class FreeRun:
    """FREE bound to a model and prompts at its settled threshold."""

    config: FreeConfig
    model: object
    prompts: list
    run: RunInputs
    threshold: float

    def decode(self, indices=None, warmup: bool = True) -> list:
        """Every prompt (a whole run)."""
        run = self.run
        return run_free(self.model, self.prompts, self.config, self.threshold,
                        max_new_tokens=run.max_new_tokens, eos_token_id=run.settings.eos_token_id,
                        head=run.head)  # fmt: skip

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """From the profile (the exit head priced by the head it uses) and each run's exits."""
        return predict_free(free_costs(profile, self.run.head), runs, d=profile.d,
                            exit_layer=self.config.exit_layer)  # fmt: skip

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> JudgedResult:
        return judge_free(self.config, self.threshold, self.closed_form(inputs.profile, timed.runs),
                          timed, inputs.greedy, inputs.greedy_predicted[BACKEND],
                          inputs.exact[self.config])  # fmt: skip
