"""The profile check of ``ppd validate`` (``measure.eval.profile_check``).

A planted model whose layers sleep lets the machine change after the profile was taken: the
check must then read the new price and call the profile stale, and read it unchanged otherwise.
On the CLI a profile whose prices were planted four times too low is warned of (the default),
refused before the runs (exit 2, naming the ratio) or replaced by a profile measured now.
The sleeps advance a clock the test controls (``VirtualClock``; on the CLI the loaded model's
pieces sleep on it too), so what is read does not depend on what else the machine runs.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from measure.eval.profile_check import (  # noqa: E402
    CHECK_ROUNDS,
    ProfileCheck,
    check_profile,
    check_scales,
    checked_columns,
    checked_summary,
    greedy_token_price,
    probe_threads,
    stale_note,
)
from measure.hf.arch import arch_spec, get_module  # noqa: E402
from measure.profile.probes import DecodeProbe  # noqa: E402
from measure.profile.profile import (  # noqa: E402
    DIST_THREADS,
    figure,
    load_profile,
    measure_profile,
    reprice,
    write_profile,
)
from ppdmodel.cli import main  # noqa: E402
from tests.measure.tiny_models import (  # noqa: E402
    char_tokenizer,
    plant_sleeps,
    planted_model,
    tiny_model,
)
from tests.measure.virtual_clock import VirtualClock  # noqa: E402

LAYER_S = 0.010
"""Planted per-layer sleep while the profile is taken."""

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def planted_on_clock():
    """A planted model whose layers sleep LAYER_S plus ``extra[0]`` seconds on a
    ``VirtualClock``, its profile taken with ``extra[0] = 0``, and the clock."""
    clock, extra = VirtualClock(), [0.0]
    model = planted_model(
        layer_s=0.0, extra_row_s=0.0, embed_s=0.001, head_s=0.002, sleep=clock.sleep
    )
    for layer in get_module(model, arch_spec(model).layers):
        layer.register_forward_hook(lambda *args: clock.sleep(LAYER_S + extra[0]))
    with clock.installed():
        profile = measure_profile(model, ks=(1,), context_tokens=8, repeats=4, warmup=1, threads=1)
    return model, extra, profile, clock


@pytest.fixture
def planted(planted_on_clock):
    """(model, extra, profile), the clock the one ``measure`` reads during the test."""
    model, extra, profile, clock = planted_on_clock
    with clock.installed():
        yield model, extra, profile


def test_an_unchanged_machine_reads_the_profiles_price_and_a_slower_one_is_stale(planted):
    model, extra, profile = planted
    price, low, high = greedy_token_price(profile, "single")
    assert low <= price <= high
    d = profile.d
    assert price == pytest.approx(d * LAYER_S + 0.003)
    probe = DecodeProbe(model, context_tokens=8)
    (same,) = check_profile(model, profile, ["single"], when="before", seconds=0.5, probe=probe)
    assert same.backend == "single" and same.when == "before" and same.rounds >= CHECK_ROUNDS
    assert same.profile_s == price and (same.low_s, same.high_s) == (low, high)
    assert same.ratio == pytest.approx(1), same.describe()
    extra[0] = LAYER_S  # every layer twice as slow
    try:
        (slow,) = check_profile(model, profile, ["single"], when="after", seconds=0, rounds=2,
                                probe=probe)  # fmt: skip
    finally:
        extra[0] = 0.0
    assert slow.rounds == 2
    assert slow.ratio == pytest.approx((2 * d * LAYER_S + 0.003) / (d * LAYER_S + 0.003))
    assert slow.inside is False and slow.stale, slow.describe()
    assert slow.now_s > high
    assert "(OUTSIDE)" in slow.describe() and "after the runs" in slow.describe()
    note = stale_note([slow])
    assert note.startswith("the machine moved while the runs ran (single ")
    assert "interleaved probes (on by default) price the machine the runs met" in note
    assert same.inside and stale_note([same]) is None


def test_the_check_leaves_the_profile_and_the_thread_count_as_they_were(planted):
    model, _, profile = planted
    before = figure(profile, "single", "layer_s")
    threads = torch.get_num_threads()
    check_profile(model, profile, ["single"], when="before", seconds=0, rounds=1)
    assert figure(profile, "single", "layer_s") == before
    assert torch.get_num_threads() == threads


def test_check_refuses_bad_arguments(planted):
    model, _, profile = planted
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        check_profile(model, profile, ["single"], when="before", rounds=0)
    with pytest.raises(ValueError, match="seconds must be a number >= 0, got -1"):
        check_profile(model, profile, ["single"], when="before", seconds=-1)
    with pytest.raises(ValueError, match="when must be 'before' or 'after', got 'during'"):
        check_profile(model, profile, ["single"], when="during")
    with pytest.raises(ValueError, match="the profile has no backend 'dist'"):
        check_profile(model, profile, ["dist"], when="before")


def test_stale_note_names_each_stale_backend_and_what_to_do():
    stale = ProfileCheck("single", "before", 0.010, 0.009, 0.011, 0.015, 4)
    fine = ProfileCheck("dist", "before", 0.010, 0.009, 0.011, 0.0105, 4)
    bare = ProfileCheck("dist", "before", 0.010, None, None, 0.02, 4)
    assert stale.ratio == pytest.approx(1.5) and stale.stale and not fine.stale
    assert bare.inside is None and not bare.stale and "no interval" in bare.describe()
    note = stale_note([stale, fine, bare])
    assert note.startswith("the profile is stale for this machine now (single 1.5x the ")
    assert "dist" not in note and "--if-stale remeasure" in note
    assert stale_note([fine, bare]) is None
    assert stale.to_dict()["ratio"] == pytest.approx(1.5)
    assert json.loads(json.dumps(stale.to_dict()))["inside"] is False


def test_other_work_busier_than_while_profiled_makes_the_profile_stale():
    busy = ProfileCheck("single", "before", 0.010, 0.009, 0.011, 0.0102, 8, 1.9, 0.01)
    assert busy.inside and busy.load_moved == pytest.approx(1.89) and busy.stale
    assert "; other work 1.90 CPUs (0.01 while profiled)" in busy.describe()
    assert "other work +1.89 CPUs busier than while profiled" in stale_note([busy])
    quiet = ProfileCheck("single", "before", 0.010, 0.009, 0.011, 0.0102, 8, 0.3, 0.01)
    assert not quiet.stale and stale_note([quiet]) is None
    unknown = ProfileCheck("single", "before", 0.010, 0.009, 0.011, 0.0102, 8, 1.9, None)
    assert unknown.load_moved is None and not unknown.stale
    assert unknown.describe().endswith("; other work 1.90 CPUs")


def test_checked_columns_scale_each_backends_rows_by_its_checks():
    checks = [
        ProfileCheck("single", "before", 0.010, None, None, 0.012, 8),
        ProfileCheck("single", "after", 0.010, None, None, 0.0075, 8),
        ProfileCheck("dist", "after", 0.010, None, None, 0.011, 8),
    ]
    scales = check_scales(checks)
    assert scales["single"] == pytest.approx((1.2 * 0.75) ** 0.5)
    assert scales["dist"] == pytest.approx(1.1)
    table = pd.DataFrame({"method": ["greedy", "greedy", "ppd a", "free"],
                          "backend": ["single", "dist", "dist", "other"],
                          "predicted_s": [1.0, 2.0, 3.0, 4.0],
                          "measured_s": [1.0, 2.0, 3.0, 4.0]})  # fmt: skip
    checked = checked_columns(table, checks)
    assert list(checked["method"]) == list(table["method"])  # the rows kept as they were
    assert checked["checked_predicted_s"].iloc[:3].tolist() == pytest.approx(
        [scales["single"], 2.2, 3.3]
    )
    assert checked["checked_rel_err"].iloc[2] == pytest.approx(0.1)
    assert pd.isna(checked["checked_rel_err"].iloc[3])  # no check of its backend
    summary = checked_summary(checked)
    assert summary["checked_median_abs_rel_err"] == pytest.approx(0.1)
    assert summary["checked_greedy_rel_err_by_backend"]["dist"] == pytest.approx(0.1)
    assert checked_summary(checked_columns(table, [])) == {}


def test_probe_threads_are_the_profiles():
    class Fake:
        def __init__(self, backends):
            self.data = {"backends": backends}

    assert probe_threads(Fake({"single": {"threads": 3}}), "single") == 3
    assert probe_threads(Fake({"single": {}}), "single") == 1
    assert probe_threads(Fake({"dist": {"threads": True}}), "dist") == DIST_THREADS


@pytest.fixture
def cli_on_clock(monkeypatch):
    """The CLI's model, as it loads it, with its pieces sleeping on a ``VirtualClock`` (the
    clock ``measure`` reads during the test): the checks read the planted prices."""
    import measure.hf.loading as loading

    clock, real_load = VirtualClock(), loading.load_causal_lm

    def load_planted(*args, **kwargs):
        return plant_sleeps(
            real_load(*args, **kwargs), layer_s=LAYER_S, extra_row_s=0.0, embed_s=0.001,
            head_s=0.002, sleep=clock.sleep,
        )  # fmt: skip

    monkeypatch.setattr(loading, "load_causal_lm", load_planted)
    with clock.installed():
        yield clock


@pytest.mark.usefixtures("cli_on_clock")
def test_cli_warns_refuses_or_remeasures_a_stale_profile(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=3).save_pretrained(model_dir)
    char_tokenizer().save_pretrained(model_dir)
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "4"]
    argv += ["--d-bar", "2", "--k", "1", "--repeats", "1", "--no-progress"]
    assert main([*argv, "--profile-repeats", "3", "--out", str(tmp_path / "fresh")]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "fresh" / "summary.json").read_text())
    # a profile measured just now is checked too (a stale one only said, never replaced)
    assert [c["when"] for c in summary["profile_check"]] == ["before", "after"]
    assert summary["profile_remeasured"] is False and summary["profile_check_stale"] == []
    assert "profile check: single, after the runs: a greedy token " in out
    # the same profile with every price planted 4x too low
    profile = load_profile(tmp_path / "fresh" / "profile.json")
    figures = {
        name: figure(profile, "single", name).scaled(0.25)
        for name in profile.data["figures"]["single"]
    }
    model = profile.data["model"]
    shapes = {k: model[k] for k in ("hidden_size", "kv_heads", "head_dim", "element_bytes")}
    low = reprice(profile, {"single": figures}, shapes=shapes, device=torch.device("cpu"),
                  note="planted 4x too low")  # fmt: skip
    path = write_profile(tmp_path / "low.json", low)
    argv += ["--profile", str(path), "--accept-wide-prices"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--if-stale", "refuse", "--out", str(tmp_path / "refused")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--if-stale refuse: the profile is stale for this machine now (single " in err
    assert "Traceback" not in err
    assert not (tmp_path / "refused" / "validation.csv").exists()
    assert main([*argv, "--out", str(tmp_path / "warned")]) == 0  # --if-stale warn
    out = capsys.readouterr().out
    assert "profile check: single, before the runs: a greedy token " in out
    assert "(OUTSIDE)" in out and "profile warning: the profile is stale for this machine" in out
    summary = json.loads((tmp_path / "warned" / "summary.json").read_text())
    before = [c for c in summary["profile_check"] if c["when"] == "before"]
    assert len(before) == 1 and before[0]["ratio"] == pytest.approx(4)  # planted 4x too low
    assert before[0]["inside"] is False
    # scaled by its check, the planted profile predicts the runs far better than as it is
    table = pd.read_csv(tmp_path / "warned" / "validation.csv")
    assert (table["check_scale"] > 2).all()
    assert (table["rel_err"] < -0.3).all()
    assert (table["checked_rel_err"].abs() < table["rel_err"].abs() / 2).all(), table
    assert summary["checked_median_abs_rel_err"] < summary["median_abs_rel_err"] / 2
    assert set(summary["checked_greedy_rel_err_by_backend"]) == {"single"}
    assert "the profile scaled by its check (single x" in out
    assert main([*argv, "--if-stale", "remeasure", "--out", str(tmp_path / "again")]) == 0
    out = capsys.readouterr().out
    assert "--if-stale remeasure: measuring a new profile" in out
    summary = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert summary["profile_remeasured"] is True
    assert (tmp_path / "again" / "profile.json").is_file()
    # the checks of the new profile in use; the given one's, that found it stale, kept apart
    assert [c["when"] for c in summary["profile_check"]] == ["before", "after"]
    # priced by the new profile: the planted prices, read again
    assert [c["ratio"] for c in summary["profile_check"]] == pytest.approx([1, 1])
    (stale,) = summary["profile_check_stale"]
    assert stale["when"] == "before" and stale["ratio"] > 2 and stale["stale"] is True
    # --check-seconds 0: no check at all
    assert main([*argv, "--check-seconds", "0", "--out", str(tmp_path / "off")]) == 0
    assert "profile check" not in capsys.readouterr().out
    summary = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert summary["profile_check"] == [] and summary["profile_remeasured"] is False
    assert "checked_median_abs_rel_err" not in summary
    assert pd.read_csv(tmp_path / "off" / "validation.csv")["checked_rel_err"].isna().all()
    # ppd run --profile: checked the same way (warn or refuse; nothing to remeasure there)
    run = ["run", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "4"]
    run += ["--d-bar", "2", "--k", "1", "--repeats", "1", "--no-progress", "--no-assistant"]
    run += ["--profile", str(path)]
    with pytest.raises(SystemExit) as info:
        main([*run, "--if-stale", "remeasure", "--out", str(tmp_path / "run-x")])
    assert info.value.code == 2 and "invalid choice: 'remeasure'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main([*run, "--if-stale", "refuse", "--out", str(tmp_path / "run-refused")])
    assert info.value.code == 2
    assert "ppd run: error: --if-stale refuse: the profile is stale" in capsys.readouterr().err
    assert main([*run, "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "profile check: single, before the runs: " in out
    assert "profile check: single, after the runs: " in out
    assert "profile warning: the profile is stale for this machine now (single " in out
