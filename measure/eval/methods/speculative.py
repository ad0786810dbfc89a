"""Draft-model speculative decoding through the method interface (``ppd validate --spec-draft
MODEL --draft-tokens G``): decoded by ``measure.decode.speculative`` (exact: greedy's tokens),
predicted from the target's cost profile, the draft's own cost profile and each run's steps.

**Prediction** (nothing fitted on the timed runs). A step that drafts q tokens costs q draft
forwards and one verify over q + 1 positions (Leviathan et al. 2023, section 3;
``ppdmodel.alternatives``):

    draft forward over r rows  = e' + d' L'_r + h'_f + tau'   (the draft's profile, d' layers)
    verify over q + 1 positions = e + d L_{q+1} + h_f + tau   (the target's profile)

(both ``ppdmodel.alternatives.forward_seconds``, the planner's definition)

with L_r the profile's per-layer time of an r-row batch (the proxy for r positions of one
sequence that HF early exit and the planner use); a step's first draft forward feeds 2 rows
after a fully accepted step (the draft never fed its last proposal), else 1. Summed over each
run's steps as they ran, this is exact under the profiles. Beside it, the i.i.d. closed form
``ppdmodel.alternatives.speculative_seconds_per_token`` (one definition of E[X + 1] with the
planner's draft-model rows) at the runs' pooled acceptance rate a (accepted / judged drafts),
times the tokens. The planner's inputs are printed: a and the cost ratio c of a draft token's
device time to a greedy token's (``ppd plan --draft-acceptance a --draft-cost-ratio c``).

**The draft**: a Hugging Face folder, a ``.gguf`` file or a known model name (``measure.hf.
loading.load_model``), or ``self:N``, the target's first N layers with its final norm and LM
head (``measure.decode.speculative.self_draft``). Its profile is measured before the rounds,
untimed (``measure.profile.profile.measure_profile``, the ``single`` backend at 1 and 2 rows),
unless a ``draft_profile`` file is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from measure.decode.speculative import SpecResult, self_draft, spec_generate
from measure.eval.judged import JudgedResult
from measure.eval.methods.base import InProcess, JudgeInputs, RunInputs, TimedMethod
from measure.eval.predict import DraftSteps, Prediction
from measure.hf.loading import load_model
from measure.profile.profile import load_profile, measure_profile
from ppdmodel.alternatives import MAX_DRAFT, forward_seconds, speculative_seconds_per_token
from ppdmodel.cost_profile import CostProfile
from ppdmodel.costs import DecodeCosts
from ppdmodel.validation import check_positive_int

BACKEND = "single"
"""Speculative decoding runs in the calling process: the ``single`` backend's costs."""
SELF_PREFIX = "self:"
"""``self:N``: a draft of the target's first N layers."""
WARMUP_TOKENS = 2


@dataclass(frozen=True)
class SpecConfig:
    """Draft-model speculative decoding: the draft, and g tokens drafted per step."""

    draft: str
    """A model folder, ``.gguf`` file or known name, or ``self:N`` (module docstring)."""
    g: int
    """Tokens the draft proposes per step (``--draft-tokens``)."""
    draft_profile: str | None = None
    """A cost profile of the draft (``ppd measure profile``); None: measured before the rounds."""
    profile_repeats: int = 5
    """Rounds of the draft's profile when it is measured here."""

    def __post_init__(self) -> None:
        if not isinstance(self.draft, str) or not self.draft:
            raise ValueError(f"draft must name a model or self:N, got {self.draft!r}")
        check_positive_int("g", self.g, limit=MAX_DRAFT)
        check_positive_int("profile_repeats", self.profile_repeats)
        if self.draft.startswith(SELF_PREFIX):
            check_positive_int("self-draft layers", _self_layers(self.draft))

    @property
    def label(self) -> str:
        """'spec draft=self:8 g=3'."""
        return f"spec draft={self.draft} g={self.g}"


def _self_layers(draft: str) -> int:
    text = draft[len(SELF_PREFIX) :]
    if not text.isdigit():
        raise ValueError(f"a self-draft is self:N with N the layers it keeps, got {draft!r}")
    return int(text)


def _forward(costs: DecodeCosts, *, d: int, rows: int = 1) -> float:
    """One forward of a d-layer model over ``rows`` positions (``ppdmodel.alternatives.
    forward_seconds``, the planner's definition)."""
    return float(forward_seconds(d=d, costs=costs, rows=rows))


def step_seconds(costs, draft_costs, *, d: int, d_draft: int, drafted: int, first_rows: int = 1):
    """(draft seconds, verify seconds) of one step drafting ``drafted`` tokens (module doc)."""
    draft = 0.0
    if drafted:
        draft = _forward(draft_costs, d=d_draft, rows=first_rows)
        draft += (drafted - 1) * _forward(draft_costs, d=d_draft)
    return draft, _forward(costs, d=d, rows=drafted + 1)


def predict_spec(costs: DecodeCosts, draft_costs: DecodeCosts, runs: list[SpecResult], *, d: int,
                 d_draft: int, g: int) -> Prediction:  # fmt: skip
    """Exact on each run's steps (``steps``; host time inside each forward), and the i.i.d.
    closed form at the pooled acceptance rate (``iid_s``, ``rate``) beside it (module
    docstring)."""
    draft = verify = 0.0
    for r in runs:
        for q, rows in zip(r.drafted, r.draft_rows, strict=True):
            dr, ve = step_seconds(costs, draft_costs, d=d, d_draft=d_draft, drafted=q,
                                  first_rows=max(rows, 1))  # fmt: skip
            draft += dr
            verify += ve
    judged = [x for r in runs for x in r.acceptance]
    a = sum(judged) / len(judged) if judged else 0.0
    tokens = sum(len(r.tokens) for r in runs)
    per_token = speculative_seconds_per_token(
        a=a, g=g, draft_s=_forward(draft_costs, d=d_draft),
        verify_s=_forward(costs, d=d, rows=g + 1),
    )  # fmt: skip
    steps = DraftSteps(
        draft, verify, 0.0, sum(len(r.drafted) for r in runs), sum(sum(r.drafted) for r in runs),
        drafted=tuple(tuple(r.drafted) for r in runs),
        produced=tuple(tuple(x + 1 for x in r.accepted) for r in runs),
    )  # fmt: skip
    n = max(tokens, 1)
    return Prediction(draft + verify, math.nan, tokens, sum(judged), costs, runs=len(runs),
                      backend=BACKEND, term_seconds=dict(draft_s=draft / n, verify_s=verify / n),
                      iid_s=float(per_token) * tokens, rate=a, steps=steps)  # fmt: skip


def cost_ratio(costs: DecodeCosts, draft_costs: DecodeCosts, *, d: int, d_draft: int) -> float:
    """A draft token's device time / a greedy token's of the target (the planner's c, ``ppd
    plan --draft-cost-ratio``)."""
    device = float(costs.greedy_token_seconds(d)) - costs.host_s
    draft_device = _forward(draft_costs, d=d_draft) - draft_costs.host_s
    return draft_device / device if device > 0 else math.nan


@dataclass(frozen=True)
class Speculative(InProcess):
    """Draft-model speculative decoding at one draft and draft length (``Method``)."""

    config: SpecConfig
    argument = "methods"
    plan_method = "draft-model"  # no simulator schedule: ppd plan --confirm samples its steps
    plan_fields = (("g", "g"),)

    def check(self, d: int, profile: CostProfile | None) -> None:
        """A self-draft keeps fewer layers than the target; the profile measured the target's
        batch at g + 1 rows (the verify's positions)."""
        if self.config.draft.startswith(SELF_PREFIX) and _self_layers(self.config.draft) >= d:
            raise ValueError(f"--spec-draft {self.config.draft}: a self-draft keeps fewer than "
                             f"the target's d = {d} layers")  # fmt: skip
        if profile is not None:
            ks = profile.backends[BACKEND].measured_ks
            if max(ks) < self.config.g + 1:
                raise ValueError(
                    f"--draft-tokens {self.config.g}: the verify runs g + 1 = {self.config.g + 1}"
                    f" positions, but the profile measured batches of at most {max(ks)} rows "
                    f"(measure one with --k {self.config.g + 1})"
                )

    def bind(self, model, prompts, run: RunInputs) -> SpeculativeRun:
        """The draft loaded and its profile measured (or read), untimed, once per draft."""
        if run.settings.decoding.do_sample:
            raise ValueError("--spec-draft: speculative decoding is timed with greedy decoding "
                             "only")  # fmt: skip
        c = self.config
        draft = run.once(("draft", c.draft), lambda: _load_draft(model, c.draft))
        context = round(sum(map(len, prompts)) / len(prompts) + run.max_new_tokens / 2)
        profile = run.once(("draft profile", c.draft, c.draft_profile),
                           lambda: _draft_profile(c, draft, context))  # fmt: skip
        return SpeculativeRun(c, model, draft, profile, prompts, run)


def _draft_profile(c: SpecConfig, draft, context: int) -> CostProfile:
    """The draft's profile: read from ``c.draft_profile``, or measured now (1 and 2 rows)."""
    if c.draft_profile is not None:
        return load_profile(c.draft_profile, model=draft)
    return measure_profile(draft, ks=(1, 2), context_tokens=context, repeats=c.profile_repeats,
                           calls=2)  # fmt: skip


def _load_draft(model, draft: str):
    if draft.startswith(SELF_PREFIX):
        return self_draft(model, _self_layers(draft))
    return load_model(draft)[0]


@dataclass(frozen=True)
class SpeculativeRun:
    """Speculative decoding bound to the target, the draft and the prompts."""

    config: SpecConfig
    model: object
    draft: object
    draft_profile: CostProfile
    prompts: list
    run: RunInputs

    def decode(self, indices=None, warmup: bool = True) -> list[SpecResult]:
        """Every prompt (a whole run), one untimed short decode first."""
        kw = dict(draft_tokens_per_step=self.config.g, eos_token_id=self.run.settings.eos_token_id)
        if warmup:
            spec_generate(self.model, self.draft, self.prompts[0], max_new_tokens=WARMUP_TOKENS,
                          **kw)  # fmt: skip
        return [spec_generate(self.model, self.draft, p, max_new_tokens=self.run.max_new_tokens,
                              **kw) for p in self.prompts]  # fmt: skip

    def closed_form(self, profile: CostProfile, runs) -> Prediction:
        """From the target's and the draft's profiles and each run's steps."""
        return predict_spec(profile.backends[BACKEND].base,
                            self.draft_profile.backends[BACKEND].base, runs, d=profile.d,
                            d_draft=self.draft_profile.d, g=self.config.g)  # fmt: skip

    def judge(self, timed: TimedMethod, inputs: JudgeInputs) -> JudgedResult:
        c, profile = self.config, inputs.profile
        p = self.closed_form(profile, timed.runs)
        ratio = cost_ratio(profile.backends[BACKEND].base, self.draft_profile.backends[BACKEND]
                           .base, d=profile.d, d_draft=self.draft_profile.d)  # fmt: skip
        line = (f"speculative decoding {c.label}: draft of {self.draft_profile.d} layers, "
                f"acceptance {p.p_hat:.3f} over {p.steps.steps} steps, {p.tokens} tokens; "
                f"predicted {p.closed_form_s:.4g} s (draft {p.steps.draft_s:.4g} s, verify "
                f"{p.steps.verify_s:.4g} s; i.i.d. closed form {p.iid_s:.4g} s), measured "
                f"{timed.spread.median:.4g} s; planner inputs: --draft-acceptance "
                f"{p.p_hat:.3f} --draft-cost-ratio {ratio:.3f}")  # fmt: skip
        return JudgedResult(
            c, timed.spread, p, inputs.greedy.spread, inputs.greedy_predicted[BACKEND],
            inputs.exact[c], method_name="speculative decoding",
            columns=dict(k=1, p_hat=p.p_hat, draft_tokens=c.g), lines=(line,),
        )  # fmt: skip
