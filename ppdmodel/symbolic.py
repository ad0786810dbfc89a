"""Sympy derivation of Theorem 4.1 and Eq. 3, 5, 6 from the run model (sympy derives).

Run model: T = d_bar*ell + (d - d_bar)*N and C = T + k(d - d_bar)*ell with N - 1 ~ Bin(ell - 1,
1 - p). The binomial moments come from its moment generating function
M(s) = (p + (1 - p) e^s)^(ell - 1): E[N - 1] = M'(0), E[(N - 1)^2] = M''(0). The ell -> infinity
figures are sympy limits of E[T]/ell, E[C]/ell and E[C]/E[T]. The tests check that every derived
expression simplifies to the printed one (``THEOREM_*``, ``EQ*``) and that the lambdified
expressions equal the numeric functions on a grid. Importing this module imports sympy.
"""

from __future__ import annotations

import sympy as sp

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


def _check_expr(expr) -> None:
    """ValueError unless ``expr`` is a sympy expression."""
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"expr must be a sympy expression, got {type(expr).__name__}")
