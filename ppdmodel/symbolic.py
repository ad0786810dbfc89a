"""Sympy derivation of Theorem 4.1 and Eq. 3, 5, 6 from the run model (sympy derives).

Run model: T = d_bar*ell + (d - d_bar)*N and C = T + k(d - d_bar)*ell with N - 1 ~ Bin(ell - 1,
1 - p). The binomial moments come from its moment generating function
M(s) = (p + (1 - p) e^s)^(ell - 1): E[N - 1] = M'(0), E[(N - 1)^2] = M''(0). The ell -> infinity
figures are sympy limits of E[T]/ell, E[C]/ell and E[C]/E[T]. The tests check that every derived
expression simplifies to the printed one (``THEOREM_*``, ``EQ*``) and that the lambdified
expressions equal the numeric functions on a grid. Importing this module imports sympy.

This project's extension (seconds under ``DecodeCosts``, ``ppdmodel.passes``): ``pass_schedule``
builds one pass from its phases (prefix, the overlap of main and the candidate batch on separate
or one shared device, match or miss), ``EXPECTED_LATENCY_SECONDS`` sums the per-pass
expectations over t = 1..ell, and ``SECONDS_PER_TOKEN`` / ``BREAK_EVEN_P`` follow; with
``UNIT_COSTS`` they reduce to Theorem 4.1.
"""

from __future__ import annotations

import sympy as sp

from ppdmodel.costs import check_early_head

d, d_bar, ell, k = sp.symbols("d d_bar ell k", positive=True)
"""Layers, early-prediction layer, generated tokens, candidates (paper symbols)."""
p = sp.Symbol("p", nonnegative=True)
"""Match rate p_correct."""
s = sp.Symbol("s", real=True)
"""Argument of the moment generating function."""

MGF_FAILURES = (p + (1 - p) * sp.exp(s)) ** (ell - 1)
"""Moment generating function of N - 1 ~ Bin(ell - 1, 1 - p)."""
MEAN_FAILURES = sp.simplify(sp.diff(MGF_FAILURES, s).subs(s, 0))
"""E[N - 1], from the MGF."""
VAR_FAILURES = sp.simplify(sp.diff(MGF_FAILURES, s, 2).subs(s, 0) - MEAN_FAILURES**2)
"""Var[N - 1] = Var[N], from the MGF."""

EXPECTED_RUNS = 1 + MEAN_FAILURES
"""E[N]."""
EXPECTED_LATENCY = sp.expand(d_bar * ell + (d - d_bar) * EXPECTED_RUNS)
"""E[T] = d_bar*ell + (d - d_bar) E[N], derived."""
EXPECTED_COMPUTE = sp.expand(EXPECTED_LATENCY + k * (d - d_bar) * ell)
"""E[C] = E[T] + k(d - d_bar) ell, derived."""
LATENCY_VARIANCE = sp.factor((d - d_bar) ** 2 * VAR_FAILURES)
"""Var[T] = (d - d_bar)^2 Var[N], derived."""

LATENCY_PER_TOKEN = sp.limit(EXPECTED_LATENCY / ell, ell, sp.oo)
"""lim_{ell->inf} E[T]/ell, derived."""
COMPUTE_PER_TOKEN = sp.limit(EXPECTED_COMPUTE / ell, ell, sp.oo)
"""lim_{ell->inf} E[C]/ell, derived."""
COMPUTE_PER_TIME = sp.limit(EXPECTED_COMPUTE / EXPECTED_LATENCY, ell, sp.oo)
"""lim_{ell->inf} E[C]/E[T], derived."""

# The expressions as printed in the paper (for comparison with the derived ones).
THEOREM_LATENCY = d * ell - (d - d_bar) * (ell - 1) * p
"""Theorem 4.1, expected latency as printed."""
THEOREM_COMPUTE = d * ell - (d - d_bar) * (ell - 1) * p + k * (d - d_bar) * ell
"""Theorem 4.1, expected total compute as printed."""
PRINTED_VARIANCE = (d - d_bar) ** 2 * (ell - 1) * p * (1 - p)
"""Var[T] as stated in the design (not printed in the paper)."""
EQ3 = d * (1 - p / 2)
"""Eq. 3: latency per token at d_bar = d/2."""
EQ5 = (k + 2 - p) / (2 - p)
"""Eq. 5: compute per time unit at d_bar = d/2."""
EQ6 = d * (2 + k - p) / 2
"""Eq. 6 (times d): compute per token at d_bar = d/2."""


def at_half_depth(expr: sp.Expr) -> sp.Expr:
    """Substitute the paper's d_bar = d/2 and simplify."""
    _check_expr(expr)
    return sp.simplify(expr.subs(d_bar, d / 2))


def lambdified(expr: sp.Expr, args=(d, d_bar, ell, p, k)):
    """A numpy function of ``args`` evaluating ``expr`` (for comparison with ppdmodel)."""
    _check_expr(expr)
    if not (isinstance(args, tuple | list) and all(isinstance(a, sp.Symbol) for a in args)):
        raise ValueError(f"args must be a tuple of sympy Symbols, got {args!r:.80}")
    return sp.lambdify(args, expr, modules="numpy")


# -- This project's extension: latency in seconds from the per-pass schedule -----------------
# (``ppdmodel.passes`` states the schedule; here it is derived from its phases and summed.)
L, x_row, e, h_e, h_f = sp.symbols("L x_row e h_e h_f", nonnegative=True)
"""Layer at batch 1, extra per-layer time per candidate row, embedding, early / final head."""
delta, eta, tau = sp.symbols("delta eta tau", nonnegative=True)
"""Dispatch message, hand-off, host time per token (seconds)."""
sigma = sp.Symbol("sigma", positive=True)
"""Shared-device slowdown (>= 1; 1 on separate devices)."""
t = sp.Symbol("t", integer=True, positive=True)
"""Token index of a pass."""

L_K = L + (k - 1) * x_row
"""Per-layer time of the k-row candidate batch (the linear model of DecodeCosts)."""


def pass_schedule(early_head: str) -> dict:
    """The phases of one pass (``ppdmodel.passes``), as sympy expressions.

    From the split, main computes alone for min(delta, W_m) (the dispatch delay), then main and
    the batch both compute at rate 1/sigma until o = min(max(W_m - delta, 0), W_c) of each is
    done, then whichever is left finishes alone; E_m and E_c are the ends of their device work.
    """
    check_early_head(early_head)
    gap = d - d_bar
    main_head = h_e if early_head == "main" else 0
    work_main = gap * L + h_f
    work_cand = e + gap * L_K + (h_e if early_head == "candidates" else 0)
    alone = sp.Min(delta, work_main)
    overlap = sp.Min(sp.Max(work_main - delta, 0), work_cand)
    end_main = alone + sigma * overlap + (work_main - alone - overlap)
    end_cand = delta + sigma * overlap + (work_cand - overlap)
    return {
        "fresh": e + d_bar * L + main_head,
        "resumed": (2 * d_bar - d) * L + main_head,
        "miss_end": end_main + tau,
        "match_end": sp.Max(end_main + tau, end_cand) + eta,
        "end_main": end_main,
        "overlap": overlap,
        "work_main": work_main,
    }


def expected_latency_seconds_expr(early_head: str) -> sp.Expr:
    """E[T] = sum_t E[start_t + end_t]: pass t resumes w.p. p (t >= 2) and ends in a match
    w.p. p (t <= ell - 1); derived by summing the per-pass expectations over t = 1..ell."""
    ph = pass_schedule(early_head)
    starts = ph["fresh"] + sp.summation(p * (ph["resumed"] - ph["fresh"]), (t, 2, ell))
    starts += (ell - 1) * ph["fresh"]
    ends = ell * ph["miss_end"] + sp.summation(
        p * (ph["match_end"] - ph["miss_end"]), (t, 1, ell - 1)
    )
    return starts + ends


GREEDY_SECONDS_PER_TOKEN = e + d * L + h_f + tau
"""Greedy decoding: embedding, d layers, final head and host time per token."""
EXPECTED_LATENCY_SECONDS = {h: expected_latency_seconds_expr(h) for h in ("main", "candidates")}
"""E[T] in seconds per early-head placement, derived."""
SECONDS_PER_TOKEN = {h: sp.diff(expr, ell) for h, expr in EXPECTED_LATENCY_SECONDS.items()}
"""lim_{ell->inf} E[T]/ell in seconds: E[T] is affine in ell, so the limit is d E[T] / d ell."""


def _break_even(per_token: sp.Expr) -> sp.Expr:
    """Solve per_token(p) = greedy for p; per_token is affine in p (B - p S): (B - G) / S."""
    at_zero = per_token.subs(p, 0)
    return (at_zero - GREEDY_SECONDS_PER_TOKEN) / (at_zero - per_token.subs(p, 1))


BREAK_EVEN_P = {h: _break_even(expr) for h, expr in SECONDS_PER_TOKEN.items()}
"""The p at which PPD's seconds per token equal greedy's (break-even when it is in [0, 1])."""
UNIT_COSTS = {L: 1, x_row: 0, e: 0, h_e: 0, h_f: 0, delta: 0, eta: 0, tau: 0, sigma: 1}
"""DecodeCosts.unit(): with these, the expressions above reduce to Theorem 4.1."""
SECONDS_ARGS = (d, d_bar, ell, p, k, L, x_row, e, h_e, h_f, delta, eta, tau, sigma)
"""Argument order of ``lambdified(expr, SECONDS_ARGS)`` for the seconds expressions."""


def _check_expr(expr) -> None:
    """ValueError unless ``expr`` is a sympy expression."""
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"expr must be a sympy expression, got {type(expr).__name__}")


# -- Speculative decoding (``ppdmodel.alternatives``): tokens per verify step ------------------
a_accept = sp.Symbol("a", positive=True)
"""Per-token acceptance probability of a drafted token."""
g_draft = sp.Symbol("g", integer=True, positive=True)
"""Draft length (tokens proposed per verify step)."""
_i = sp.Symbol("i", integer=True, nonnegative=True)


def speculative_tokens_expr() -> sp.Expr:
    """E[X + 1] from the law of the accepted count X: P(X = i) = a^i (1 - a) for i < g (the
    first i drafts accepted, the next rejected) and P(X = g) = a^g; derived by summation."""
    expr = sp.summation((_i + 1) * a_accept**_i * (1 - a_accept), (_i, 0, g_draft - 1))
    return sp.simplify(expr + (g_draft + 1) * a_accept**g_draft)


SPECULATIVE_TOKENS_PER_STEP = speculative_tokens_expr()
"""E[X + 1], derived (a Piecewise: g + 1 at a = 1)."""
LEVIATHAN_TOKENS = (1 - a_accept ** (g_draft + 1)) / (1 - a_accept)
"""Leviathan et al. (2023), Eq. 1, as printed."""
