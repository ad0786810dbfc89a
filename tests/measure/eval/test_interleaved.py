"""Cost probes interleaved with the judged rounds (``ppd validate --interleave-probes``).

A planted cost change after the profile was taken (every layer sleeps longer) must move the
prediction from the interleaved probes with the runs, while the profile taken beforehand
keeps pricing the old machine. And the CLI mode runs on a tiny random model, reporting both
predictions in the printed table, the CSV and summary.json, with progress lines on stderr.
The planted sleeps advance a clock the test controls (``VirtualClock``), so the tolerances hold
on a busy machine.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from measure.decode.settings import RunSettings  # noqa: E402
from measure.eval.interleaved import InterleavedProbes  # noqa: E402
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from measure.hf.arch import arch_spec, get_module  # noqa: E402
from measure.profile.profile import figure, measure_profile  # noqa: E402
from ppdmodel.cli import main  # noqa: E402
from tests.measure.tiny_models import char_tokenizer, planted_model, tiny_model  # noqa: E402
from tests.measure.virtual_clock import VirtualClock  # noqa: E402

LAYER_S = 0.010
"""Planted per-layer sleep while the profile is taken."""
SLOWER_S = 0.010
"""Added to every layer after the profile: the machine the runs see is slower."""
PROMPTS = [[5, 6, 7, 8, 9]]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def slowed_on_clock():
    """A planted model whose layers sleep LAYER_S plus ``extra[0]`` seconds (one sleep each),
    on a ``VirtualClock``: the sleeps advance it, and nothing else does."""
    clock, extra = VirtualClock(), [0.0]
    model = planted_model(
        layer_s=0.0, extra_row_s=0.0, embed_s=0.001, head_s=0.002, sleep=clock.sleep
    )
    for layer in get_module(model, arch_spec(model).layers):
        layer.register_forward_hook(lambda *args: clock.sleep(LAYER_S + extra[0]))
    return model, extra, clock


@pytest.fixture
def slowed(slowed_on_clock):
    """The planted model and its ``extra``, with its clock the one ``measure`` reads during the
    test (the test holds on a busy machine)."""
    model, extra, clock = slowed_on_clock
    with clock.installed():
        yield model, extra


def test_interleaved_prediction_follows_a_cost_change_after_the_profile(slowed):
    model, extra = slowed
    extra[0] = 0.0
    profile = measure_profile(model, ks=(1, 2), context_tokens=8, repeats=3, warmup=1, threads=1)
    extra[0] = SLOWER_S  # after the profile: every layer twice as slow
    try:
        result = validate(
            model, PROMPTS, profile=profile, configs=[PPDConfig(d_bar=2, k=1)],
            max_new_tokens=6, settings=RunSettings(repeats=2), interleave_probes=2,
        )  # fmt: skip
    finally:
        extra[0] = 0.0
    table = result.table
    assert list(table["method"]) == ["greedy", "ppd d_bar=2 k=1 main single"]
    assert table["exact"].all()
    errors = table[["method", "rel_err", "interleaved_rel_err"]]
    assert (table["rel_err"] < -0.3).all(), errors  # the old machine
    # the probes price the machine the runs met: on the test's clock, exactly
    assert table["interleaved_rel_err"].abs().max() < 1e-9, errors
    assert (table["interleaved_rel_err"] > table["rel_err"] + 0.2).all(), errors
    assert table["interleaved_inside"].map(lambda x: isinstance(x, bool)).all()
    assert (table["interleaved_low_s"] <= table["interleaved_high_s"]).all()
    probed = result.interleaved_profile.costs("single", d_bar=2).layer_s
    assert probed - profile.costs("single", d_bar=2).layer_s == pytest.approx(SLOWER_S)
    probed_n = [figure(result.interleaved_profile, "single", f"candidate_layer_s[{k}]").n
                for k in (1, 2)]  # fmt: skip
    # 2 gaps x 2 rounds and one round before each of the 2 x 2 runs for the judged k; k = 2
    # kept from the profile
    assert probed_n == [8, 3]
    # the sentinel: before each of the 2 gaps, before the one prompt of each of the 2 x 2 runs,
    # after the last
    windows = result.interleaved_profile.data["machine"]["windows_s"]
    assert windows == pytest.approx([4 * (LAYER_S + SLOWER_S)] * (2 + 4 + 1))  # the slower machine
    assert result.sentinel.windows_s == windows
    timeline = result.sentinel_table()  # (sentinel.csv) in order: the gap's window first
    assert timeline["kind"].tolist()[:3] == ["window", "window", "run"]
    pieces = timeline[timeline["kind"] == "run"]
    assert len(pieces) == 4 and (pieces["prompt"] == 0).all()
    greedy = pieces[pieces["method"] == "greedy"]
    assert greedy["seconds"].tolist() == pytest.approx(result.timing.greedy.totals_s)
    assert greedy["round"].tolist() == [0, 1]
    # paired with the sentinel around each run, the profile taken on the old machine is moved
    # to the machine each run met: the planted slowdown no longer shows
    assert table["paired_rel_err"].abs().max() < 0.15, table["paired_rel_err"]
    assert table["interleaved_paired_rel_err"].abs().max() < 0.15
    summary = result.summary()
    assert summary["interleaved_median_abs_rel_err"] < 0.15 < summary["median_abs_rel_err"]
    # the slower machine moves greedy as it moves PPD: the speed-up stays predicted
    assert summary["speedup_median_abs_rel_err"] < 0.15 < summary["median_abs_rel_err"]
    # and read turn by turn (each prompt's run against greedy's of its round)
    assert summary["speedup_turns_median_abs_rel_err"] < 0.15
    ppd = table.iloc[1]
    assert ppd["speedup_turns_low"] <= ppd["speedup_turns"] <= ppd["speedup_turns_high"]
    assert ppd["speedup_turns_rel_err"] == pytest.approx(
        ppd["speedup_predicted"] / ppd["speedup_turns"] - 1
    )
    assert pd.isna(table.iloc[0]["speedup_turns"])  # (greedy's row)
    # what a repeat may move it by: this run's turn noise (2 rounds of 1 prompt) and
    # replicates; the test's clock has no run-to-run noise
    assert summary["speedup_turns_repeat_bound"] == 0
    assert summary["paired_median_abs_rel_err"] < 0.15 < summary["median_abs_rel_err"]
    assert summary["sentinel_level_over_profile"] == pytest.approx(2)  # twice as slow
    assert summary["sentinel_windows"] == 7 and 0 <= summary["sentinel_weight"] <= 1
    assert summary["interleaved_paired_worst_abs_rel_err"] < 0.15
    assert summary["probes"].startswith(
        "interleaved probes: 2 gaps of 2 rounds and 4 single rounds before judged runs"
    )


def test_a_profile_without_sentinel_windows_is_not_paired(slowed):
    """An older profile (no ``machine`` entry): the interleaved probes are still paired with
    their own windows; the profile's prediction has no reference to pair with."""
    model, extra = slowed
    extra[0] = 0.0
    profile = measure_profile(model, ks=(1,), context_tokens=8, repeats=2, warmup=0, threads=1)
    del profile.data["machine"]
    result = validate(
        model, [*PROMPTS, [9, 8, 7]], profile=profile, configs=[PPDConfig(d_bar=2, k=1)],
        max_new_tokens=3, settings=RunSettings(repeats=1), interleave_probes=1,
    )  # fmt: skip
    table = result.table
    assert table["exact"].all()
    assert table["paired_rel_err"].isna().all()
    assert table["interleaved_paired_rel_err"].notna().all()
    summary = result.summary()
    assert "paired_median_abs_rel_err" not in summary
    assert "interleaved_paired_median_abs_rel_err" in summary
    # 1 gap, 2 runs of 2 prompts, the end
    assert "; 6 sentinel windows of 8 greedy steps; " in summary["probes"]


def test_probes_refuse_bad_arguments(slowed):
    model, _ = slowed
    profile = measure_profile(model, ks=(1,), context_tokens=8, repeats=2, warmup=0, threads=1)
    with pytest.raises(ValueError, match="rounds must be an integer >= 1"):
        InterleavedProbes(model, profile, [PPDConfig(2, 1)], rounds=0)
    with pytest.raises(ValueError, match="the profile has no backend 'dist'"):
        InterleavedProbes(model, profile, [PPDConfig(2, 1, backend="dist")])
    with pytest.raises(ValueError, match="no probes were run"):
        InterleavedProbes(model, profile, [PPDConfig(2, 1)]).profile()
    with pytest.raises(ValueError, match="interleave_probes must be an integer >= 0"):
        validate(model, PROMPTS, profile=profile, configs=[PPDConfig(2, 1)], max_new_tokens=2,
                 interleave_probes=-1)  # fmt: skip


def test_cli_interleave_probes_reports_both_predictions(tmp_path, capsys):
    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=3).save_pretrained(model_dir)
    char_tokenizer().save_pretrained(model_dir)
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "4"]
    argv += ["--d-bar", "2", "--k", "1", "--repeats", "2", "--profile-repeats", "2"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0  # on by default
    captured = capsys.readouterr()
    assert "| interleaved    error" in captured.out
    assert "interleaved probes: 2 gaps of 2 rounds and 4 single rounds" in captured.out
    assert "from the interleaved probes (the prediction of record: " in captured.out
    assert "from the profile taken beforehand (what ppd plan prices; " in captured.out
    assert "paired with the sentinel (" in captured.out
    assert "x the profile's step time; each prompt's own windows weighted " in captured.out
    assert "): profile median |error| " in captured.out
    assert "speed-ups over greedy (a drift of the whole machine leaves them)" in captured.out
    progress = [x for x in captured.err.splitlines() if x.startswith("ppd: ")]
    assert len(progress) == 4 and progress[-1].startswith("ppd: 4/4 done (round 2/2: ")
    assert all("s elapsed, about " in x and x.endswith(" s left") for x in progress)
    table = pd.read_csv(tmp_path / "out" / "validation.csv")
    assert table[["predicted_s", "interleaved_predicted_s"]].notna().all().all()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "median_abs_rel_err" in summary and "interleaved_median_abs_rel_err" in summary
    assert summary["prediction_of_record"] == "interleaved"
    assert summary["machine_drift_log_sd"] >= 0 and summary["interleaved_machine_drift_log_sd"] >= 0
    assert "(profile cost replicates, with the machine's drift while timed: log-sd" in captured.out
    assert (tmp_path / "out" / "profile_interleaved.json").is_file()
    timeline = pd.read_csv(tmp_path / "out" / "sentinel.csv")
    assert set(timeline["kind"]) == {"window", "run"} and timeline["seconds"].gt(0).all()
    # --no-progress silences the lines; --no-interleave-probes leaves the profile's prediction
    argv += ["--profile", str(tmp_path / "out" / "profile.json"), "--no-progress"]
    argv += ["--accept-wide-prices"]  # 2 rounds on a loaded machine may leave a price wide
    assert main([*argv, "--no-interleave-probes", "--out", str(tmp_path / "plain")]) == 0
    captured = capsys.readouterr()
    assert "ppd: " not in captured.err and "interleaved probes:" not in captured.out
    assert "predicted vs measured: median |error| " in captured.out
    assert "torch thread(s), as the profile timed its single backend" in captured.err
    assert "| interleaved" not in captured.out
    table = pd.read_csv(tmp_path / "plain" / "validation.csv")
    assert table["interleaved_predicted_s"].isna().all()
    assert table[["paired_rel_err", "interleaved_paired_rel_err"]].isna().all().all()
    summary = json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert summary["prediction_of_record"] == "profile"


def test_cli_probe_rounds_need_the_mode(tmp_path, capsys):
    argv = ["validate", "--model", "m", "--prompt", "x", "--probe-rounds", "3"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--no-interleave-probes", "--out", str(tmp_path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--probe-rounds sets the interleaved probes' rounds, which --no-interleave" in err
    assert "Traceback" not in err


def test_a_profile_without_a_context_length_is_not_probed(tmp_path, capsys):
    """An older profile cannot be probed at the runs' context: the default falls back to its
    prediction alone, with a note; an explicit --interleave-probes refuses it by name."""
    from measure.eval.workflow import probes_for

    old = SimpleNamespace(data={"model": {}})
    assert probes_for(None, old, 2) == 0
    assert "no interleaved probes: its prediction alone" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--interleave-probes: the profile records no context"):
        probes_for(True, old, 2)
    new = SimpleNamespace(data={"model": {"context_tokens": 12}})
    assert probes_for(None, new, 2) == 2
    assert probes_for(False, new, 0) == 0
    from measure.eval.interleaved import probe_context

    assert probe_context(new) == 12 and probe_context(old) is None
    assert probe_context(SimpleNamespace(data={"model": {"context_tokens": True}})) is None


def test_the_start_up_is_re_timed_only_where_the_profile_priced_it(slowed):
    """A profile written before a backend's batch start-up was timed (dist before 21969f7)
    keeps it unpriced in the interleaved prediction too: both predictions price the same terms."""
    import json

    from ppdmodel.cost_profile import parse_cost_profile

    model, extra = slowed
    extra[0] = 0.0
    profile = measure_profile(model, ks=(1,), context_tokens=8, repeats=2, warmup=0, threads=1)
    assert InterleavedProbes(model, profile, [PPDConfig(2, 1)]).startup == {"single": True}
    older = json.loads(json.dumps(profile.data))
    figures = older["figures"]["single"]
    for name in [n for n in figures if n.startswith(("batch_after_head_s[", "batch_startup_s["))]:
        del figures[name]
    probes = InterleavedProbes(model, parse_cost_profile(older), [PPDConfig(2, 1)])
    assert probes.startup == {"single": False}


def test_only_the_first_probe_call_is_warmed_up(slowed, monkeypatch):
    """The rounds before judged runs (and later gaps) are timed cold, as the run after them
    starts: a warm-up round before each made five of six fresh validations read 2-6 % low."""
    import measure.eval.interleaved as interleaved

    model, extra = slowed
    extra[0] = 0.0
    profile = measure_profile(model, ks=(1,), context_tokens=8, repeats=2, warmup=0, threads=1)
    calls = []
    real = interleaved.probe_samples

    def spy(probe, ks, *, repeats, warmup, **kwargs):
        calls.append((repeats, warmup))
        return real(probe, ks, repeats=repeats, warmup=warmup, **kwargs)

    monkeypatch.setattr(interleaved, "probe_samples", spy)
    probes = InterleavedProbes(model, profile, [PPDConfig(2, 1)])
    probes()  # a gap
    probes.before_run(PPDConfig(2, 1))
    probes.before_run(None)  # greedy
    probes()
    rounds = interleaved.PROBE_ROUNDS
    assert calls == [(rounds, 1), (1, 0), (1, 0), (rounds, 0)]
    assert figure(probes.profile(), "single", "layers_s").n == 2 * rounds + 2  # timed rounds


def _fresh_apart(profile, result, field: str, probed) -> None:
    """The re-probed k = 1 is priced from its own new ratio alone: never pooled with the
    profile's k = 3 (not re-probed, its ratios kept), which was timed at another time."""
    pairs = result.interleaved_profile.data["backends"]["dist"]["pair_slowdowns"]
    before = profile.data["backends"]["dist"]["pair_slowdowns"]
    assert pairs["measured"][field]["3"] == pytest.approx(before["measured"][field]["3"])
    for i, side in ((1, "main"), (2, "candidate")):
        assert probed[0][i] == pytest.approx(pairs["measured"][field]["1"][side], rel=1e-12)
        assert all(f"{field}[1]" not in group for group in pairs["pooled"].get(side, []))


def test_dist_pair_factors_are_probed_between_rounds_on_the_group():
    """A CPU dist profile's pair factors (planted: main x1.2, the batch x1.6) are re-measured
    on the validation's own ranks in every gap, and the interleaved prediction uses them."""
    from tests.measure.eval.test_pair_prediction import _profile

    model = tiny_model("llama", seed=3)
    d = model.config.num_hidden_layers
    profile = _profile(d=d, context_tokens=8)
    planted = profile.backends["dist"].pair_slowdowns
    result = validate(
        model, PROMPTS, profile=profile, configs=[PPDConfig(d_bar=2, k=1, backend="dist")],
        max_new_tokens=4, settings=RunSettings(repeats=2), interleave_probes=1,
    )  # fmt: skip
    assert result.table["exact"].all()
    figures = result.interleaved_profile.data["figures"]["dist"]
    # 2 gaps x 1 round at the measured k nearest to k = 1; k = 3 kept from the profile
    sides = ("main_alone", "main_both", "cand_alone", "cand_both")
    assert all(figures[f"pair_{s}_s[1]"]["n"] == 2 for s in sides)
    assert figures["pair_main_both_s[3]"]["n"] == 15
    probed = result.interleaved_profile.backends["dist"].pair_slowdowns
    assert probed[0][0] == 1 and probed[0] != planted[0]
    _fresh_apart(profile, result, "by_k", probed)
    assert "the dist pair probe at k 1 in 2 of them" in result.probe_note
    costs = result.interleaved_profile.costs("dist", d_bar=2, k=1)  # what the prediction uses
    assert costs.shared_device_slowdown == max(probed[0][1], 1.0)
    assert costs.candidate_device_slowdown == max(probed[0][2], 1.0)


def test_candidates_pair_factors_are_probed_for_a_candidates_configuration():
    """A profile with the candidates placement's pair factors and a judged dist configuration
    with the early head on the candidate side: that placement's factors are re-measured (and
    main's placement, not judged, kept), and the prediction uses them."""
    from tests.measure.eval.test_pair_prediction import _profile

    model = tiny_model("llama", seed=3)
    d = model.config.num_hidden_layers
    profile = _profile(d=d, context_tokens=8, candidates=True)
    planted = profile.backends["dist"].pair_slowdowns_candidates
    config = PPDConfig(d_bar=2, k=1, backend="dist", early_head="candidates")
    result = validate(
        model, PROMPTS, profile=profile, configs=[config], max_new_tokens=4,
        settings=RunSettings(repeats=2), interleave_probes=1,
    )  # fmt: skip
    assert result.table["exact"].all()
    figures = result.interleaved_profile.data["figures"]["dist"]
    sides = ("main_alone", "main_both", "cand_alone", "cand_both")
    assert all(figures[f"pair_{s}_s[1,candidates]"]["n"] == 2 for s in sides)
    assert all(figures[f"pair_{s}_s[1]"]["n"] == 15 for s in sides)  # kept from the profile
    probed = result.interleaved_profile.backends["dist"].pair_slowdowns_candidates
    assert probed[0][0] == 1 and probed[0] != planted[0]
    _fresh_apart(profile, result, "by_k_candidates", probed)
    assert "the dist pair probe at k 1 (early head on candidates) in 2 of them" in (
        result.probe_note)  # fmt: skip
    costs = result.interleaved_profile.costs("dist", d_bar=2, k=1, early_head="candidates")
    assert costs.candidate_device_slowdown == max(probed[0][2], 1.0)
