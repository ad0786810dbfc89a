"""A serial device (the single backend): the candidate batch runs to its end at the split,
then main's suffix; exact whether or not the batch outlasts that suffix (W_c > W_m)."""

from __future__ import annotations

import numpy as np
import pytest

import ppdmodel
from ppdmodel import DecodeCosts
from ppdmodel.cost_grid import DecodeCostsGrid, ppd_grid_per_token
from ppdmodel.passes import device_work, pass_times

D, D_BAR = 8, 4


def _costs(serial=True, batch_s=1.25, dispatch_s=0.0):
    """Dyadic costs; with batch_s = 1.25 at k = 3 the batch outlasts main's suffix."""
    return DecodeCosts(
        layer_s=0.5, candidate_layer_s_by_k={1: 0.5, 3: batch_s}, embedding_s=0.75,
        early_head_s=2.0, final_head_s=1.5, candidate_dispatch_s=dispatch_s, handoff_s=0.375,
        host_s=0.25, shared_device_slowdown=2.0, serial_device=serial,
    )  # fmt: skip


def test_pass_runs_the_whole_batch_then_mains_suffix():
    costs = _costs(dispatch_s=0.125)
    work_m, work_c, delta, _ = device_work(d=D, d_bar=D_BAR, k=3, costs=costs, early_head="main")
    assert work_c > work_m  # the case the slowdown-2 model got wrong
    times = pass_times(d=D, d_bar=D_BAR, k=3, costs=costs, early_head="main")
    assert times.main_rest_s == delta + work_c + work_m + costs.host_s
    assert times.wait_s == 0.0  # the batch is done before main's suffix starts
    assert times.saving_s == costs.embedding_s + (D - D_BAR) * costs.layer_s - costs.handoff_s
    assert times.excess_over_greedy_s == costs.early_head_s + delta + work_c


def test_serial_equals_the_slowdown_2_model_while_the_batch_fits():
    serial, fluid = _costs(batch_s=0.5), _costs(serial=False, batch_s=0.5)
    m = (np.random.default_rng(0).random(40) < 0.5).astype(int)
    for k in (1, 3):
        work_m, work_c, _, _ = device_work(d=D, d_bar=D_BAR, k=k, costs=fluid, early_head="main")
        assert work_c <= work_m
        shape = dict(d=D, d_bar=D_BAR, m=m, k=k, early_head="main")
        assert ppdmodel.trace_latency_seconds(costs=serial, **shape) == (
            ppdmodel.trace_latency_seconds(costs=fluid, **shape)
        )


def test_slowdown_2_model_is_short_by_the_batch_overrun_on_every_miss():
    m = np.zeros(15, dtype=int)  # 16 passes, all misses
    work_m, work_c, _, _ = device_work(d=D, d_bar=D_BAR, k=3, costs=_costs(), early_head="main")
    shape = dict(d=D, d_bar=D_BAR, m=m, k=3, early_head="main")
    serial = ppdmodel.trace_latency_seconds(costs=_costs(), **shape)
    fluid = ppdmodel.trace_latency_seconds(costs=_costs(serial=False), **shape)
    assert serial - fluid == pytest.approx(16 * (work_c - work_m))


@pytest.mark.parametrize("early_head", ["main", "candidates"])
def test_waterfall_and_break_even_on_a_serial_device(early_head):
    costs = _costs()
    shape = dict(d=D, d_bar=D_BAR, k=3, costs=costs, early_head=early_head)
    for p in (0.0, 0.3, 1.0):
        split = ppdmodel.latency_waterfall(p=p, **shape)
        assert split.total_s == pytest.approx(ppdmodel.latency_per_token_seconds(p=p, **shape))
        assert split.batching_s == split.dispatch_s == 0.0  # never waited for
    times = pass_times(**shape)
    p_star = ppdmodel.break_even_p(**shape)
    if np.isfinite(p_star):
        ppd = ppdmodel.latency_per_token_seconds(p=p_star, **shape)
        assert ppd == pytest.approx(costs.greedy_token_seconds(D))
    else:
        assert times.excess_over_greedy_s > times.saving_s


def test_grid_rows_equal_the_scalar_costs():
    rows = [_costs(serial=s, batch_s=b) for s in (False, True) for b in (0.5, 1.25)]
    grid = DecodeCostsGrid(
        layer_s=np.array([c.layer_s for c in rows]),
        candidate_layer_s=np.array([c.candidate_layer_seconds(3) for c in rows]),
        embedding_s=0.75, early_head_s=2.0, final_head_s=1.5, handoff_s=0.375, host_s=0.25,
        shared_device_slowdown=2.0, serial_device=np.array([c.serial_device for c in rows]),
    )  # fmt: skip
    out = ppd_grid_per_token(d=D, d_bar=D_BAR, k=3, p=0.4, ell=64, costs=grid, early_head="main")
    expected = [
        ppdmodel.expected_latency_seconds(d=D, d_bar=D_BAR, ell=64, p=0.4, k=3, costs=c) / 64
        for c in rows
    ]
    assert out.latency_s == pytest.approx(expected)


def test_serial_device_must_be_a_bool():
    with pytest.raises(ValueError, match="serial_device"):
        DecodeCosts(serial_device="yes")
    with pytest.raises(ValueError, match="serial_device"):
        DecodeCostsGrid(layer_s=1.0, candidate_layer_s=1.0, serial_device=np.array([0.5]))
    assert DecodeCosts.from_dict(_costs().to_dict()) == _costs()
