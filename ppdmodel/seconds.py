"""PPD and greedy latency in seconds under DecodeCosts (THIS PROJECT'S EXTENSION of the paper).

The paper's Table 3 shows real PPD runs slower than Theorem 4.1 predicts; the parts it leaves
out (early and final LM heads, the k-row candidate batch, a shared device, messages, host time)
are the fields of ``ppdmodel.DecodeCosts``. From the per-pass schedule of ``ppdmodel.passes``:

    T     = ell B - M S                     (one trace; M = sum_{t=2..ell} m_t)
    E[T]  = ell B - S sum_{t=2..ell} p_t    (= ell B - S (ell - 1) p for i.i.d. p)
    greedy: ell G,  G = e + d L + h_f + tau
    break-even: the smallest p in [0, 1] with B - p S <= G, i.e. (B - G) / S

B: a token's time with no accepted prediction; S: the time one accepted prediction saves (see
``ppdmodel.passes`` for both in terms of the costs, for early_head = "main" and "candidates").
With ``DecodeCosts.unit(L)`` these are L times Theorem 4.1.

The older keyword form (``seconds_per_layer``, ``per_token_overhead_s``,
``per_handoff_overhead_s``) is the special case DecodeCosts(layer_s=..., host_s=...,
handoff_s=...): E[T_s] = L E[T] + ell tau + (ell - 1) p eta.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.costs import check_early_head
from ppdmodel.passes import check_costs, pass_times
from ppdmodel.positions import check_m
from ppdmodel.theorem import _as_result, expected_latency, expected_matches, validate_theorem_args
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_probability,
)


def _legacy_latency(d, d_bar, ell, p, seconds_per_layer, token_s, handoff_s, per_position):
    """The older keyword form: L E[T] + ell tau + E[M] eta (arrays allowed for the times)."""
    seconds_per_layer = check_positive("seconds_per_layer", seconds_per_layer)
    token_s = check_nonnegative("per_token_overhead_s", token_s)
    handoff_s = check_nonnegative("per_handoff_overhead_s", handoff_s)
    overheads = dict(per_token_overhead_s=token_s, per_handoff_overhead_s=handoff_s)
    validate_theorem_args(d, d_bar, ell, p, per_position, seconds_per_layer=seconds_per_layer,
                          **overheads)  # fmt: skip
    layers = expected_latency(d=d, d_bar=d_bar, ell=ell, p=p, per_position=per_position)
    ell, p = check_positive_int("ell", ell), check_probability("p", p)  # float64: no wrap-around
    handoffs = expected_matches(ell=ell, p=p, per_position=per_position)
    with np.errstate(over="ignore"):
        total = (
            np.multiply(seconds_per_layer, layers)
            + np.multiply(ell, token_s)
            + np.multiply(handoffs, handoff_s)
        )
    return _as_result(_finite_seconds(total))


def expected_latency_seconds(
    *,
    d,
    d_bar,
    ell,
    p,
    k=1,
    costs=None,
    early_head: str = "main",
    seconds_per_layer=None,
    per_token_overhead_s=None,
    per_handoff_overhead_s=None,
    per_position: bool | None = None,
):
    """Expected PPD latency in seconds for ell tokens: E[T] = ell B - S sum_{t=2..ell} p_t.

    ``costs`` (a DecodeCosts) gives every term; ``k`` candidates run as one batch; the early
    head runs on main (``early_head="main"``) or on the candidate side (``"candidates"``).
    ``p``: i.i.d. match rate or per-position p_t, t = 2..ell (as ``expected_latency``).
    Without ``costs``, the older form: ``seconds_per_layer`` (required) and the two overheads.
    Exact under the schedule of ``ppdmodel.passes`` (a shared device: fluid sharing).
    """
    legacy = (seconds_per_layer, per_token_overhead_s, per_handoff_overhead_s)
    if costs is None:
        if seconds_per_layer is None:
            raise ValueError("pass costs= (a ppdmodel.DecodeCosts) or seconds_per_layer= (> 0)")
        token_s = 0.0 if per_token_overhead_s is None else per_token_overhead_s
        handoff_s = 0.0 if per_handoff_overhead_s is None else per_handoff_overhead_s
        _validated_k(k)  # the older form has no batch or early-head terms: checked, unused
        check_early_head(early_head)
        return _legacy_latency(
            d, d_bar, ell, p, seconds_per_layer, token_s, handoff_s, per_position
        )
    if any(value is not None for value in legacy):
        raise ValueError(
            "give either costs= or seconds_per_layer=/per_token_overhead_s=/"
            "per_handoff_overhead_s=, not both"
        )
    validate_theorem_args(d, d_bar, ell, p, per_position, k=_validated_k(k))
    times = pass_times(d=d, d_bar=d_bar, k=_validated_k(k), costs=check_costs(costs),
                       early_head=early_head)  # fmt: skip
    matches = expected_matches(ell=ell, p=p, per_position=per_position)
    return _as_result(np.multiply(ell, times.miss_only_s) - np.multiply(matches, times.saving_s))


def _validated_k(k):
    return check_positive_int("k", k)


def trace_latency_seconds(*, d, d_bar, m, k=1, costs, early_head: str = "main"):
    """PPD latency in seconds of one trace m = (m_2..m_ell) of 0/1: T = ell B - M S, exact.

    ``m`` may be 2-d (one trace per row); ell = len(m) + 1 (the last axis).
    """
    m = check_m(m)
    ell = m.shape[-1] + 1
    d = check_positive_int("d", d)
    check_d_bar(d, d_bar)
    times = pass_times(d=d, d_bar=d_bar, k=_validated_k(k), costs=check_costs(costs),
                       early_head=early_head)  # fmt: skip
    return _as_result(ell * times.miss_only_s - m.sum(axis=-1) * times.saving_s)


def greedy_latency_seconds(
    *, d, ell, seconds_per_layer=None, per_token_overhead_s=None, costs=None
):
    """Greedy decoding latency in seconds: ell G with G = e + d L + h_f + tau (``costs``), or,
    in the older form, ell * (d * seconds_per_layer + per_token_overhead_s)."""
    d = check_positive_int("d", d)
    ell = check_positive_int("ell", ell)
    if costs is not None:
        if seconds_per_layer is not None or per_token_overhead_s is not None:
            raise ValueError("give either costs= or seconds_per_layer=/per_token_overhead_s=")
        return _as_result(np.multiply(ell, check_costs(costs).greedy_token_seconds(d)))
    if seconds_per_layer is None:
        raise ValueError("pass costs= (a ppdmodel.DecodeCosts) or seconds_per_layer= (> 0)")
    seconds_per_layer = check_positive("seconds_per_layer", seconds_per_layer)
    token_s = 0.0 if per_token_overhead_s is None else per_token_overhead_s
    token_s = check_nonnegative("per_token_overhead_s", token_s)
    d, ell = check_positive_int("d", d), check_positive_int("ell", ell)
    check_broadcast(d=np.shape(d), ell=np.shape(ell), seconds_per_layer=np.shape(seconds_per_layer),
                    per_token_overhead_s=np.shape(token_s))  # fmt: skip
    with np.errstate(over="ignore"):
        per_token = np.multiply(d, seconds_per_layer) + np.asarray(token_s)
        total = np.multiply(ell, per_token)
    return _as_result(_finite_seconds(total))


def latency_per_token_seconds(*, d, d_bar, p, k=1, costs, early_head: str = "main"):
    """PPD seconds per token as ell -> infinity, i.i.d. p: B - p S."""
    d = check_positive_int("d", d)
    check_d_bar(d, d_bar)
    p, k = check_probability("p", p), _validated_k(k)
    check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), p=np.shape(p), k=np.shape(k))
    times = pass_times(d=d, d_bar=d_bar, k=k, costs=check_costs(costs),
                       early_head=early_head)  # fmt: skip
    return _as_result(times.miss_only_s - np.multiply(p, times.saving_s))


def break_even_p(*, d, d_bar, k=1, costs, early_head: str = "main"):
    """Smallest p in [0, 1] with PPD's seconds per token (ell -> inf) <= greedy's; inf if none.

    PPD per token is B - p S and greedy's G, with B - G = [h_e on main] + (s_m - 1) o_m >= 0
    (``ppdmodel.passes``): p* = 0 when B = G, (B - G) / S when 0 < (B - G) <= S, else inf.
    """
    d = check_positive_int("d", d)
    check_d_bar(d, d_bar)
    times = pass_times(d=d, d_bar=d_bar, k=_validated_k(k), costs=check_costs(costs),
                       early_head=early_head)  # fmt: skip
    return _as_result(times.break_even_p)


def _finite_seconds(total):
    """``total``, or ValueError if a huge per-layer time or overhead made it overflow."""
    if not np.all(np.isfinite(total)):
        raise ValueError(
            "seconds_per_layer, per_token_overhead_s and per_handoff_overhead_s are too large: "
            "the latency overflows float64"
        )
    return total
