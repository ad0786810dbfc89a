"""Self-speculative early exit predicted from a cost profile and layer match sequences.

**Prediction** (nothing fitted on the timed runs): the match sequence at layer L, k = 1, on
the same prompts, measured separately with ``measure.match.rate.measure_prompt`` (positions
where layer L's top-1 under the final norm and LM head equals the greedy token), gives each
run's steps exactly (``ppdmodel.early_exit``); the profile prices each forward
(``ppdmodel.early_exit.EarlyExitCosts``). Beside it, the i.i.d. closed form
``ppdmodel.alternatives`` (``early_exit_step_seconds``, ``speculative_seconds_per_token``)
at the pooled match rate, with the same host time. The profile has no term for HF
``generate``'s Python bookkeeping outside the model's forwards (a ``generate`` call per
draft, logits processing, cache crops): ``measure.eval.hf_early_exit.measure_bookkeeping``
measures it beforehand on a synthetic prompt (not the judged ones), as seconds per step and
per draft forward, from the time outside the hooked forwards. Approximated: the LM head on
q + 1 rows (priced as on one row), r positions of one sequence (priced with the profile's
k-row slope), and a draft that stops at an end-of-sequence token it proposed (the step
accounting then differs from HF's; ``steps_agree`` says so).

The runs' seconds and tokens start after each run's first step (the prefill step, see
``measure.eval.hf_early_exit``); so do the prediction and the greedy reference
(``greedy_after``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from measure.checks import as_prompt_ids, eos_set
from measure.eval.hf_early_exit import BACKEND, EarlyExitConfig, HFBookkeeping
from measure.eval.judged import JudgedResult
from measure.eval.predict import DraftSteps, Prediction
from measure.hf.layer_split import LayerSplitModel
from measure.match.config import make_config
from measure.match.rate import measure_prompt
from measure.profile.stats import Spread
from ppdmodel.alternatives import early_exit_step_seconds, speculative_seconds_per_token
from ppdmodel.cost_profile import CostProfile
from ppdmodel.defaults import default_d_bar
from ppdmodel.early_exit import EarlyExitCosts, early_exit_trace_seconds


def layer_matches(model, prompts, layers, *, max_new_tokens, eos_token_id=None) -> dict:
    """{layer: [bool array per prompt]}: layer L's top-1 (final norm + LM head) equals the
    greedy token, positions 1..ell, k = 1 (``measure.match.rate.measure_prompt``); also
    ``"tokens"``: the greedy tokens of that pass, per prompt."""
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
    layers = sorted(set(layers))
    config = make_config(
        lsm.num_layers, layers=layers, ks=(1,), max_new_tokens=max_new_tokens, verify=False
    )
    out: dict = {layer: [] for layer in layers}
    out["tokens"] = []
    eos = sorted(eos_set(eos_token_id))
    for i, p in enumerate(prompts):
        result = measure_prompt(lsm, as_prompt_ids(p, lsm.device), str(i), config, eos_ids=eos)
        probed, ranks = result.ranks["shared"]
        for j, layer in enumerate(probed):
            out[layer].append(ranks[:, j] < 1)
        out["tokens"].append(result.tokens)
    return out


def predict_early_exit(
    profile: CostProfile,
    matches,
    config: EarlyExitConfig,
    *,
    max_new_tokens: int,
    bookkeeping: HFBookkeeping | None = None,
) -> tuple[Prediction, Prediction]:
    """(the method's, greedy's for the same tokens) predicted seconds of one method from the
    profile and per-prompt match sequences at its layer, after each run's first step:
    exact step accounting (``steps``), the i.i.d. closed form at the pooled match rate
    (``iid_s``, ``rate``) with ``early_exit_step_seconds``' step costs and the same host time;
    ``bookkeeping``: HF's host time measured beforehand (None: the profile's tau per
    forward)."""
    d = profile.d
    config.check(d)
    # early exit has no hand-off or dispatch (the only fields d_bar changes): any valid d_bar
    costs = profile.costs(BACKEND, d_bar=default_d_bar(d))
    host = {}
    if bookkeeping is not None:
        host = dict(host_draft_s=bookkeeping.per_draft_s, host_step_s=bookkeeping.per_step_s)
    step_costs = EarlyExitCosts(d=d, exit_layer=config.exit_layer, costs=costs, **host)
    draft = verify = 0.0
    tokens = steps = forwards = 0
    firsts, drafted, produced = [], [], []
    for m in matches:
        dr, ve, s = early_exit_trace_seconds(
            m, g=config.g, costs=step_costs, limit=max_new_tokens, skip_steps=1
        )
        draft += dr
        verify += ve
        tokens += s.tokens - s.produced[0]
        steps += s.steps - 1
        forwards += s.draft_forwards - s.drafted[0]
        firsts.append(s.produced[0])
        drafted.append(s.drafted)
        produced.append(s.produced)
    pooled = np.concatenate([np.asarray(m, dtype=bool) for m in matches])
    p_hat = float(pooled.mean())
    c_draft, c_verify = early_exit_step_seconds(
        d=d, exit_layer=config.exit_layer, g=config.g, costs=costs
    )  # the closed form's step costs, with HF's host time in place of tau
    per_token = speculative_seconds_per_token(
        a=p_hat,
        g=config.g,
        draft_s=float(c_draft) - costs.host_s + step_costs.draft_host_s,
        verify_s=float(c_verify) - costs.host_s + step_costs.step_host_s,
    )
    host_s = steps * step_costs.step_host_s + forwards * step_costs.draft_host_s
    accounted = DraftSteps(
        draft_s=draft - forwards * step_costs.draft_host_s,
        verify_s=verify - steps * step_costs.step_host_s, host_s=host_s, steps=steps,
        draft_forwards=forwards, drafted=tuple(drafted), produced=tuple(produced),
        first_step_tokens=tuple(firsts),
    )  # fmt: skip
    n = max(tokens, 1)
    terms = {"draft_s": accounted.draft_s / n, "verify_s": accounted.verify_s / n,
             "hf_host_s": host_s / n}  # fmt: skip
    nan = math.nan  # one object: predictions of the same runs compare equal
    method = Prediction(draft + verify, nan, tokens, 0, costs, runs=len(matches), backend=BACKEND,
                        term_seconds=terms, iid_s=float(per_token) * tokens, rate=p_hat,
                        steps=accounted)  # fmt: skip
    greedy = Prediction(tokens * float(costs.greedy_token_seconds(d)), nan, tokens, 0, costs,
                        runs=len(matches), backend=BACKEND)  # fmt: skip
    return method, greedy


def greedy_after(greedy_runs, first_step_tokens) -> float:
    """Greedy's decode seconds for the tokens after each run's first early-exit step."""
    total = 0.0
    for run, n in zip(greedy_runs, first_step_tokens, strict=True):
        total += run.wall_s - (run.token_times_s[n - 1] if n > 0 else 0.0)
    return total


def steps_agree(runs, steps: DraftSteps) -> bool:
    """True when every measured run drafted and produced what the accounting predicted."""
    for run, drafted, produced in zip(runs, steps.drafted, steps.produced, strict=True):
        if tuple(run.drafted()) != drafted or tuple(run.produced) != produced:
            return False
    return True


@dataclass(frozen=True)
class EarlyExitCheck:
    """What HF early exit's runs showed beside its prediction (``JudgedResult.details``)."""

    steps_agree: bool
    """True when HF's steps were the predicted ones."""
    forward_s: tuple[float, float, float]
    """Measured (draft forwards, verify forwards, outside the forwards) seconds of the median
    round (hooks), after each run's first step."""
    bookkeeping: HFBookkeeping | None = None
    """HF's host time outside the forwards, measured before the rounds (the prediction's)."""

    def breakdown(self, steps: DraftSteps) -> str:
        """Predicted vs measured draft forwards, verify forwards and the time outside them
        (measured in the median round, by the hooks)."""
        draft, verify, rest = self.forward_s
        return (
            f"draft forwards predicted {steps.draft_s:.4g} s / measured {draft:.4g} s "
            f"({steps.draft_forwards} forwards); verify forwards predicted {steps.verify_s:.4g} s"
            f" / measured {verify:.4g} s ({steps.steps} steps); host outside the forwards "
            f"predicted {steps.host_s:.4g} s / measured {rest:.4g} s"
        )


def judge_early_exit(config: EarlyExitConfig, timed, greedy, matches, *, profile: CostProfile,
                     max_new_tokens: int, exact: bool,
                     bookkeeping: HFBookkeeping | None = None) -> JudgedResult:  # fmt: skip
    """HF early exit's judged result from its timed runs and greedy's (``TimedMethod``s), the
    match sequences at its layer and HF's bookkeeping measured beforehand (or None): greedy is
    measured and predicted over the same tokens (after each run's first step)."""
    predicted, greedy_predicted = predict_early_exit(
        profile, matches, config, max_new_tokens=max_new_tokens, bookkeeping=bookkeeping
    )
    p, steps = predicted, predicted.steps
    firsts = [r.first_step_tokens for r in timed.runs]
    greedy_rounds = Spread.of([greedy_after(runs, firsts) for runs in greedy.results])
    check = EarlyExitCheck(steps_agree(timed.runs, steps), _median_round_seconds(timed),
                           bookkeeping)  # fmt: skip
    iid_err = p.iid_s / timed.spread.median - 1
    line = (
        f"  {config.label}: p_hat {p.p_hat:.3f}, {steps.steps} steps, {steps.draft_forwards} "
        f"draft forwards, {p.tokens} tokens; predicted {p.closed_form_s:.4g} s (i.i.d. closed "
        f"form {p.iid_s:.4g} s, {100 * iid_err:+.1f} %), measured {timed.spread.median:.4g} s; "
        f"steps as predicted: {'yes' if check.steps_agree else 'NO'}; tokens equal greedy's: "
        f"{'yes' if exact else 'NO'}"
    )
    return JudgedResult(
        config, timed.spread, predicted, greedy_rounds, greedy_predicted, exact,
        method_name="early exit",
        columns=dict(k=1, p_hat=p.p_hat, exit_layer=config.exit_layer, draft_tokens=config.g,
                     steps_agree=check.steps_agree),
        lines=(line, "    " + check.breakdown(steps)),
        notes=() if check.steps_agree else ("HF's steps differ from the predicted ones",),
        details=check,
    )  # fmt: skip


def _median_round_seconds(method) -> tuple[float, float, float]:
    """(draft forwards, verify forwards, outside them) seconds of the round with the median
    total (the lower middle one for an even count)."""
    totals = method.totals_s
    middle = sorted(range(len(totals)), key=totals.__getitem__)[(len(totals) - 1) // 2]
    runs = method.results[middle]
    pairs = [r.forward_seconds() for r in runs]
    draft, verify = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
    return draft, verify, totals[middle] - draft - verify
