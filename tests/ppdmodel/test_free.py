"""FREE's closed form (ppdmodel.free): exact expectation against enumeration, limits and the
i.i.d. linear formula (the simulator's agreement: tests/sim/test_free_schedule.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts
from ppdmodel.free import stacked_counts

COSTS = DecodeCosts(
    layer_s=1e-3,
    candidate_layer_s_by_k={2: 1.25e-3, 4: 1.75e-3},
    embedding_s=1e-4,
    early_head_s=4e-3,
    final_head_s=5e-3,
    host_s=3e-4,
)
LINEAR = DecodeCosts(layer_s=1e-3, candidate_extra_row_layer_s=2e-4, final_head_s=3e-3)
D, L = 30, 10


def test_stacked_counts():
    assert stacked_counts([1, 1, 0, 1, 0, 0]).tolist() == [0, 1, 2, 0, 1, 0]


def test_rows_layer_seconds_knots_and_extrapolation():
    secs = ppdmodel.free_rows_layer_seconds(rows=[1, 2, 3, 4, 6], costs=COSTS)
    assert np.allclose(secs, [1e-3, 1.25e-3, 1.5e-3, 1.75e-3, 2.25e-3])


@pytest.mark.parametrize("costs", [COSTS, LINEAR])
@pytest.mark.parametrize("q", [0.0, 0.35, 1.0, [0.1, 0.9, 0.5, 0.2, 0.7, 0.4, 1.0]])
def test_expectation_equals_enumeration(costs, q):
    ell = 7
    qs = np.full(ell, q) if np.ndim(q) == 0 else np.asarray(q)
    expected = 0.0
    for xs in itertools.product([0, 1], repeat=ell):
        prob = np.prod([qs[i] if x else 1 - qs[i] for i, x in enumerate(xs)])
        if prob:
            t = ppdmodel.free_trace_latency_seconds(d=D, exit_layer=L, exits=xs, costs=costs)
            expected += prob * t
    got = ppdmodel.free_expected_latency_seconds(d=D, exit_layer=L, ell=ell, q=q, costs=costs)
    assert got == pytest.approx(expected, rel=1e-12)


def test_iid_linear_closed_form():
    """(module docstring) E[T] = ell S + (1 - q) sum_t [(d - L_s)(layer_s + x E[n_t]) + h_f]."""
    ell, q, c = 50, 0.6, LINEAR
    shallow = c.embedding_s + L * c.layer_s + c.early_head_s + c.host_s
    t = np.arange(1, ell + 1)
    mean_n = q * (1 - q ** (t - 1)) / (1 - q)
    deep = (D - L) * (c.layer_s + c.candidate_extra_row_layer_s * mean_n) + c.final_head_s
    formula = ell * shallow + (1 - q) * deep.sum()
    got = ppdmodel.free_expected_latency_seconds(d=D, exit_layer=L, ell=ell, q=q, costs=c)
    assert got == pytest.approx(formula, rel=1e-12)


def test_limits_unit_costs():
    """Unit costs: never exiting is greedy plus nothing (T = ell d); always exiting is ell L_s."""
    unit, ell = DecodeCosts.unit(), 20
    kw = dict(d=D, exit_layer=L, ell=ell, costs=unit)
    assert ppdmodel.free_expected_latency_seconds(q=0.0, **kw) == ell * D
    assert ppdmodel.free_expected_latency_seconds(q=1.0, **kw) == ell * L
    exits = [1, 0, 0, 1, 1, 0]
    n_deep = exits.count(0)
    t = ppdmodel.free_trace_latency_seconds(d=D, exit_layer=L, exits=exits, costs=unit)
    assert t == len(exits) * L + (D - L) * n_deep
    lat = [ppdmodel.free_expected_latency_seconds(q=q, **{**kw, "costs": COSTS}) for q in
           np.linspace(0, 1, 11)]  # fmt: skip
    assert np.all(np.diff(lat) < 0)  # more exits: faster


def test_compute_is_latency_less_host():
    kw = dict(d=D, exit_layer=L, ell=12, q=0.4, costs=COSTS)
    lat = ppdmodel.free_expected_latency_seconds(**kw)
    assert ppdmodel.free_expected_compute_seconds(**kw) == pytest.approx(lat - 12 * COSTS.host_s)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(d=30, exit_layer=30, ell=4, q=0.5), "exit_layer"),
        (dict(d=30, exit_layer=0, ell=4, q=0.5), "exit_layer"),
        (dict(d=30, exit_layer=3, ell=0, q=0.5), "ell"),
        (dict(d=30, exit_layer=3, ell=4, q=1.5), "q"),
        (dict(d=30, exit_layer=3, ell=4, q=[0.5, 0.5]), "q"),
    ],
)
def test_rejects(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ppdmodel.free_expected_latency_seconds(costs=COSTS, **kwargs)
    with pytest.raises(ValueError, match="costs"):
        ppdmodel.free_expected_latency_seconds(d=30, exit_layer=3, ell=4, q=0.5, costs=None)
