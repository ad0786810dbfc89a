"""Closed forms of the other ways to spend PPD's extra hardware (this project's extension).

**Speculative decoding** (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers
via Speculative Decoding", ICML, section 3): a draft proposes g tokens one at a time; the
target verifies them in one forward over g + 1 positions, keeps the longest accepted prefix and
adds one token of its own (the correction, or a bonus token when all g are accepted). With each
drafted token accepted independently with probability a, the accepted count X has
P(X >= i) = a^i for i <= g, so a step yields

    E[X + 1] = sum_{i=0..g} a^i = (1 - a^(g+1)) / (1 - a)        (their Eq. 1; g + 1 at a = 1)

tokens. A step costs g c_draft + c_verify seconds, so seconds per token are
(g c_draft + c_verify) / E[X + 1]; with c_verify one target forward T and c_draft = c T this is
their improvement factor (1 - a^(g+1)) / ((1 - a)(g c + 1)) (Theorem 3.8). Under
``DecodeCosts`` (``draft_model_step_seconds``; the planner's draft-model rows, and the measured
method's prediction from the target's and the draft's profiles, price a step with it):

    forward over r positions = e + d L_r + h_f + tau      (``forward_seconds``)
    c_verify = forward over g + 1 positions
    c_draft  = c (e + d layer_s + h_f) + tau                (a draft token: c of a greedy
                                                              token's device time, own host time)

**Self-speculative early-exit decoding** (LayerSkip, Elhoushi et al. 2024; transformers'
``assistant_early_exit``): the draft is the model's own first L layers and an LM head. It
proposes the token the full model would produce iff the layer-L top-1 equals the final top-1
given the same (accepted, hence true) prefix: a = p_correct(L, k = 1), the match rate the
toolkit measures; independence across positions is the assumption. Under ``DecodeCosts``:

    c_draft  = e + L layer_s + h_e + tau
    c_verify = e + d L_{g+1} + h_f + tau                  (verify with the whole model), or
    c_verify = e + (d - L) L_{g+1} + L layer_s + h_f + tau
               when the draft's first-L-layer states are reused (LayerSkip's cache reuse): the
               g + 1 verified positions need only layers L+1..d, except the last drafted token,
               which the draft never fed through layers 1..L

with L_{g+1} the per-layer time of g + 1 rows decoded together (memory-bound: about one row's
time; ``DecodeCosts.candidate_layer_seconds(g + 1)``, the k-row batch time used as a proxy for
g + 1 positions of one sequence). On memory-bound hardware reuse saves FLOPs, hardly time: a
verify step streams about d layers' weights either way. Busy device time equals the step time
less host time.

**Tensor parallelism** (Megatron-LM, Shoeybi et al. 2019, section 3): a layer split over n
devices needs two all-reduces of the [rows, hidden] activations per forward; a ring
all-reduce of B bytes costs 2 (n - 1) alpha + 2 (n - 1) / n * B / beta (Thakur, Rabenseifner &
Gropp 2005, "Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1),
section 4), alpha the link's per-message latency and beta its bandwidth.

**FREE** (Bae et al., EMNLP 2023; ``ppdmodel.free``): shallow-deep early exit with
synchronized parallel decoding, on the same axes: seconds per token E[T] / ell and busy
device-seconds per token at an i.i.d. exit rate q, both from ``ppdmodel.free`` (not derived
again here). It is the one *approximate* alternative: its output departs from greedy
decoding's where a confident shallow token is wrong. Every alternative therefore carries a
**quality** in [0, 1] against greedy decoding's output: ``EXACT_QUALITY`` (1.0) for the exact
methods (greedy, PPD, tensor parallelism, speculative decoding with a separate draft,
self-speculative early exit: their tokens equal greedy's), and for FREE a figure measured per
threshold (agreement with greedy's tokens, or ROUGE-L against greedy's output; the planner's
FREE table, ``sim.formats.read_free_table``). No quality is ever assumed for FREE.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.cost_grid import check_cost_terms
from ppdmodel.free import free_expected_compute_seconds, free_expected_latency_seconds
from ppdmodel.passes import check_costs
from ppdmodel.theorem import _as_result
from ppdmodel.validation import (
    as_int,
    check_broadcast,
    check_flag,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_probability,
    check_seed,
)

MAX_DRAFT = 1024
"""Longest draft length g accepted (far beyond any useful one)."""
MAX_SAMPLES = 10**8
"""Most uniforms one Monte Carlo call draws (n_steps * g)."""
EXACT_QUALITY = 1.0
"""Quality of a method whose output equals greedy decoding's (module docstring)."""
MAX_FREE_POINTS = 10**4
"""Most (d, exit_layer, q) combinations one FREE call evaluates (each walks ell tokens)."""


def speculative_tokens_per_step(*, a, g):
    """E[X + 1] = (1 - a^(g+1)) / (1 - a): tokens per verify step (g + 1 at a = 1).

    ``a``: per-token acceptance probability in [0, 1]; ``g``: draft length (>= 1).
    Evaluated with expm1 / log (accurate near a = 1). Vectorised.
    """
    a = check_probability("a", a)
    g = check_positive_int("g", g, limit=MAX_DRAFT)
    check_broadcast(a=np.shape(a), g=np.shape(g))
    a_arr, g_arr = np.broadcast_arrays(np.asarray(a, dtype=float), np.asarray(g, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) = -inf gives 1 / 1
        log_a = np.log(a_arr)
        closed = np.expm1((g_arr + 1) * log_a) / np.expm1(log_a)
    out = np.where(a_arr == 1, g_arr + 1.0, closed)
    return _as_result(out + 0.0)


def speculative_seconds_per_token(*, a, g, draft_s, verify_s):
    """Seconds per token of speculative decoding: (g draft_s + verify_s) / E[X + 1].

    ``draft_s``: one draft token, seconds; ``verify_s``: the target's forward over g + 1
    positions, seconds (both >= 0, broadcast with ``a`` and ``g``).
    """
    draft_s = check_nonnegative("draft_s", draft_s)
    verify_s = check_nonnegative("verify_s", verify_s)
    tokens = speculative_tokens_per_step(a=a, g=g)
    check_broadcast(a=np.shape(a), g=np.shape(g), draft_s=np.shape(draft_s),
                    verify_s=np.shape(verify_s))  # fmt: skip
    g = check_positive_int("g", g, limit=MAX_DRAFT)
    with np.errstate(over="ignore"):
        seconds = (np.multiply(g, draft_s) + verify_s) / np.asarray(tokens)
    if not np.all(np.isfinite(seconds)):
        raise ValueError("draft_s and verify_s are too large: the seconds per token overflow "
                         "float64")  # fmt: skip
    return _as_result(seconds)


def speculative_speedup(*, a, g, c):
    """Leviathan et al.'s expected improvement factor (1 - a^(g+1)) / ((1 - a)(g c + 1)).

    ``c``: a draft token's time as a fraction of one target forward (>= 0); verification is
    taken to cost one target forward.
    """
    c = check_nonnegative("c", c)
    tokens = np.asarray(speculative_tokens_per_step(a=a, g=g))
    check_broadcast(a=np.shape(a), g=np.shape(g), c=np.shape(c))
    g = check_positive_int("g", g, limit=MAX_DRAFT)
    with np.errstate(over="ignore"):  # g c beyond float64: the speed-up's limit, 0
        return _as_result(tokens / (np.multiply(g, c) + 1.0))


def early_exit_step_seconds(*, d, exit_layer, g, costs, reuse_draft_layers: bool = False):
    """(c_draft, c_verify) of self-speculative early-exit decoding under ``costs`` (seconds).

    c_draft = e + L layer_s + h_e + tau;  c_verify = e + d L_{g+1} + h_f + tau, or, with
    ``reuse_draft_layers``, e + (d - L) L_{g+1} + L layer_s + h_f + tau (module docstring).
    ``costs``: a
    ``DecodeCosts`` or a ``DecodeCostsGrid`` (fields broadcast with d, exit_layer, g).
    """
    d = check_positive_int("d", d)
    exit_layer = check_positive_int("exit_layer", exit_layer)
    g = check_positive_int("g", g, limit=MAX_DRAFT)
    costs = check_cost_terms(costs)
    check_flag("reuse_draft_layers", reuse_draft_layers)
    check_broadcast(d=np.shape(d), exit_layer=np.shape(exit_layer), g=np.shape(g))
    if np.any(np.asarray(exit_layer) >= np.asarray(d)):
        raise ValueError("exit_layer must be < d (the draft runs the first exit_layer layers)")
    first_layers = np.multiply(exit_layer, costs.layer_s)
    draft = costs.embedding_s + first_layers + costs.early_head_s + costs.host_s
    batch_layer = costs.candidate_layer_seconds(np.add(g, 1))
    if reuse_draft_layers:
        layers = np.subtract(d, exit_layer) * batch_layer + first_layers
    else:
        layers = np.multiply(d, batch_layer)
    verify = costs.embedding_s + layers + costs.final_head_s + costs.host_s
    return _as_result(draft), _as_result(verify)


def early_exit_seconds_per_token(*, d, exit_layer, g, a, costs, reuse_draft_layers: bool = False):
    """Seconds per token of self-speculative early-exit decoding, a = p_correct(exit_layer, 1).

    (g c_draft + c_verify) / E[X + 1] with ``early_exit_step_seconds``; ell -> infinity.
    """
    draft, verify = early_exit_step_seconds(
        d=d, exit_layer=exit_layer, g=g, costs=costs, reuse_draft_layers=reuse_draft_layers
    )
    a = check_probability("a", a)
    check_broadcast(a=np.shape(a), d=np.shape(d), exit_layer=np.shape(exit_layer), g=np.shape(g))
    return speculative_seconds_per_token(a=a, g=g, draft_s=draft, verify_s=verify)


def forward_seconds(*, d, costs, rows=1):
    """One forward of a ``d``-layer model over ``rows`` positions of one sequence, seconds:
    e + d L_rows + h_f + tau, L_rows = ``costs.candidate_layer_seconds(rows)`` (the k-row batch
    time as the proxy for rows positions; ``costs``: one ``DecodeCosts``). Speculative
    decoding's verify over g + 1 positions, or a draft model's forward under its own costs.
    Vectorised over d and rows."""
    d = check_positive_int("d", d)
    rows = check_positive_int("rows", rows)
    costs = check_costs(costs)
    check_broadcast(d=np.shape(d), rows=np.shape(rows))
    layers = np.multiply(d, costs.candidate_layer_seconds(rows))
    return _as_result(costs.embedding_s + layers + (costs.final_head_s + costs.host_s))


def draft_model_step_seconds(*, d, g, c, costs):
    """(c_draft, c_verify) of speculative decoding with a separate draft model (module
    docstring), seconds: c_draft = c (e + d layer_s + h_f) + tau, one drafted token at ``c``
    (>= 0) of a greedy token's device time of the target, with its own host time; c_verify
    = ``forward_seconds`` over g + 1 positions. ``costs``: the target's ``DecodeCosts``.
    Vectorised over d, g and c."""
    d = check_positive_int("d", d)
    g = check_positive_int("g", g, limit=MAX_DRAFT)
    c = check_nonnegative("c", c)
    costs = check_costs(costs)
    check_broadcast(d=np.shape(d), g=np.shape(g), c=np.shape(c))
    device = costs.greedy_token_seconds(d) - costs.host_s
    with np.errstate(over="ignore"):
        draft = np.multiply(c, device) + costs.host_s
    if not np.all(np.isfinite(draft)):
        raise ValueError("c is too large: a draft token's seconds overflow float64")
    return _as_result(draft), forward_seconds(d=d, costs=costs, rows=np.add(g, 1))


def ring_allreduce_seconds(*, n, nbytes, latency_s, bandwidth_bytes_per_s):
    """Ring all-reduce of ``nbytes`` over ``n`` devices: 2(n-1) alpha + 2(n-1)/n B / beta.

    Thakur, Rabenseifner & Gropp (2005), section 4; 0 for n = 1. Vectorised.
    """
    n = check_positive_int("n", n)
    nbytes = check_nonnegative("nbytes", nbytes)
    latency_s = check_nonnegative("latency_s", latency_s)
    bandwidth_bytes_per_s = check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    check_broadcast(n=np.shape(n), nbytes=np.shape(nbytes), latency_s=np.shape(latency_s),
                    bandwidth_bytes_per_s=np.shape(bandwidth_bytes_per_s))  # fmt: skip
    steps = 2.0 * (np.asarray(n) - 1)
    volume = steps / np.asarray(n) * np.asarray(nbytes)
    seconds = steps * latency_s + volume / bandwidth_bytes_per_s
    if not np.all(np.isfinite(seconds)):
        raise ValueError("latency_s, nbytes and bandwidth_bytes_per_s: the time overflows "
                         "float64 (a bandwidth too small or a message too large)")  # fmt: skip
    return _as_result(seconds)


def sample_speculative_steps(*, a: float, g: int, n_steps: int, seed=None) -> np.ndarray:
    """Monte Carlo of the verify rule: tokens produced by each of ``n_steps`` steps.

    Each step draws g uniforms u_1..u_g; drafted token i is accepted iff u_i < a and all
    before it were; the step yields (accepted + 1) tokens. For checking the closed form.
    """
    a = check_probability("a", a)
    g = as_int("g", g, limit=MAX_DRAFT)
    n_steps = as_int("n_steps", n_steps, limit=MAX_SAMPLES // g)
    if np.ndim(a):
        raise ValueError("a must be one probability (a scalar) for the Monte Carlo")
    check_seed("seed", seed)
    u = np.random.default_rng(seed).random((n_steps, g))
    rejected = u >= a
    first_reject = np.where(rejected.any(axis=1), rejected.argmax(axis=1), g)
    return first_reject + 1


def _free_per_token(expected, *, d, exit_layer, q, ell, costs):
    """``expected`` (a ``ppdmodel.free`` expectation) / ell, broadcast over d, exit_layer, q."""
    q = check_probability("q", q)
    try:
        d_arr, layer_arr, q_arr = np.broadcast_arrays(np.asarray(d), np.asarray(exit_layer), q)
    except ValueError as exc:
        raise ValueError(f"d, exit_layer and q must broadcast together: {exc}") from None
    if d_arr.size == 0 or d_arr.size > MAX_FREE_POINTS:
        raise ValueError(f"d, exit_layer and q must broadcast to 1..{MAX_FREE_POINTS} values")
    ell = check_positive_int("ell", ell)
    if np.ndim(ell):
        raise ValueError("ell must be one integer (the tokens of a sequence)")
    out = np.empty(d_arr.shape)
    for i in np.ndindex(d_arr.shape):
        total = expected(d=d_arr[i], exit_layer=layer_arr[i], ell=ell, q=float(q_arr[i]),
                         costs=costs)  # fmt: skip
        out[i] = total / int(ell)
    return _as_result(out)


def free_seconds_per_token(*, d, exit_layer, q, ell, costs):
    """FREE's expected seconds per token at an i.i.d. exit rate ``q``: E[T] / ell, E[T] from
    ``ppdmodel.free.free_expected_latency_seconds`` (exact for ``ell`` tokens).

    ``exit_layer``: L_s, the shallow model's layers (1 <= L_s < d); ``q``: P(a token exits) in
    [0, 1]; ``costs``: one ``DecodeCosts`` (its k-row batch times price a deep pass over
    stacked tokens). Vectorised over d, exit_layer and q.
    """
    return _free_per_token(free_expected_latency_seconds, d=d, exit_layer=exit_layer, q=q,
                           ell=ell, costs=costs)  # fmt: skip


def free_compute_per_token(*, d, exit_layer, q, ell, costs):
    """FREE's expected busy device-seconds per token (one device): E[T] / ell less host time,
    from ``ppdmodel.free.free_expected_compute_seconds``. Arguments as
    ``free_seconds_per_token``."""
    return _free_per_token(free_expected_compute_seconds, d=d, exit_layer=exit_layer, q=q,
                           ell=ell, costs=costs)  # fmt: skip
