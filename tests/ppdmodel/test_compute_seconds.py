"""PPD compute in busy device-seconds, and the cost grid: reductions, expectations, agreement."""

import itertools

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts
from ppdmodel.compute_seconds import (
    expected_compute_seconds,
    greedy_compute_seconds,
    trace_compute_seconds,
)
from ppdmodel.cost_grid import DecodeCostsGrid, ppd_grid_per_token
from tests.ppdmodel.test_costs import random_costs

PLACEMENTS = ("main", "candidates")


def test_unit_costs_reduce_to_theorem_41_with_one_candidate():
    for d, d_bar, ell, p in [(40, 20, 16, 0.3), (12, 7, 9, 0.9), (8, 4, 2, 0.0)]:
        got = expected_compute_seconds(d=d, d_bar=d_bar, ell=ell, p=p, costs=DecodeCosts.unit())
        assert got == pytest.approx(ppdmodel.expected_compute(d=d, d_bar=d_bar, ell=ell, p=p, k=1))


def test_expectation_is_the_mean_over_all_traces():
    rng = np.random.default_rng(3)
    d, d_bar, k, ell, p = 10, 6, 3, 6, 0.35
    for placement in PLACEMENTS:
        costs = random_costs(rng)
        traces = np.array(list(itertools.product((0, 1), repeat=ell - 1)))
        weights = np.prod(np.where(traces == 1, p, 1 - p), axis=1)
        each = trace_compute_seconds(
            d=d, d_bar=d_bar, m=traces, k=k, costs=costs, early_head=placement
        )
        expected = expected_compute_seconds(
            d=d, d_bar=d_bar, ell=ell, p=p, k=k, costs=costs, early_head=placement
        )
        assert float(weights @ each) == pytest.approx(expected, rel=1e-12)


def test_device_counts_multiply_each_side():
    costs = DecodeCosts(layer_s=1.0, embedding_s=0.5, final_head_s=2.0, early_head_s=1.0)
    one = expected_compute_seconds(d=8, d_bar=4, ell=10, p=0.5, costs=costs)
    main_only = expected_compute_seconds(
        d=8, d_bar=4, ell=10, p=0.5, costs=costs, devices_candidates=1, devices_main=2
    )
    both = expected_compute_seconds(
        d=8, d_bar=4, ell=10, p=0.5, costs=costs, devices_main=2, devices_candidates=2
    )
    assert both == pytest.approx(2 * one)
    assert one < main_only < both


def test_greedy_compute():
    costs = DecodeCosts(layer_s=2.0, embedding_s=0.5, final_head_s=3.0, host_s=9.0)
    assert greedy_compute_seconds(d=10, ell=4, costs=costs) == 4 * (0.5 + 20 + 3)
    assert greedy_compute_seconds(d=10, ell=4, costs=costs, devices=2) == 8 * (0.5 + 20 + 3)


def _grid_of(costs_list, ks):
    """Stack DecodeCosts into a grid, the candidate batch evaluated at each row's k."""
    fields = (
        "layer_s",
        "embedding_s",
        "early_head_s",
        "final_head_s",
        "candidate_dispatch_s",
        "hidden_dispatch_s",
        "handoff_s",
        "host_s",
        "shared_device_slowdown",
    )
    columns = {f: np.array([getattr(c, f) for c in costs_list]) for f in fields}
    layer_k = [c.candidate_layer_seconds(k) for c, k in zip(costs_list, ks, strict=True)]
    return DecodeCostsGrid(candidate_layer_s=np.array(layer_k), **columns)


def test_grid_equals_the_scalar_functions_row_by_row():
    rng = np.random.default_rng(11)
    n, d, ell = 40, 12, 32
    costs_list = [random_costs(rng) for _ in range(n)]  # shared and separate rows mixed
    d_bar = rng.integers(6, 12, n)
    k = rng.integers(1, 6, n)
    p = rng.random(n)
    grid = _grid_of(costs_list, k)
    for placement in PLACEMENTS:
        out = ppd_grid_per_token(
            d=d, d_bar=d_bar, k=k, p=p, ell=ell, costs=grid, early_head=placement, devices_main=2
        )
        for i, costs in enumerate(costs_list):
            args = dict(d=d, d_bar=int(d_bar[i]), k=int(k[i]), costs=costs, early_head=placement)
            latency = ppdmodel.expected_latency_seconds(ell=ell, p=p[i], **args) / ell
            compute = expected_compute_seconds(ell=ell, p=p[i], devices_main=2, **args) / ell
            assert out.latency_s[i] == pytest.approx(latency, rel=1e-12)
            assert out.compute_s[i] == pytest.approx(compute, rel=1e-12)
            assert out.break_even_p[i] == pytest.approx(ppdmodel.break_even_p(**args))
            assert out.greedy_latency_s[i] == pytest.approx(costs.greedy_token_seconds(d))


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"layer_s": [1.0, -1.0], "candidate_layer_s": 1.0}, "layer_s"),
        ({"layer_s": 1.0, "candidate_layer_s": 0.0}, "candidate_layer_s"),
        ({"layer_s": 1.0, "candidate_layer_s": 1.0, "host_s": np.nan}, "host_s"),
        (
            {"layer_s": 1.0, "candidate_layer_s": 1.0, "shared_device_slowdown": 0.5},
            "shared_device_slowdown",
        ),
    ],
)
def test_grid_rejects_bad_fields(kwargs, name):
    with pytest.raises(ValueError, match=name):
        DecodeCostsGrid(**kwargs)


def test_grid_evaluation_checks_its_arguments():
    grid = DecodeCostsGrid(layer_s=1.0, candidate_layer_s=1.0)
    with pytest.raises(ValueError, match="costs"):
        ppd_grid_per_token(d=8, d_bar=4, k=1, p=0.5, ell=4, costs=DecodeCosts(), early_head="main")
    with pytest.raises(ValueError, match="d_bar"):
        ppd_grid_per_token(d=8, d_bar=3, k=1, p=0.5, ell=4, costs=grid, early_head="main")
    with pytest.raises(ValueError, match="early_head"):
        ppd_grid_per_token(d=8, d_bar=4, k=1, p=0.5, ell=4, costs=grid, early_head="side")
