"""Self-speculative early exit, timed through transformers and predicted from a cost profile.

**What runs.** ``model.generate(assistant_early_exit=L)`` drafts with the model's first L
layers and verifies with all d (transformers' ``EarlyExitCandidateGenerator``). Its draft
length and confidence stop are read from the *model's* ``generation_config`` (the assistant's
config is a copy of it; ``generate(num_assistant_tokens=...)`` does not reach the draft), so
``constant_draft`` sets ``num_assistant_tokens = g``, ``num_assistant_tokens_schedule =
"constant"`` and ``assistant_confidence_threshold = 0`` (no ``ConfidenceCriteria``) there for
the call and restores them after. Forward hooks record every draft and verify forward (rows,
start, end); a streamer records the tokens each step adds.

**Prefill.** In assisted decoding the first step cannot start from a pre-filled cache (its
first verify always feeds the whole prompt), so the first step is the prefill: its draft (the
assistant's L-layer pass over the prompt) and its verify (the target's pass over the prompt
and the first drafts). The clock starts when that first verify returns, and the tokens it
produced are left out of the run's tokens, of its prediction and of the greedy reference:
greedy's seconds for the same tokens are its decode seconds after the token where the first
step ended (``GreedyResult.token_times_s``). Greedy itself excludes its prefill too.

**Prediction** (nothing fitted on the timed runs): the match sequence at layer L, k = 1, on
the same prompts, measured separately with ``measure.match.rate.measure_prompt`` (positions
where layer L's top-1 under the final norm and LM head equals the greedy token), gives each
run's steps exactly (``ppdmodel.early_exit``); the profile prices each forward
(``ppdmodel.early_exit.EarlyExitCosts``). Beside it, the i.i.d. closed form
``ppdmodel.alternatives`` (``early_exit_step_seconds``, ``speculative_seconds_per_token``)
at the pooled match rate, with the same host time. The profile has no term for HF
``generate``'s Python bookkeeping outside the model's forwards (a ``generate`` call per
draft, logits processing, cache crops): ``measure_bookkeeping`` measures it beforehand on a
synthetic prompt (not the judged ones), as seconds per step and per draft forward, from the
time outside the hooked forwards.
Approximated: the LM head on q + 1 rows (priced as on one row), r positions of one sequence
(priced with the profile's k-row slope), and a draft that stops at an end-of-sequence token
it proposed (the step accounting then differs from HF's; ``steps_agree`` says so).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from measure.decode.checks import as_prompt_ids, eos_set
from measure.hf.layer_split import LayerSplitModel
from measure.match.config import make_config
from measure.match.rate import measure_prompt
from measure.profile.clock import host_clock, synchronize
from measure.profile.stats import Spread
from ppdmodel.alternatives import early_exit_step_seconds, speculative_seconds_per_token
from ppdmodel.cost_profile import CostProfile
from ppdmodel.early_exit import EarlyExitCosts, early_exit_trace_seconds
from ppdmodel.validation import check_positive_int

BACKEND = "single"
"""HF early exit runs in the calling process: its costs are the ``single`` backend's."""


@dataclass(frozen=True)
class EarlyExitConfig:
    """One early-exit method: draft with layers 1..exit_layer, g tokens per step."""

    exit_layer: int
    g: int

    def __post_init__(self) -> None:
        check_positive_int("exit_layer", self.exit_layer)
        check_positive_int("g", self.g, limit=1024)

    @property
    def label(self) -> str:
        """'early exit L=22 g=3'."""
        return f"early exit L={self.exit_layer} g={self.g}"

    def check(self, d: int) -> None:
        """Refuse an exit layer outside [1, d - 1]."""
        if not 1 <= self.exit_layer <= d - 1:
            raise ValueError(f"early exit layer must be in [1, d - 1] = [1, {d - 1}], got "
                             f"{self.exit_layer}")  # fmt: skip


@dataclass
class Forward:
    """One forward of the model inside ``generate``."""

    draft: bool
    rows: int
    start: float
    end: float


@dataclass
class EarlyExitResult:
    """One prompt decoded by HF early exit: all tokens, and the decode after the first step."""

    tokens: list[int]
    """Every generated token (the first step's included)."""
    wall_s: float
    """Seconds from the end of the first verify to the end of ``generate``."""
    produced: list[int]
    """Tokens each step added (streamer), first step included."""
    forwards: list[Forward] = field(default_factory=list)
    total_s: float = 0.0
    """The whole ``generate`` call, prefill included."""

    @property
    def first_step_tokens(self) -> int:
        return self.produced[0] if self.produced else 0

    @property
    def decode_tokens(self) -> int:
        """Tokens produced after the first step (what ``wall_s`` times)."""
        return len(self.tokens) - self.first_step_tokens

    def drafted(self) -> list[int]:
        """Draft forwards of each step (from the hooks), first step included."""
        out, count = [], 0
        for f in self.forwards:
            if f.draft:
                count += 1
            else:
                out.append(count)
                count = 0
        return out

    def forward_seconds(self) -> tuple[float, float]:
        """(draft, verify) forward seconds after the first step (LM head included)."""
        ends = [i for i, f in enumerate(self.forwards) if not f.draft]
        later = self.forwards[ends[0] + 1 :] if ends else []
        draft = sum(f.end - f.start for f in later if f.draft)
        verify = sum(f.end - f.start for f in later if not f.draft)
        return draft, verify


class _StepStreamer:
    """Counts the tokens each step adds (transformers calls ``put`` with the prompt first)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self.sizes.append(int(value.numel()))

    def end(self) -> None:
        pass


@contextlib.contextmanager
def constant_draft(model, g: int):
    """Set a constant draft length g and no confidence stop on ``model.generation_config``
    (where transformers' assistant reads them), restoring the old values afterwards."""
    config = model.generation_config
    names = ("num_assistant_tokens", "num_assistant_tokens_schedule",
             "assistant_confidence_threshold")  # fmt: skip
    old = {n: getattr(config, n, None) for n in names}
    config.num_assistant_tokens = int(g)
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0
    try:
        yield
    finally:
        for n, v in old.items():
            setattr(config, n, v)


@contextlib.contextmanager
def _recording(model, d: int):
    base = getattr(model, model.base_model_prefix)
    forwards: list[Forward] = []
    device = model.device

    def pre(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        rows = int(ids.shape[1]) if ids is not None else 0
        forwards.append(Forward(base.config.num_hidden_layers < d, rows, host_clock(), 0.0))

    def post(_module, _args, _kwargs, _output):
        synchronize(device)
        forwards[-1].end = host_clock()

    handles = [
        model.register_forward_pre_hook(pre, with_kwargs=True),
        model.register_forward_hook(post, with_kwargs=True),
    ]
    try:
        yield forwards
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def hf_early_exit(
    model, prompt, *, config: EarlyExitConfig, max_new_tokens: int, eos_token_id=None
) -> EarlyExitResult:
    """Decode one prompt with ``generate(assistant_early_exit=L)``, constant g (module doc)."""
    d = model.config.get_text_config().num_hidden_layers
    config.check(d)
    ids = as_prompt_ids(prompt, model.device)
    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=0,
        assistant_early_exit=config.exit_layer,
    )
    eos = sorted(eos_set(eos_token_id))
    if eos:
        kwargs["eos_token_id"] = eos
    else:
        kwargs["min_new_tokens"] = max_new_tokens
    streamer = _StepStreamer()
    with constant_draft(model, config.g), _recording(model, d) as forwards:
        synchronize(model.device)
        start = host_clock()
        out = model.generate(ids, streamer=streamer, **kwargs)
        synchronize(model.device)
        stop = host_clock()
    first_verify = next((f.end for f in forwards if not f.draft), stop)
    return EarlyExitResult(
        tokens=out[0, ids.shape[1] :].tolist(),
        wall_s=stop - first_verify,
        produced=streamer.sizes,
        forwards=forwards,
        total_s=stop - start,
    )


def run_early_exit(model, prompts, config: EarlyExitConfig, *, max_new_tokens, eos_token_id=None):
    """``hf_early_exit`` on every prompt (one short warm-up call first, not returned)."""
    hf_early_exit(model, prompts[0], config=config, max_new_tokens=2, eos_token_id=eos_token_id)
    return [
        hf_early_exit(
            model, p, config=config, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
        )
        for p in prompts
    ]


@dataclass(frozen=True)
class HFBookkeeping:
    """HF ``generate``'s seconds outside the model's forwards, per step and per draft
    forward, measured on a synthetic prompt (``measure_bookkeeping``)."""

    per_step_s: float
    per_draft_s: float
    runs: int

    def describe(self) -> str:
        return (
            f"HF bookkeeping outside the forwards (measured on a synthetic prompt, {self.runs} "
            f"runs): {1e3 * self.per_step_s:.3g} ms per step + {1e3 * self.per_draft_s:.3g} ms "
            "per draft forward"
        )


PROBE_PROMPT_TOKENS = 8
"""Length of the synthetic prompt ``measure_bookkeeping`` decodes."""


def measure_bookkeeping(
    model, exit_layer: int, *, max_new_tokens: int = 16, repeats: int = 3, gs=(1, 3)
) -> HFBookkeeping:
    """Seconds per step and per draft forward that HF early exit spends outside the model's
    forwards: ``repeats`` decodes of a synthetic prompt at each draft length in ``gs``
    (min_new_tokens = max_new_tokens, no end-of-sequence stop), least squares over the
    runs' outside time against their steps and draft forwards (each after the first step),
    clipped at 0."""
    vocab = model.config.get_text_config().vocab_size
    prompt = [(7 * i + 3) % vocab for i in range(PROBE_PROMPT_TOKENS)]
    rows, outside = [], []
    for g in dict.fromkeys(gs):
        config = EarlyExitConfig(exit_layer, g)
        hf_early_exit(model, prompt, config=config, max_new_tokens=2)  # warm-up
        for _ in range(repeats):
            run = hf_early_exit(model, prompt, config=config, max_new_tokens=max_new_tokens)
            draft, verify = run.forward_seconds()
            drafted = run.drafted()[1:]
            rows.append([len(drafted), sum(drafted)])
            outside.append(run.wall_s - draft - verify)
    a, b = np.asarray(rows, dtype=float), np.asarray(outside)
    if np.linalg.matrix_rank(a) < 2:  # one draft length: all of it per step
        per_step, per_draft = float(b.sum() / max(a[:, 0].sum(), 1.0)), 0.0
    else:
        per_step, per_draft = np.linalg.lstsq(a, b, rcond=None)[0]
    return HFBookkeeping(max(float(per_step), 0.0), max(float(per_draft), 0.0), len(outside))


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


@dataclass(frozen=True)
class EarlyExitPrediction:
    """Predicted decode seconds (after each run's first step) of one early-exit method."""

    predicted_s: float
    """Exact step accounting on the realized match sequences, priced by the profile."""
    iid_s: float
    """The i.i.d. closed form (ell -> infinity) at the pooled match rate with
    ``early_exit_step_seconds``' step costs and the same host time, times the decode
    tokens."""
    draft_s: float
    """Draft forwards (layers 1..L and the LM head), host time excluded."""
    verify_s: float
    """Verify forwards (d layers and the LM head), host time excluded."""
    host_s: float
    """Host time: the measured HF bookkeeping, or the profile's tau per forward."""
    tokens: int
    """Decode tokens (after each run's first step)."""
    steps: int
    draft_forwards: int
    p_hat: float
    """Layer-L top-1 matches per position, all positions of all prompts."""
    greedy_s: float
    """Greedy's predicted seconds for the same tokens (tokens x G)."""
    first_step_tokens: tuple[int, ...]
    """Tokens of each run's first step (the untimed prefill step), predicted."""
    drafted: tuple[tuple[int, ...], ...]
    produced: tuple[tuple[int, ...], ...]
    """Per run, each step's drafted and produced tokens, predicted."""

    def terms(self) -> dict[str, float]:
        """Seconds per token: draft and verify forwards and host time (they sum to
        predicted / tokens)."""
        n = max(self.tokens, 1)
        return {"draft_s": self.draft_s / n, "verify_s": self.verify_s / n,
                "hf_host_s": self.host_s / n}  # fmt: skip


def predict_early_exit(
    profile: CostProfile,
    matches,
    config: EarlyExitConfig,
    *,
    max_new_tokens: int,
    bookkeeping: HFBookkeeping | None = None,
) -> EarlyExitPrediction:
    """Predict one method from the profile and per-prompt match sequences at its layer;
    ``bookkeeping``: HF's host time measured beforehand (None: the profile's tau per forward)."""
    d = profile.d
    config.check(d)
    costs = profile.costs(BACKEND, d_bar=config.exit_layer)
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
    return EarlyExitPrediction(
        predicted_s=draft + verify,
        iid_s=float(per_token) * tokens,
        draft_s=draft - forwards * step_costs.draft_host_s,
        verify_s=verify - steps * step_costs.step_host_s,
        host_s=host_s,
        tokens=tokens,
        steps=steps,
        draft_forwards=forwards,
        p_hat=p_hat,
        greedy_s=tokens * float(costs.greedy_token_seconds(d)),
        first_step_tokens=tuple(firsts),
        drafted=tuple(drafted),
        produced=tuple(produced),
    )


def greedy_after(greedy_runs, first_step_tokens) -> float:
    """Greedy's decode seconds for the tokens after each run's first early-exit step."""
    total = 0.0
    for run, n in zip(greedy_runs, first_step_tokens, strict=True):
        total += run.wall_s - (run.token_times_s[n - 1] if n > 0 else 0.0)
    return total


def steps_agree(runs, prediction: EarlyExitPrediction) -> bool:
    """True when every measured run drafted and produced what the accounting predicted."""
    for run, drafted, produced in zip(runs, prediction.drafted, prediction.produced, strict=True):
        if tuple(run.drafted()) != drafted or tuple(run.produced) != produced:
            return False
    return True


@dataclass
class EarlyExitOutcome:
    """One early-exit method in ``ppd validate``: measured, predicted, greedy for the same
    tokens, exactness and whether HF's steps were the predicted ones."""

    config: EarlyExitConfig
    measured: Spread
    predicted: EarlyExitPrediction
    greedy_measured: Spread
    """Greedy's decode seconds for the same tokens, per round."""
    exact: bool
    steps_agree: bool
    forward_s: tuple[float, float] = (float("nan"), float("nan"))
    """Measured (draft, verify) forward seconds of the first round, after the first step."""

    @property
    def rel_err(self) -> float:
        return self.predicted.predicted_s / self.measured.median - 1

    @property
    def iid_rel_err(self) -> float:
        return self.predicted.iid_s / self.measured.median - 1

    @property
    def speedup_measured(self) -> float:
        return self.greedy_measured.median / self.measured.median

    @property
    def speedup_predicted(self) -> float:
        return self.predicted.greedy_s / self.predicted.predicted_s

    def breakdown(self) -> str:
        """Predicted vs measured draft forwards, verify forwards and the time outside them
        (measured: the first round's hooks; the outside time is the median's remainder)."""
        p = self.predicted
        draft, verify = self.forward_s
        rest = self.measured.median - draft - verify
        return (
            f"draft forwards predicted {p.draft_s:.4g} s / measured {draft:.4g} s "
            f"({p.draft_forwards} forwards); verify forwards predicted {p.verify_s:.4g} s / "
            f"measured {verify:.4g} s ({p.steps} steps); host outside the forwards predicted "
            f"{p.host_s:.4g} s / measured {rest:.4g} s"
        )


def evaluate_early_exit(
    profile: CostProfile,
    configs,
    timed: dict,
    greedy,
    matches: dict,
    *,
    max_new_tokens: int,
    exact: dict,
    bookkeeping: HFBookkeeping | None = None,
) -> list[EarlyExitOutcome]:
    """One ``EarlyExitOutcome`` per config from the timed methods (``timed[config]``: a
    ``measure.eval.repeat.TimedMethod``), greedy's, the layer match sequences and HF's
    bookkeeping measured beforehand (or None)."""
    outcomes = []
    for config in configs:
        method = timed[config]
        predicted = predict_early_exit(
            profile,
            matches[config.exit_layer],
            config,
            max_new_tokens=max_new_tokens,
            bookkeeping=bookkeeping,
        )
        firsts = [r.first_step_tokens for r in method.runs]
        greedy_rounds = [greedy_after(runs, firsts) for runs in greedy.results]
        outcomes.append(
            EarlyExitOutcome(
                config=config,
                measured=method.spread,
                predicted=predicted,
                greedy_measured=Spread.of(greedy_rounds),
                exact=exact[config],
                steps_agree=steps_agree(method.runs, predicted),
                forward_s=_forward_seconds(method.runs),
            )
        )
    return outcomes


def _forward_seconds(runs) -> tuple[float, float]:
    pairs = [r.forward_seconds() for r in runs]
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)
