"""Self-speculative early exit on one realized trace: exact step counts and their seconds.

``ppdmodel.alternatives`` gives the i.i.d. closed form (ell -> infinity). Here the match
outcomes of one generation are known: ``matches[j - 1]`` is True iff layer L's top-1 in the
pass that produced x_j equals x_j (k = 1; positions j = 1..ell). A draft proposes layer L's
top-1 given the accepted (hence true) prefix, so its i-th token is accepted iff it and all
before it match. One *step*, with n tokens already produced, drafts q = min(g, limit - n - 1)
tokens (transformers' ``_calculate_new_tokens``: the draft never reaches the last allowed
token), accepts the longest matching prefix X <= q and adds the target's own token: it
produces X + 1 tokens, cut at the trace's end (an end-of-sequence token).

Step costs as transformers 5 runs ``generate(assistant_early_exit=L)`` (read in
``generation/candidate_generator.py`` and ``utils.py``): the assistant is the model with
``num_hidden_layers`` set to L and keeps its *own* KV cache for layers 1..L; each step it
crops that cache to n - 2 positions and re-feeds the last two tokens, so a step's first draft
forward has 2 rows and the other q - 1 have 1 row, each with the LM head on 1 row; the target
verifies n's last token and the q drafts in one forward of q + 1 rows through all d layers
(nothing reused from the draft) with the LM head on q + 1 rows. Under ``DecodeCosts``:

    draft(r)  = e + L layer(r) + h_e + tau,     verify(r) = e + d layer(r) + h_f + tau,
    layer(r)  = layer_s + (r - 1) candidate_extra_row_layer_s

(the profile's extra-row slope of a k-row batch stands in for r positions of one sequence;
the LM head on r rows is priced as on one row: memory-bound, it streams the same weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import numpy as np

from ppdmodel.costs import DecodeCosts
from ppdmodel.passes import check_costs
from ppdmodel.validation import MAX_EXACT_INT, as_int, as_real, check_positive_int

MAX_DRAFT = 1024
"""Longest draft length g accepted (as ``ppdmodel.alternatives``)."""
MAX_TRACE = 10**6
"""Longest trace (positions) accepted: the accounting walks it step by step."""


@dataclass(frozen=True)
class EarlyExitSteps:
    """The steps of one trace: tokens drafted and drafts accepted in each."""

    drafted: tuple[int, ...]
    accepted: tuple[int, ...]
    produced: tuple[int, ...]
    """Tokens each step added (accepted + 1, cut at the trace's end)."""

    @property
    def steps(self) -> int:
        """Verify forwards of the target."""
        return len(self.drafted)

    @property
    def tokens(self) -> int:
        return sum(self.produced)

    @property
    def draft_forwards(self) -> int:
        """Draft forwards of the assistant (one per drafted token)."""
        return sum(self.drafted)


def _check_matches(matches) -> np.ndarray:
    try:
        arr = np.asarray(matches)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"matches must be a 1-D sequence of booleans: {exc}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("matches must be a non-empty 1-D sequence of booleans (positions 1..ell)")
    if arr.size > MAX_TRACE:
        raise ValueError(f"matches must hold at most {MAX_TRACE} positions, got {arr.size}")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError("matches must hold only booleans or 0/1")
    return arr.astype(bool)


def early_exit_steps(matches, *, g: int, limit: int | None = None) -> EarlyExitSteps:
    """Exact step accounting of one trace (module docstring).

    ``matches``: booleans for positions 1..ell; ``g``: draft length (constant schedule);
    ``limit``: max_new_tokens of the run (>= ell; default ell).
    """
    m = _check_matches(matches)
    g = as_int("g", g, limit=MAX_DRAFT)
    ell = m.size
    limit = ell if limit is None else as_int("limit", limit)
    if limit < ell:
        raise ValueError(f"limit must be >= the trace's length {ell}, got {limit}")
    drafted, accepted, produced = [], [], []
    n = 0
    while n < ell:
        q = max(0, min(g, limit - n - 1))
        x = 0
        while x < q and n + x < ell and m[n + x]:
            x += 1
        drafted.append(q)
        accepted.append(x)
        produced.append(min(x + 1, ell - n))
        n += produced[-1]
    return EarlyExitSteps(tuple(drafted), tuple(accepted), tuple(produced))


@dataclass(frozen=True)
class EarlyExitCosts:
    """Forward costs of HF's self-speculative early exit at exit layer L (module docstring)."""

    d: int
    exit_layer: int
    costs: DecodeCosts
    first_draft_rows: int = 2
    """Rows of a step's first draft forward (HF re-feeds the last two tokens)."""
    host_draft_s: float | None = None
    """Host seconds per draft forward (HF ``generate``'s bookkeeping, when measured); None:
    the profile's host time per token tau."""
    host_step_s: float | None = None
    """Host seconds per step (beside its verify forward), when measured; None: tau."""

    def __post_init__(self) -> None:
        check_costs(self.costs)
        for name in ("d", "exit_layer", "first_draft_rows"):
            object.__setattr__(self, name, as_int(name, getattr(self, name)))
        for name in ("host_draft_s", "host_step_s"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, as_real(name, getattr(self, name)))
        if self.exit_layer >= self.d:
            raise ValueError(f"exit_layer must be in [1, d - 1] = [1, {self.d - 1}]")

    @property
    def draft_host_s(self) -> float:
        """Host seconds charged to each draft forward."""
        return self.costs.host_s if self.host_draft_s is None else self.host_draft_s

    @property
    def step_host_s(self) -> float:
        """Host seconds charged to each step (with its verify forward)."""
        return self.costs.host_s if self.host_step_s is None else self.host_step_s

    def layer_s(self, rows: int) -> float:
        """One layer over ``rows`` positions of one sequence, seconds."""
        rows = check_positive_int("rows", rows)
        return self.costs.layer_s + (rows - 1) * self.costs.candidate_extra_row_layer_s

    def draft_s(self, rows: int = 1) -> float:
        """e + L layer(rows) + h_e + tau (or the measured host seconds per draft forward)."""
        c = self.costs
        return (
            c.embedding_s
            + self.exit_layer * self.layer_s(rows)
            + c.early_head_s
            + self.draft_host_s
        )

    def verify_s(self, rows: int) -> float:
        """e + d layer(rows) + h_f + tau (or the measured host seconds per step)."""
        c = self.costs
        return c.embedding_s + self.d * self.layer_s(rows) + c.final_head_s + self.step_host_s

    def step_s(self, drafted: int) -> tuple[float, float]:
        """(draft seconds, verify seconds) of a step that drafts ``drafted`` tokens."""
        drafted = as_int("drafted", drafted, minimum=0, limit=MAX_EXACT_INT - 1)
        draft = 0.0
        if drafted > 0:
            draft = self.draft_s(self.first_draft_rows) + (drafted - 1) * self.draft_s(1)
        return draft, self.verify_s(drafted + 1)


def early_exit_trace_seconds(
    matches, *, g: int, costs: EarlyExitCosts, limit: int | None = None, skip_steps: int = 0
) -> tuple[float, float, EarlyExitSteps]:
    """(draft seconds, verify seconds, steps) of one trace, leaving out its first
    ``skip_steps`` steps (the untimed prefill step of a measured run)."""
    if not isinstance(costs, EarlyExitCosts):
        raise ValueError(f"costs must be an EarlyExitCosts, got {type(costs).__name__}")
    if not isinstance(skip_steps, Integral) or isinstance(skip_steps, bool) or skip_steps < 0:
        raise ValueError(f"skip_steps must be an integer >= 0, got {skip_steps!r}")
    steps = early_exit_steps(matches, g=g, limit=limit)
    draft = verify = 0.0
    for q in steps.drafted[int(skip_steps) :]:
        dr, ve = costs.step_s(q)
        draft += dr
        verify += ve
    return draft, verify, steps
