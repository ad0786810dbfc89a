"""Two sharing factors (main's s_m, the candidate batch's s_c) in the closed form: the fluid
schedule by cases, the one-factor schedule bit for bit at s_m == s_c, compute and the grid."""

import dataclasses

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts
from ppdmodel.compute_seconds import compute_terms, trace_compute_seconds
from ppdmodel.cost_grid import DecodeCostsGrid, ppd_grid_per_token
from ppdmodel.passes import device_work, pass_times, shared_work
from tests.ppdmodel.test_costs import random_costs

PLACEMENTS = ("main", "candidates")


def _float_costs(rng, serial=False) -> DecodeCosts:
    """Costs of arbitrary floats (not dyadic), one shared-device factor."""
    values = {name: float(rng.exponential(0.01)) for name in DecodeCosts().to_dict()}
    values.update(layer_s=float(rng.uniform(1e-4, 1e-2)), candidate_layer_s_by_k={})
    values.update(shared_device_slowdown=float(rng.uniform(1.0, 2.5)), serial_device=serial)
    return DecodeCosts.from_dict(values)


def _one_factor(*, d, d_bar, k, costs, early_head):
    """The one-factor schedule as it was written before the candidate side had its own factor
    (the reference the two-factor code must equal bit for bit when s_c == s_m)."""
    work_main, work_cand, delta, main_head = device_work(
        d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head
    )
    sigma = 1.0 if costs.serial_device else costs.shared_device_slowdown
    overlap = np.minimum(np.maximum(np.subtract(work_main, delta), 0.0), work_cand)
    fluid = 0.0 if sigma == 1 else (sigma - 1.0) * overlap
    loss = np.add(delta, work_cand) if costs.serial_device else fluid
    slack = work_main + costs.host_s
    wait = 0.0 if costs.serial_device else np.maximum((delta + work_cand) - slack, 0.0)
    end_main = work_main + fluid
    match = work_cand + fluid
    miss = match if costs.serial_device else np.clip(end_main + costs.host_s - delta, 0.0, match)
    return dict(main_rest=slack + loss, wait=wait, loss=loss, match=match, miss=miss,
                end_main=end_main)  # fmt: skip


def test_equal_factors_are_the_one_factor_schedule_bit_for_bit():
    """s_c None, s_c = s_m given explicitly, and the one-factor reference: equal with ==."""
    rng = np.random.default_rng(24)
    for i in range(600):
        serial = i % 5 == 0
        costs = _float_costs(rng, serial) if i % 2 else random_costs(rng)
        if serial and i % 2 == 0:
            costs = dataclasses.replace(costs, serial_device=True)
        explicit = dataclasses.replace(
            costs, candidate_device_slowdown=costs.shared_device_slowdown
        )
        d = int(rng.integers(2, 41))
        shape = dict(d=d, d_bar=int(rng.integers((d + 1) // 2, d)), k=int(rng.integers(1, 6)),
                     early_head=PLACEMENTS[i % 2])  # fmt: skip
        ref = _one_factor(costs=costs, **shape)
        for c in (costs, explicit):
            times = pass_times(costs=c, **shape)
            assert times.main_rest_s == ref["main_rest"] and times.wait_s == ref["wait"]
            assert times.overlap_excess_s == ref["loss"]
            terms = compute_terms(costs=c, **shape)
            assert terms.candidates_match_s == ref["match"]
            assert terms.candidates_miss_s == ref["miss"]
            fall = ppdmodel.latency_waterfall(costs=c, p=0.37, **shape)
            assert fall.sharing_s == ref["loss"]
        one = ppdmodel.latency_waterfall(costs=costs, p=0.37, **shape).terms()
        assert one == ppdmodel.latency_waterfall(costs=explicit, p=0.37, **shape).terms()


def _by_cases(work_main, work_cand, delta, s_m, s_c):
    """(E_m, E_c) after the split, derived by cases: main alone for delta, then both at rates
    1/s_m and 1/s_c until one is done, then the other alone at full rate."""
    if work_main <= delta:
        return work_main, delta + work_cand
    rest = work_main - delta
    if s_m * rest <= s_c * work_cand:  # main finishes first
        end_main = delta + s_m * rest
        return end_main, end_main + (work_cand - s_m * rest / s_c)
    end_cand = delta + s_c * work_cand  # the batch finishes first
    return end_cand + (rest - s_c * work_cand / s_m), end_cand


def test_two_factor_schedule_equals_the_derivation_by_cases():
    rng = np.random.default_rng(3)
    seen = {"main first": 0, "batch first": 0, "no overlap": 0}
    for i in range(2000):
        costs = dataclasses.replace(
            _float_costs(rng), shared_device_slowdown=float(rng.uniform(1, 3)),
            candidate_device_slowdown=float(rng.uniform(1, 3)),
        )  # fmt: skip
        shape = dict(d=12, d_bar=int(rng.integers(6, 12)), k=int(rng.integers(1, 4)),
                     early_head=PLACEMENTS[i % 2])  # fmt: skip
        work_main, work_cand, delta, _ = device_work(costs=costs, **shape)
        s_m, s_c = costs.shared_device_slowdown, costs.candidate_device_slowdown
        end_main, end_cand = _by_cases(work_main, work_cand, delta, s_m, s_c)
        rest = work_main - delta
        case = "no overlap" if rest <= 0 else (
            "main first" if s_m * rest <= s_c * work_cand else "batch first")  # fmt: skip
        seen[case] += 1
        times = pass_times(costs=costs, **shape)
        tau = costs.host_s
        assert times.main_rest_s - tau == pytest.approx(end_main, rel=1e-12)
        assert times.wait_s == pytest.approx(max(end_cand - end_main - tau, 0), abs=1e-15)
        terms = compute_terms(costs=costs, **shape)
        assert terms.candidates_match_s == pytest.approx(end_cand - delta, rel=1e-12)
        miss = min(max(end_main + tau - delta, 0.0), end_cand - delta)
        assert terms.candidates_miss_s == pytest.approx(miss, rel=1e-12, abs=1e-15)
        shared_main, shared_cand = shared_work(work_main, work_cand, delta, s_m, s_c)
        assert s_m * shared_main == pytest.approx(s_c * shared_cand, rel=1e-12)  # one span
    assert min(seen.values()) > 100, seen


# d = 4, d_bar = 2, k = 1: W_m = 2 L + h_f = 3, W_c = 2 L_k = 2, delta = 1; s_m = 3, s_c = 1.5.
# Main alone for 1 (R = 2 left), then both: the batch is done after s_c W_c = 3 (main did
# 3 / s_m = 1 of its 2), main finishes its last 1 alone: E_m = 5, E_c = 4 (batch first).
# Swapped, s_m = 1.5, s_c = 3: main is done after s_m R = 3 (the batch did 3 / s_c = 1),
# the batch finishes its last 1 alone: E_m = 4, E_c = 5 (main first).
HAND = DecodeCosts(layer_s=1.0, final_head_s=1.0, candidate_dispatch_s=1.0, host_s=0.5,
                   handoff_s=0.25, shared_device_slowdown=3.0,
                   candidate_device_slowdown=1.5)  # fmt: skip


@pytest.mark.parametrize(
    "s_m,s_c,end_main,end_cand",
    [(3.0, 1.5, 5.0, 4.0), (1.5, 3.0, 4.0, 5.0), (2.0, 2.0, 5.0, 5.0), (1.0, 2.0, 3.0, 4.0)],
)
def test_pass_times_and_compute_terms_by_hand(s_m, s_c, end_main, end_cand):
    costs = dataclasses.replace(HAND, shared_device_slowdown=s_m, candidate_device_slowdown=s_c)
    shape = dict(d=4, d_bar=2, k=1, costs=costs, early_head="main")
    times = pass_times(**shape)
    assert times.main_rest_s == end_main + 0.5  # E_m + tau
    assert times.wait_s == max(end_cand - end_main - 0.5, 0.0)
    assert times.overlap_excess_s == end_main - 3.0  # (s_m - 1) o_m
    assert times.candidate_excess_s == end_cand - 1.0 - 2.0  # (s_c - 1) o_c
    terms = compute_terms(**shape)
    assert terms.main_fresh_s == 2.0 + end_main  # P_f + E_m
    assert terms.candidates_match_s == end_cand - 1.0  # E_c - delta
    assert terms.candidates_miss_s == min(end_main + 0.5 - 1.0, end_cand - 1.0)
    # trace m = [1, 0]: main 3 (P_f + E_m) - (P_f - P_r), batch 3 c_miss + (c_match - c_miss)
    busy = trace_compute_seconds(m=[1, 0], **shape)
    main = 3 * (2.0 + end_main) - 2.0
    cand = 3 * terms.candidates_miss_s + (terms.candidates_match_s - terms.candidates_miss_s)
    assert busy == pytest.approx(main + cand, rel=1e-15)


def test_waterfall_with_two_factors_sums_to_the_closed_form():
    rng = np.random.default_rng(8)
    for i in range(200):
        costs = dataclasses.replace(
            random_costs(rng, shared=True),
            candidate_device_slowdown=1 + float(rng.integers(0, 33)) / 16,
        )
        shape = dict(d=16, d_bar=int(rng.integers(8, 16)), k=int(rng.integers(1, 5)),
                     costs=costs, early_head=PLACEMENTS[i % 2])  # fmt: skip
        p = float(rng.random())
        fall = ppdmodel.latency_waterfall(p=p, **shape)
        times = pass_times(**shape)
        assert fall.total_s == pytest.approx(times.miss_only_s - p * times.saving_s, rel=1e-12)
        finite = ppdmodel.latency_waterfall(p=p, ell=32, **shape)
        expected = ppdmodel.expected_latency_seconds(ell=32, p=p, **shape) / 32
        assert finite.total_s == pytest.approx(expected, rel=1e-12)


def test_candidate_factor_validation_and_serialisation():
    for bad in (0.5, float("nan"), float("inf"), "2", True, 0.0):
        with pytest.raises(ValueError, match=r"DecodeCosts\.candidate_device_slowdown must be a "
                                             r"finite factor >= 1"):  # fmt: skip
            DecodeCosts(candidate_device_slowdown=bad)
    assert "candidate_device_slowdown" not in DecodeCosts().to_dict()  # older readers
    costs = DecodeCosts(shared_device_slowdown=1.0, candidate_device_slowdown=1.25)
    assert costs.to_dict()["candidate_device_slowdown"] == 1.25
    assert DecodeCosts.from_dict(costs.to_dict()) == costs
    assert costs.shared_device and costs.candidate_slowdown == 1.25
    assert DecodeCosts(shared_device_slowdown=1.5).candidate_slowdown == 1.5
    assert not DecodeCosts(candidate_device_slowdown=1.0).shared_device


def test_grid_with_a_candidate_factor_equals_the_scalar_functions():
    rng = np.random.default_rng(12)
    n, d, ell = 30, 12, 16
    costs_list = [dataclasses.replace(random_costs(rng, shared=True),
                                      candidate_device_slowdown=float(rng.uniform(1, 3)))
                  for _ in range(n)]  # fmt: skip
    d_bar, k, p = rng.integers(6, 12, n), rng.integers(1, 5, n), rng.random(n)
    names = ("layer_s", "embedding_s", "early_head_s", "final_head_s", "candidate_dispatch_s",
             "hidden_dispatch_s", "handoff_s", "host_s", "shared_device_slowdown",
             "candidate_device_slowdown")  # fmt: skip
    grid = DecodeCostsGrid(
        candidate_layer_s=np.array([c.candidate_layer_seconds(int(j)) for c, j in zip(
            costs_list, k, strict=True)]),
        **{f: np.array([getattr(c, f) for c in costs_list]) for f in names},
    )  # fmt: skip
    for placement in PLACEMENTS:
        out = ppd_grid_per_token(d=d, d_bar=d_bar, k=k, p=p, ell=ell, costs=grid,
                                 early_head=placement)  # fmt: skip
        for i, costs in enumerate(costs_list):
            args = dict(d=d, d_bar=int(d_bar[i]), k=int(k[i]), costs=costs, early_head=placement)
            latency = ppdmodel.expected_latency_seconds(ell=ell, p=p[i], **args) / ell
            assert out.latency_s[i] == pytest.approx(latency, rel=1e-12)
    with pytest.raises(ValueError, match="candidate_device_slowdown"):
        DecodeCostsGrid(layer_s=1.0, candidate_layer_s=1.0, candidate_device_slowdown=[1.0, 0.5])
