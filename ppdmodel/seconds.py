"""Latency in seconds: Theorem 4.1 scaled by a per-layer time, plus two optional overheads.

The overhead terms are THIS PROJECT'S EXTENSION, not part of the paper's model. The paper's
Table 3 shows real PPD runs far slower than Theorem 4.1 predicts (e.g. no gain from k=1 to k=3
on SQuAD, blamed on inter-process communication). Two terms let a user model that gap:

- ``per_token_overhead_s``: a fixed cost paid once per generated token (sampling, kernel
  launches, synchronisation), for greedy decoding and PPD alike: ell * per_token_overhead_s.
- ``per_handoff_overhead_s``: a cost per accepted early prediction (the matching sub-process
  hands its hidden state and KV entries to the main process). Its expected count is
  sum_{t=2..ell} p_t = (ell - 1) p, so it adds (ell - 1) p * per_handoff_overhead_s.

E[T_s] = seconds_per_layer * E[T] + ell * per_token_overhead_s
         + (ell - 1) p * per_handoff_overhead_s
"""

from __future__ import annotations

import numpy as np

from ppdmodel.theorem import _as_result, expected_latency, expected_matches
from ppdmodel.validation import (
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_probability,
)


def expected_latency_seconds(
    *,
    d,
    d_bar,
    ell,
    p,
    seconds_per_layer,
    per_token_overhead_s=0.0,
    per_handoff_overhead_s=0.0,
    per_position: bool | None = None,
):
    """Expected PPD latency in seconds for ell tokens (see the module docstring for the model).

    With both overheads 0 this is seconds_per_layer times Theorem 4.1's E[T].
    """
    seconds_per_layer = check_positive("seconds_per_layer", seconds_per_layer)
    per_token_overhead_s = check_nonnegative("per_token_overhead_s", per_token_overhead_s)
    per_handoff_overhead_s = check_nonnegative("per_handoff_overhead_s", per_handoff_overhead_s)
    layers = expected_latency(d=d, d_bar=d_bar, ell=ell, p=p, per_position=per_position)
    ell, p = check_positive_int("ell", ell), check_probability("p", p)  # float64: no wrap-around
    handoffs = expected_matches(ell=ell, p=p, per_position=per_position)
    with np.errstate(over="ignore"):
        total = (
            np.multiply(seconds_per_layer, layers)
            + np.multiply(ell, per_token_overhead_s)
            + np.multiply(handoffs, per_handoff_overhead_s)
        )
    return _as_result(_finite_seconds(total))


def greedy_latency_seconds(*, d, ell, seconds_per_layer, per_token_overhead_s=0.0):
    """Greedy (no PPD) decoding latency in seconds: ell * (d * seconds_per_layer + overhead)."""
    d = check_positive_int("d", d)
    ell = check_positive_int("ell", ell)
    seconds_per_layer = check_positive("seconds_per_layer", seconds_per_layer)
    per_token_overhead_s = check_nonnegative("per_token_overhead_s", per_token_overhead_s)
    with np.errstate(over="ignore"):
        per_token = np.multiply(d, seconds_per_layer) + np.asarray(per_token_overhead_s)
        total = np.multiply(ell, per_token)
    return _as_result(_finite_seconds(total))


def _finite_seconds(total):
    """``total``, or ValueError if a huge per-layer time or overhead made it overflow."""
    if not np.all(np.isfinite(total)):
        raise ValueError(
            "seconds_per_layer and the overheads are too large: the latency overflows float64"
        )
    return total
