"""FREE's latency and compute in seconds (Bae et al., EMNLP 2023; this project's cost model).

FREE (``measure.free``) feeds every token through the shallow model (layers 1..L_s) and the
exit head. Token t exits (x_t = 1) when the head's confidence reaches the threshold; the next
token that does not exit runs the deep layers L_s+1..d over the n_t tokens stacked since the
last deep pass and itself, n_t + 1 rows at once (synchronized parallel decoding; state
copying runs the same schedule), then the final head. Under ``DecodeCosts``, with
e the embedding, h_e the exit (early) head, h_f the final head and tau host time per token:

    S      = e + L_s layer_s + h_e + tau                  (every token)
    D(n)   = (d - L_s) layer(n + 1) + h_f                 (a deep pass over n + 1 rows)
    T      = ell S + sum_{t: x_t = 0} D(n_t)              (one trace, exact)
    E[T]   = ell S + sum_{t=1..ell} (1 - q_t) E[D(n_t)]   (independent exits, P(x_t = 1) = q_t)

with n_1 = 0 and n_{t+1} = n_t + 1 if x_t = 1, else 0 (so x_t is independent of n_t and the
law of n_t follows by recursion). layer(r) is the measured k-row batch time (the profile's
``candidate_layer_s_by_k``, standing in for r positions of one sequence) through the knots
(1, layer_s) and (k, seconds) for k > 1, linear between knots and extended beyond the last
with the last segment's slope (``candidate_extra_row_layer_s`` without a table). For i.i.d.
q and a linear layer(r) = layer_s + (r - 1) x this is
E[T] = ell S + (1 - q) sum_t [(d - L_s)(layer_s + x E[n_t]) + h_f], E[n_t] = q (1 - q^(t-1)) /
(1 - q). With ``DecodeCosts.unit()``: T = ell L_s + (d - L_s) N_deep (N_deep deep passes),
against greedy's ell d. FREE runs on one device, so its busy device time is T - ell tau.
"""

from __future__ import annotations

import math

import numpy as np

from ppdmodel.costs import DecodeCosts
from ppdmodel.passes import check_costs
from ppdmodel.validation import as_int, check_probability, ndim

MAX_ELL = 10**5
"""Longest generation accepted (the expectation walks it token by token)."""


def check_free_shape(d, exit_layer) -> tuple[int, int]:
    d = as_int("d", d, minimum=2, limit=10**6)
    exit_layer = as_int("exit_layer", exit_layer, limit=10**6)
    if exit_layer >= d:
        raise ValueError(f"exit_layer must be in [1, d - 1] = [1, {d - 1}], got {exit_layer}")
    return d, exit_layer


def _knots(costs: DecodeCosts) -> tuple[np.ndarray, np.ndarray, float]:
    """Knots (rows, seconds per layer) of layer(r) and the slope beyond the last knot."""
    pairs = [(1, costs.layer_s), *((k, s) for k, s in costs.candidate_layer_s_by_k if k > 1)]
    rows, secs = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
    if len(pairs) == 1:
        slope = costs.candidate_extra_row_layer_s
    else:
        slope = max(0.0, (secs[-1] - secs[-2]) / (rows[-1] - rows[-2]))
    return rows, secs, float(slope)


def free_rows_layer_seconds(*, rows, costs):
    """Seconds of one deep layer over ``rows`` positions, layer(rows) (module docstring)."""
    check_costs(costs)
    try:
        r = np.asarray(rows)
    except (ValueError, TypeError):  # ragged nesting
        r = np.asarray(None)
    if r.dtype.kind not in "iuf" or r.size == 0 or not np.all(np.isfinite(r)) or r.min() < 1:
        raise ValueError(f"rows must be numbers >= 1, got {rows!r:.80}")
    knots, secs, slope = _knots(costs)
    out = np.interp(r, knots, secs) + slope * np.maximum(r - knots[-1], 0)
    return float(out) if out.ndim == 0 else out


def _shallow_s(d, exit_layer, costs) -> float:
    return costs.embedding_s + exit_layer * costs.layer_s + costs.early_head_s + costs.host_s


def _deep_s(d, exit_layer, n, costs):
    """D(n) for stacked counts n (array)."""
    layer = free_rows_layer_seconds(rows=np.asarray(n, dtype=float) + 1, costs=costs)
    return (d - exit_layer) * layer + costs.final_head_s


def check_exits(exits) -> np.ndarray:
    try:
        x = np.asarray(exits)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"exits must be a 1-D sequence of 0/1: {exc}") from None
    if x.ndim != 1 or x.size == 0 or x.size > MAX_ELL:
        raise ValueError(f"exits must be a 1-D sequence of 1..{MAX_ELL} values 0/1")
    if x.dtype.kind not in "biuf" or not np.all((x == 0) | (x == 1)):
        raise ValueError("exits must hold only 0/1 (or booleans)")
    return x.astype(bool)


def stacked_counts(exits) -> np.ndarray:
    """n_t for t = 1..ell: tokens stacked before token t (module docstring)."""
    x = check_exits(exits)
    n = np.zeros(x.size, dtype=np.int64)
    for t in range(1, x.size):
        n[t] = n[t - 1] + 1 if x[t - 1] else 0
    return n


def free_trace_latency_seconds(*, d, exit_layer, exits, costs):
    """Exact FREE latency of one trace, seconds: ell S + sum_{x_t = 0} D(n_t).

    ``exits``: x_t for the generated tokens t = 1..ell (a run's ``FreeResult.exits``).
    """
    d, exit_layer = check_free_shape(d, exit_layer)
    check_costs(costs)
    x = check_exits(exits)
    n = stacked_counts(x)[~x]
    deep = float(np.sum(_deep_s(d, exit_layer, n, costs))) if n.size else 0.0
    return x.size * _shallow_s(d, exit_layer, costs) + deep


def _q_per_position(ell, q) -> np.ndarray:
    if ndim("q", q) == 0:
        return np.full(ell, check_probability("q", q))
    arr = check_probability("q", q)
    if np.ndim(arr) != 1 or len(arr) != ell:
        raise ValueError(f"q must be a scalar or a 1-D array of ell = {ell} values (q_t)")
    return np.asarray(arr, dtype=float)


def free_expected_latency_seconds(*, d, exit_layer, ell, q, costs):
    """Expected FREE latency for ell tokens, seconds (module docstring): exits independent,
    P(x_t = 1) = q (i.i.d.) or q_t (a 1-D array of ell values, t = 1..ell)."""
    d, exit_layer = check_free_shape(d, exit_layer)
    ell = as_int("ell", ell, limit=MAX_ELL)
    check_costs(costs)
    qs = _q_per_position(ell, q)
    knots, _, _ = _knots(costs)
    j = max(1, int(knots[-1]) - 1)  # n >= j: layer(n + 1) is linear in n
    deep_j = _deep_s(d, exit_layer, np.arange(j), costs)  # D(0..j-1)
    deep_tail0 = _deep_s(d, exit_layer, j, costs)
    deep_slope = float(_deep_s(d, exit_layer, j + 1, costs)) - float(deep_tail0)
    p = np.zeros(j)
    p[0] = 1.0
    mass = moment = 0.0  # P(n_t >= j) and E[n_t; n_t >= j]
    deep_total = 0.0
    for qt in qs:
        tail = mass * float(deep_tail0) + deep_slope * (moment - j * mass)
        deep_total += (1.0 - qt) * (float(p @ deep_j) + tail)
        last = p[-1]
        moment = qt * (moment + mass + j * last)
        mass = qt * (mass + last)
        p[1:] = qt * p[:-1]
        p[0] = 1.0 - qt
    total = ell * _shallow_s(d, exit_layer, costs) + deep_total
    if not math.isfinite(total):
        raise ValueError("costs give a non-finite latency")
    return float(total)


def free_expected_compute_seconds(*, d, exit_layer, ell, q, costs):
    """Expected busy device-seconds of FREE (one device): E[T] - ell tau."""
    latency = free_expected_latency_seconds(d=d, exit_layer=exit_layer, ell=ell, q=q, costs=costs)
    return latency - as_int("ell", ell, limit=MAX_ELL) * costs.host_s
