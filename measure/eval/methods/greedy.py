"""Greedy (or plainly sampled) decoding: the baseline every other method is judged against."""

from __future__ import annotations

from dataclasses import dataclass

import sim
from measure.checks import as_prompt_ids, check_context
from measure.decode.greedy import greedy_generate
from measure.decode.sampling import GREEDY, Decoding
from measure.decode.settings import RunSettings
from measure.eval.methods.base import RunInputs, picked
from measure.eval.predict import GREEDY_BACKEND, Prediction, predict_greedy
from ppdmodel.cost_profile import CostProfile


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
class Greedy:
    """The baseline (``settings.decoding``: greedy, or the sampler PPD is checked against)."""

    config = None
    by_prompt = True
    label = "greedy"
    backend = GREEDY_BACKEND
    schedule = staticmethod(sim.simulate)
    """``sim.simulate`` with ``schedule="greedy"``."""
    plan_method = "greedy"
    plan_keys = {}

    def ranks(self, settings: RunSettings) -> int:
        return 0

    def check(self, d: int, profile) -> None:
        pass

    def bind(self, model, prompts, run: RunInputs) -> GreedyRun:
        return GreedyRun(model, prompts, run)


@dataclass(frozen=True)
class GreedyRun:
    """Greedy bound to a model and prompts."""

    model: object
    prompts: list
    run: RunInputs

    def decode(self, indices=None, warmup: bool = True) -> list:
        indices = range(len(self.prompts)) if indices is None else indices
        s = self.run.settings
        return run_greedy(
            self.model, picked(self.prompts, indices), max_new_tokens=self.run.max_new_tokens,
            eos_token_id=s.eos_token_id, decoding=s.decoding, seeds=picked(self.run.seeds, indices),
            warmup=warmup,
        )  # fmt: skip

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """ell G per run on the ``single`` backend's figures (``predict_greedy``; ``validate``
        prices greedy on every judged method's backend)."""
        return predict_greedy(profile, runs)

    def judge(self, timed, inputs) -> None:
        """None: greedy is priced per backend by ``validate`` (the baseline's rows)."""
        return None
