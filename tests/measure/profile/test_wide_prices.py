"""A price whose spread is too wide to predict from is re-measured, then marked and refused."""

from __future__ import annotations

import json

import pytest

from measure.profile.stats import Spread
from ppdmodel.cli import main
from ppdmodel.cost_profile import check_wide_prices, parse_cost_profile
from tests.ppdmodel.profiles import minimal_profile

WIDE = {"backend": "single", "figure": "candidate_layer_s[3]", "rel_spread": 0.273,
        "threshold": 0.2}  # fmt: skip


def _wide_profile(d: int = 30) -> dict:
    return {**minimal_profile(d), "wide_prices": [WIDE]}


def test_remeasure_keeps_the_narrower_and_stops_after_the_bounded_rounds():
    pytest.importorskip("torch")
    from measure.profile.profile import is_price, remeasure_wide

    assert is_price("layer_s") and is_price("candidate_layer_s[3]")
    assert not is_price("layer_s[2]") and not is_price("host_s")
    wide, narrow = Spread.of([1.0, 1.5, 2.0, 3.0]), Spread.of([1.0, 1.01, 1.02, 1.03])
    calls = []

    def measure():
        calls.append(1)
        return {"layer_s": wide, "host_s": narrow}

    out = remeasure_wide({"layer_s": wide, "host_s": wide}, measure, 0.1, 3)
    assert len(calls) == 3 and out["layer_s"] is wide  # never narrower: every round spent
    assert out["host_s"] is wide  # not a price: not re-measured
    calls.clear()
    out = remeasure_wide({"layer_s": wide}, lambda: calls.append(1) or {"layer_s": narrow}, 0.1, 3)
    assert len(calls) == 1 and out["layer_s"] is narrow  # narrow after one round: stop


def test_remeasure_moves_a_start_up_and_its_parts_together():
    """The start-up is a round-by-round difference of its parts: one part replaced alone
    would unpair it (a CI run once kept a narrower candidate_layer_s[1] beside the old
    start-up)."""
    pytest.importorskip("torch")
    from measure.profile.profile import remeasure_wide

    wide, narrow = Spread.of([1.0, 1.5, 2.0, 3.0]), Spread.of([1.0, 1.01, 1.02, 1.03])
    names = ("batch_startup_s[1]", "batch_after_head_s[1]", "embedding_s", "candidate_layer_s[1]")
    old = {n: Spread.of([1.0, 1.02, 1.04, 1.05]) for n in names} | {"layer_s": wide}
    old["candidate_layer_s[1]"] = wide
    fresh = {n: Spread.of([2.0, 2.5, 3.0, 4.0]) for n in names} | {"layer_s": narrow}
    fresh["candidate_layer_s[1]"] = narrow
    out = remeasure_wide(old, lambda: fresh, 0.1, 1)
    assert all(out[n] is fresh[n] for n in names)  # the group, wide parts and all
    assert out["layer_s"] is narrow
    worse = {**fresh, "candidate_layer_s[1]": Spread.of([1.0, 2.0, 3.0, 9.0])}
    out = remeasure_wide(old, lambda: worse, 0.1, 1)
    assert all(out[n] is old[n] for n in names) and out["layer_s"] is narrow
    no_startup = {"candidate_layer_s[1]": wide, "embedding_s": wide}  # no group: one by one
    out = remeasure_wide(no_startup, lambda: fresh, 0.1, 1)
    assert out["candidate_layer_s[1]"] is narrow and out["embedding_s"] is wide


def test_a_group_is_replaced_only_when_its_widest_price_narrows():
    """k = 1 wide, k = 3 fine: a fresh draw that narrows k = 1 but widens k = 3 beyond it would
    make the group worse, so the old group stays; the two-stream pair is a group too."""
    pytest.importorskip("torch")
    from measure.profile.profile import remeasure_wide

    def rel(r):  # a Spread whose IQR / median is r
        return Spread.of([1.0 - r, 1.0 - r / 2, 1.0, 1.0 + r / 2, 1.0 + r])

    group = ("batch_startup_s[1]", "batch_after_head_s[1]", "embedding_s", "batch_startup_s[3]",
             "batch_after_head_s[3]")  # fmt: skip
    old = {n: rel(0.01) for n in group} | {"candidate_layer_s[1]": rel(0.3),
                                           "candidate_layer_s[3]": rel(0.05)}  # fmt: skip
    fresh = {n: rel(0.01) for n in group} | {"candidate_layer_s[1]": rel(0.25),
                                             "candidate_layer_s[3]": rel(0.4)}  # fmt: skip
    out = remeasure_wide(old, lambda: fresh, 0.1, 1)
    assert all(out[n] is old[n] for n in old)
    better = {**fresh, "candidate_layer_s[3]": rel(0.2)}
    out = remeasure_wide(old, lambda: better, 0.1, 1)
    assert all(out[n] is better[n] for n in old)
    streams = {"stream_both_s": rel(0.3), "stream_alone_s": rel(0.02)}
    again = {"stream_both_s": rel(0.1), "stream_alone_s": rel(0.03)}
    out = remeasure_wide(streams, lambda: again, 0.2, 1)
    assert out["stream_both_s"] is again["stream_both_s"]
    assert out["stream_alone_s"] is again["stream_alone_s"]  # with it, though it was fine


def test_remeasure_stops_when_the_probe_cannot_supply_the_wide_price():
    pytest.importorskip("torch")
    from measure.profile.profile import remeasure_wide

    wide = Spread.of([1.0, 1.5, 2.0, 3.0])
    calls = []
    out = remeasure_wide({"layer_s": wide, "link_s[4]": wide},
                         lambda: calls.append(1) or {"link_s[4]": wide}, 0.1, 3)  # fmt: skip
    assert len(calls) == 1 and out["layer_s"] is wide  # the ranks cannot re-time a layer


def test_profile_marks_a_price_wider_than_the_threshold():
    torch = pytest.importorskip("torch")
    from measure.profile import measure_profile
    from tests.measure.tiny_models import tiny_model

    torch.set_num_threads(1)
    model = tiny_model("llama", seed=2)
    kw = dict(ks=(1,), context_tokens=16, repeats=4, warmup=0, calls=1, threads=1)
    tight = measure_profile(model, max_spread=1e-12, remeasure_rounds=1, **kw)
    figures = {w.figure for w in tight.wide_prices}
    assert "layer_s" in figures and tight.data["spread_threshold"] == 1e-12
    assert all(w.threshold == 1e-12 and w.rel_spread > 1e-12 for w in tight.wide_prices)
    with pytest.raises(ValueError, match="too wide to predict from: single .*IQR/median"):
        check_wide_prices(tight)
    from measure.profile.report import format_profile

    assert "too wide to predict from: single layer_s: IQR/median" in format_profile(tight)
    loose = measure_profile(model, max_spread=1e9, remeasure_rounds=0, **kw)
    assert loose.wide_prices == () and check_wide_prices(loose) == []
    with pytest.raises(ValueError, match="max_spread must be"):
        measure_profile(model, max_spread=0, **kw)


def test_old_files_read_as_before_and_a_bad_mark_is_named():
    old = parse_cost_profile(minimal_profile())
    assert old.wide_prices == () and check_wide_prices(old) == []
    (price,) = parse_cost_profile(_wide_profile()).wide_prices
    assert price.describe() == "single candidate_layer_s[3]: IQR/median 27.3 % > 20 %"
    with pytest.raises(ValueError, match=r"wide_prices\[0\].rel_spread must be"):
        parse_cost_profile({**minimal_profile(), "wide_prices": [{**WIDE, "rel_spread": "x"}]})
    with pytest.raises(ValueError, match="wide_prices must be a list"):
        parse_cost_profile({**minimal_profile(), "wide_prices": {}})


def _one_line_refusal(code, err):
    err = err.split("\r")[-1].split("\n", 1)[-1] if "\r" in err else err  # HF's loading bar
    assert code == 2 and err.count("\n") == 1, err
    assert "single candidate_layer_s[3]: IQR/median 27.3 % > 20 %" in err
    assert "--accept-wide-prices" in err


def test_latency_refuses_a_wide_profile_unless_accepted(tmp_path, capsys):
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(_wide_profile()))
    argv = ["latency", "--costs", str(path), "--p", "0.5", "--json"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    _one_line_refusal(info.value.code, capsys.readouterr().err)
    assert main([*argv, "--accept-wide-prices"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all("candidate_layer_s[3]" in r["wide_prices"] for r in rows)


def test_plan_refuses_a_wide_profile_unless_accepted(tmp_path, capsys):
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(_wide_profile()))
    argv = ["plan", "--profile", str(path), "--shape", "smollm2-135m", "--out", str(tmp_path / "p"),
            "--devices", "2",
            "--d-bar", "15", "--k", "1", "--json"]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main(argv)
    _one_line_refusal(info.value.code, capsys.readouterr().err)
    assert main([*argv, "--accept-wide-prices", "--allow-other-model-table"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "uses a wide price (single candidate_layer_s[3]" in report["note"]


def test_validate_refuses_a_wide_profile(tmp_path, capsys):
    pytest.importorskip("torch")
    from tests.measure.tiny_models import NUM_LAYERS, save_tiny_model_dir

    model = save_tiny_model_dir(tmp_path / "tiny")
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(_wide_profile(NUM_LAYERS)))
    capsys.readouterr()
    argv = ["validate", "--model", str(model), "--profile", str(path), "--prompt", "hi",
            "--out", str(tmp_path / "v"), "--max-new-tokens", "2"]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main(argv)
    _one_line_refusal(info.value.code, capsys.readouterr().err)


def test_the_stream_figures_are_held_only_where_no_pair_probe_ran():
    """With the pair probe's factors pricing the overlap, a wide two-stream figure would re-run
    the whole rank probe (16 rounds) for a figure no PPD prediction reads."""
    pytest.importorskip("torch")
    from measure.profile.profile import held_prices, remeasure_wide

    wide, narrow = Spread.of([1.0, 1.5, 2.0, 3.0]), Spread.of([1.0, 1.01, 1.02, 1.03])
    figures = {"stream_both_s": wide, "stream_alone_s": narrow, "layer_s": narrow}
    assert held_prices(figures) == ["stream_both_s", "stream_alone_s", "layer_s"]
    paired = {**figures, "pair_main_both_s[1]": wide}
    assert held_prices(paired) == ["layer_s"]
    calls = []
    out = remeasure_wide(paired, lambda: calls.append(1) or {}, 0.1, 2)
    assert not calls and out["stream_both_s"] is wide
