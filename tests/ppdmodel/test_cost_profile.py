"""Reading a cost profile: per-configuration DecodeCosts, and malformed files refused by name."""

from __future__ import annotations

import json
import math

import pytest

from ppdmodel.cost_profile import parse_cost_profile, read_cost_profile, read_profile_data
from ppdmodel.costs import DecodeCosts
from tests.ppdmodel.profiles import minimal_profile


def test_costs_grow_with_the_candidate_layers():
    profile = parse_cost_profile(minimal_profile(d=30), d=30)
    assert (profile.model_name, profile.d) == ("planted", 30)
    at_15 = profile.costs("single", d_bar=15)
    at_22 = profile.costs("single", d_bar=22)
    assert isinstance(at_15, DecodeCosts)
    assert at_15.handoff_s == pytest.approx(15 * 0.0001)
    assert at_22.handoff_s == pytest.approx(8 * 0.0001)
    assert at_15.candidate_layer_seconds(3) == 0.003 and at_15.shared_device_slowdown == 2.0
    assert profile.backends["single"].measured_ks == (1, 3)
    assert profile.warnings == [] and profile.provenance == {}


def _without(data: dict, path: str) -> dict:
    node = data
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    del node[last]
    return data


@pytest.mark.parametrize(
    "path",
    [
        "format",
        "version",
        "model",
        "model.d",
        "model.name",
        "backends",
        "backends.single.costs",
        "backends.single.costs.layer_s",
        "backends.single.costs.early_head_s",
        "backends.single.costs.host_s",
        "backends.single.costs.shared_device_slowdown",
        "backends.single.costs.candidate_layer_s_by_k",
    ],
)
def test_a_missing_field_is_named(path):
    with pytest.raises(ValueError, match=f"{path.replace('.', '[.]')} is missing"):
        parse_cost_profile(_without(minimal_profile(), path))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("layer_s", -0.001, "backends.single.costs.layer_s must be a finite number"),
        ("layer_s", 0.0, "backends.single.costs.layer_s must be a finite number of seconds > 0"),
        ("layer_s", 1e308, r"backends.single.costs.layer_s must be .* <= 1e\+06, got 1e\+308"),
        ("host_s", 1e7, r"backends.single.costs.host_s must be .* <= 1e\+06"),
        ("shared_device_slowdown", 1e300, r"shared_device_slowdown must be .* <= 1e\+06"),
        ("candidate_layer_s_by_k", {"3": 1e308}, r"candidate_layer_s_by_k\[3\] must be"),
        ("early_head_s", math.inf, "backends.single.costs.early_head_s must be a finite"),
        ("host_s", math.nan, "backends.single.costs.host_s must be a finite"),
        ("handoff_s", "1ms", "backends.single.costs.handoff_s must be a finite"),
        ("shared_device_slowdown", 0.5, "shared_device_slowdown must be a finite factor >= 1"),
        ("candidate_layer_s_by_k", {"3": -1.0}, r"candidate_layer_s_by_k\[3\] must be"),
        ("candidate_layer_s_by_k", {}, "candidate_layer_s_by_k must map k to seconds"),
    ],
)
def test_bad_times_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        parse_cost_profile(minimal_profile(**{field: value}))


def test_bad_growth_format_version_and_depth_are_refused():
    data = minimal_profile()
    data["backends"]["single"]["per_candidate_layer_s"] = {"handoff_s": -1.0}
    with pytest.raises(ValueError, match="per_candidate_layer_s.handoff_s must be a finite"):
        parse_cost_profile(data)
    data["backends"]["single"]["per_candidate_layer_s"] = {"layer_s": 1.0}
    with pytest.raises(ValueError, match="unknown fields"):
        parse_cost_profile(data)
    with pytest.raises(ValueError, match="format must be 'ppd-cost-profile'"):
        parse_cost_profile({**minimal_profile(), "format": "csv"})
    with pytest.raises(ValueError, match="version must be 1"):
        parse_cost_profile({**minimal_profile(), "version": 2})
    with pytest.raises(ValueError, match="model.d = 30 does not match the model's depth d = 4"):
        parse_cost_profile(minimal_profile(d=30), d=4)
    with pytest.raises(ValueError, match="model.d must be a positive integer"):
        parse_cost_profile(minimal_profile(d=0))
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_cost_profile([1, 2])


def test_a_serial_backend_prices_both_placements_with_the_main_schedule():
    serial = parse_cost_profile(minimal_profile(serial=True)).backends["single"]
    assert serial.serial and serial.placement("candidates") == "main"
    plain = parse_cost_profile(minimal_profile()).backends["single"]
    assert not plain.serial and plain.placement("candidates") == "candidates"
    with pytest.raises(ValueError, match="early_head must be one of"):
        plain.placement("side")
    data = minimal_profile()
    data["backends"]["single"]["serial"] = "yes"
    with pytest.raises(ValueError, match="backends.single.serial must be true or false"):
        parse_cost_profile(data)


def test_a_serial_backend_carries_serial_device_into_its_costs():
    serial = parse_cost_profile(minimal_profile(serial=True))
    assert serial.costs("single", d_bar=15).serial_device
    assert not parse_cost_profile(minimal_profile()).costs("single", d_bar=15).serial_device


def test_greedy_is_priced_on_the_backend_it_is_compared_with():
    data = minimal_profile(serial=True)
    dist_costs = {**data["backends"]["single"]["costs"], "layer_s": 0.003, "host_s": 0.001,
                  "shared_device_slowdown": 1.3}  # fmt: skip
    data["backends"]["dist"] = {"costs": dist_costs, "greedy_host_s": 0.0003}
    profile = parse_cost_profile(data)
    single, dist = (profile.greedy_costs(b, d_bar=15) for b in ("single", "dist"))
    assert (single.layer_s, single.host_s) == (0.002, 0.0002)
    assert (dist.layer_s, dist.host_s) == (0.003, 0.0003)  # dist's figures, greedy's host
    del data["backends"]["dist"]["greedy_host_s"]  # older profiles: the dist figures' host_s
    data["figures"] = {"dist": {"host_s": {"median": 0.0004, "q1": 0.0, "q3": 0.0, "n": 3}}}
    assert parse_cost_profile(data).greedy_costs("dist", d_bar=15).host_s == 0.0004
    data["backends"]["dist"]["greedy_host_s"] = -1
    with pytest.raises(ValueError, match="backends.dist.greedy_host_s"):
        parse_cost_profile(data)


def test_each_placement_is_priced_with_its_own_host_time_where_measured():
    data = minimal_profile(serial=True)
    dist_costs = {**data["backends"]["single"]["costs"], "host_s": 0.0009}
    by_placement = {"main": 0.0009, "candidates": 0.0016}
    replicate = {"costs": {**dist_costs, "host_s": 0.001}}  # written without its own
    data["backends"]["dist"] = {"costs": dist_costs, "host_s_by_placement": by_placement,
                                "cost_replicates": [replicate]}  # fmt: skip
    profile = parse_cost_profile(data)
    priced = {h: profile.costs("dist", d_bar=15, k=1, early_head=h).host_s
              for h in ("main", "candidates")}  # fmt: skip
    assert priced == by_placement
    assert profile.costs("dist", d_bar=15).host_s == 0.0009  # no placement: the entry's own
    rep = profile.backends["dist"].replicates[0]
    assert rep.costs(d=30, d_bar=15, early_head="candidates").host_s == 0.0016  # inherited
    assert profile.costs("single", d_bar=15, early_head="candidates").host_s == 0.0002
    for bad, message in (({"side": 0.001}, "placement 'side'"),
                         ({"candidates": -1}, "host_s_by_placement.candidates"),
                         ([0.001], "must map placements")):  # fmt: skip
        data["backends"]["dist"]["host_s_by_placement"] = bad
        with pytest.raises(ValueError, match=message):
            parse_cost_profile(data)


def test_the_dist_start_up_is_kept_apart_for_the_term_check_and_inherited_by_replicates():
    data = minimal_profile(serial=True)
    dist_costs = {**data["backends"]["single"]["costs"], "hidden_dispatch_s": 0.0013}
    own = {"costs": dist_costs, "batch_startup_s": 0.0009}
    data["backends"]["dist"] = {"costs": dist_costs, "batch_startup_s": 0.001,
                                "cost_replicates": [{"costs": dist_costs}, own]}  # fmt: skip
    profile = parse_cost_profile(data)
    dist = profile.backends["dist"]
    assert dist.batch_startup_s == 0.001 and profile.backends["single"].batch_startup_s == 0.0
    assert [rep.batch_startup_s for rep in dist.replicates] == [0.001, 0.0009]  # older: entry's
    # priced where the profile put it (inside the candidates placement's dispatch), not twice
    costs = profile.costs("dist", d_bar=15, k=1, early_head="candidates")
    assert costs.hidden_dispatch_s == 0.0013
    for bad in (-1, "x", math.nan):
        data["backends"]["dist"]["batch_startup_s"] = bad
        with pytest.raises(ValueError, match="backends.dist.batch_startup_s"):
            parse_cost_profile(data)


def test_the_rank_start_up_prices_the_candidates_placement_at_the_nearest_k():
    """The rank's own start-up (per k) replaces the one-process one inside the candidates
    placement's dispatch; the main placement, k None and older replicates are as before."""
    data = minimal_profile(serial=True)
    dist_costs = {**data["backends"]["single"]["costs"], "hidden_dispatch_s": 0.0013}
    own = {"costs": dist_costs, "batch_startup_s": 0.001, "rank_startup_s_by_k": {"1": 0.002}}
    data["backends"]["dist"] = {"costs": dist_costs, "batch_startup_s": 0.001,
                                "rank_startup_s_by_k": {"3": 0.003, "1": 0.0015},
                                "cost_replicates": [{"costs": dist_costs}, own]}  # fmt: skip
    profile = parse_cost_profile(data)
    dist = profile.backends["dist"]
    assert dist.rank_startup_s_by_k == ((1, 0.0015), (3, 0.003))
    assert [rep.rank_startup_s_by_k for rep in dist.replicates] == [((1, 0.0015), (3, 0.003)),
                                                                     ((1, 0.002),)]  # fmt: skip
    assert dist.batch_startup("candidates", 2) == 0.0015  # nearest k, the smaller on a tie
    assert dist.batch_startup("candidates", 4) == 0.003
    assert dist.batch_startup("candidates") == 0.001 and dist.batch_startup("main", 3) == 0.0
    at = {k: profile.costs("dist", d_bar=15, k=k, early_head="candidates").hidden_dispatch_s
          for k in (1, 3)}  # fmt: skip
    assert at[1] == pytest.approx(0.0013 + 0.0005) and at[3] == pytest.approx(0.0013 + 0.002)
    assert profile.costs("dist", d_bar=15, k=3, early_head="main").hidden_dispatch_s == 0.0013
    assert profile.costs("dist", d_bar=15, early_head="candidates").hidden_dispatch_s == 0.0013
    rep = dist.replicates[1].costs(d=30, d_bar=15, k=3, early_head="candidates")
    assert rep.hidden_dispatch_s == pytest.approx(0.0013 + 0.001)
    # a serial backend keeps its whole dispatch as the start-up, whatever k
    assert profile.backends["single"].batch_startup("candidates", 3) == 0.0
    with pytest.raises(ValueError, match="k must be"):
        dist.batch_startup("candidates", 0)
    for bad, message in (({"x": 0.001}, r"keys must be integers k >= 1, got 'x'"),
                         ({"0": 0.001}, "got '0'"), ({"1": -1}, r"rank_startup_s_by_k\[1\]"),
                         ([0.001], "must map k to seconds")):  # fmt: skip
        data["backends"]["dist"]["rank_startup_s_by_k"] = bad
        with pytest.raises(ValueError, match=message):
            parse_cost_profile(data)


def test_unknown_backend_and_bad_d_bar_are_refused():
    profile = parse_cost_profile(minimal_profile(d=30))
    with pytest.raises(ValueError, match=r"profiled backends \['single'\]"):
        profile.costs("dist", d_bar=15)
    with pytest.raises(ValueError, match="outside Theorem 4.1's domain"):
        profile.costs("single", d_bar=10)


def test_read_cost_profile_reads_what_parse_checks(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(minimal_profile(d=30)), encoding="utf-8")
    profile = read_cost_profile(path, d=30)
    assert profile.d == 30 and profile.data == parse_cost_profile(minimal_profile(d=30)).data
    assert read_cost_profile(str(path)).d == 30
    with pytest.raises(ValueError, match="model.d = 30 does not match the model's depth d = 12"):
        read_cost_profile(path, d=12)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"cost profile path .*p\.json': no such file"),
        ("{not json", r"cost profile file .*p\.json is not JSON"),
        (b"\xff\xfe{", r"cost profile file .*p\.json is not JSON"),
        ("[1, 2]", r"cost profile file .*p\.json must hold a JSON object, got list"),
        (json.dumps(minimal_profile(layer_s=1e308)), r"backends\.single\.costs\.layer_s must be"),
    ],
)
def test_read_cost_profile_names_the_file_or_the_field(tmp_path, content, message):
    path = tmp_path / "p.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        read_cost_profile(path)


@pytest.mark.parametrize("path", [None, 3, "", b"p.json"])
def test_read_cost_profile_refuses_what_is_not_a_path(path):
    with pytest.raises(ValueError, match="^path must be a file path"):
        read_cost_profile(path)


def test_a_folder_is_not_a_profile_file(tmp_path):
    with pytest.raises(ValueError, match="cost profile path .*: no such file"):
        read_profile_data(tmp_path)
