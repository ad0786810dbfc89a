"""Predict measured runs from a cost profile measured beforehand: nothing is fitted on them.

For a PPD configuration, each run's own match outcomes m (known once the run is over; p is
not fitted) give its latency exactly under the profile's costs: the closed form
``ppdmodel.trace_latency_seconds`` (T = ell B - M S) and the simulator (``sim`` with
``SimConfig(costs=, early_head=)`` replaying m). Greedy's is ell G per run. Summed over the
prompts, these are the predictions set beside the measured medians. The waterfall is the
per-token split at the pooled match rate M / ell (``ppdmodel.latency_waterfall``), which
sums to the closed form's total divided by the tokens. Greedy is priced on the figures of the
backend it is compared with (``predict_greedy(backend=)``): a ``dist`` configuration's
speed-up rests on the ``dist`` figures alone, not on the ``single`` ones measured apart.
Each prediction carries the closed form's interval over the profile's bootstrap replicates
(``Prediction.interval``, ``ppdmodel.intervals``). A configuration's costs are the profile's
for its backend, d_bar and k: on a ``dist`` profile with pair factors, main's and the batch's
own sharing factors measured at that k (or the nearest measured k), each replicate with its
own redrawn ones; ``Prediction.sharing`` says which factors were used.

On a CPU the ``single`` backend runs main and the candidate side on the same threads, one
after the other, so the early head costs a pass the same on either side: both placements are
predicted with the closed form's ``early_head="main"`` schedule on a serial device
(``modelled_placement``, the profile's ``serial`` backends, ``DecodeCosts.serial_device``):
the batch runs to its end before main's suffix, exact also when it outlasts that suffix
(W_c > W_m, e.g. k = 3 at d_bar = d/2).

One end effect the per-pass model leaves out: the decoder's pass over the last allowed token
(t = max_new_tokens) makes no early prediction, as no token follows it, so that pass costs
what a greedy pass costs. Both predictions subtract, once per run that reached
max_new_tokens, that pass's excess over greedy, ``ppdmodel.passes``' B - G (main's early
head and the sharing loss); a run that ended at an end-of-sequence token predicted the token
after it and keeps the full pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import sim
from measure.eval.ppd_config import PPDConfig
from ppdmodel import (
    LatencyWaterfall,
    greedy_latency_seconds,
    latency_waterfall,
    trace_latency_seconds,
)
from ppdmodel.cost_profile import CostProfile, SharingFactors
from ppdmodel.costs import DecodeCosts
from ppdmodel.defaults import default_d_bar
from ppdmodel.intervals import Interval, interval_of
from ppdmodel.passes import pass_times

GREEDY_BACKEND = "single"
"""The backend greedy is priced on when no PPD backend is named (``predict_greedy``)."""


@dataclass(frozen=True)
class DraftSteps:
    """The draft-and-verify steps behind the prediction of a speculative method (HF early exit,
    draft-model speculative decoding), over all prompts."""

    draft_s: float
    """Draft forwards, host time excluded where ``host_s`` holds it."""
    verify_s: float
    """Verify forwards, host time excluded where ``host_s`` holds it."""
    host_s: float
    """Host time priced apart (HF's bookkeeping), or 0 where the forwards include it."""
    steps: int
    draft_forwards: int
    drafted: tuple[tuple[int, ...], ...] = ()
    """Per run, each step's drafted tokens."""
    produced: tuple[tuple[int, ...], ...] = ()
    """Per run, each step's produced tokens."""
    first_step_tokens: tuple[int, ...] = ()
    """Per run, the tokens of a first step left out of the timing (HF's prefill step)."""


@dataclass(frozen=True)
class Prediction:
    """Predicted decode seconds of one method (or greedy) over all prompts: the closed form on
    the runs' own traces, the simulator's replay where the method has a schedule, and the
    i.i.d. closed form at the pooled rate where it has one."""

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
    last_pass_s: float = 0.0
    """Seconds subtracted for last passes that made no early prediction (module docstring)."""
    backend: str = GREEDY_BACKEND
    """The profile backend whose figures priced it."""
    interval: Interval | None = None
    """The closed form's interval over the profile's cost replicates (``ppdmodel.intervals``;
    the runs' own m_t are replayed, so p adds no spread); None: the profile kept no samples."""
    sharing: SharingFactors | None = None
    """The shared-device factors the costs apply and their source (PPD only)."""
    per_run_s: tuple[float, ...] = ()
    """The closed form of each run, in the order given (they sum to ``closed_form_s``)."""
    replicate_s: tuple[float, ...] = ()
    """The closed form under each of the profile's cost replicates (behind ``interval``; the
    same replicates, in the same order, for greedy and PPD on one backend: a speed-up's
    interval takes the ratio within each, ``speedup_interval``)."""
    term_seconds: dict = field(default_factory=dict)
    """Seconds per token by cost term (``measure.eval.verdict.TERM_LABELS``); they sum to
    ``closed_form_s / tokens`` (empty for greedy)."""
    iid_s: float = math.nan
    """The i.i.d. closed form at the runs' pooled rate (FREE, early exit, speculative
    decoding; NaN where none is made)."""
    rate: float | None = None
    """The pooled rate behind ``iid_s`` (FREE's exit rate, early exit's layer-L match rate,
    speculative decoding's acceptance); None: PPD's M / sum(ell - 1)."""
    steps: DraftSteps | None = None
    """The draft-and-verify steps of a speculative method, or None."""

    def terms(self) -> dict[str, float]:
        """Seconds per token by cost term (``term_seconds``; PPD: the waterfall's terms and
        ``last_pass_s`` <= 0)."""
        return dict(self.term_seconds)

    @property
    def p_hat(self) -> float:
        """The pooled rate (``rate``), else accepted predictions per predictable token,
        M / sum(ell - 1)."""
        if self.rate is not None:
            return self.rate
        return self.matches / max(self.tokens - self.runs, 1) if self.runs else 0.0


def modelled_placement(config: PPDConfig, profile: CostProfile) -> str:
    """The early-head placement the closed form is evaluated with: ``main`` on a backend the
    profile marks ``serial`` (the single backend on a CPU), else the configuration's."""
    return profile.backends[config.backend].placement(config.early_head)


def last_pass_excess_s(costs: DecodeCosts, *, d: int, config: PPDConfig, early_head=None) -> float:
    """Seconds the last pass saves by making no early prediction: B - G (module docstring)."""
    times = pass_times(
        d=d, d_bar=config.d_bar, k=config.k, costs=costs,
        early_head=early_head or config.early_head,
    )  # fmt: skip
    return float(times.excess_over_greedy_s)


def predict_ppd(
    profile: CostProfile, runs, config: PPDConfig, *, max_new_tokens: int | None = None
) -> Prediction:
    """Closed-form and simulated seconds of ``runs`` (PPDResult per prompt) under ``config``.

    ``max_new_tokens``: the runs' limit; a run of that many tokens gets the last-pass
    correction (module docstring). None: no correction.
    """
    costs = profile.costs(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    d, shared = profile.d, costs.shared_device
    placement = modelled_placement(config, profile)
    end = last_pass_excess_s(costs, d=d, config=config, early_head=placement)
    closed = simulated = cuts = 0.0
    tokens = matches = 0
    per_run = []
    replicates = profile.cost_replicates(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    interval, drawn = None, []
    if replicates:
        drawn = [_closed_ppd(c, runs, config, d, placement, max_new_tokens) for c in replicates]
        interval = interval_of(drawn)
    for run in runs:
        m = list(run.m)
        shape = dict(d=d, d_bar=config.d_bar, k=config.k, costs=costs)
        cut = end if _hit_limit(m, max_new_tokens) else 0.0
        cuts += cut
        per_run.append(trace_latency_seconds(m=m, early_head=placement, **shape) - cut)
        closed += per_run[-1]
        sim_config = sim.SimConfig(
            ell=len(m) + 1,
            matches=sim.Replay(m),
            early_head=placement,
            n_gpus=1 if shared else 2,
            **shape,
        )
        simulated += sim.simulate(sim_config).latency_s - cut
        tokens += len(m) + 1
        matches += sum(m)
    rate = matches / tokens if tokens else 0.0
    split = latency_waterfall(
        d=d, d_bar=config.d_bar, p=rate, k=config.k, costs=costs, early_head=placement
    )
    terms = {k: float(v) for k, v in split.terms().items()}
    terms["last_pass_s"] = -cuts / max(tokens, 1)
    return Prediction(
        closed, simulated, tokens, matches, costs, split, runs=len(runs), last_pass_s=cuts,
        backend=config.backend, interval=interval,
        sharing=profile.sharing(config.backend, config.k, config.early_head),
        per_run_s=tuple(per_run), replicate_s=tuple(drawn), term_seconds=terms,
    )  # fmt: skip


def _hit_limit(m, max_new_tokens) -> bool:
    """True when a run of ``len(m) + 1`` tokens reached max_new_tokens (its last pass made no
    early prediction)."""
    return max_new_tokens is not None and len(m) + 1 == max_new_tokens


def _closed_ppd(costs, runs, config, d, placement, max_new_tokens) -> float:
    """The closed form over ``runs`` under ``costs``, last-pass correction included."""
    end = last_pass_excess_s(costs, d=d, config=config, early_head=placement)
    total = 0.0
    for run in runs:
        m = list(run.m)
        total += trace_latency_seconds(d=d, d_bar=config.d_bar, m=m, k=config.k, costs=costs,
                                       early_head=placement)  # fmt: skip
        total -= end if _hit_limit(m, max_new_tokens) else 0.0
    return total


def predict_greedy(profile: CostProfile, runs, backend: str = GREEDY_BACKEND) -> Prediction:
    """Closed-form and simulated seconds of greedy ``runs`` (GreedyResult per prompt), priced
    on ``backend``'s figures (``CostProfile.greedy_costs``): the backend of the PPD runs it is
    compared with, so both sides of a predicted speed-up were measured together."""
    d = profile.d
    costs = profile.greedy_costs(backend, d_bar=default_d_bar(d))
    closed = simulated = 0.0
    tokens = 0
    per_run = []
    replicates = profile.cost_replicates(backend, d_bar=default_d_bar(d), greedy=True)
    ells = [len(run.tokens) for run in runs]
    interval, drawn = None, []
    if replicates:
        drawn = [sum(greedy_latency_seconds(d=d, ell=ell, costs=c) for ell in ells)
                 for c in replicates]  # fmt: skip
        interval = interval_of(drawn)
    for run in runs:
        ell = len(run.tokens)
        per_run.append(greedy_latency_seconds(d=d, ell=ell, costs=costs))
        closed += per_run[-1]
        config = sim.SimConfig(
            d=d, d_bar=default_d_bar(d), k=1, ell=ell, costs=costs, schedule="greedy"
        )
        simulated += sim.simulate(config).latency_s
        tokens += ell
    return Prediction(closed, simulated, tokens, 0, costs, None, runs=len(runs), backend=backend,
                      interval=interval, per_run_s=tuple(per_run),
                      replicate_s=tuple(drawn))  # fmt: skip


def speedup_interval(greedy: Prediction, method: Prediction) -> Interval | None:
    """The predicted speed-up's interval: greedy's closed form over the method's within each
    cost replicate (a cost both share, e.g. the machine's drift, cancels); None where either
    kept no replicates or they are not the same replicates (another backend)."""
    g, m = greedy.replicate_s, method.replicate_s
    if not g or len(g) != len(m) or greedy.backend != method.backend:
        return None
    return interval_of([a / b for a, b in zip(g, m, strict=True)])


def predicted_ratios(greedy: Prediction, method: Prediction) -> list[float]:
    """Each prompt's predicted speed-up: greedy's closed form over the method's, run by run
    (``per_run_s``; the two must cover the same runs)."""
    if len(greedy.per_run_s) != len(method.per_run_s):
        raise ValueError(f"greedy and method must predict the same runs, got "
                         f"{len(greedy.per_run_s)} and {len(method.per_run_s)}")  # fmt: skip
    return [g / m for g, m in zip(greedy.per_run_s, method.per_run_s, strict=True)]
