"""Predict measured runs from a cost profile measured beforehand: nothing is fitted on them.

For a PPD configuration, each run's own match outcomes m (known once the run is over; p is
not fitted) give its latency exactly under the profile's costs: the closed form
``ppdmodel.trace_latency_seconds`` (T = ell B - M S) and the simulator (``sim`` with
``SimConfig(costs=, early_head=)`` replaying m). Greedy's is ell G per run. Summed over the
prompts, these are the predictions set beside the measured medians. The waterfall is the
per-token split at the pooled match rate M / ell (``ppdmodel.latency_waterfall``), which
sums exactly to the closed form's total divided by the tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import sim
from measure.eval.repeat import PPDConfig
from ppdmodel import (
    LatencyWaterfall,
    greedy_latency_seconds,
    latency_waterfall,
    trace_latency_seconds,
)
from ppdmodel.cli_args import default_d_bar
from ppdmodel.cost_profile import CostProfile
from ppdmodel.costs import DecodeCosts

GREEDY_BACKEND = "single"
"""Greedy decoding runs in the calling process: its costs are the ``single`` backend's."""


@dataclass(frozen=True)
class Prediction:
    """Predicted decode seconds of one method over all prompts."""

    closed_form_s: float
    """Closed form, summed over runs."""
    simulated_s: float
    """Simulator, summed over runs."""
    tokens: int
    """Generated tokens over all runs."""
    matches: int
    """Accepted predictions M over all runs (0 for greedy)."""
    costs: DecodeCosts
    """The costs used."""
    waterfall: LatencyWaterfall | None = None
    """Per-token split at the pooled match rate (PPD only)."""
    runs: int = 0
    """Runs (prompts) behind the prediction."""

    @property
    def p_hat(self) -> float:
        """Accepted predictions per predictable token, M / sum(ell - 1)."""
        return self.matches / max(self.tokens - self.runs, 1) if self.runs else 0.0


def predict_ppd(profile: CostProfile, runs, config: PPDConfig) -> Prediction:
    """Closed-form and simulated seconds of ``runs`` (PPDResult per prompt) under ``config``."""
    costs = profile.costs(config.backend, d_bar=config.d_bar)
    d, shared = profile.d, costs.shared_device
    closed = simulated = 0.0
    tokens = matches = 0
    for run in runs:
        m = list(run.m)
        shape = dict(d=d, d_bar=config.d_bar, k=config.k, costs=costs)
        closed += trace_latency_seconds(m=m, early_head=config.early_head, **shape)
        sim_config = sim.SimConfig(
            ell=len(m) + 1,
            matches=sim.Replay(m),
            early_head=config.early_head,
            n_gpus=1 if shared else 2,
            **shape,
        )
        simulated += sim.simulate(sim_config).latency_s
        tokens += len(m) + 1
        matches += sum(m)
    rate = matches / tokens if tokens else 0.0
    split = latency_waterfall(
        d=d, d_bar=config.d_bar, p=rate, k=config.k, costs=costs, early_head=config.early_head
    )
    return Prediction(closed, simulated, tokens, matches, costs, split, runs=len(runs))


def predict_greedy(profile: CostProfile, runs) -> Prediction:
    """Closed-form and simulated seconds of greedy ``runs`` (GreedyResult per prompt)."""
    d = profile.d
    costs = profile.costs(GREEDY_BACKEND, d_bar=default_d_bar(d))
    closed = simulated = 0.0
    tokens = 0
    for run in runs:
        ell = len(run.tokens)
        closed += greedy_latency_seconds(d=d, ell=ell, costs=costs)
        config = sim.SimConfig(
            d=d, d_bar=default_d_bar(d), k=1, ell=ell, costs=costs, schedule="greedy"
        )
        simulated += sim.simulate(config).latency_s
        tokens += ell
    return Prediction(closed, simulated, tokens, 0, costs, None, runs=len(runs))
