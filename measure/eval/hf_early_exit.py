"""Self-speculative early exit run and timed through transformers (``assistant_early_exit``).

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

**Bookkeeping.** ``measure_bookkeeping`` measures, on a synthetic prompt, the seconds
``generate`` spends outside the model's forwards per step and per draft forward: a term the
cost profile lacks (``measure.eval.early_exit`` prices it).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from measure import clock as clocks
from measure.checks import as_prompt_ids, eos_set
from measure.clock import synchronize
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
        forwards.append(Forward(base.config.num_hidden_layers < d, rows, clocks.host_clock(), 0.0))

    def post(_module, _args, _kwargs, _output):
        synchronize(device)
        forwards[-1].end = clocks.host_clock()

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
        start = clocks.host_clock()
        out = model.generate(ids, streamer=streamer, **kwargs)
        synchronize(model.device)
        stop = clocks.host_clock()
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
    model, exit_layer: int, *, max_new_tokens: int = 16, repeats: int = 5, gs=(1, 3)
) -> HFBookkeeping:
    """Seconds per step and per draft forward that HF early exit spends outside the model's
    forwards: ``repeats`` decodes of a synthetic prompt at each draft length in ``gs``
    (min_new_tokens = max_new_tokens, no end-of-sequence stop); per draft length the median
    run (outside time, steps and draft forwards after the first step), then the two unknowns
    solved from those medians (robust to a slow spell on a shared machine), clipped at 0."""
    vocab = model.config.get_text_config().vocab_size
    prompt = [(7 * i + 3) % vocab for i in range(PROBE_PROMPT_TOKENS)]
    rows, outside, runs = [], [], 0
    for g in dict.fromkeys(gs):
        config = EarlyExitConfig(exit_layer, g)
        hf_early_exit(model, prompt, config=config, max_new_tokens=2)  # warm-up
        per_g = []
        for _ in range(repeats):
            run = hf_early_exit(model, prompt, config=config, max_new_tokens=max_new_tokens)
            draft, verify = run.forward_seconds()
            drafted = run.drafted()[1:]
            per_g.append((run.wall_s - draft - verify, len(drafted), sum(drafted)))
        per_g.sort()
        median = per_g[(len(per_g) - 1) // 2]
        outside.append(median[0])
        rows.append([median[1], median[2]])
        runs += repeats
    a, b = np.asarray(rows, dtype=float), np.asarray(outside)
    if np.linalg.matrix_rank(a) < 2:  # one draft length: all of it per step
        per_step, per_draft = float(b.sum() / max(a[:, 0].sum(), 1.0)), 0.0
    else:
        per_step, per_draft = np.linalg.lstsq(a, b, rcond=None)[0]
    return HFBookkeeping(max(float(per_step), 0.0), max(float(per_draft), 0.0), runs)
