"""Which generated token a match m_t belongs to: the one rule shared by ppdmodel, sim and measure.

Generated tokens are x_1..x_ell (token *positions* j = 1..ell, as the paper's Tables 6-8 count
them). In Algorithm 2 (paper Appendix C), iteration t = 0..ell-1 runs the forward pass over
x_t; at layer d_bar it selects the top-k early guesses of x_{t+1} (line 13), and its final
layer produces x_{t+1} (line 20). If x_{t+1} is among the guesses, the next iteration starts
from layer d - d_bar + 1 (lines 9-11): the pass producing x_{t+2} is shortened.

So the latency model's m_t (t = 2..ell: "the pass producing token t started from a handed-over
candidate") is the match recorded for token position j = t - 1. Position ell's guess is never
used (no token follows it), and position 1's guess shortens the pass producing x_2:

    m_t = match at position t - 1,   t = 2..ell,   i.e. positions 1..ell-1.

A per-position match rate p_t (t = 2..ell) is likewise the rate at position t - 1.
"""

from __future__ import annotations

import numpy as np

FIRST_T = 2
"""The first t with an m_t: the pass producing x_1 always runs all d layers."""


def position_of_m(t):
    """The token position j whose early-prediction match is m_t: j = t - 1 (t >= 2)."""
    try:
        t = np.asarray(t)
    except (ValueError, TypeError):  # ragged nesting
        t = np.asarray(None)
    if t.dtype.kind not in "iuf" or not np.isfinite(t).all() or np.any(t != np.floor(t)):
        raise ValueError(f"t must be an integer position >= {FIRST_T} (or an array of them), "
                         f"got {t!r:.60}")  # fmt: skip
    if np.any(t < FIRST_T):
        raise ValueError(f"t must be >= {FIRST_T} (m_t is defined for t = 2..ell), got {t!r}")
    return t - 1


def m_from_positions(matches_by_position):
    """m_t for t = 2..ell from the matches (or rates) of positions 1..ell: drop position ell.

    Works on a list or a numpy array (last axis = position); returns the same kind.
    """
    if isinstance(matches_by_position, list | tuple):
        return list(matches_by_position[:-1])
    arr = np.asarray(matches_by_position)
    if arr.ndim == 0 or arr.dtype.kind not in "biuf":
        raise ValueError(
            "matches_by_position must be a list or an array of matches or rates "
            f"(last axis = position), got {matches_by_position!r:.60}"
        )
    if arr.size and not (arr.min() >= 0 and arr.max() <= 1):
        raise ValueError("matches_by_position must hold 0/1 matches or rates in [0, 1]")
    return arr[..., :-1]


def check_m(m) -> np.ndarray:
    """``m`` (m_t for t = 2..ell, 0 or 1 on the last axis; 2-d: one trace per row) as an
    array; ValueError naming ``m`` otherwise (ragged nesting and text included)."""
    try:
        arr = np.asarray(m)
    except (ValueError, TypeError):  # ragged nesting
        arr = np.asarray(None)
    if (
        arr.ndim == 0
        or arr.dtype.kind not in "biuf"
        or (arr.size and not np.isin(arr, (0, 1)).all())
    ):
        raise ValueError("m must be a sequence of 0 and 1 (m_t for t = 2..ell)")
    return arr
