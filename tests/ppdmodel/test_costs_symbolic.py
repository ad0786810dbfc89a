"""The sympy derivation of the seconds-level model agrees with the numeric code."""

import itertools

import numpy as np
import pytest
import sympy as sp

import ppdmodel
from ppdmodel import DecodeCosts
from ppdmodel import symbolic as S

PLACEMENTS = ("main", "candidates")


@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_unit_costs_simplify_to_theorem_4_1(early_head):
    derived = S.EXPECTED_LATENCY_SECONDS[early_head].subs(S.UNIT_COSTS)
    assert sp.simplify(derived - S.THEOREM_LATENCY) == 0
    assert (
        sp.simplify(S.SECONDS_PER_TOKEN[early_head].subs(S.UNIT_COSTS) - S.LATENCY_PER_TOKEN) == 0
    )
    assert sp.simplify(S.BREAK_EVEN_P[early_head].subs(S.UNIT_COSTS)) == 0


@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_phases_give_the_stated_device_end(early_head):
    phases = S.pass_schedule(early_head)
    stated = phases["work_main"] + (S.sigma - 1) * phases["overlap"]
    assert sp.simplify(phases["end_main"] - stated) == 0


def _grid():
    rows = list(itertools.product(
        [(4, 2), (30, 15), (30, 22), (40, 39)],  # (d, d_bar)
        [1, 16], [0.0, 0.35, 1.0], [1, 3],  # ell, p, k
        [(1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0),  # L x_row e h_e h_f delta eta tau sigma
         (1.0, 0.25, 0.5, 5.0, 5.0, 1.0, 1.5, 0.5, 1.0),
         (0.5, 0.5, 0.1, 2.0, 0.5, 3.0, 0.25, 2.0, 1.3),
         (2.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0)],
    ))  # fmt: skip
    return [(*dd, ell, p, k, *c) for dd, ell, p, k, c in rows]


@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_sympy_equals_numeric_on_a_grid(early_head):
    latency = S.lambdified(S.EXPECTED_LATENCY_SECONDS[early_head], S.SECONDS_ARGS)
    per_token = S.lambdified(S.SECONDS_PER_TOKEN[early_head], S.SECONDS_ARGS)
    break_even = S.lambdified(S.BREAK_EVEN_P[early_head], S.SECONDS_ARGS)
    for row in _grid():
        d, d_bar, ell, p, k, L, x_row, e, h_e, h_f, delta, eta, tau, sigma = row
        costs = DecodeCosts(
            layer_s=L, candidate_extra_row_layer_s=x_row, embedding_s=e, early_head_s=h_e,
            final_head_s=h_f, candidate_dispatch_s=delta, hidden_dispatch_s=delta,
            handoff_s=eta, host_s=tau, shared_device_slowdown=sigma,
        )  # fmt: skip
        args = dict(d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head)
        numeric = ppdmodel.expected_latency_seconds(**args, ell=ell, p=p)
        assert latency(*row) == pytest.approx(numeric, rel=1e-12, abs=1e-12)
        numeric = ppdmodel.latency_per_token_seconds(**args, p=p)
        assert per_token(*row) == pytest.approx(numeric, rel=1e-12, abs=1e-12)
        p_star = ppdmodel.break_even_p(**args)
        with np.errstate(divide="ignore", invalid="ignore"):
            symbolic = float(break_even(*row))
        if 0 < p_star < np.inf:
            assert symbolic == pytest.approx(p_star, rel=1e-12)
        elif p_star == np.inf:
            assert not 0 <= symbolic <= 1
