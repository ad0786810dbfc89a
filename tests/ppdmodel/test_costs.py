"""Seconds under DecodeCosts: reduction to Theorem 4.1, exactness, break-even, waterfall."""

import itertools
import json
import math

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts

PLACEMENTS = ("main", "candidates")
SECONDS_FIELDS = (
    "layer_s",
    "candidate_extra_row_layer_s",
    "embedding_s",
    "early_head_s",
    "final_head_s",
    "candidate_dispatch_s",
    "hidden_dispatch_s",
    "handoff_s",
    "host_s",
)


def random_costs(rng, shared=None) -> DecodeCosts:
    """Costs drawn at random, in multiples of 1/16 (sums and products stay exact)."""

    def q(hi):
        return float(rng.integers(0, 16 * hi + 1)) / 16

    shared = rng.random() < 0.5 if shared is None else shared
    return DecodeCosts(
        layer_s=q(2) + 1 / 16,
        candidate_extra_row_layer_s=q(1) * rng.integers(0, 2),
        embedding_s=q(2),
        early_head_s=q(6),
        final_head_s=q(6),
        candidate_dispatch_s=q(3),
        hidden_dispatch_s=q(3),
        handoff_s=q(3),
        host_s=q(3),
        shared_device_slowdown=1 + 1 / 16 + q(1) if shared else 1.0,
    )


# -- DecodeCosts --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", SECONDS_FIELDS)
@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf"), "1", True])
def test_bad_seconds_name_the_field(name, bad):
    with pytest.raises(ValueError, match=rf"DecodeCosts\.{name} must be a finite number"):
        DecodeCosts(**{name: bad})


@pytest.mark.parametrize("bad", [0.99, 0.0, -2, float("nan"), float("inf")])
def test_slowdown_below_one_is_refused(bad):
    with pytest.raises(ValueError, match=r"DecodeCosts\.shared_device_slowdown .* >= 1"):
        DecodeCosts(shared_device_slowdown=bad)


def test_layer_time_must_be_positive_and_table_is_checked():
    with pytest.raises(ValueError, match=r"DecodeCosts\.layer_s .* > 0"):
        DecodeCosts(layer_s=0.0)
    with pytest.raises(ValueError, match=r"candidate_layer_s_by_k key k must be a positive"):
        DecodeCosts(candidate_layer_s_by_k={0: 1.0})
    with pytest.raises(ValueError, match=r"candidate_layer_s_by_k\[3\] must be a finite"):
        DecodeCosts(candidate_layer_s_by_k={1: 1.0, 3: float("nan")})
    with pytest.raises(ValueError, match=r"\(k, seconds\) pairs"):
        DecodeCosts(candidate_layer_s_by_k=[1.0])


def test_unknown_placement_and_bad_costs_are_refused():
    kwargs = dict(d=30, d_bar=15, ell=16, p=0.3, k=3, costs=DecodeCosts())
    with pytest.raises(ValueError, match=r"early_head must be one of \('main', 'candidates'\)"):
        ppdmodel.expected_latency_seconds(**kwargs, early_head="side")
    with pytest.raises(ValueError, match=r"early_head must be one of"):
        ppdmodel.break_even_p(d=30, d_bar=15, costs=DecodeCosts(), early_head=None)
    with pytest.raises(ValueError, match=r"costs must be a ppdmodel.DecodeCosts"):
        ppdmodel.expected_latency_seconds(**{**kwargs, "costs": {"layer_s": 1}})
    with pytest.raises(ValueError, match=r"k must be a positive integer"):
        ppdmodel.expected_latency_seconds(**{**kwargs, "k": 0})
    with pytest.raises(ValueError, match=r"not both"):
        ppdmodel.expected_latency_seconds(**kwargs, seconds_per_layer=1.0)
    with pytest.raises(ValueError, match=r"costs= .* or seconds_per_layer="):
        ppdmodel.expected_latency_seconds(d=30, d_bar=15, ell=16, p=0.3)
    with pytest.raises(ValueError, match=r"outside Theorem 4.1's domain"):
        ppdmodel.break_even_p(d=30, d_bar=14, costs=DecodeCosts())


def test_to_dict_from_dict_round_trip_through_json():
    costs = DecodeCosts(
        layer_s=1e-3, early_head_s=5e-3, candidate_layer_s_by_k={3: 1.4e-3, 1: 1e-3}
    )
    assert costs.candidate_layer_s_by_k == ((1, 1e-3), (3, 1.4e-3))
    back = DecodeCosts.from_dict(json.loads(json.dumps(costs.to_dict())))
    assert back == costs
    with pytest.raises(ValueError, match=r"unknown fields \['layer_seconds'\]"):
        DecodeCosts.from_dict({"layer_seconds": 1.0})


def test_candidate_batch_time_linear_or_measured():
    linear = DecodeCosts(layer_s=1.0, candidate_extra_row_layer_s=0.25)
    np.testing.assert_allclose(linear.candidate_layer_seconds(np.array([1, 3, 5])), [1, 1.5, 2])
    table = DecodeCosts(layer_s=1.0, candidate_layer_s_by_k={1: 1.0, 3: 2.0})
    assert table.candidate_layer_seconds(2) == 1.5  # interpolated
    assert table.candidate_layer_seconds(8) == 2.0  # clamped to the largest measured k
    assert ppdmodel.link_seconds(latency_s=1e-3, nbytes=1e6, bandwidth_bytes_per_s=1e9) == 2e-3


# -- Reduction to Theorem 4.1 and the older keyword form -----------------------------------------
@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_unit_costs_reduce_to_theorem_4_1_exactly(early_head):
    grid = itertools.product([2, 30, 40], [0.5, 0.75, 0.95], [1, 16, 128], [0, 0.3, 1], [1, 3])
    d, frac, ell, p, k = (np.array(x) for x in zip(*grid, strict=True))
    d_bar = np.floor(d * frac).clip(np.ceil(d / 2), d - 1)
    got = ppdmodel.expected_latency_seconds(
        d=d, d_bar=d_bar, ell=ell, p=p, k=k, costs=DecodeCosts.unit(), early_head=early_head
    )
    np.testing.assert_array_equal(got, ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p))
    scaled = ppdmodel.expected_latency_seconds(
        d=d, d_bar=d_bar, ell=ell, p=p, k=k, costs=DecodeCosts.unit(0.25), early_head=early_head
    )
    np.testing.assert_array_equal(scaled, 0.25 * got)
    assert np.all(ppdmodel.break_even_p(d=d, d_bar=d_bar, k=k, costs=DecodeCosts.unit()) == 0)


def test_older_keyword_form_is_a_special_case():
    p_t = np.linspace(0.1, 0.9, 127)
    for p in (0.5, p_t):
        old = ppdmodel.expected_latency_seconds(
            d=40, d_bar=20, ell=128, p=p, seconds_per_layer=2e-3,
            per_token_overhead_s=1e-2, per_handoff_overhead_s=3e-2,
        )  # fmt: skip
        costs = DecodeCosts(layer_s=2e-3, host_s=1e-2, handoff_s=3e-2)
        new = ppdmodel.expected_latency_seconds(d=40, d_bar=20, ell=128, p=p, costs=costs)
        assert new == pytest.approx(old, rel=1e-12)
    greedy = ppdmodel.greedy_latency_seconds(d=40, ell=128, costs=costs)
    assert greedy == pytest.approx(ppdmodel.greedy_latency_seconds(
        d=40, ell=128, seconds_per_layer=2e-3, per_token_overhead_s=1e-2))  # fmt: skip


def test_greedy_comes_from_the_same_costs():
    costs = DecodeCosts(layer_s=1.0, embedding_s=0.5, final_head_s=4, early_head_s=9, host_s=2)
    assert ppdmodel.greedy_latency_seconds(d=30, ell=10, costs=costs) == 10 * (0.5 + 30 + 4 + 2)
    # p = 0 with the head off main's path and no sharing: PPD takes exactly greedy's time
    ppd = ppdmodel.expected_latency_seconds(
        d=30, d_bar=15, ell=10, p=0.0, costs=costs, early_head="candidates"
    )
    assert ppd == 10 * (0.5 + 30 + 4 + 2)


# -- Exactness: the expectation is the mean of the per-trace latency -----------------------------
@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_expectation_is_the_mean_over_all_traces(early_head):
    rng = np.random.default_rng(3)
    ell = 6
    traces = np.array(list(itertools.product([0, 1], repeat=ell - 1)))
    for _ in range(20):
        costs, k = random_costs(rng), int(rng.integers(1, 6))
        d = int(rng.integers(2, 41))
        d_bar = int(rng.integers(math.ceil(d / 2), d))
        p_t = rng.random(ell - 1)
        weights = np.prod(np.where(traces == 1, p_t, 1 - p_t), axis=1)
        per_trace = ppdmodel.trace_latency_seconds(
            d=d, d_bar=d_bar, m=traces, k=k, costs=costs, early_head=early_head
        )
        expected = ppdmodel.expected_latency_seconds(
            d=d, d_bar=d_bar, ell=ell, p=p_t, k=k, costs=costs, early_head=early_head
        )
        assert weights @ per_trace == pytest.approx(expected, rel=1e-12)


def test_trace_latency_rejects_non_binary_m():
    with pytest.raises(ValueError, match=r"m must be a sequence of 0 and 1"):
        ppdmodel.trace_latency_seconds(d=4, d_bar=2, m=[1, 2], costs=DecodeCosts())


# -- Break-even p ---------------------------------------------------------------------------------
def test_break_even_reproduces_the_issue_example():
    """SmolLM2-135M (d=30): an early head of ~5.4 layers on main alone needs p >= 0.36 at
    d_bar=15 and 0.675 at d_bar=22 (issue 11); on the candidate side it costs nothing here."""
    costs = DecodeCosts(layer_s=1.0, early_head_s=5.4)
    assert ppdmodel.break_even_p(d=30, d_bar=15, costs=costs) == pytest.approx(0.36)
    assert ppdmodel.break_even_p(d=30, d_bar=22, costs=costs) == pytest.approx(0.675)
    assert ppdmodel.break_even_p(d=30, d_bar=15, costs=costs, early_head="candidates") == 0


@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_break_even_properties(early_head):
    rng = np.random.default_rng(7)
    for _ in range(200):
        costs, k = random_costs(rng), int(rng.integers(1, 6))
        d = int(rng.integers(2, 41))
        d_bar = int(rng.integers(math.ceil(d / 2), d))
        args = dict(d=d, d_bar=d_bar, k=k, early_head=early_head)
        p_star = ppdmodel.break_even_p(**args, costs=costs)
        greedy = costs.greedy_token_seconds(d)
        if np.isfinite(p_star):
            assert 0 <= p_star <= 1
            ppd = ppdmodel.latency_per_token_seconds(**args, p=p_star, costs=costs)
            assert ppd == pytest.approx(greedy, rel=1e-9)
            below = ppdmodel.latency_per_token_seconds(**args, p=p_star * 0.99, costs=costs)
            assert p_star == 0 or below > greedy
        else:
            at_one = ppdmodel.latency_per_token_seconds(**args, p=1.0, costs=costs)
            assert at_one > greedy
        heavier = DecodeCosts(**{**costs.to_dict(), "early_head_s": costs.early_head_s + 1})
        assert ppdmodel.break_even_p(**args, costs=heavier) >= p_star


def test_break_even_zero_when_free_and_inf_when_impossible():
    assert ppdmodel.break_even_p(d=30, d_bar=15, costs=DecodeCosts(handoff_s=100.0)) == 0
    costs = DecodeCosts(early_head_s=1.0, handoff_s=100.0)
    assert ppdmodel.break_even_p(d=30, d_bar=15, costs=costs) == math.inf
    grid = ppdmodel.break_even_p(
        d=30, d_bar=np.array([15, 22, 26]), k=np.array([[1], [3]]),
        costs=DecodeCosts(early_head_s=5.4, candidate_extra_row_layer_s=0.1),
    )  # fmt: skip
    assert grid.shape == (2, 3) and np.all(np.diff(grid, axis=1) > 0)  # deeper d_bar: needs more
    assert np.all(grid[1, :2] > grid[0, :2])  # a slower 3-row batch makes the waits longer
    assert grid[0, 2] == grid[1, 2] == math.inf  # d_bar=26 saves 4 layers < the 5.4 head


# -- Waterfall ------------------------------------------------------------------------------------
@pytest.mark.parametrize("early_head", PLACEMENTS)
def test_waterfall_terms_sum_to_the_closed_form(early_head):
    rng = np.random.default_rng(11)
    for _ in range(100):
        costs, k = random_costs(rng), int(rng.integers(1, 6))
        d = int(rng.integers(2, 41))
        d_bar = int(rng.integers(math.ceil(d / 2), d))
        p = float(rng.random())
        args = dict(d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head)
        fall = ppdmodel.latency_waterfall(**args, p=p)
        assert sum(fall.terms().values()) == pytest.approx(fall.total_s, rel=1e-12)
        assert fall.total_s == pytest.approx(
            ppdmodel.latency_per_token_seconds(**args, p=p), rel=1e-12, abs=1e-12
        )
        assert fall.greedy_s == pytest.approx(costs.greedy_token_seconds(d))
        finite = ppdmodel.latency_waterfall(**args, p=p, ell=32)
        total = ppdmodel.expected_latency_seconds(**args, p=p, ell=32)
        assert finite.total_s == pytest.approx(total / 32, rel=1e-12, abs=1e-12)


def test_waterfall_of_unit_costs_is_only_the_ideal_term():
    fall = ppdmodel.latency_waterfall(d=40, d_bar=20, p=np.array([0.2, 0.6]), costs=DecodeCosts())
    np.testing.assert_allclose(
        fall.ideal_s, ppdmodel.latency_per_token(d=40, d_bar=20, p=[0.2, 0.6])
    )
    for name, value in fall.terms().items():
        if name != "ideal_s":
            np.testing.assert_array_equal(value, 0)


def test_waterfall_names_each_cost():
    costs = DecodeCosts(
        layer_s=1.0, candidate_extra_row_layer_s=0.5, early_head_s=3.0, handoff_s=2.0,
        host_s=1.0, shared_device_slowdown=1.5,
    )  # fmt: skip
    main = ppdmodel.latency_waterfall(d=8, d_bar=4, p=0.5, k=3, costs=costs)
    # D=4: main's suffix 4 units, batch 4 * 2 = 8: wait 8 - 4 - 1 (host) = 3, all batching
    assert (main.early_head_s, main.batching_s, main.handoff_s) == (3.0, 1.5, 1.0)
    assert main.sharing_s == 0.5 * 4 and main.host_s == 1.0 and main.ideal_s == 6.0
    cand = ppdmodel.latency_waterfall(
        d=8, d_bar=4, p=0.5, k=3, costs=costs, early_head="candidates"
    )
    assert (cand.early_head_s, cand.batching_s) == (0.5 * 3.0, 1.5)  # head adds 3 to the wait
