"""Where PPD's time per token goes: the seconds per token split into additive terms.

From ``ppdmodel.passes``, PPD's seconds per token are B - p S (p: the i.i.d. match rate, or
sum_t p_t / ell over a given ell). Expanded,

    B - p S = L (d - (d - d_bar) p)                       ideal: Theorem 4.1 in seconds
            + e (1 - p)                                    embedding (fresh passes only)
            + h_f                                          final head
            + [h_e if early_head = "main"]                 early head on main's path
            + (s_m - 1) o_m + p (w - w')                   sharing one device
                                                           (serial device: delta + W_c)
            + tau                                          host
            + p eta                                        hand-off
            + p w                                          waiting for the candidate batch

and the wait w = max(e - h_f - tau + D (L_k - L) + [h_e on candidates] + delta
+ ((s_c - 1) o_c - (s_m - 1) o_m), 0) is attributed to its parts in that order (embedding,
batching, early head, dispatch, and last the two sides' unequal slowdowns, booked under
sharing; w' is w without that last part): each gets the increase of the max when its part
is added, so the parts telescope to w exactly. With one factor for both sides the last
part is exactly 0. On a
serial device (``DecodeCosts.serial_device``) w = 0 and the whole candidate side, delta + W_c,
is the sharing term.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ppdmodel.passes import check_costs, device_work, sharing_losses
from ppdmodel.theorem import _as_result, expected_matches, validate_theorem_args
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_positive_int,
    check_probability,
)


@dataclass(frozen=True)
class LatencyWaterfall:
    """PPD seconds per token split into terms (floats or arrays); they sum to ``total_s``."""

    ideal_s: object
    """Theorem 4.1 per token times the batch-1 layer time: L (d - (d - d_bar) p)."""
    embedding_s: object
    """Embedding on fresh passes, plus the wait it causes on the candidate side."""
    final_head_s: object
    """Final head after layer d."""
    early_head_s: object
    """Early head on main's path ("main"), or the wait it causes ("candidates")."""
    batching_s: object
    """Wait caused by the k-row batch being slower per layer than batch 1."""
    dispatch_s: object
    """Wait caused by the message that starts the candidates."""
    sharing_s: object
    """Main's slowdown while it shares its device with the candidates, plus the wait the two
    sides' unequal slowdowns add (a serial device: the whole candidate side, which runs before
    main's suffix)."""
    handoff_s: object
    """Hand-offs of accepted candidates: p eta."""
    host_s: object
    """Host time per token."""
    greedy_s: object
    """Greedy decoding's seconds per token under the same costs, for comparison."""

    def terms(self) -> dict:
        """The additive terms in waterfall order (``greedy_s`` excluded)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "greedy_s"}

    @property
    def total_s(self):
        """PPD seconds per token: the sum of the terms."""
        return _as_result(sum(np.asarray(value) for value in self.terms().values()))

    @property
    def speedup(self):
        """greedy_s / total_s."""
        return _as_result(np.divide(self.greedy_s, self.total_s))


def latency_waterfall(
    *, d, d_bar, p, k=1, costs, early_head: str = "main", ell=None, per_position=None
) -> LatencyWaterfall:
    """PPD seconds per token split into terms (module docstring).

    ell None: ell -> infinity with i.i.d. ``p``. Given ell: the mean over ell tokens,
    E[T] / ell, with ``p`` i.i.d. or per-position (t = 2..ell) as in ``expected_latency``.
    """
    k = check_positive_int("k", k)
    if ell is None:
        d = check_positive_int("d", d)
        d_bar = check_d_bar(d, d_bar)
        p = check_probability("p", p)
        check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), p=np.shape(p), k=np.shape(k))
        rate = np.asarray(p, dtype=float)
    else:
        d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position, k=k)
        rate = np.divide(expected_matches(ell=ell, p=p, per_position=per_position), ell)
    costs = check_costs(costs)
    work_main, work_cand, delta, main_head = device_work(
        d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head
    )
    gap = np.subtract(d, d_bar)
    cand_head = costs.early_head_s - main_head
    x0 = costs.embedding_s - costs.final_head_s - costs.host_s
    x1 = x0 + gap * (costs.candidate_layer_seconds(k) - costs.layer_s)
    x2 = x1 + cand_head
    waits = np.logical_not(costs.serial_device)  # a serial device never waits (passes)
    excess, fluid_main, fluid_cand = sharing_losses(work_main, work_cand, delta, costs)
    x3 = x2 + delta
    w0, w1, w2, w3, w4 = (waits * np.maximum(x, 0.0)
                          for x in (x0, x1, x2, x3, x3 + (fluid_cand - fluid_main)))  # fmt: skip

    def out(x):
        return _as_result(np.broadcast_to(x, np.broadcast_shapes(*shapes)) + 0.0)

    shapes = [np.shape(v) for v in (d, d_bar, k, rate)]
    return LatencyWaterfall(
        ideal_s=out(costs.layer_s * (d - gap * rate)),
        embedding_s=out(costs.embedding_s * (1 - rate) + rate * w0),
        final_head_s=out(costs.final_head_s),
        early_head_s=out(main_head + rate * (w2 - w1)),
        batching_s=out(rate * (w1 - w0)),
        dispatch_s=out(rate * (w3 - w2)),
        sharing_s=out(excess + rate * (w4 - w3)),
        handoff_s=out(rate * costs.handoff_s),
        host_s=out(costs.host_s),
        greedy_s=out(costs.greedy_token_seconds(d)),
    )
