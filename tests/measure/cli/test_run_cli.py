"""``ppd run`` and ``ppd validate`` end to end on a tiny model saved to a directory."""

from __future__ import annotations

import json

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from ppdmodel.cli import main  # noqa: E402
from sim.formats import read_traces  # noqa: E402
from tests.measure.tiny_models import char_tokenizer, tiny_model  # noqa: E402

torch.set_num_threads(1)
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [40, 41]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-ppd")
    tiny_model("llama", seed=3).save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def test_cli_run_prints_report_and_writes_traces(model_dir, tmp_path, capsys):
    code = main(
        [
            "run",
            "--model",
            str(model_dir),
            "--prompt",
            "hello",
            "--prompt",
            "abc",
            "--max-new-tokens",
            "6",
            "--k",
            "1",
            "2",
            "--repeats",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "hf assistant_early_exit" in printed and "ppd" in printed
    assert "2 interleaved round(s) (turns by prompt); load average" in printed
    verdicts = [line for line in printed.splitlines() if line.startswith("verdict: ")]
    assert len(verdicts) == 2 and all("than greedy" in line for line in verdicts)
    assert "largest cost term: unknown (no profile" in verdicts[0]
    report = pd.read_csv(tmp_path / "report.csv")
    assert report.loc[report["method"] == "ppd", "exact"].all()
    assert (report["rounds"] == 2).all() and (report["seconds_q1"] <= report["seconds"]).all()
    traces = read_traces(tmp_path / "traces.jsonl")
    assert [t.sequence for t in traces] == ["0-k1", "1-k1", "0-k2", "1-k2"]
    assert all(t.source == "ppd_run" and t.events for t in traces)


def test_cli_validate_measures_a_profile_then_predicts(model_dir, tmp_path, capsys):
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--prompt", "xyz"]
    argv += ["--max-new-tokens", "6", "--d-bar", "2", "3", "--k", "1", "2", "--repeats", "2"]
    assert main([*argv, "--profile-repeats", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no --profile given: measuring one first" in out
    assert "0 parameters fitted" in out and out.count("verdict: ppd d_bar=") == 4
    assert "largest gap between a block timed in the runs and the profile's price" in out
    assert "passes timed in the runs against the closed form's time of their kind" in out
    assert "ppd d_bar=2 k=1 main single: profile: fresh x" in out
    assert "speed-ups judged turn by turn (each prompt's run against greedy's beside it" in out
    assert "too few turns for a 95 % interval (the measured range covers 88 %" in out  # 4 turns
    for name in (
        "profile.json",
        "validation.csv",
        "waterfalls.csv",
        "terms.csv",
        "passes.csv",
        "turns.csv",
        "traces.jsonl",
        "waterfall.png",
        "predicted_vs_measured.png",
        "layer_times.png",
    ):
        assert (tmp_path / name).is_file(), name
    passes = pd.read_csv(tmp_path / "passes.csv")
    assert set(passes["priced_by"]) == {"profile", "interleaved"}  # the probes: on by default
    assert passes["method"].nunique() == 4
    assert set(passes["pass"]) <= {"fresh", "resumed"} and (passes["count"] > 0).all()
    table = pd.read_csv(tmp_path / "validation.csv")
    assert table["method"].iloc[0] == "greedy" and len(table) == 5
    assert set(table["agreement"]) <= {"within 5 %", "5-15 %", "poor"}
    assert (table["rounds"] == 2).all() and table["exact"].all()
    ppd = table.iloc[1:]  # 2 rounds x 2 prompts = 4 turns: the interval is their whole range
    assert (ppd["speedup_turns_low"] <= ppd["speedup_turns"]).all()
    assert (ppd["speedup_turns"] <= ppd["speedup_turns_high"]).all()
    assert ppd["speedup_turns_coverage"].tolist() == [0.875] * 4  # 1 - 2 / 2^4
    assert (ppd["speedup_predicted_low"] <= ppd["speedup_predicted_high"]).all()  # (finite)
    assert ppd["speedup_turns_rel_err"].tolist() == pytest.approx(
        (ppd["speedup_predicted"] / ppd["speedup_turns"] - 1).tolist()
    )
    again = tmp_path / "again"  # the saved profile is read back, not measured again
    argv += ["--k", "1", "--profile", str(tmp_path / "profile.json"), "--out", str(again)]
    argv += ["--accept-wide-prices"]  # 3 rounds on a loaded machine may leave a price wide
    assert main([*argv, "--no-interleave-probes"]) == 0
    out = capsys.readouterr().out
    assert "measuring one first" not in out and f"profile {tmp_path / 'profile.json'}" in out
    assert "cached positions" not in out  # same prompts: the profile's context fits them
    assert json.loads((again / "run.json").read_text())["model"] == str(model_dir)
    # the validation folder is a p-table for ppd plan, checked against the profile's model
    plan = ["plan", "--profile", str(tmp_path / "profile.json"), "--table", str(again)]
    plan += ["--devices", "2", "--confirm-n", "0", "--draws", "8", "--out", str(tmp_path / "p")]
    plan += ["--accept-wide-prices", "--verbose"]
    assert main(plan) == 0
    out = capsys.readouterr().out
    assert out.startswith("decision per workload") and "p: this model's own" in out
    assert "verdict: " in out and "speedup_low" in out
    front = pd.read_csv(tmp_path / "p" / "plan.csv")
    assert {"latency_low_s", "speedup_high", "asked", "on_frontier"} <= set(front.columns)
    (again / "run.json").write_text(json.dumps({"model": "another-model"}))
    with pytest.raises(SystemExit) as exc:
        main(plan)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "'another-model'" in err and model_dir.name in err


def test_validate_warns_when_the_profile_context_does_not_fit_the_prompts():
    from types import SimpleNamespace

    from measure.eval.workflow import context_warning

    profile = SimpleNamespace(data={"model": {"context_tokens": 200}})
    assert context_warning(profile, 230) is None  # within 25 %
    warning = context_warning(profile, 323)
    assert "measured at 200 cached positions" in warning and "--context-tokens 323" in warning
    assert context_warning(SimpleNamespace(data={}), 323) is None  # no context recorded


def test_cli_run_with_a_profile_names_the_largest_term(model_dir, tmp_path, capsys):
    from measure.hf.loading import load_model
    from measure.profile.profile import measure_profile, write_profile

    model, _ = load_model(model_dir)
    loose = dict(max_spread=1e9, remeasure_rounds=0)  # a loaded machine may read 2 rounds wide
    path = write_profile(tmp_path / "p.json", measure_profile(model, ks=(1,), repeats=2, **loose))
    argv = ["run", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "4"]
    argv += ["--k", "1", "--no-assistant", "--repeats", "1", "--profile", str(path)]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 0
    (verdict,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("verdict")]
    assert "largest cost term: " in verdict and "unknown" not in verdict
    assert "prediction agreed " in verdict


def test_cli_validate_refuses_a_profile_of_another_model(model_dir, tmp_path, capsys):
    from tests.ppdmodel.profiles import minimal_profile

    path = tmp_path / "other.json"
    path.write_text(json.dumps(minimal_profile(d=30)))
    argv = ["validate", "--model", str(model_dir), "--prompt", "hi", "--profile", str(path)]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--out", str(tmp_path / "out")])
    assert info.value.code == 2
    assert "model.d = 30 does not match the model's depth d = 4" in capsys.readouterr().err


def test_cli_validate_fit_is_retired(model_dir, tmp_path, capsys):
    """The fitted comparison is gone: predict-then-measure is the one validation."""
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--fit"]
    with pytest.raises(SystemExit) as info:
        main([*argv, "--out", str(tmp_path)])
    assert info.value.code == 2 and "--fit" in capsys.readouterr().err
    assert not (tmp_path / "calibration.json").exists()


def test_cli_refuses_d_bar_below_half(model_dir, tmp_path):
    with pytest.raises(SystemExit) as info:
        main(
            [
                "run",
                "--model",
                str(model_dir),
                "--prompt",
                "hi",
                "--d-bar",
                "1",
                "--max-new-tokens",
                "2",
                "--no-assistant",
                "--out",
                str(tmp_path),
            ]
        )
    assert info.value.code == 2


def test_cli_run_early_head_on_candidates(model_dir, tmp_path, capsys):
    base = ["run", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "6"]
    base += ["--k", "2", "--no-assistant", "--d-bar", "2", "--out", str(tmp_path)]
    assert main([*base, "--early-head", "candidates"]) == 0
    printed = capsys.readouterr().out
    assert "early head on candidates" in printed
    report = pd.read_csv(tmp_path / "report.csv")
    assert report.loc[report["method"] == "ppd", "exact"].all()
    (trace,) = read_traces(tmp_path / "traces.jsonl")
    early = {
        ev["process"] for ev in trace.events if ev["kind"] == "head" and ev["layer_start"] == 2
    }
    assert early == {1}  # the candidate process ran the early head
    with pytest.raises(SystemExit) as info:
        main([*base, "--early-head", "side"])
    assert info.value.code == 2
    assert "--early-head" in capsys.readouterr().err


def test_cli_run_with_a_translator_head_and_spec_bench_prompts(model_dir, tmp_path, capsys):
    from measure.datasets import sample_path
    from measure.train.distill import new_head

    model = tiny_model("llama", seed=3)
    head = new_head(model, "translator", 3)
    with torch.no_grad():
        head.translator.bias.normal_()
    head.save(tmp_path / "head")
    argv = ["run", "--model", str(model_dir), "--prompts", str(sample_path("spec-bench"))]
    argv += ["--category", "qa", "--head-dir", str(tmp_path / "head"), "--no-assistant"]
    argv += ["--max-new-tokens", "4", "--k", "2", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "d_bar = 3" in printed  # the head's layer
    assert "translator head" in printed and "n_tokens" in printed
    traces = read_traces(tmp_path / "out" / "traces.jsonl")
    assert [t.sequence for t in traces] == ["7-k2", "8-k2"] and {t.head for t in traces} == {
        "translator"
    }


def test_cli_validate_with_a_translator_head_uses_it_in_every_round(model_dir, tmp_path, capsys):
    from measure.datasets import sample_path
    from measure.hf.loading import load_model
    from measure.profile.profile import measure_profile, write_profile
    from measure.train.distill import new_head

    head = new_head(tiny_model("llama", seed=3), "translator", 3)
    with torch.no_grad():
        head.translator.bias.normal_()
    head.save(tmp_path / "head")
    model, _ = load_model(model_dir)
    loose = dict(max_spread=1e9, remeasure_rounds=0)  # else --profile may refuse a wide price
    measured = measure_profile(model, ks=(2,), repeats=2, **loose)
    profile = write_profile(tmp_path / "p.json", measured)
    argv = ["validate", "--model", str(model_dir), "--prompts", str(sample_path("spec-bench"))]
    argv += ["--category", "qa", "--head-dir", str(tmp_path / "head"), "--k", "2"]
    argv += ["--max-new-tokens", "4", "--repeats", "1", "--profile", str(profile)]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    table = pd.read_csv(tmp_path / "out" / "validation.csv")
    assert table["exact"].all() and list(table["d_bar"].dropna()) == [3]  # the head's layer
    traces = read_traces(tmp_path / "out" / "traces.jsonl")
    assert {t.head for t in traces} == {"translator"} and len(traces) == 2


def test_cli_run_undefined_p_prints_na(model_dir, tmp_path, capsys):
    argv = ["run", "--model", str(model_dir), "--prompt", "hi", "--max-new-tokens", "1"]
    assert main([*argv, "--k", "1", "--no-assistant", "--out", str(tmp_path)]) == 0
    ppd_row = [
        line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("ppd")
    ]
    assert ppd_row and " n/a " in ppd_row[0] and " 0 " in ppd_row[0]  # p_correct n/a, n_m 0


def test_cli_validate_with_early_exit_rows(model_dir, tmp_path, capsys):
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "6"]
    argv += ["--d-bar", "2", "--k", "1", "--repeats", "1", "--profile-repeats", "2"]
    argv += ["--early-exit", "2", "--draft-tokens", "1", "2", "--no-progress"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "HF bookkeeping outside the forwards" in out
    assert out.count("verdict: early exit L=2 g=") == 2 and "steps as predicted: yes" in out
    table = pd.read_csv(tmp_path / "validation.csv")
    early = table[table["method"].str.startswith("early exit")]
    assert list(early["method"]) == ["early exit L=2 g=1", "early exit L=2 g=2"]
    assert early["exact"].all() and early["steps_agree"].all()
    assert list(early["exit_layer"]) == [2, 2] and list(early["draft_tokens"]) == [1, 2]
    assert early["simulated_s"].isna().all() and (early["iid_s"] > 0).all()


def test_cli_run_sampled_is_exact_against_sampled_generate(model_dir, tmp_path, capsys):
    """Appendix B: --do-sample rows are checked against the sampled baseline and HF's sampled
    generate, seeded per prompt as `ppd measure match-rate --seed` seeds it."""
    argv = ["run", "--model", str(model_dir), "--prompt", "hello", "--prompt", "abc"]
    argv += ["--max-new-tokens", "6", "--k", "1", "2", "--repeats", "1"]
    argv += ["--do-sample", "--top-k", "20", "--seed", "3", "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "sample top_k=20 (seed 3; " in printed
    report = pd.read_csv(tmp_path / "report.csv")
    assert report["method"].tolist() == [
        "sample top_k=20",
        "ppd",
        "ppd",
        "hf generate (sample top_k=20)",
    ]
    assert report["exact"].all()
    traces = read_traces(tmp_path / "traces.jsonl")
    assert len(traces) == 4 and all(t.source == "ppd_run" for t in traces)


def test_cli_validate_sampled_predicts_from_its_own_matches(model_dir, tmp_path, capsys):
    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--prompt", "xyz"]
    argv += ["--max-new-tokens", "6", "--d-bar", "2", "--k", "1", "--repeats", "1"]
    argv += ["--do-sample", "--top-p", "0.9", "--profile-repeats", "2", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sample top_p=0.9 (seed 0" in out and "0 parameters fitted" in out
    assert pd.read_csv(tmp_path / "validation.csv")["exact"].dropna().all()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--top-k", "5"], "--top-k: sampling options need --do-sample"),
        (["--do-sample", "--top-p", "0"], r"top_p must be in \(0, 1\]"),
        (["--do-sample", "--early-exit", "2", "--draft-tokens", "2"], "--do-sample: --early-exit"),
    ],
)
def test_cli_sampling_misuse_exits_2(model_dir, tmp_path, capsys, extra, message):
    import re

    argv = ["validate", "--model", str(model_dir), "--prompt", "hello", "--max-new-tokens", "4"]
    with pytest.raises(SystemExit) as exc:
        main([*argv, *extra, "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err


def test_validate_runs_at_the_profiles_threads_unless_told(capsys):
    """A loaded 2-core machine read +7 to +28 % when the profile priced 1 thread and the runs
    used the default 2: --threads now defaults to the profile's, and another is warned of."""
    from types import SimpleNamespace

    from measure.decode.settings import RunSettings
    from measure.eval.workflow import profile_threads

    profile = SimpleNamespace(data={"backends": {"single": {"threads": 1}}})
    assert profile_threads(RunSettings(), profile).threads == 1
    assert "1 torch thread(s), as the profile timed its single backend" in capsys.readouterr().err
    assert profile_threads(RunSettings(threads=2), profile).threads == 2
    err = capsys.readouterr().err
    assert "warning: --threads 2, but the profile timed its single backend at 1 thread(s)" in err
    older = SimpleNamespace(data={"backends": {"single": {}}})  # an older file
    assert profile_threads(RunSettings(), older).threads is None
    assert capsys.readouterr().err == ""


def test_turns_line_advises_rounds_only_where_rounds_would_help():
    from measure.cli.run_commands import MOVED_ROUNDS_FACTOR, turns_line

    summary = dict(speedup_turns_coverage=0.96, speedup_turns_half_width_max=0.3,
                   speedup_turns_median_abs_rel_err=0.02, speedup_turns_worst_abs_rel_err=0.09,
                   speedup_turns_inside=8, speedup_turns_with_interval=8,
                   speedup_intervals_overlap=8)  # fmt: skip
    line = lambda needed: turns_line({**summary, "speedup_turns_rounds_for_target": needed}, 3)  # noqa: E731
    assert line(2).endswith("+-30.0 % at worst")  # already enough rounds
    assert line(12).endswith("(about --repeats 12 would pin every one to +-2.5 %)")
    moved = line(3 * MOVED_ROUNDS_FACTOR + 1)
    assert "machine moved during the rounds: run again when it is quiet" in moved
    assert "about --repeats 25)" in moved
    short = turns_line({**summary, "speedup_turns_rounds_for_target": None}, 3)
    assert "too few turns for a 95 % interval" in short
    repeat = turns_line({**summary, "speedup_turns_rounds_for_target": 2,
                         "speedup_turns_repeat_bound": 7.46}, 3)  # fmt: skip
    assert repeat.endswith("a repeat (same prompts, fresh profile) would move a configuration's "
                           "error by up to 7.5 points by chance alone (95 %)")  # fmt: skip
