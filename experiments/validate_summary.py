"""Error tables of a ``experiments/cpu_validate.sh`` folder: per run and model, every row's
predicted against measured seconds, its error and whether the measured median fell inside the
predicted 95 % interval; the median and worst |error| of each run; and, with two runs or more,
how far the runs' errors moved (the run-to-run check of issue 24: median |error| within 2
percentage points, each configuration's within 5). With several folders (e.g. ``RUNS=1`` runs
of different settings), their runs are compared together, named FOLDER/runN.

Usage: python experiments/validate_summary.py OUT [OUT ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from measure.eval.turn_speedup import TURN_COLUMNS, read_turn_table, turn_columns
from ppdmodel.intervals import LEVEL

KEY = ["method", "backend"]
"""A row's identity across runs (the method label holds d_bar, k and the placement)."""


def read_runs(out: Path, prefix: str = "") -> pd.DataFrame:
    """Every validation.csv under OUT/run*/MODEL/, with ``run`` (``prefix`` + runN), ``model``
    and the load line."""
    frames = []
    for csv in sorted(out.glob("run*/*/validation.csv")):
        run, model = prefix + csv.parent.parent.name, csv.parent.name
        load = csv.parent.parent / f"{model}.load"  # (with_suffix would cut "-1.1b" at the dot)
        summary = csv.parent / "summary.json"
        drift = json.loads(summary.read_text()) if summary.exists() else {}
        frames.append(
            with_turns(pd.read_csv(csv), csv.parent).assign(
                run=run,
                model=model,
                load=load.read_text().strip() if load.exists() else "",
                folder=str(csv.parent),
                drift=drift.get("machine_drift_log_sd"),
                interleaved_drift=drift.get("interleaved_machine_drift_log_sd"),
            )
        )
    if not frames:
        raise SystemExit(f"no run*/*/validation.csv under {out}")
    return pd.concat(frames, ignore_index=True)


def with_turns(rows: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """``rows`` with the speed-ups judged turn by turn (``measure.eval.turn_speedup``); a
    validation written before they were recorded gets them from its turns.csv, else from its
    sentinel.csv (every prompt's seconds, ``--interleave-probes``) with each prompt's
    prediction rebuilt from profile.json and traces.jsonl (``turns_from_sentinel``); else NaN."""
    if "speedup_turns" in rows and rows["speedup_turns"].notna().any():
        return rows
    rows = rows.assign(**dict.fromkeys(TURN_COLUMNS, float("nan")))
    table = turn_table(folder)
    if table is None:
        return rows
    readings = read_turn_table(table) if len(table) else {}
    for i, r in rows.iterrows():
        if r["method"] in readings:
            got = turn_columns(readings[r["method"]], r["speedup_predicted"])
            rows.loc[i, list(got)] = list(got.values())
    return rows


def turn_table(folder: Path) -> pd.DataFrame | None:
    """A validation folder's turn table: its turns.csv, else rebuilt from its sentinel.csv
    (``turns_from_sentinel``), else None."""
    if (folder / "turns.csv").exists():
        return pd.read_csv(folder / "turns.csv")
    if all((folder / n).exists() for n in ("sentinel.csv", "traces.jsonl", "profile.json")):
        return turns_from_sentinel(folder)
    return None


def turns_from_sentinel(folder: Path) -> pd.DataFrame:
    """The turn table (``ProfileValidation.turn_table``'s columns) of a validation that kept
    only sentinel.csv: each prompt's seconds from it, each prompt's predicted ratio rebuilt
    from the profile and the run's own match sequences (traces.jsonl, in prompt order per
    configuration), as ``ppd validate`` predicts them (``measure.eval.predict``)."""
    from measure.eval.predict import predict_greedy, predict_ppd, predicted_ratios
    from measure.eval.repeat import PPDConfig
    from ppdmodel.cost_profile import parse_cost_profile

    profile = parse_cost_profile(json.loads((folder / "profile.json").read_text()))
    meta = folder / "run.json"
    limit = json.loads(meta.read_text()).get("max_new_tokens") if meta.exists() else None
    runs: dict[PPDConfig, list] = {}
    for line in (folder / "traces.jsonl").read_text().splitlines():
        t = json.loads(line)
        config = PPDConfig(d_bar=t["d_bar"], k=t["k"], early_head=t.get("early_head", "main"),
                           backend=t.get("backend", "single"))  # fmt: skip
        runs.setdefault(config, []).append(SimpleNamespace(m=t["m"], tokens=t["tokens"]))
    ratios = {}
    for config, prompts in runs.items():
        ppd = predict_ppd(profile, prompts, config, max_new_tokens=limit)
        greedy = predict_greedy(profile, prompts, config.backend)
        ratios[config.label] = predicted_ratios(greedy, ppd)
    sentinel = pd.read_csv(folder / "sentinel.csv")
    pieces = sentinel[(sentinel["kind"] == "run") & sentinel["prompt"].notna()]
    seconds = pieces.pivot_table(index=["round", "prompt"], columns="method", values="seconds",
                                 aggfunc="first")  # fmt: skip
    rows = []
    for method, ratio in ratios.items():
        if method not in seconds or "greedy" not in seconds:
            continue
        for (round_, prompt), row in seconds.iterrows():
            rows.append(dict(method=method, round=int(round_), prompt=int(prompt),
                             seconds=row[method], greedy_seconds=row["greedy"],
                             predicted_ratio=ratio[int(prompt)]))  # fmt: skip
    columns = ["method", "round", "prompt", "seconds", "greedy_seconds", "predicted_ratio"]
    return pd.DataFrame(rows, columns=columns)


def _cell(x, fmt: str) -> str:
    return "" if pd.isna(x) else format(x, fmt)


def run_table(rows: pd.DataFrame) -> str:
    """Markdown table of one run of one model, then its median / worst |error| line."""
    lines = [
        "| method | backend | p | predicted s [95 %] | measured s [q1, q3] | error | in | "
        "speed-up measured / predicted | exact |",
        "|" + " --- |" * 9,
    ]
    for r in rows.itertuples(index=False):
        interval = (
            f" [{_cell(r.predicted_low_s, '.3f')}, {_cell(r.predicted_high_s, '.3f')}]"
            if not pd.isna(r.predicted_low_s)
            else ""
        )
        inside = "" if pd.isna(r.inside) else ("in" if bool(r.inside) else "OUT")
        lines.append(
            f"| {r.method} | {r.backend} | {_cell(r.p_hat, '.3f')} | "
            f"{r.predicted_s:.3f}{interval} | {r.measured_s:.3f} "
            f"[{r.measured_q1_s:.3f}, {r.measured_q3_s:.3f}] | {100 * r.rel_err:+.1f} % | "
            f"{inside} | {_cell(r.speedup_measured, '.3f')} / "
            f"{_cell(r.speedup_predicted, '.3f')} | {bool(r.exact)} |"
        )
    errors = 100 * rows["rel_err"].abs()
    hits = rows["inside"].dropna().astype(bool)
    ppd = rows[rows["method"].str.startswith("ppd ")]
    speedup = 100 * (ppd["speedup_predicted"] / ppd["speedup_measured"] - 1).abs().dropna()
    lines.append(
        f"\nmedian |error| {errors.median():.1f} %, worst {errors.max():.1f} % over {len(rows)} "
        f"rows; measured median inside the 95 % interval in {int(hits.sum())} of {len(hits)}"
        + (f"; speed-ups over greedy: median |error| {speedup.median():.1f} %, worst "
           f"{speedup.max():.1f} %" if len(speedup) else "")
    )  # fmt: skip
    turns = rows["speedup_turns_rel_err"].dropna()
    if len(turns):  # measure.eval.turn_speedup: each prompt's run against greedy's beside it
        read = rows.dropna(subset=["speedup_turns"])
        inside = (read["speedup_turns_low"] <= read["speedup_predicted"]) & (
            read["speedup_predicted"] <= read["speedup_turns_high"])  # fmt: skip
        lines.append(
            f"\nspeed-ups judged turn by turn: median |error| {100 * turns.abs().median():.1f} %, "
            f"worst {100 * turns.abs().max():.1f} %; predicted inside the measured 95 % interval "
            f"in {int(inside.sum())} of {len(read)}"
        )
    drift = rows["drift"].dropna()
    if len(drift):  # the profile's sentinel windows (measure.profile.drift)
        lines.append(f"\nthe machine's speed while profiling: log-sd {100 * drift.iloc[0]:.1f} % "
                     "(in the intervals above)")  # fmt: skip
    probed = rows["interleaved_rel_err"].dropna() if "interleaved_rel_err" in rows else []
    if len(probed):  # --interleave-probes: the prediction from the probes between the rounds
        hit = rows["interleaved_inside"].dropna().astype(bool)
        gaps = rows["interleaved_drift"].dropna()
        lines.append(
            f"\nfrom the interleaved probes: median |error| {100 * probed.abs().median():.1f} %, "
            f"worst {100 * probed.abs().max():.1f} %; inside the interval in {int(hit.sum())} "
            f"of {len(hit)}"
            + (f" (the machine's speed between the gaps: log-sd {100 * gaps.iloc[0]:.1f} %)"
               if len(gaps) else "")
        )  # fmt: skip
    checked = rows["checked_rel_err"].dropna() if "checked_rel_err" in rows else []
    if len(checked):  # the profile scaled by its check (measure.eval.profile_check)
        ppd = rows.loc[rows["method"] != "greedy", "checked_rel_err"].dropna()
        lines.append(
            f"\nthe profile scaled by its check: median |error| {100 * ppd.abs().median():.1f} %, "
            f"worst {100 * ppd.abs().max():.1f} %"
        )
    paired = [
        f"{name} {100 * rows[col].abs().median():.1f} % (worst {100 * rows[col].abs().max():.1f} %)"
        for name, col in _paired_columns(rows)
    ]
    if paired:  # measure.eval.paired: each run at the machine's speed the sentinel read by it
        lines.append(
            "\npaired with the sentinel around each run: median |error| " + ", ".join(paired)
        )
    return "\n".join(lines)


def _paired_columns(rows: pd.DataFrame):
    """(name, column) of the paired errors the rows have (``measure.eval.paired``)."""
    for name, column in (
        ("profile", "paired_rel_err"),
        ("interleaved", "interleaved_paired_rel_err"),
    ):
        if column in rows and rows[column].notna().any():
            yield name, column


ROW_BOUND = 5.0
"""Issue 24's bound on how far one row's error may move between runs (points)."""
MEDIAN_BOUND = 2.0
"""Issue 24's bound on how far the median |error| may move between runs (points)."""


def _errors(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` in percent, a row per configuration (KEY) and a column per run."""
    return rows.assign(err=100 * rows[column]).pivot_table(
        index=KEY, columns="run", values="err", aggfunc="first"
    )


def _moves(errors: pd.DataFrame) -> pd.Series:
    """How far each configuration's error moved over the runs (points; ``_errors``' table)."""
    return (errors.max(axis=1) - errors.min(axis=1)).dropna()


def _within(rows: pd.DataFrame, column: str) -> str:
    """'rows within 5 points over every run: 7 of 10, median change 3.1 points' of ``column``."""
    moved = _moves(_errors(rows, column))
    return (
        f"rows within {ROW_BOUND:g} points over every run: {int((moved <= ROW_BOUND).sum())} of "
        f"{len(moved)}, median change {moved.median():.1f} points"
    )


def _turn_noise(turns: pd.DataFrame) -> tuple[pd.Series, np.ndarray | None]:
    """Each (row, run)'s measured log-sd from its run's turns (``run_to_run.turn_noise``:
    the noise left once each prompt's own error is removed), else from its turns' interval
    (wider: it counts how prompts differ); and the rows' correlation (``correlation_of``, in
    the order of their first appearance in ``turns``) averaged over the runs (None without
    turn tables)."""
    from measure.eval.run_to_run import correlation_of, log_sd_of, turn_noise

    sds = pd.Series(log_sd_of(turns["speedup_turns_low"], turns["speedup_turns_high"],
                              turns["speedup_turns_coverage"]), index=turns.index)  # fmt: skip
    methods = list(dict.fromkeys(turns["method"]))
    correlations = []
    for folder, rows in turns.groupby("folder", sort=False):
        table = turn_table(Path(folder))
        if table is None or not len(table):
            continue
        sd, corr = turn_noise(table)
        for i, method in rows["method"].items():
            if pd.notna(sd.get(method, np.nan)):
                sds[i] = sd[method]
        correlations.append(correlation_of(corr, methods))
    return sds, (np.mean(correlations, axis=0) if correlations else None)


def _chance(turns: pd.DataFrame) -> str:
    """'; from the runs' own turns and profile replicates, ...' for the turn-judged rows
    present in every run with both sides' spreads (``measure.eval.run_to_run``); '' else."""
    from measure.eval.run_to_run import log_sd_of, noise_allowance, rounds_to_hold

    if not {"speedup_predicted_low", "speedup_predicted_high", "rounds"} <= set(turns):
        return ""  # (a validation from before the predicted speed-ups had intervals)
    measured, correlation = _turn_noise(turns)
    turns = turns.assign(
        log_err=np.log1p(turns["speedup_turns_rel_err"]),
        measured_sd=measured,
        predicted_sd=log_sd_of(turns["speedup_predicted_low"], turns["speedup_predicted_high"],
                               LEVEL),
    )  # fmt: skip
    values = ["log_err", "measured_sd", "predicted_sd", "rounds"]
    long = turns.dropna(subset=values)  # (runs without intervals drop out whole)
    table = long.pivot_table(index=KEY, columns="run", values=values, aggfunc="first").dropna()
    if len(table) == 0 or table["log_err"].shape[1] < 2:
        return ""
    wide = {c: table[c].to_numpy() for c in values}
    order = list(dict.fromkeys(turns["method"]))
    rows = [order.index(m) for m in table.index.get_level_values("method")]
    corr = None if correlation is None else correlation[np.ix_(rows, rows)]
    allow = noise_allowance(wide["log_err"], wide["measured_sd"], wide["predicted_sd"],
                            correlation=corr)  # fmt: skip
    points = 100 * np.expm1(wide["log_err"])
    moved = points.max(axis=1) - points.min(axis=1)
    medians = np.median(np.abs(points), axis=0)
    rounds = wide["rounds"].astype(int)
    needed = [rounds_to_hold(ROW_BOUND, r, m, p) for r, m, p in
              zip(rounds, wide["measured_sd"], wide["predicted_sd"], strict=True)]  # fmt: skip
    ran = "-".join(map(str, sorted({int(rounds.min()), int(rounds.max())})))
    hold = (f"no number of rounds brings every row's bound under {ROW_BOUND:g} points: the "
            f"profile's spread alone reaches it for {sum(n is None for n in needed)} of "
            f"{len(needed)} (more --profile-repeats)" if None in needed else
            f"about {max(needed)} rounds per run would bring every row's bound under "
            f"{ROW_BOUND:g} points (these ran {ran})")  # fmt: skip
    some = (
        ""
        if points.shape[1] == turns["run"].nunique()
        else (f" (the {points.shape[1]} runs with intervals)")
    )
    return (
        f"; from the runs' own turns and profile replicates{some}, a row's error would move by "
        f"at most {allow.rows.min():.1f}-{allow.rows.max():.1f} points (each row's "
        f"{100 * allow.level:g} % bound) and the median |error| by {allow.median:.1f} points "
        f"(it moved {medians.max() - medians.min():.1f}); {int((moved > allow.rows).sum())} of "
        f"{len(moved)} rows moved more ({(1 - allow.level) * len(moved):.1f} expected); {hold}"
    )


def run_to_run(table: pd.DataFrame) -> str:
    """Per model: each run's median |error| and the largest change of one row's error."""
    lines = []
    for model, rows in table.groupby("model", sort=True):
        runs = sorted(rows["run"].unique())
        if len(runs) < 2:
            continue
        errors = _errors(rows, "rel_err")
        medians = [errors[run].abs().median() for run in runs]
        probed = ""
        if "interleaved_rel_err" in rows and rows["interleaved_rel_err"].notna().any():
            inter = _errors(rows, "interleaved_rel_err")
            probed = (
                "; from the interleaved probes "
                + ", ".join(
                    f"{run} {inter[run].abs().median():.1f} %" for run in runs if run in inter
                )
                + f" ({_within(rows, 'interleaved_rel_err')})"
            )
        if "checked_rel_err" in rows and rows["checked_rel_err"].notna().any():
            ppd_rows = rows[rows["method"] != "greedy"]
            checked = _errors(ppd_rows, "checked_rel_err")
            probed += (
                "; the profile scaled by its check "
                + ", ".join(
                    f"{run} {checked[run].abs().median():.1f} %" for run in runs if run in checked
                )
                + f" ({_within(ppd_rows, 'checked_rel_err')})"
            )
        for name, column in _paired_columns(rows):
            per_run = rows.groupby("run")[column].apply(lambda e: 100 * e.abs().median())
            probed += f"; paired ({name}) " + ", ".join(
                f"{run} {per_run[run]:.1f} %" for run in runs if pd.notna(per_run.get(run))
            )
        ppd = rows[rows["method"].str.startswith("ppd ")]
        speedups = (100 * (ppd["speedup_predicted"] / ppd["speedup_measured"] - 1).abs()).groupby(
            ppd["run"]).median()  # fmt: skip
        if len(speedups) == len(runs):
            probed += (
                "; speed-ups' median |error| "
                + ", ".join(f"{run} {speedups[run]:.1f} %" for run in runs)
                + f" (spread {speedups.max() - speedups.min():.1f} points; "
                + _within(
                    ppd.assign(err=ppd["speedup_predicted"] / ppd["speedup_measured"] - 1), "err"
                )
                + ")"
            )
        turns = rows.dropna(subset=["speedup_turns_rel_err"])
        if turns["run"].nunique() == len(runs):
            per_run = turns.groupby("run")["speedup_turns_rel_err"].apply(
                lambda e: 100 * e.abs().median())  # fmt: skip
            probed += (
                "; judged turn by turn "
                + ", ".join(f"{run} {per_run[run]:.1f} %" for run in runs)
                + f" ({_within(turns, 'speedup_turns_rel_err')}{_chance(turns)})"
            )
        moved = _moves(errors).sort_values(ascending=False)
        lines.append(
            f"- {model}: median |error| "
            + ", ".join(f"{run} {m:.1f} %" for run, m in zip(runs, medians, strict=True))
            + f" (spread {max(medians) - min(medians):.1f} points); largest change of one "
            f"row's error {moved.iloc[0]:.1f} points ({' '.join(map(str, moved.index[0]))}); "
            f"{_within(rows, 'rel_err')}" + probed
        )
    return "\n".join(lines)


def record_table(table: pd.DataFrame) -> str:
    """Per model with two runs or more, the prediction of record (``ppd validate``'s: from the
    interleaved probes where every run has them, else from the profile) run to run, against
    issue 24's bounds: its median |error| within MEDIAN_BOUND points, each row within
    ROW_BOUND."""
    lines = []
    for model, rows in table.groupby("model", sort=True):
        runs = sorted(rows["run"].unique())
        if len(runs) < 2:
            continue
        probed = "interleaved_rel_err" in rows and rows.groupby("run")["interleaved_rel_err"].apply(
            lambda e: e.notna().any()).all()  # fmt: skip
        column = "interleaved_rel_err" if probed else "rel_err"
        errors = _errors(rows, column)
        medians = errors.abs().median()
        moved = _moves(errors)
        spread = medians.max() - medians.min()
        lines.append(
            f"| {model} | {'interleaved' if probed else 'profile'} | "
            + ", ".join(f"{medians[run]:.1f}" for run in runs)
            + " | "
            + ", ".join(f"{errors[run].abs().max():.1f}" for run in runs)
            + f" | {spread:.1f}{'' if spread <= MEDIAN_BOUND else ' (over)'} | "
            f"{int((moved <= ROW_BOUND).sum())} of {len(moved)} | {moved.max():.1f} |"
        )
    if not lines:
        return ""
    return "\n".join([
        f"| model | prediction of record | median \\|error\\| by run (%) | worst by run (%) | "
        f"median moved (points; bound {MEDIAN_BOUND:g}) | rows within {ROW_BOUND:g} points | "
        "largest row move |",
        "|" + " --- |" * 7,
        *lines,
    ])  # fmt: skip


def main(outs: list[Path]) -> None:
    several = len(outs) > 1
    table = pd.concat([read_runs(out, f"{out.name}/" if several else "") for out in outs],
                      ignore_index=True)  # fmt: skip
    print("# Predict, then measure (experiments/cpu_validate.sh)\n")
    for (run, model), rows in table.groupby(["run", "model"], sort=True):
        print(f"## {run}: {model}\n\n```\n{rows['load'].iloc[0]}\n```\n\n{run_table(rows)}\n")
    summary = run_to_run(table)
    if summary:
        print(f"## Run to run\n\n{summary}")
        print(f"\n## The prediction of record, run to run\n\n{record_table(table)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__.splitlines()[-1])
    main([Path(a) for a in sys.argv[1:]])
