"""The analysis parts of the experiment scripts (experiments/), on planted data (no model, no
timing)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pairing_removes_spells_that_cover_a_run_and_its_neighbours():
    drift = _load("machine_drift")
    # a machine switching between two speeds (log 0 and log 0.3) every 30 blocks, no noise
    logs = np.where((np.arange(240) // 30) % 2 == 0, 0.0, 0.3)
    pooled, paired = drift.pairing(logs)
    assert len(pooled) == 240 - (drift.PAIR_ROUNDS - 1) * drift.PAIR_SPACING - drift.PAIR_RUN - 2
    assert pooled.std() > 0.05  # the runs' median and the pooled windows meet other spells
    # paired, only a run whose spell switches beside it is off
    assert np.median(np.abs(paired)) == 0.0 and paired.std() < pooled.std() / 2


def test_the_drift_floor_is_the_spread_of_80_second_windows():
    drift = _load("machine_drift")
    # blocks every 2 s for 320 s; the machine at 50 ms, then 60 ms, in 80 s spells
    t = np.arange(1, 161) * 2.0
    level = np.where((t // 80) % 2 == 0, 0.050, 0.060)
    blocks = pd.DataFrame({"t_s": t, "median_s": level})
    windows = np.log([0.050, 0.060, 0.050, 0.060])
    assert drift.drift_floor(blocks) == pytest.approx(np.std(windows, ddof=1), rel=0.02)
    assert drift.drift_floor(blocks[blocks["t_s"] < 150]) is None  # (two windows: too few)


def test_validate_summary_reports_the_paired_errors(tmp_path):
    summary = _load("validate_summary")
    for run, shift in (("run1", 0.0), ("run2", 0.04)):
        folder = tmp_path / run / "m"
        folder.mkdir(parents=True)
        pd.DataFrame({
            "method": ["greedy", "ppd d_bar=2 k=1 main single"], "backend": ["single"] * 2,
            "p_hat": [np.nan, 0.5], "predicted_s": [1.0, 1.2], "predicted_low_s": [0.9, 1.0],
            "predicted_high_s": [1.1, 1.4], "measured_s": [1.1, 1.3], "measured_q1_s": [1.0, 1.2],
            "measured_q3_s": [1.2, 1.4], "rel_err": [-0.09, -0.08], "inside": [False, True],
            "speedup_measured": [1.0, 0.85], "speedup_predicted": [1.0, 0.83], "exact": [True] * 2,
            "interleaved_rel_err": [0.05, 0.02], "interleaved_inside": [True, True],
            "paired_rel_err": [0.01 + shift, -0.03], "interleaved_paired_rel_err": [0.02, 0.01],
        }).to_csv(folder / "validation.csv", index=False)  # fmt: skip
    table = summary.read_runs(tmp_path)
    text = summary.run_table(table[table["run"] == "run1"])
    assert (
        "paired with the sentinel around each run: median |error| profile 2.0 % (worst "
        "3.0 %), interleaved 1.5 % (worst 2.0 %)" in text
    )
    again = summary.run_to_run(table)
    assert "paired (profile) run1 2.0 %, run2 4.0 %" in again
    assert "rows within 5 points over every run: 2 of 2, median change 0.0 points" in again
    assert set(summary.read_runs(tmp_path, "a/")["run"]) == {"a/run1", "a/run2"}
    record = summary.record_table(table)  # the interleaved prediction, in every run here
    assert "| m | interleaved | 3.5, 3.5 | 5.0, 5.0 | 0.0 | 2 of 2 | 0.0 |" in record
    plain = table.assign(interleaved_rel_err=np.nan)  # without it: the profile's
    assert "| m | profile | 8.5, 8.5 | 9.0, 9.0 | 0.0 | 2 of 2 | 0.0 |" in summary.record_table(
        plain
    )
    moved = table.assign(interleaved_rel_err=np.where(table["run"] == "run2", 0.1, 0.0))
    assert "| 10.0 (over) | 0 of 2 | 10.0 |" in summary.record_table(moved)


def test_validate_summary_says_what_chance_allows_between_runs(tmp_path):
    """Two runs of two rows: one row's error moves 1 point with intervals of +-4 %, the other
    20 points with intervals of +-1 %: only the second moved more than chance allows."""
    summary = _load("validate_summary")
    for run, errors in (("run1", (0.0, 0.0)), ("run2", (0.01, 0.20))):
        folder = tmp_path / run / "m"
        folder.mkdir(parents=True)
        measured = np.array([0.8, 0.9]) / (1 + np.array(errors))
        half = np.array([0.04, 0.01])
        pd.DataFrame({
            "method": ["ppd d_bar=2 k=1 main single", "ppd d_bar=2 k=1 main dist"],
            "backend": ["single", "dist"], "p_hat": [0.5, 0.5], "predicted_s": [1.0, 1.0],
            "predicted_low_s": [0.9, 0.9], "predicted_high_s": [1.1, 1.1],
            "measured_s": [1.0, 1.0], "measured_q1_s": [0.9, 0.9], "measured_q3_s": [1.1, 1.1],
            "rel_err": [0.0, 0.0], "inside": [True, True], "speedup_measured": measured,
            "speedup_predicted": [0.8, 0.9], "exact": [True, True], "rounds": [4, 4],
            "speedup_turns": measured, "speedup_turns_low": measured * np.exp(-half),
            "speedup_turns_high": measured * np.exp(half), "speedup_turns_rel_err": errors,
            "speedup_turns_coverage": [0.95, 0.95],
            "speedup_predicted_low": [0.8 * 0.999, 0.9 * 0.999],
            "speedup_predicted_high": [0.8 * 1.001, 0.9 * 1.001],
        }).to_csv(folder / "validation.csv", index=False)  # fmt: skip
    text = summary.run_to_run(summary.read_runs(tmp_path))
    # without turn tables, from the measured intervals: z sqrt(2) (1 % / z) and (4 % / z) =
    # 1.4 and 5.7 points in log terms (the second row's centre, +9 %, widens the first to 1.5)
    assert "a row's error would move by at most 1.5-5.7 points (each row's 95 % bound)" in text
    assert "1 of 2 rows moved more (0.1 expected)" in text
    # the +-4 % row: 5.7 points at 4 rounds -> about (5.7 / 5)^2 4 = 5.2, so 6 rounds
    assert (
        "about 6 rounds per run would bring every row's bound under 5 points (these ran 4)" in text
    )
    # with turn tables, from the turns: residuals +-d about each prompt's own error (which
    # differs by +-10 % between the prompts, and stays) give sd d / sqrt(6) = 2 %
    d = 0.02 * np.sqrt(6)
    for run, errors in (("run1", (0.0, 0.0)), ("run2", (0.01, 0.20))):
        turns = [dict(method=method, round=r, prompt=i, greedy_seconds=1.0, predicted_ratio=0.8,
                      seconds=1 / 0.8 / np.exp(-(e + (0.1 if i else -0.1) + (d if r % 2 else -d))))
                 for method, e in zip(["ppd d_bar=2 k=1 main single", "ppd d_bar=2 k=1 main dist"],
                                      errors, strict=True)
                 for r in range(4) for i in range(2)]  # fmt: skip
        pd.DataFrame(turns).to_csv(tmp_path / run / "m" / "turns.csv", index=False)
    text = summary.run_to_run(summary.read_runs(tmp_path))
    bounds = re.search(r"would move by at most ([\d.]+)-([\d.]+) points", text).groups()
    assert [float(b) for b in bounds] == pytest.approx([5.54, 5.54 * 1.09], abs=0.15)


def test_validate_summary_judges_older_runs_turn_by_turn(tmp_path):
    """A validation.csv without the turn columns gets them from turns.csv, or from its
    sentinel.csv with each prompt's prediction rebuilt from profile.json and traces.jsonl."""
    from measure.eval.predict import predict_greedy, predict_ppd
    from measure.eval.repeat import PPDConfig
    from ppdmodel.cost_profile import parse_cost_profile
    from tests.ppdmodel.profiles import minimal_profile

    summary = _load("validate_summary")
    config = PPDConfig(d_bar=2, k=1)
    rows = pd.DataFrame({"method": ["greedy", config.label], "speedup_predicted": [1.0, 0.84]})
    assert summary.with_turns(rows, tmp_path)["speedup_turns"].isna().all()  # nothing to read
    # two prompts: 5 tokens, 2 of 4 matched; 3 tokens, none matched
    traces = [{"d_bar": 2, "k": 1, "early_head": "main", "backend": "single",
               "m": [1, 0, 1, 0], "tokens": [1] * 5},
              {"d_bar": 2, "k": 1, "early_head": "main", "backend": "single",
               "m": [0, 0], "tokens": [1] * 3}]  # fmt: skip
    (tmp_path / "traces.jsonl").write_text("\n".join(json.dumps(t) for t in traces) + "\n")
    (tmp_path / "profile.json").write_text(json.dumps(minimal_profile(d=4)))
    profile = parse_cost_profile(minimal_profile(d=4))
    runs = [SimpleNamespace(m=t["m"], tokens=t["tokens"]) for t in traces]
    greedy, ppd = predict_greedy(profile, runs), predict_ppd(profile, runs, config)
    ratios = [g / m for g, m in zip(greedy.per_run_s, ppd.per_run_s, strict=True)]
    events = [("window", 0.1, "", None, None)]
    for r in (0, 1):
        slow = 1.5 if r == 1 else 1.0  # a slow spell over round 1: both methods meet it
        for prompt in (0, 1):
            greedy_s = slow * (1.0 + prompt)
            ppd_s = greedy_s / ratios[prompt] / 1.1
            events += [
                ("run", greedy_s, "greedy", r, prompt),
                ("run", ppd_s, config.label, r, prompt),
            ]
    pd.DataFrame(events, columns=["kind", "seconds", "method", "round", "prompt"]).to_csv(
        tmp_path / "sentinel.csv", index=False
    )
    got = summary.with_turns(rows, tmp_path)  # every turn measured 1.1x its prediction
    assert got["speedup_turns"].iloc[1] == pytest.approx(0.84 * 1.1)
    assert got["speedup_turns_rel_err"].iloc[1] == pytest.approx(1 / 1.1 - 1)
    assert got["speedup_turns_coverage"].iloc[1] == pytest.approx(1 - 2 / 2**4)
    assert got["speedup_turns"].isna().iloc[0]  # greedy's row
    table = summary.turns_from_sentinel(tmp_path)
    table.to_csv(tmp_path / "turns.csv", index=False)  # what ppd validate now writes
    (tmp_path / "sentinel.csv").unlink()
    again = summary.with_turns(rows, tmp_path)
    assert again["speedup_turns"].iloc[1] == pytest.approx(0.84 * 1.1)


def test_paired_errors_recomputes_a_folder(tmp_path):
    script = _load("paired_errors")
    machine = {"sentinel": "greedy step's layers", "threads": 1, "windows_s": [0.05, 0.05, 0.05]}
    (tmp_path / "profile.json").write_text(json.dumps({"machine": machine}))
    probed = dict(machine, windows_s=[0.1, 0.1])
    (tmp_path / "profile_interleaved.json").write_text(json.dumps({"machine": probed}))
    # the runs met a machine twice as slow as the profile's (windows 0.1 s against 0.05 s)
    events = [("window", 0.1, "", None)]
    for method in ("greedy", "ppd"):
        for prompt in (0, 1):
            events += [("run", 2.0, method, prompt), ("window", 0.1, "", None)]
    pd.DataFrame(events, columns=["kind", "seconds", "method", "prompt"]).to_csv(
        tmp_path / "sentinel.csv", index=False
    )
    pd.DataFrame({"method": ["greedy", "ppd"], "backend": ["single"] * 2,
                  "predicted_s": [2.0, 2.2], "interleaved_predicted_s": [4.0, 4.4]}).to_csv(
        tmp_path / "validation.csv", index=False)  # fmt: skip
    table = script.errors(tmp_path)
    # the profile priced 2.0 s on its machine; the runs took 4.0 s on one twice as slow
    assert table["paired_rel_err"].tolist() == pytest.approx([0.0, 0.1])
    assert table["interleaved_paired_rel_err"].tolist() == pytest.approx([0.0, 0.1])
    assert table["level_over_profile"].iloc[0] == pytest.approx(2.0)
    assert (table["weight"] == 0.0).all()  # 5 windows < MIN_WINDOWS
    (tmp_path / "profile.json").write_text(json.dumps({}))  # an older profile: no windows
    with pytest.raises(ValueError, match="a profile without sentinel windows"):
        script.errors(tmp_path)


def test_ab_validate_refuses_bad_arguments(tmp_path):
    script = EXPERIMENTS / "ab_validate.sh"
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "Usage: experiments/ab_validate.sh OUT N" in usage.stdout
    bad = subprocess.run(["bash", str(script), str(tmp_path / "o"), "0", "a", "b", "m"],
                         capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "N must be an integer >= 1, got '0'" in bad.stderr
    assert not (tmp_path / "o").exists()  # nothing made before the arguments are checked


def test_arch_smoke_prints_its_usage_without_an_output_folder():
    script = EXPERIMENTS / "arch_smoke.sh"
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "Usage: experiments/arch_smoke.sh OUT" in usage.stdout


def test_sharing_drift_reports_the_stretches_factors():
    sharing = _load("sharing_drift")
    # 32 blocks of 2 rounds: alone 40 ms; beside the other rank 1.0x or 1.2x, alternating
    both = np.where(np.arange(32) % 2 == 0, 0.040, 0.048)
    blocks = pd.DataFrame({"t_s": np.arange(1, 33) * 2.0, "rounds": 2,
                           "main_alone_s": 0.040, "main_both_s": both,
                           "main_factor": both / 0.040, "cand_alone_s": 0.030,
                           "cand_both_s": 0.033, "cand_factor": 1.1})  # fmt: skip
    text = sharing.summary(blocks)
    assert text.startswith("32 blocks of 2 rounds over 64 s")
    assert "main: factor median 1.100, range 1.000-1.200" in text
    # every 8-round stretch (4 blocks) holds two of each: the same mean ratio, no spread
    assert "main, stretches of 8 rounds (8): log-sd 0.0 % as mean over mean" in text
    assert "cand, stretches of 32 rounds (2)" not in text  # (fewer than 3 stretches: left out)
    assert sharing.summary(blocks.iloc[:0]) == "no blocks"


def _event(process, token, a, b, start_ms, end_ms, kind="layers"):
    return {"process": process, "token": token, "layer_start": a, "layer_end": b,
            "start_s": start_ms / 1e3, "end_s": end_ms / 1e3, "kind": kind}  # fmt: skip


def test_dist_timeline_reads_the_rank_start_and_the_wait_for_the_ids(tmp_path):
    timeline = _load("dist_timeline")
    # d = 6, d_bar = 4 (e = 2); pass t: main's prefix ends at p (fresh [0, 4), or [2, 4) after
    # a hand-off), the suffix starts 0.5 ms later; each candidate rank's early head for token
    # t + 1 starts `late` ms after p and lasts 6 ms (a second rank's 1 ms later in pass 2);
    # main's final head ends at p + 7.5 and its next prefix starts once every rank's ids are
    # in, plus 0.3 ms
    events, p = [], 0.0
    for t, late in enumerate((1.0, 3.0, 2.0, 1.0), start=1):
        final_end, head_end = p + 7.5, p + late + 6.0
        events += [
            _event(0, t, 0 if t != 3 else 2, 4, p - 2.0, p),
            _event(0, t, 4, 6, p + 0.5, p + 3.5),
            _event(0, t, 6, 6, p + 3.5, final_end, "head"),
            _event(1, t + 1, 4, 4, p + late, head_end, "head"),
        ]
        if t == 2:
            events.append(_event(2, t + 1, 4, 4, p + late + 1.0, head_end + 1.0, "head"))
            head_end += 1.0
        p = max(final_end, head_end) + 0.3 + 2.0  # the next prefix (2 ms) ends here
    trace = {"sequence": "p1", "d": 6, "d_bar": 4, "k": 1, "m": [0, 0, 1, 0],
             "backend": "dist", "early_head": "candidates", "events": events}  # fmt: skip
    other = dict(trace, early_head="main")  # left out
    (tmp_path / "traces.jsonl").write_text(
        "\n".join(json.dumps(t) for t in (trace, other)) + "\n", encoding="utf-8"
    )
    table = timeline.passes(timeline.read_traces(tmp_path)[0])
    assert list(table["token"]) == [1, 2, 3]  # the last pass, with no pass after it, left out
    assert np.allclose(table["send"], 0.5e-3)
    assert np.allclose(table["rank start"], [1e-3, 4e-3, 2e-3])  # the later rank of pass 2
    assert np.allclose(table["ids late"], [-0.5e-3, 2.5e-3, 0.5e-3])
    # main waits for late ids (pass 3 follows a resumed prefix): the host's 0.3 ms plus the wait
    assert np.allclose(table["main gap"], [0.3e-3, 2.8e-3, 0.8e-3])
    summary = timeline.summary(timeline.read_traces(tmp_path))
    assert list(summary["k"]) == [1] and int(summary["passes"][0]) == 3
    assert summary["rank start p50"][0] == pytest.approx(2.0)
    assert summary["ids late > 0"][0] == pytest.approx(2 / 3)
    out = subprocess.run(["python", str(EXPERIMENTS / "dist_timeline.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "main waited for the ids in 67 % of passes" in out
