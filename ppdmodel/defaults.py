"""The model's parameters when none are given: d (the paper's model) and d_bar (d/2, a layer).

One definition each, used by the CLI, the planner, the profiler and the predictors.
"""

from __future__ import annotations

from ppdmodel.validation import as_int

DEFAULT_D = 40
"""Decoder layers when none are given: Vicuna-13B, the model behind the paper's tables."""


def default_d_bar(d: int) -> int:
    """The early-prediction layer when none is given: the smallest integer layer >= d/2.

    d/2 is the paper's setting (Eq. 3, 5, 6); for odd d it is not a layer, so it is rounded
    up, the nearest layer inside Theorem 4.1's domain d/2 <= d_bar < d (d >= 2 layers).
    """
    return (as_int("d", d, minimum=2) + 1) // 2
