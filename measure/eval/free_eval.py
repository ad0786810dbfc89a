"""FREE predicted from a cost profile and each run's own exit sequence, then measured.

``ppd validate --free L --threshold X|auto`` times FREE (``measure.free``) in the same
interleaved rounds as greedy and PPD. **Prediction** (nothing fitted on the timed runs): each
run's exits x_t give its latency exactly under the profile's costs,
``ppdmodel.free_trace_latency_seconds`` (shallow layers, exit head and host time per token;
a deep pass over n + 1 rows priced by the profile's k-row batch times; the final head), the
simulator ``sim.simulate_free`` replays them, and the i.i.d. closed form at the pooled exit
rate stands beside both. The profile's early head (final norm + LM head on one row) prices
the exit head (the logit lens; a trained head of the same shape costs the same).
**Quality**, FREE being approximate: per run the share of positions whose token equals
greedy's and ROUGE-L of the output against greedy's (on token ids), pooled over the prompts.
**threshold "auto"**: Algorithm 1 (``measure.free.threshold.AdaptiveThreshold``) runs,
untimed, on the first ``calibration_sentences`` prompts before the rounds (the paper's
early-stage instances of the same data), and the threshold it settles on is used in every
timed run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

import sim
from measure.eval.judged import JudgedResult, quality
from measure.eval.predict import Prediction
from measure.free.decode import MODES, check_exit_layer, free_generate
from measure.free.threshold import INITIAL_THRESHOLD, ZETA, AdaptiveThreshold, check_threshold
from measure.hf.lens import LogitLens
from ppdmodel.costs import DecodeCosts
from ppdmodel.free import (
    free_expected_latency_seconds,
    free_rows_layer_seconds,
    free_trace_latency_seconds,
    stacked_counts,
)
from sim.formats import FREE_TABLE_COLUMNS

BACKEND = "single"
"""FREE runs in the calling process: its costs are the profile's ``single`` backend's."""


@dataclass(frozen=True)
class FreeConfig:
    """One FREE method to time: exit layer L_s, threshold (a number or "auto") and mode."""

    exit_layer: int
    threshold: float | str
    mode: str = "sync"
    calibration_sentences: int = 1
    """Prompts Algorithm 1 calibrates on (threshold "auto")."""

    def __post_init__(self) -> None:
        check_threshold(self.threshold)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")

    def check(self, d: int) -> None:
        check_exit_layer(self.exit_layer, d)

    @property
    def label(self) -> str:
        """'free L_s=10 threshold=0.8 sync'."""
        return f"free L_s={self.exit_layer} threshold={self.threshold} {self.mode}"


def calibrate(model, prompts, config: FreeConfig, *, max_new_tokens, eos_token_id=None, head=None):
    """Algorithm 1 on the first ``config.calibration_sentences`` prompts: the estimator, its
    threshold settled (refit after each sentence)."""
    est = AdaptiveThreshold(
        initial=INITIAL_THRESHOLD, zeta=ZETA, calibration_sentences=config.calibration_sentences
    )
    for p in list(prompts)[: config.calibration_sentences]:
        free_generate(
            model, p, exit_layer=config.exit_layer, threshold="auto", estimator=est,
            max_new_tokens=max_new_tokens, mode=config.mode, head=head,
            eos_token_id=eos_token_id,
        )  # fmt: skip
    return est


def run_free(model, prompts, config, threshold, *, max_new_tokens, eos_token_id=None, head=None):
    """FREE on every prompt at a fixed ``threshold`` (one untimed 2-token warm-up first)."""
    kw = dict(exit_layer=config.exit_layer, threshold=threshold, mode=config.mode, head=head)
    free_generate(model, prompts[0], max_new_tokens=2, **kw)
    return [
        free_generate(model, p, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, **kw)
        for p in prompts
    ]


def free_terms(costs: DecodeCosts, runs, *, d: int, exit_layer: int) -> dict[str, float]:
    """Seconds per token of each part of FREE over ``runs`` (they sum to the prediction)."""
    tokens = sum(len(r.exits) for r in runs)
    deep = 0.0
    for r in runs:
        x = np.asarray(r.exits, dtype=bool)
        if (~x).any():
            rows = stacked_counts(x)[~x] + 1
            deep += float(np.sum(free_rows_layer_seconds(rows=rows, costs=costs)))
    n_deep = sum(len(r.exits) - sum(r.exits) for r in runs)
    per = 1.0 / max(tokens, 1)
    return {
        "embedding_s": costs.embedding_s,
        "shallow_s": exit_layer * costs.layer_s,
        "early_head_s": costs.early_head_s,
        "deep_s": (d - exit_layer) * deep * per,
        "final_head_s": n_deep * costs.final_head_s * per,
        "host_s": costs.host_s,
    }


def predict_free(costs: DecodeCosts, runs, *, d: int, exit_layer: int) -> Prediction:
    """Closed form per trace, simulator and i.i.d. form for ``runs`` (FreeResult per prompt);
    ``rate``: the pooled exit rate."""
    tokens = sum(len(r.exits) for r in runs)
    rate = sum(sum(r.exits) for r in runs) / max(tokens, 1)
    closed = simulated = iid = 0.0
    for r in runs:
        kw = dict(d=d, exit_layer=exit_layer, costs=costs)
        closed += free_trace_latency_seconds(exits=r.exits, **kw)
        simulated += sim.simulate_free(exits=r.exits, record_events=False, **kw).latency_s
        iid += free_expected_latency_seconds(ell=len(r.exits), q=rate, **kw)
    terms = free_terms(costs, runs, d=d, exit_layer=exit_layer)
    return Prediction(closed, simulated, tokens, 0, costs, runs=len(runs), backend=BACKEND,
                      term_seconds=terms, iid_s=iid, rate=rate)  # fmt: skip


def free_costs(profile, head=None) -> DecodeCosts:
    """FREE's costs from a profile: the ``single`` backend's, the exit head priced as the
    final head for the logit lens (``head`` None or a ``LogitLens``; module docstring)."""
    base = profile.backends[BACKEND].base
    if head is None or isinstance(head, LogitLens):
        return replace(base, early_head_s=base.final_head_s)
    return base


@dataclass(frozen=True)
class Settled:
    """FREE's own record in its judged result (``JudgedResult.details``)."""

    threshold: float
    """The threshold the timed runs used ("auto": the one Algorithm 1 settled on)."""


def judge_free(config: FreeConfig, threshold: float, prediction: Prediction, timed, greedy,
               greedy_predicted: Prediction, exact: bool) -> JudgedResult:  # fmt: skip
    """FREE's judged result: ``timed`` and ``greedy`` (``TimedMethod``s) measured in the same
    rounds, its ``prediction`` and its quality against greedy's tokens."""
    p = prediction
    line = (
        f"FREE (approximate; quality against greedy's tokens): {config.label}: threshold "
        f"{threshold:.3g}, exit rate {p.p_hat:.3f}, {p.tokens} tokens; predicted "
        f"{p.closed_form_s:.4g} s (simulated {p.simulated_s:.4g} s, i.i.d. {p.iid_s:.4g} s), "
        f"measured {timed.spread.median:.4g} s"
    )
    q = quality(timed.runs, greedy.runs)
    return JudgedResult(
        config, timed.spread, p, greedy.spread, greedy_predicted, exact, quality=q,
        method_name="FREE", columns=dict(exit_layer=config.exit_layer, threshold=threshold,
                                         exit_rate=p.p_hat),
        lines=(f"{line}; {q.describe()}",), details=Settled(threshold),
    )  # fmt: skip


QUALITY_METRIC = "rouge_l_vs_greedy"
"""The ``quality`` a FREE table from ``free_table`` holds: ROUGE-L against greedy's tokens."""


def free_table(outcomes: list[JudgedResult]) -> pd.DataFrame:
    """The planner's FREE table (``sim.formats``; ``ppd plan --free-table``): per judged FREE
    method its exit layer, the threshold used (``Settled``), the pooled exit rate and ROUGE-L
    against greedy's output."""
    rows = [
        dict(exit_layer=o.config.exit_layer, threshold=o.details.threshold,
             exit_rate=o.predicted.p_hat,
             quality=o.quality.rouge_l, quality_metric=QUALITY_METRIC, mode=o.config.mode)
        for o in outcomes
        if o.config.mode != "oracle"  # the oracle runs every deep layer: not FREE's schedule
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=[*FREE_TABLE_COLUMNS, "quality_metric", "mode"])
