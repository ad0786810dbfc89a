"""The planner prices a dist profile's configurations with the pair factors ``ppd validate``
applies (``CostProfile.costs(backend, d_bar=, k=)``), its intervals with each replicate's."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from ppdmodel import expected_latency_seconds
from ppdmodel.cost_profile import parse_cost_profile
from ppdmodel.intervals import spread_interval
from sim.hardware_costs import decode_costs, load_profile
from sim.plan import plan
from sim.plan_grid import PlanSpace, screen
from sim.plan_intervals import INTERVAL_COLUMNS, profile_replicates
from sim.ptable import PTable
from sim.shape import ModelShape
from tests.ppdmodel.test_pair_profile import dist_profile

SHAPE = ModelShape.from_name("smollm2-135m").with_context(1024)
PAIRS = {"d_bar": 15, "by_k": {"1": {"main": 1.3, "candidate": 1.05},
                               "3": {"main": 1.1, "candidate": 1.7}},
         "by_k_candidates": {"1": {"main": 1.35, "candidate": 1.4},
                             "3": {"main": 1.15, "candidate": 2.1}}}  # fmt: skip
"""``by_k_candidates`` (the early head on the candidate side) differs from ``by_k``: the plan
prices each placement with its own factors, as ``ppd validate``."""
KS = (1, 2, 3, 4)
"""k = 2 takes k = 1's factors (the smaller on a tie), k = 4 takes k = 3's."""
SPACE = PlanSpace(max_devices=2, d_bars=(15, 22), ks=KS, alternatives=False, ell=64)


def _ptable() -> PTable:
    rows = [{"workload": "qa", "head": "shared", "layer": layer, "k": k,
             "p_correct": 0.2 + 0.02 * layer / 15 + 0.05 * k}
            for layer in (15, 22, 29) for k in KS]  # fmt: skip
    return PTable.from_frame(pd.DataFrame(rows), d=30, name="planted")


BATCH = {"candidate_layer_s_by_k": {"1": 0.0024, "3": 0.003}}
"""The planted batch prices, k = 1's above main's ``layer_s`` (0.002): the candidate side's
one-row batch is priced apart from main's layer, by the planner
(``ProfileHardware.candidate_layer_seconds``) as by ``CostProfile.costs``."""


def _replicates() -> list[dict]:
    """Three replicates of the dist entry, each with its own redrawn pair factors."""
    reps = []
    for shift in (-0.05, 0.0, 0.08):
        pairs = copy.deepcopy(PAIRS)
        for sides in [*pairs["by_k"].values(), *pairs["by_k_candidates"].values()]:
            sides.update(main=sides["main"] + shift, candidate=sides["candidate"] + 2 * shift)
        rep = dist_profile(pairs, **BATCH)["backends"]["dist"]
        rep["costs"]["final_head_s"] *= 1 + shift
        reps.append({key: rep[key] for key in ("costs", "per_candidate_layer_s",
                                               "pair_slowdowns")})  # fmt: skip
    return reps


def _write(tmp_path, pairs=PAIRS, replicates=None):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(dist_profile(pairs, replicates=replicates, **BATCH)))
    return path, parse_cost_profile(json.loads(path.read_text()))


def _expected(profile, row, ell, costs=None) -> float:
    """What ``ppd validate`` / ``ppd latency --costs`` predicts per token for ``row``."""
    costs = costs or profile.costs(
        "dist", d_bar=int(row.d_bar), k=int(row.k), early_head=row.early_head
    )
    placement = profile.backends["dist"].placement(row.early_head)
    total = expected_latency_seconds(d=30, d_bar=int(row.d_bar), ell=ell, p=float(row.p),
                                     k=int(row.k), costs=costs, early_head=placement)  # fmt: skip
    return float(total) / ell


def _dist_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[(frame.method == "ppd") & (frame.tp_candidates == 1)]


def test_planned_dist_latency_is_validates_prediction_at_every_k(tmp_path):
    path, profile = _write(tmp_path)
    hardware = load_profile(path, SHAPE)
    dist = _dist_rows(screen(hardware, _ptable(), SPACE, 30))
    assert sorted(set(dist.k)) == list(KS) and set(dist.early_head) == {"main", "candidates"}
    for row in dist.itertuples():
        assert row.latency_s == pytest.approx(_expected(profile, row, SPACE.ell), rel=1e-12)
    # the pair factors change the plan: the one stream factor for both sides prices it otherwise
    one = profile.costs("dist", d_bar=15)
    row = next(r for r in dist.itertuples() if r.k == 1)
    assert row.latency_s != pytest.approx(_expected(profile, row, SPACE.ell, one), rel=1e-6)
    # the candidates placement's own factors change it too: main's placement's price it otherwise
    row = next(r for r in dist.itertuples() if r.k == 3 and r.early_head == "candidates")
    main = profile.costs("dist", d_bar=int(row.d_bar), k=3, early_head="main")
    assert row.latency_s != pytest.approx(_expected(profile, row, SPACE.ell, main), rel=1e-6)
    # the simulator's confirmation gets the same factors (nearest measured k for 2 and 4)
    by_placement = {
        "main": [(1.3, 1.05), (1.3, 1.05), (1.1, 1.7), (1.1, 1.7)],
        "candidates": [(1.35, 1.4), (1.35, 1.4), (1.15, 2.1), (1.15, 2.1)],
    }
    for early_head, factors in by_placement.items():
        for k, (s_m, s_c) in zip(KS, factors, strict=True):
            costs = decode_costs(hardware[1], d_bar=22, k=k, early_head=early_head,
                                 tp_candidates=1)  # fmt: skip
            assert (costs.shared_device_slowdown, costs.candidate_device_slowdown) == (s_m, s_c)
            wanted = profile.costs("dist", d_bar=22, k=k, early_head=early_head)
            assert (costs.shared_device_slowdown, costs.candidate_slowdown) == (
                wanted.shared_device_slowdown, wanted.candidate_slowdown)  # fmt: skip


def test_without_pair_factors_the_dist_plan_keeps_one_factor(tmp_path):
    path, profile = _write(tmp_path, pairs=None)
    hardware = load_profile(path, SHAPE)
    screened = screen(hardware, _ptable(), SPACE, 30)
    for row in _dist_rows(screened).itertuples():
        assert row.latency_s == pytest.approx(_expected(profile, row, SPACE.ell), rel=1e-12)
    costs = decode_costs(hardware[1], d_bar=22, k=3, early_head="main", tp_candidates=1)
    assert costs.shared_device_slowdown == 1.25 and costs.candidate_device_slowdown is None
    # the profile's entry adds nothing then: the same rows as the base costs alone
    bare = [hw.__class__(hw.base, hw.shape, hw.layout, hw.per_candidate_layer_s, name=hw.name)
            for hw in hardware]  # fmt: skip
    pd.testing.assert_frame_equal(screened, screen(bare, _ptable(), SPACE, 30))


def test_plan_intervals_draw_each_replicates_pair_factors(tmp_path):
    path, profile = _write(tmp_path, replicates=_replicates())
    hardware = load_profile(path, SHAPE)
    replicates = profile_replicates(profile, hardware)
    draws = len(_replicates())  # each replicate once; p has no n_tokens, so it is fixed
    table = replace(_ptable(), model="planted")  # this model's own p, measured at every d_bar
    result = plan(hardware, table, SPACE, d=30, confirm_n=0, replicates=replicates,
                  draws=draws, executor=ThreadPoolExecutor(1), model="planted",
                  profile_drift=0.0)  # fmt: skip
    asked = _dist_rows(result.asked)
    assert len(asked) == 2 * len(KS) * 2 and asked[list(INTERVAL_COLUMNS)].notna().all().all()
    for row in asked.itertuples():
        assert row.latency_s == pytest.approx(_expected(profile, row, SPACE.ell), rel=1e-12)
        reps = profile.cost_replicates("dist", d_bar=int(row.d_bar), k=int(row.k),
                                       early_head=row.early_head)  # fmt: skip
        want = spread_interval([_expected(profile, row, SPACE.ell, c) for c in reps])
        got = (row.latency_low_s, row.latency_high_s)
        np.testing.assert_allclose(got, (want.low, want.high), rtol=1e-12)
        assert want.low < want.high  # the replicates' pair factors spread it


def test_greedy_and_early_exit_on_a_dist_profile_take_greedys_host_time(tmp_path):
    """A dist entry's host_s is PPD main's (messages, waits: milliseconds); greedy and the
    other one-process methods are priced with the entry's greedy_host_s, as ppd validate
    prices greedy (``CostProfile.greedy_costs``), not with PPD's."""
    data = dist_profile(PAIRS, **BATCH)
    data["backends"]["dist"]["costs"]["host_s"] = 0.004
    data["backends"]["dist"]["greedy_host_s"] = 0.00005
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    profile = parse_cost_profile(json.loads(path.read_text()))
    hardware = load_profile(path, SHAPE)
    space = PlanSpace(max_devices=2, d_bars=(15,), ks=(1,), ell=64)
    screened = screen(hardware, _ptable(), space, 30)
    on_dist = screened[screened.hardware == 1]
    greedy = on_dist[on_dist.method == "greedy"].iloc[0]
    want = profile.greedy_costs("dist", d_bar=15).greedy_token_seconds(30)
    assert greedy.latency_s == pytest.approx(want, rel=1e-12)
    assert want < profile.costs("dist", d_bar=15).greedy_token_seconds(30) - 0.0039
    ppd = _dist_rows(on_dist).iloc[0]  # PPD keeps main's own host time
    assert ppd.latency_s == pytest.approx(_expected(profile, ppd, space.ell), rel=1e-12)
    # early exit too: each step's host time is greedy's, >= 3.95 ms less per token than PPD's
    del data["backends"]["dist"]["greedy_host_s"]
    path.write_text(json.dumps(data))
    before = screen(load_profile(path, SHAPE), _ptable(), space, 30)
    early = [s[(s.hardware == 1) & (s.method == "early-exit")].latency_s.to_numpy()
             for s in (screened, before)]  # fmt: skip
    assert len(early[0]) and (early[1] - early[0] >= 0.00395 - 1e-12).all()
