"""Generations that make a match rate meaningless: EOS at once, or a repetition loop.

An instruct model given a prompt it does not expect may end its turn at once (EOS at position
1: one record, no m_t) or fall into a loop ("#\n#\n#..."), whose tokens every early head
predicts easily. Both bias p_correct, so runs count such prompts and warn about them.

Definitions:

* **ends at once**: the first generated token is an EOS token;
* **repetition**: after dropping trailing EOS tokens, the generation ends with one n-gram
  (n = 1..``max_period``) repeated back to back at least ``min_repeats`` times, and the
  repeated stretch covers at least ``min_span`` tokens (defaults 16, 3, 12: twelve equal
  tokens, six copies of a 2-gram, four of a 3-gram, three of a 4..16-gram).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field


class DegenerateGenerationWarning(UserWarning):
    """Some prompts' generations ended at once or fell into repetition."""


MAX_PERIOD = 16
MIN_REPEATS = 3
MIN_SPAN = 12


def ends_at_once(tokens: Sequence[int], eos_ids: Iterable[int]) -> bool:
    """True if the first generated token is an EOS token."""
    return len(tokens) > 0 and int(tokens[0]) in set(eos_ids)


def tail_copies(tokens: Sequence[int], n: int) -> int:
    """How many times the last n-gram of ``tokens`` repeats back to back at the end (>= 1)."""
    if n < 1 or n > len(tokens):
        raise ValueError(f"n must be in [1, len(tokens) = {len(tokens)}], got {n}")
    tokens = list(tokens)
    tail, r = tokens[-n:], 1
    while len(tokens) >= (r + 1) * n and tokens[-(r + 1) * n : -r * n] == tail:
        r += 1
    return r


def is_repetitive(
    tokens: Sequence[int],
    eos_ids: Iterable[int] = (),
    *,
    max_period: int = MAX_PERIOD,
    min_repeats: int = MIN_REPEATS,
    min_span: int = MIN_SPAN,
) -> bool:
    """True if the generation ends in a repetition loop (module docstring)."""
    eos, tokens = {int(e) for e in eos_ids}, [int(t) for t in tokens]
    while tokens and tokens[-1] in eos:
        tokens.pop()
    for n in range(1, min(max_period, len(tokens)) + 1):
        r = tail_copies(tokens, n)
        if r >= min_repeats and n * r >= min_span:
            return True
    return False


@dataclass(frozen=True)
class DegenerateSummary:
    """Prompts whose generation ended at once or fell into repetition, among ``n_prompts``."""

    n_prompts: int
    """Prompts checked."""
    ended_at_once: tuple[str, ...] = field(default=())
    """Ids of prompts whose first generated token was EOS."""
    repetition: tuple[str, ...] = field(default=())
    """Ids of prompts whose generation ends in a repetition loop."""

    @property
    def n_degenerate(self) -> int:
        return len(self.ended_at_once) + len(self.repetition)

    def to_dict(self) -> dict:
        return {
            "n_prompts": self.n_prompts,
            "ended_at_once": list(self.ended_at_once),
            "repetition": list(self.repetition),
            "rule": {"max_period": MAX_PERIOD, "min_repeats": MIN_REPEATS, "min_span": MIN_SPAN},
        }

    def message(self) -> str | None:
        """A warning text, or None when no prompt is degenerate."""
        if not self.n_degenerate:
            return None
        parts = []
        if self.ended_at_once:
            parts.append(
                f"{len(self.ended_at_once)} of {self.n_prompts} prompts ended at once (EOS at "
                f"position 1): {_ids(self.ended_at_once)}"
            )
        if self.repetition:
            parts.append(
                f"{len(self.repetition)} of {self.n_prompts} prompts fell into repetition: "
                f"{_ids(self.repetition)}"
            )
        hint = (
            "; their match rates do not describe normal generations (check the prompt format; "
            "instruct models need their chat template)"
        )
        return "; ".join(parts) + hint


def _ids(ids: Sequence[str], shown: int = 8) -> str:
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def summarize(
    generations: Mapping[str, Sequence[int]], eos_ids: Iterable[int]
) -> DegenerateSummary:
    """Classify each prompt's generated tokens (prompt id -> tokens)."""
    eos = {int(e) for e in eos_ids}
    at_once = tuple(pid for pid, toks in generations.items() if ends_at_once(toks, eos))
    loops = tuple(
        pid for pid, toks in generations.items() if pid not in at_once and is_repetitive(toks, eos)
    )
    return DegenerateSummary(len(generations), at_once, loops)


def warn_degenerate(summary: DegenerateSummary, stacklevel: int = 2) -> str | None:
    """Warn (DegenerateGenerationWarning) with ``summary.message()`` if a prompt is degenerate."""
    text = summary.message()
    if text is not None:
        warnings.warn(text, DegenerateGenerationWarning, stacklevel=stacklevel + 1)
    return text
