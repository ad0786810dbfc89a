"""FREE through the method interface (``measure.eval.free_eval``): a threshold "auto" settled by
Algorithm 1 before the rounds, untimed; predicted from the profile and each run's exit
sequence; approximate, so judged on its quality against greedy's tokens too."""

from __future__ import annotations

from dataclasses import dataclass

from measure.eval.free_eval import (
    BACKEND,
    FreeConfig,
    FreeOutcome,
    calibrate,
    evaluate_free,
    run_free,
)
from measure.eval.methods.base import InProcess, JudgeInputs, RunInputs, TimedMethod


@dataclass(frozen=True)
class Free(InProcess):
    """FREE at one exit layer, threshold and mode (``Method``)."""

    config: FreeConfig

    def __post_init__(self) -> None:
        if not isinstance(self.config, FreeConfig):
            raise ValueError(f"free must hold FreeConfig values, got {self.config!r}")

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

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> FreeOutcome:
        greedy_s = inputs.greedy_predicted[BACKEND].closed_form_s
        (outcome,) = evaluate_free(inputs.profile, {self.config: self.threshold},
                                   {self.config: timed}, inputs.greedy, greedy_s, inputs.exact,
                                   head=self.run.head)  # fmt: skip
        return outcome
