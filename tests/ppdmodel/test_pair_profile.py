"""A dist profile's pair factors (each side's own sharing slowdown, per k) read as DecodeCosts."""

from __future__ import annotations

import copy
import json

import pytest

from ppdmodel.cli import main
from ppdmodel.cost_profile import parse_cost_profile
from tests.ppdmodel.profiles import COSTS, minimal_profile

STREAM = 1.25
"""The dist entry's one factor (the stream probe): both sides without pair factors."""
PAIRS = {"d_bar": 15, "by_k": {"1": {"main": 1.1, "candidate": 1.05},
                               "3": {"main": 1.2, "candidate": 1.6}}}  # fmt: skip


def dist_profile(pairs=PAIRS, replicates=None, **costs) -> dict:
    """``minimal_profile`` with a ``dist`` entry (stream factor STREAM) carrying ``pairs``."""
    data = minimal_profile(d=30, serial=True)
    entry = {"costs": {**copy.deepcopy(COSTS), "shared_device_slowdown": STREAM, **costs},
             "per_candidate_layer_s": {"handoff_s": 0.0001}}  # fmt: skip
    if pairs is not None:
        entry["pair_slowdowns"] = copy.deepcopy(pairs)
    if replicates is not None:
        entry["cost_replicates"] = replicates
    data["backends"]["dist"] = entry
    return data


def test_pair_factors_price_each_side_at_the_configurations_k():
    profile = parse_cost_profile(dist_profile())
    one = profile.costs("dist", d_bar=15, k=1)
    assert (one.shared_device_slowdown, one.candidate_device_slowdown) == (1.1, 1.05)
    three = profile.costs("dist", d_bar=20, k=3)
    assert (three.shared_device_slowdown, three.candidate_slowdown) == (1.2, 1.6)
    assert "pair probe at k=3, d_bar=15" in profile.sharing("dist", 3).describe()
    # a k not measured: the nearest measured k (the smaller on a tie), and the note says so
    for k, measured in ((2, 1), (4, 3), (9, 3)):
        costs = profile.costs("dist", d_bar=15, k=k)
        sharing = profile.sharing("dist", k)
        assert (sharing.measured_k, costs.shared_device_slowdown) == (measured, sharing.main)
        assert f"k={measured}, the nearest measured to k={k}" in sharing.describe()
    # without k (greedy, a caller that does not know it): the one factor for both sides
    plain = profile.costs("dist", d_bar=15)
    assert plain.shared_device_slowdown == STREAM and plain.candidate_device_slowdown is None
    assert (
        profile.sharing("dist").describe() == "sharing x1.250 both sides (shared_device_slowdown)"
    )
    # everything but the factors is the entry's own
    assert one.layer_s == plain.layer_s and one.handoff_s == plain.handoff_s


def test_a_profile_without_pair_factors_keeps_one_factor_for_both_sides():
    old = parse_cost_profile(dist_profile(pairs=None))
    for k in (1, 2, 3):
        assert old.costs("dist", d_bar=15, k=k) == old.costs("dist", d_bar=15)
        assert old.costs("dist", d_bar=15, k=k).candidate_slowdown == STREAM
    assert old.sharing("dist", 3).source == "costs"
    # the single (serial) backend never applies a factor, pair factors or not
    single = parse_cost_profile(dist_profile()).costs("single", d_bar=15, k=3)
    assert single.serial_device and single.candidate_device_slowdown is None
    assert parse_cost_profile(dist_profile()).sharing("single", 3).source == "serial"


def test_pair_factors_of_a_gpu_profile_are_not_applied():
    data = dist_profile()
    data["provenance"] = {"device": "cuda:0"}  # dist ranks on two GPUs; the probe's on the CPU
    profile = parse_cost_profile(data)
    assert profile.costs("dist", d_bar=15, k=3) == profile.costs("dist", d_bar=15)
    assert profile.sharing("dist", 3).source == "costs"
    data["backends"]["dist"]["pair_slowdowns"]["by_k"]["1"]["main"] = float("nan")
    with pytest.raises(ValueError, match=r"pair_slowdowns\.by_k\[1\]\.main"):
        parse_cost_profile(data)  # still checked


def test_a_pair_factor_below_one_is_taken_as_one_and_said():
    pairs = {"d_bar": 15, "by_k": {"1": {"main": 0.97, "candidate": 1.3}}}
    profile = parse_cost_profile(dist_profile(pairs))
    costs = profile.costs("dist", d_bar=15, k=1)
    assert (costs.shared_device_slowdown, costs.candidate_device_slowdown) == (1.0, 1.3)
    assert "main profiled x0.970, taken as 1" in profile.sharing("dist", 1).describe()


@pytest.mark.parametrize(
    "side,bad",
    [("main", float("nan")), ("candidate", float("inf")), ("main", 2e6), ("candidate", 0.0),
     ("main", -1.0), ("candidate", "1.2"), ("main", True), ("candidate", None)],
)  # fmt: skip
def test_bad_pair_factors_are_refused_naming_the_field(side, bad):
    pairs = copy.deepcopy(PAIRS)
    pairs["by_k"]["3"][side] = bad
    field = rf"backends\.dist\.pair_slowdowns\.by_k\[3\]\.{side} must be a finite factor > 0"
    with pytest.raises(ValueError, match=field + r" and <= 1e\+06"):
        parse_cost_profile(dist_profile(pairs))


@pytest.mark.parametrize(
    "pairs,match",
    [({"d_bar": 15, "by_k": {}}, r"pair_slowdowns must be an object with by_k"),
     ([1.1, 1.2], r"pair_slowdowns must be an object"),
     ({"by_k": {"0": {"main": 1.0, "candidate": 1.0}}}, r"by_k key must be a candidate count"),
     ({"by_k": {"1": {"main": 1.0}}}, r"field backends\.dist\.pair_slowdowns\.by_k\[1\]\.candidate"
                                      r" is missing"),
     ({"by_k": {"1": 1.2}}, r"by_k\[1\] must be an object"),
     ({"d_bar": 0, "by_k": {"1": {"main": 1.0, "candidate": 1.0}}}, r"d_bar must be a positive")],
)  # fmt: skip
def test_malformed_pair_entries_are_refused(pairs, match):
    with pytest.raises(ValueError, match=match):
        parse_cost_profile(dist_profile(pairs))


@pytest.mark.parametrize("bad", [0.5, float("nan"), float("inf"), 2e6, "2", True])
def test_a_candidate_factor_in_costs_is_optional_and_checked(bad):
    given = parse_cost_profile(dist_profile(pairs=None, candidate_device_slowdown=1.5))
    assert given.costs("dist", d_bar=15).candidate_device_slowdown == 1.5
    null = parse_cost_profile(dist_profile(pairs=None, candidate_device_slowdown=None))
    assert null.costs("dist", d_bar=15).candidate_device_slowdown is None
    field = r"backends\.dist\.costs\.candidate_device_slowdown must be a finite factor >= 1"
    with pytest.raises(ValueError, match=field):
        parse_cost_profile(dist_profile(pairs=None, candidate_device_slowdown=bad))


def _replicate() -> dict:
    """A bare cost replicate (no pair factors of its own) with a sharing factor of 1.3."""
    return {"costs": {**copy.deepcopy(COSTS), "shared_device_slowdown": 1.3},
            "per_candidate_layer_s": {"handoff_s": 0.0001}}  # fmt: skip


def test_replicates_carry_their_own_pair_factors_or_the_entrys():
    rep = _replicate()
    own = {
        **rep,
        "pair_slowdowns": {
            "d_bar": 15,
            "by_k": {"1": {"main": 1.4, "candidate": 1.5}, "3": {"main": 1.7, "candidate": 1.9}},
        },
    }
    profile = parse_cost_profile(dist_profile(replicates=[own, rep]))
    first, second = profile.cost_replicates("dist", d_bar=15, k=3)
    assert (first.shared_device_slowdown, first.candidate_device_slowdown) == (1.7, 1.9)
    # written before the pair factors were redrawn: the entry's, fixed
    assert (second.shared_device_slowdown, second.candidate_device_slowdown) == (1.2, 1.6)
    assert [c.candidate_device_slowdown for c in profile.cost_replicates("dist", d_bar=15)] == [
        None, None]  # fmt: skip
    bad = {**rep, "pair_slowdowns": {"by_k": {"1": {"main": float("nan"), "candidate": 1.0}}}}
    with pytest.raises(ValueError, match=r"cost_replicates\[0\]\.pair_slowdowns\.by_k\[1\]\.main"):
        parse_cost_profile(dist_profile(replicates=[bad]))


CANDIDATES = {"1": {"main": 1.15, "candidate": 1.3}, "3": {"main": 1.25, "candidate": 1.8}}
"""``by_k_candidates``: the factors with the early head on the candidate side."""


def test_the_candidates_placement_takes_its_own_pair_factors():
    profile = parse_cost_profile(dist_profile({**PAIRS, "by_k_candidates": CANDIDATES}))
    cand = profile.costs("dist", d_bar=15, k=3, early_head="candidates")
    assert (cand.shared_device_slowdown, cand.candidate_device_slowdown) == (1.25, 1.8)
    sharing = profile.sharing("dist", 3, early_head="candidates")
    assert sharing.placement == "candidates"
    assert "early head on the candidate side" in sharing.describe()
    assert "x1.800 early head + batch" in sharing.describe()
    # the nearest measured k, as for main's rows
    assert profile.sharing("dist", 2, early_head="candidates").measured == (1.15, 1.3)
    # main's placement (and no placement given) keeps by_k
    for early_head in ("main", None):
        main = profile.costs("dist", d_bar=15, k=3, early_head=early_head)
        assert (main.shared_device_slowdown, main.candidate_device_slowdown) == (1.2, 1.6)
        sharing = profile.sharing("dist", 3, early_head=early_head)
        assert sharing.placement is None and "early head" not in sharing.describe()
    # without k: the entry's one factor whatever the placement
    assert profile.costs("dist", d_bar=15, early_head="candidates").shared_device_slowdown == STREAM
    with pytest.raises(ValueError, match="early_head"):
        profile.sharing("dist", 3, early_head="both")


def test_the_candidates_placement_falls_back_to_the_main_rows():
    profile = parse_cost_profile(dist_profile())
    cand = profile.costs("dist", d_bar=15, k=3, early_head="candidates")
    assert (cand.shared_device_slowdown, cand.candidate_device_slowdown) == (1.2, 1.6)
    sharing = profile.sharing("dist", 3, early_head="candidates")
    assert sharing.placement is None and "early head" not in sharing.describe()


def test_candidates_pair_factors_of_a_gpu_profile_are_not_applied():
    data = dist_profile({**PAIRS, "by_k_candidates": CANDIDATES})
    data["provenance"] = {"device": "cuda"}
    profile = parse_cost_profile(data)
    assert profile.sharing("dist", 3, early_head="candidates").source == "costs"


@pytest.mark.parametrize(
    "cands,match",
    [({}, r"pair_slowdowns\.by_k_candidates must map k"),
     ([1.2], r"pair_slowdowns\.by_k_candidates must map k"),
     ({"0": {"main": 1.0, "candidate": 1.0}}, r"by_k_candidates key must be a candidate count"),
     ({"1": {"main": 1.0}}, r"field backends\.dist\.pair_slowdowns\.by_k_candidates\[1\]"
                            r"\.candidate is missing"),
     ({"1": {"candidate": 1.0}}, r"by_k_candidates\[1\]\.main is missing"),
     ({"1": 1.2}, r"by_k_candidates\[1\] must be an object"),
     ({"1": {"main": float("nan"), "candidate": 1.0}},
      r"by_k_candidates\[1\]\.main must be a finite factor")],
)  # fmt: skip
def test_malformed_candidates_pair_entries_are_refused(cands, match):
    with pytest.raises(ValueError, match=match):
        parse_cost_profile(dist_profile({**PAIRS, "by_k_candidates": cands}))


def test_replicates_carry_their_own_candidates_factors_or_the_entrys():
    rep = _replicate()
    own = {
        **rep,
        "pair_slowdowns": {
            "d_bar": 15,
            "by_k": {"3": {"main": 1.7, "candidate": 1.9}},
            "by_k_candidates": {"3": {"main": 1.4, "candidate": 2.1}},
        },
    }
    main_only = {
        **rep,
        "pair_slowdowns": {"d_bar": 15, "by_k": {"3": {"main": 1.7, "candidate": 1.9}}},
    }
    pairs = {**PAIRS, "by_k_candidates": CANDIDATES}
    profile = parse_cost_profile(dist_profile(pairs, replicates=[own, main_only, rep]))
    got = [
        (c.shared_device_slowdown, c.candidate_device_slowdown)
        for c in profile.cost_replicates("dist", d_bar=15, k=3, early_head="candidates")
    ]
    # its own; the entry's candidates rows beside its own main rows; the entry's both
    assert got == [(1.4, 2.1), (1.25, 1.8), (1.25, 1.8)]
    main = [
        (c.shared_device_slowdown, c.candidate_device_slowdown)
        for c in profile.cost_replicates("dist", d_bar=15, k=3, early_head="main")
    ]
    assert main == [(1.7, 1.9), (1.7, 1.9), (1.2, 1.6)]  # fmt: skip


def test_latency_rows_priced_at_their_k_say_which_factors(tmp_path, capsys):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(dist_profile()))
    argv = ["compute", "--costs", str(path), "--backend", "dist", "--p", "0.4", "--k", "2",
            "--json"]  # fmt: skip
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["sharing"].startswith("sharing x1.100 main, x1.050 candidate batch (pair probe")
    assert "nearest measured to k=2" in row["sharing"]
    assert main([*argv, "--shared-device-slowdown", "1.5"]) == 0  # one factor for both again
    (flagged,) = json.loads(capsys.readouterr().out)
    assert flagged["sharing"] == "sharing x1.500 main, x1.500 candidate batch (flags)"
    assert flagged["ppd_s_per_token"] != row["ppd_s_per_token"]


def test_latency_rows_price_each_placement_with_its_own_factors(tmp_path, capsys):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(dist_profile({**PAIRS, "by_k_candidates": CANDIDATES})))
    argv = ["compute", "--costs", str(path), "--backend", "dist", "--p", "0.4", "--k", "3",
            "--early-head", "main", "candidates", "--json"]  # fmt: skip
    assert main(argv) == 0
    rows = {row["early_head"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["main"]["sharing"].startswith("sharing x1.200 main, x1.600 candidate batch")
    assert rows["candidates"]["sharing"].startswith("sharing x1.250 main, x1.800 early head")
    assert "early head on the candidate side" in rows["candidates"]["sharing"]
    # priced with those factors: as CostProfile.costs for the placement
    from ppdmodel import expected_latency_seconds

    profile = parse_cost_profile(json.loads(path.read_text()))
    for early_head, row in rows.items():
        costs = profile.costs("dist", d_bar=row["d_bar"], k=3, early_head=early_head)
        total = expected_latency_seconds(d=30, d_bar=row["d_bar"], ell=row["ell"], p=0.4, k=3,
                                         costs=costs, early_head=early_head)  # fmt: skip
        want = total / row["ell"]
        assert row["ppd_s_per_token"] == pytest.approx(want, rel=1e-12)
