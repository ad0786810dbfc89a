"""Main's seconds per pass under a ``sim`` cost model: one per-pass arithmetic (Algorithm 2).

A pass over token t starts at layer 1 (embedding first) or, after an accepted hand-off, at
layer d - d_bar + 1; it runs up to d_bar, the early head, then layers d_bar + 1..d and the
final head (layers 1-based, as ``sim.cost``). The simulator's fast engine takes its pass
times from here; the closed form
in seconds has its own per-pass schedule under uniform layer costs (``ppdmodel.passes``).
"""

from __future__ import annotations

import numpy as np

from ppdmodel.validation import MAX_EXACT_INT, as_int, check_instance
from sim.cost import MeasuredCost, RooflineCost, UniformCost

COST_MODELS = (UniformCost, RooflineCost, MeasuredCost)


def prefix_seconds(cost, *, first_layer: int, d_bar: int, early_head: bool = True) -> float:
    """Main from ``first_layer`` through d_bar (with the embedding when it starts at layer 1),
    plus the early head when the pass makes candidates."""
    check_instance("cost", cost, COST_MODELS)
    seconds = cost.embed_seconds(1) if first_layer == 1 else 0.0
    if first_layer <= d_bar:
        seconds += cost.block_seconds(first_layer, d_bar, 1)
    return seconds + (cost.head_seconds(1) if early_head else 0.0)


def suffix_seconds(cost, *, d: int, d_bar: int) -> float:
    """Main's layers d_bar + 1..d and the final head."""
    check_instance("cost", cost, COST_MODELS)
    return cost.block_seconds(d_bar + 1, d, 1) + cost.head_seconds(1)


def greedy_step_seconds(cost, d: int) -> float:
    """One greedy step: embedding, layers 1..d and the head, batch 1."""
    check_instance("cost", cost, COST_MODELS)
    return cost.embed_seconds(1) + cost.block_seconds(1, d, 1) + cost.head_seconds(1)


def main_pass_seconds(cost, *, d: int, d_bar: int, m) -> np.ndarray:
    """Main's compute per pass t = 1..ell of a trace m (m_t, t = 2..ell) as the real decoder
    runs it: pass t resumes at layer d - d_bar + 1 iff m_t = 1; the last pass has no early head."""
    check_instance("cost", cost, COST_MODELS)
    d, d_bar = as_int("d", d, limit=MAX_EXACT_INT), as_int("d_bar", d_bar, limit=MAX_EXACT_INT)
    m = np.asarray(m)
    if m.ndim != 1:
        raise ValueError(f"m must be a 1-d sequence of 0/1 matches, got shape {m.shape}")
    ell, e = len(m) + 1, d - d_bar
    out = np.empty(ell)
    for t in range(1, ell + 1):
        first = e + 1 if t > 1 and m[t - 2] == 1 else 1
        out[t - 1] = prefix_seconds(
            cost, first_layer=first, d_bar=d_bar, early_head=t < ell
        ) + suffix_seconds(cost, d=d, d_bar=d_bar)
    return out
