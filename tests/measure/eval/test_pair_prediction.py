"""A dist profile built from pair-probe samples: its replicates redraw the pair factors, and a
prediction applies each side's own factor at the configuration's k and says so."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ppdmodel  # noqa: E402
from measure.eval.predict import predict_ppd  # noqa: E402
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.terms import TERM_COLUMNS, term_check  # noqa: E402
from measure.eval.text import _sharing  # noqa: E402
from measure.eval.validate import _row  # noqa: E402
from measure.profile.profile import _priced  # noqa: E402
from measure.profile.stats import Spread  # noqa: E402
from ppdmodel.cost_profile import PROFILE_FORMAT, PROFILE_VERSION, parse_cost_profile  # noqa: E402

D, KS = 8, (1, 3)
SHAPES = {"element_bytes": 4, "kv_heads": 2, "head_dim": 8, "hidden_size": 32}
LINK = {"latency_s": 1e-5, "bandwidth_bytes_per_s": 1e9}


def _figures(rng, pairs: bool, candidates: bool = False) -> dict[str, Spread]:
    """Figures of a dist backend (seconds, with samples); pair factors main ~1.2, batch ~1.6;
    with ``candidates``, the candidates placement's too: main ~1.3, early head + batch ~2.2."""

    def noisy(center, n=15):
        return Spread.of(list(center * (1 + 0.05 * rng.standard_normal(n))))

    fig = {name: noisy(v) for name, v in (
        ("layer_s", 1e-3), ("embedding_s", 1e-5), ("early_head_s", 2e-3),
        ("final_head_s", 2e-3), ("host_s", 1e-4), ("handoff_copy_s", 1e-6), ("pack_s", 1e-6),
        ("unpack_append_s", 1e-6), ("stream_alone_s", 0.02), ("stream_both_s", 0.025))}  # fmt: skip
    fig.update({f"candidate_layer_s[{k}]": noisy(1e-3 * (1 + 0.2 * (k - 1))) for k in KS})
    if pairs:
        for k in KS:
            fig[f"pair_main_alone_s[{k}]"] = noisy(0.01)
            fig[f"pair_main_both_s[{k}]"] = noisy(0.012)
            fig[f"pair_cand_alone_s[{k}]"] = noisy(0.01)
            fig[f"pair_cand_both_s[{k}]"] = noisy(0.016)
    if pairs and candidates:
        for k in KS:
            fig[f"pair_main_alone_s[{k},candidates]"] = noisy(0.01)
            fig[f"pair_main_both_s[{k},candidates]"] = noisy(0.013)
            fig[f"pair_cand_alone_s[{k},candidates]"] = noisy(0.012)
            fig[f"pair_cand_both_s[{k},candidates]"] = noisy(0.0264)
    return fig


def _profile(pairs=True, device="cpu", d=D, context_tokens=None, candidates=False):
    """A two-backend profile priced from planted figures (``_figures``), kept in it."""
    rng = np.random.default_rng(7)
    entries, figures = {}, {}
    for backend in ("single", "dist"):
        fig = _figures(rng, pairs, candidates)
        entries[backend] = _priced(backend, fig, d, KS, SHAPES, torch.device(device), LINK)
        entries[backend].pop("warnings")
        figures[backend] = {name: s.to_dict() for name, s in fig.items()}
    model = {"name": "t", "d": d}
    if context_tokens is not None:
        model["context_tokens"] = context_tokens
    data = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "model": model,
            "backends": entries, "figures": figures, "link": dict(LINK), "provenance": {},
            "warnings": []}  # fmt: skip
    return parse_cost_profile(data, d=d)


RUNS = [SimpleNamespace(m=[1, 0, 1, 1, 0, 0, 1], tokens=list(range(8))),
        SimpleNamespace(m=[0, 1, 1], tokens=list(range(4)))]  # fmt: skip


def test_replicates_redraw_the_pair_factors():
    profile = _profile()
    pair = profile.data["backends"]["dist"]["pair_slowdowns"]
    assert pair["d_bar"] == 4 and set(pair["by_k"]) == {"1", "3"}
    reps = profile.cost_replicates("dist", d_bar=5, k=3)
    mains = {c.shared_device_slowdown for c in reps}
    cands = {c.candidate_device_slowdown for c in reps}
    assert len(mains) > 10 and len(cands) > 10  # each replicate its own redrawn factors
    costs = profile.costs("dist", d_bar=5, k=3)
    assert min(mains) < costs.shared_device_slowdown < max(mains)
    assert min(cands) < costs.candidate_device_slowdown < max(cands)
    assert 1.4 < costs.candidate_device_slowdown and costs.shared_device_slowdown < 1.35


def test_no_pair_factors_off_a_cpu():
    profile = _profile(device="meta")  # the ranks run on two devices: nothing shared
    assert "pair_slowdowns" not in profile.data["backends"]["dist"]
    assert profile.sharing("dist", 3).source == "costs"


def test_dist_prediction_applies_each_sides_factor_and_says_so():
    profile = _profile()
    config = PPDConfig(d_bar=5, k=3, backend="dist", early_head="candidates")
    pred = predict_ppd(profile, RUNS, config)
    costs = profile.costs("dist", d_bar=5, k=3)
    assert pred.costs == costs and costs.candidate_device_slowdown is not None
    closed = sum(ppdmodel.trace_latency_seconds(d=D, d_bar=5, m=r.m, k=3, costs=costs,
                                                early_head="candidates") for r in RUNS)  # fmt: skip
    assert pred.closed_form_s == pytest.approx(closed, rel=1e-12)
    assert pred.simulated_s == pytest.approx(closed, rel=1e-9)
    assert pred.sharing == profile.sharing("dist", 3) and pred.sharing.source == "pair"
    # the interval spans replicates whose pair factors differ: wider than with them fixed
    assert pred.interval.low < pred.closed_form_s < pred.interval.high
    data = copy.deepcopy(dict(profile.data))
    for rep in data["backends"]["dist"]["cost_replicates"]:
        del rep["pair_slowdowns"]  # as written before they were redrawn: the entry's, fixed
    fixed = predict_ppd(parse_cost_profile(data, d=D), RUNS, config).interval
    assert pred.interval.high - pred.interval.low > fixed.high - fixed.low
    row = _row(config.label, "dist", 5, 3, "candidates", pred, Spread.of([1.0, 1.1]), 0.0, 0.0,
               1.0, 1.0, True)  # fmt: skip
    assert row["sharing"] == pred.sharing.describe()
    assert _sharing(pred).startswith("; sharing x") and "pair probe at k=3" in _sharing(pred)
    # k = 2 was not measured: the nearest measured k's factors, and the note says so
    two = predict_ppd(profile, RUNS, PPDConfig(d_bar=5, k=2, backend="dist"))
    assert "the nearest measured to k=2" in two.sharing.describe()
    # the single backend is serial: unchanged, no factor named in the report
    single = predict_ppd(profile, RUNS, PPDConfig(d_bar=5, k=3))
    assert single.costs == profile.costs("single", d_bar=5) and _sharing(single) == ""


def test_the_candidates_placement_is_predicted_with_its_own_pair_factors():
    profile = _profile(candidates=True)
    pair = profile.data["backends"]["dist"]["pair_slowdowns"]
    assert set(pair["by_k_candidates"]) == {"1", "3"}
    assert all(2.0 < sides["candidate"] < 2.4 for sides in pair["by_k_candidates"].values())
    config = PPDConfig(d_bar=5, k=3, backend="dist", early_head="candidates")
    pred = predict_ppd(profile, RUNS, config)
    costs = profile.costs("dist", d_bar=5, k=3, early_head="candidates")
    assert pred.costs == costs and costs.candidate_device_slowdown > 2.0
    main = profile.costs("dist", d_bar=5, k=3, early_head="main")
    assert main.candidate_device_slowdown < 1.8  # main's placement keeps the batch's factor
    closed = sum(ppdmodel.trace_latency_seconds(d=D, d_bar=5, m=r.m, k=3, costs=costs,
                                                early_head="candidates") for r in RUNS)  # fmt: skip
    assert pred.closed_form_s == pytest.approx(closed, rel=1e-12)
    assert pred.sharing.placement == "candidates"
    assert "early head on the candidate side" in _sharing(pred)
    # each replicate its own redrawn candidates factors
    reps = profile.cost_replicates("dist", d_bar=5, k=3, early_head="candidates")
    cands = {c.candidate_device_slowdown for c in reps}
    assert len(cands) > 10 and min(cands) < costs.candidate_device_slowdown < max(cands)
    assert pred.interval.low < pred.closed_form_s < pred.interval.high
    # main's placement: the main rows, no placement named
    on_main = predict_ppd(profile, RUNS, PPDConfig(d_bar=5, k=3, backend="dist"))
    assert on_main.costs == main and on_main.sharing.placement is None
    # the term check shows the factors of the configuration's placement
    events = [dict(process=0, token=1, layer_start=5, layer_end=8, kind="layers", start_s=0.0,
                   end_s=0.004)]  # fmt: skip
    run = SimpleNamespace(trace=SimpleNamespace(events=events), tokens=[1], m=[],
                          token_times_s=[0.005])  # fmt: skip
    table = term_check(profile, config, [run])
    assert len(table) and set(table["sharing_candidates"]) == {costs.candidate_device_slowdown}
    assert set(table["sharing_main"]) == {costs.shared_device_slowdown}


def test_one_factor_profile_predicts_as_before():
    profile = _profile(pairs=False)
    config = PPDConfig(d_bar=5, k=3, backend="dist")
    pred = predict_ppd(profile, RUNS, config)
    assert pred.costs == profile.costs("dist", d_bar=5)  # k changes nothing without pairs
    assert pred.costs.candidate_device_slowdown is None
    assert pred.sharing.describe().endswith("both sides (shared_device_slowdown)")


def test_term_check_shows_the_factors_used():
    profile = _profile()
    config = PPDConfig(d_bar=5, k=3, backend="dist")
    events = [dict(process=0, token=1, layer_start=5, layer_end=8, kind="layers", start_s=0.0,
                   end_s=0.004)]  # fmt: skip
    run = SimpleNamespace(trace=SimpleNamespace(events=events), tokens=[1], m=[],
                          token_times_s=[0.005])  # fmt: skip
    table = term_check(profile, config, [run])
    assert list(table.columns) == list(TERM_COLUMNS)
    costs = profile.costs("dist", d_bar=5, k=3)
    assert set(table["sharing_main"]) == {costs.shared_device_slowdown}
    assert set(table["sharing_candidates"]) == {costs.candidate_device_slowdown}


def test_a_new_drift_rescales_every_backend_alike():
    """reprice with a drift re-timed for one backend rebuilds the other's replicates with the
    same factors, so a ratio of the two backends' replicates still cancels the drift."""
    from measure.profile.drift import MachineDrift, drift_factors
    from measure.profile.profile import reprice
    from measure.profile.replicates import PROFILE_REPLICATES

    profile = _profile()
    before = [c.layer_s for c in profile.cost_replicates("single", d_bar=5)]
    drift = MachineDrift((0.05, 0.07, 0.06), threads=1)
    again = reprice(profile, {"dist": {}}, shapes=SHAPES, device=torch.device("cpu"), note="t",
                    drift=drift)  # fmt: skip
    factors = drift_factors(drift, PROFILE_REPLICATES)
    single = [c.layer_s for c in again.cost_replicates("single", d_bar=5)]
    dist = [c.layer_s for c in again.cost_replicates("dist", d_bar=5)]
    assert single == pytest.approx(
        [b * f for b, f in zip(before, factors, strict=True)]
    )  # not re-timed
    base = [c.layer_s for c in profile.cost_replicates("dist", d_bar=5)]
    assert dist == pytest.approx([b * f for b, f in zip(base, factors, strict=True)])
    assert again.data["machine"]["windows_s"] == [0.05, 0.07, 0.06]


@pytest.mark.parametrize("early_head", ["main", "candidates"])
def test_the_batch_price_holds_the_start_up_after_an_early_head_on_its_side(early_head):
    from measure.eval.terms import _blocks
    from ppdmodel.cost_profile import BackendCosts

    costs = ppdmodel.DecodeCosts(layer_s=1.0, embedding_s=0.25, candidate_dispatch_s=0.5,
                                 hidden_dispatch_s=0.75, serial_device=True)  # fmt: skip
    config = PPDConfig(d_bar=6, k=1, early_head=early_head)
    # a serial backend: its whole dispatch is the start-up, timed inside the batch
    serial = BackendCosts(base=costs, serial=True, batch_startup_s=0.125)
    startup = 0.5 if early_head == "main" else 0.75
    assert serial.batch_startup(early_head) == startup
    prices = {name: price for name, _, price in _blocks(config, 10, costs, startup)}
    assert prices["candidate batch"] == pytest.approx(0.25 + 4 * 1.0 + startup)
    # dist: only the start-up after the candidate rank's own early head (none after a message)
    fluid_costs = dataclasses.replace(costs, serial_device=False)
    for recorded in (0.0, 0.125):
        dist = BackendCosts(base=fluid_costs, batch_startup_s=recorded)
        expected = recorded if early_head == "candidates" else 0.0
        assert dist.batch_startup(early_head) == expected
        got = {n: p for n, _, p in _blocks(config, 10, fluid_costs, dist.batch_startup(early_head))}
        assert got["candidate batch"] == pytest.approx(0.25 + 4 * 1.0 + expected)
    with pytest.raises(ValueError, match="early_head"):
        serial.batch_startup("side")
