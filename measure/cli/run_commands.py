"""What ``ppd run`` and ``ppd validate`` do once their options are parsed (``measure.cli.run``):
build the settings (``RunRequest``), call the workflow (``measure.eval.workflow``), print.

Imported when one of the two commands runs (it needs the ``measure`` extra: torch).
"""

from __future__ import annotations

from pathlib import Path

from measure.decode.settings import ReportRequest, RunRequest
from measure.eval.profile_check import check_scales
from measure.eval.turn_speedup import TARGET_HALF_WIDTH
from measure.eval.workflow import RunOutcome, ValidationOutcome, run_report, validate_run

_TURNS_NOTE = {"prompts": "turns by prompt", "runs": "turns by run"}
"""How the printed header names ``--turns``."""


def run_command(args) -> int:
    """``ppd run``: exit 1 if a method's tokens differ from greedy's."""
    outcome = run_report(ReportRequest.from_args(args))
    print_run(outcome)
    return 0 if outcome.exact else 1


def validate_command(args) -> int:
    """``ppd validate``: exit 1 if an exact method's tokens differ from greedy's."""
    outcome = validate_run(RunRequest.from_args(args))
    print_validation(outcome)
    return 0 if outcome.exact else 1


def _sampled(request: RunRequest, rows: str) -> str:
    s = request.sampling
    return f" (seed {s.seed}; 'greedy' {rows}: the sampled baseline)" if s.do_sample else ""


def print_run(outcome: RunOutcome) -> None:
    """``ppd run``'s report: the table, the rounds, a verdict per method."""
    from measure.eval.report import format_table

    request, loaded, report = outcome.request, outcome.loaded, outcome.report
    m, timing, out = request.methods, request.timing, Path(request.output.out)
    print(
        f"d = {loaded.d}, d_bar = {loaded.d_bars[0]}, {len(loaded.ids)} prompts, max "
        f"{m.max_new_tokens} new tokens, backend {m.backend[0]}, early head on "
        f"{m.early_head[0]}, {loaded.settings.decoding.label}" + _sampled(request, "in verdicts")
    )
    print(format_table(report.table))
    print(f"{timing.repeats} interleaved round(s) ({_TURNS_NOTE[timing.turns]}); "
          f"{report.timing.load.describe()}")  # fmt: skip
    for line in report.verdicts(loaded.profile):
        print("verdict: " + line)
    print(f"wrote {out / 'report.csv'} and {out / 'traces.jsonl'}")


def print_validation(outcome: ValidationOutcome) -> None:
    """``ppd validate``'s report: the table, the waterfalls, the gaps and passes, a verdict
    per method, the errors of each prediction."""
    from measure.eval.text import (
        format_early_exit,
        format_gaps,
        format_passes,
        format_table,
        format_waterfall,
    )

    request, result, summary = outcome.request, outcome.result, outcome.summary
    profile, probed, out = outcome.profile, outcome.probed, Path(request.output.out)
    ids, repeats = outcome.loaded.ids, request.timing.repeats
    print(
        f"d = {profile.d}, {len(ids)} prompts, max {request.methods.max_new_tokens} new tokens, "
        f"{repeats} interleaved rounds ({_TURNS_NOTE[request.timing.turns]}), "
        f"{outcome.loaded.settings.decoding.label}{_sampled(request, 'rows')}; "
        f"{result.timing.load.describe()}"
    )
    print(format_table(result))
    print("waterfall per token (predicted from the profile; measured beside it):")
    for r in result.results:
        print("  " + format_waterfall(r))
    print("largest gap between a block timed in the runs and the profile's price:")
    for line in format_gaps(result):
        print("  " + line)
    print(
        "passes timed in the runs against the closed form's time of their kind (x measured /"
        " predicted; the gap per token; fresh: after a miss, resumed: after a match):"
    )
    for line in format_passes(result):
        print("  " + line)
    for line in format_early_exit(result):
        print(line)
    for o in result.others:
        for line in o.report_lines():
            print(line)
    for line in result.verdicts():
        print("verdict: " + line)
    print(
        (
            "from the profile taken beforehand (what ppd plan prices; it follows the machine's "
            "drift since): "
            if probed
            else "predicted vs measured: "
        )
        + f"median |error| {100 * summary['median_abs_rel_err']:.1f} %, "
        f"worst {100 * summary['worst_abs_rel_err']:.1f} % over "
        f"{summary['configurations']} configuration(s); greedy "
        + ", ".join(
            f"{100 * err:+.1f} % (priced on {backend})"
            for backend, err in summary["greedy_rel_err_by_backend"].items()
        )
        + "; 0 parameters fitted on these runs; measured median inside the predicted 95 % "
        f"interval for {summary['inside_interval']} of {summary['with_interval']} "
        f"configuration(s) with one (profile cost replicates{_drift_note(summary)})"
    )
    if "checked_median_abs_rel_err" in summary:
        print(checked_line(summary, outcome.checks))
    if "speedup_median_abs_rel_err" in summary:
        print(
            "speed-ups over greedy (a drift of the whole machine leaves them): median |error| "
            f"{100 * summary['speedup_median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary['speedup_worst_abs_rel_err']:.1f} %"
        )
    if "speedup_turns_median_abs_rel_err" in summary:
        print(turns_line(summary, repeats))
    if probed:
        print(result.probe_note)
        print(
            "from the interleaved probes (the prediction of record: its prices were timed "
            "beside the runs): median |error| "
            f"{100 * summary['interleaved_median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary['interleaved_worst_abs_rel_err']:.1f} %; greedy "
            + ", ".join(f"{100 * err:+.1f} % (on {backend})" for backend, err in
                        summary["interleaved_greedy_rel_err_by_backend"].items())
            + f"; inside its interval for {summary['interleaved_inside_interval']} "
            f"configuration(s){_drift_note(summary, 'interleaved_')}"
        )  # fmt: skip
        paired = [
            f"{name} median |error| {100 * summary[f'{key}median_abs_rel_err']:.1f} %, worst "
            f"{100 * summary[f'{key}worst_abs_rel_err']:.1f} %"
            for name, key in (("profile", "paired_"), ("interleaved", "interleaved_paired_"))
            if f"{key}median_abs_rel_err" in summary
        ]
        if paired:
            print(f"paired with the sentinel ({_sentinel_note(summary)}): " + "; ".join(paired))
    print(
        f"wrote {out}/validation.csv, summary.json, waterfalls.csv, terms.csv, passes.csv, "
        "turns.csv, "
        "traces.jsonl, "
        "waterfall.png, predicted_vs_measured.png, layer_times.png"
        + (", profile_interleaved.json, sentinel.csv" if probed else "")
    )


MOVED_ROUNDS_FACTOR = 8
"""Advice for more than this many times the rounds run reads as a moving machine, not as a
count to run (``turns_line``)."""


def turns_line(summary: dict, repeats: int) -> str:
    """The speed-ups judged turn by turn (``measure.eval.turn_speedup``), in one line."""
    needed = summary["speedup_turns_rounds_for_target"]
    coverage = summary["speedup_turns_coverage"]
    if needed is None:
        width = (f"too few turns for a 95 % interval (the measured range covers "
                 f"{100 * coverage:.0f} %: 6 turns or more reach 95 %)")  # fmt: skip
    else:
        width = f"measured to +-{100 * summary['speedup_turns_half_width_max']:.1f} % at worst"
        if needed > MOVED_ROUNDS_FACTOR * repeats:  # not a count of rounds worth suggesting
            width += (" (turns this far apart mean the machine moved during the rounds: run "
                      f"again when it is quiet; pinning every one to +-{100 * TARGET_HALF_WIDTH:g}"
                      f" % would take about --repeats {needed})")  # fmt: skip
        elif needed > repeats:
            width += (f" (about --repeats {needed} would pin every one to +-"
                      f"{100 * TARGET_HALF_WIDTH:g} %)")  # fmt: skip
    repeat = summary.get("speedup_turns_repeat_bound")
    if repeat is not None:  # measure.eval.run_to_run
        width += (f"; a repeat (same prompts, fresh profile) would move a configuration's error "
                  f"by up to {repeat:.1f} points by chance alone (95 %)")  # fmt: skip
    return (
        "speed-ups judged turn by turn (each prompt's run against greedy's beside it and its "
        f"own prediction): median |error| {100 * summary['speedup_turns_median_abs_rel_err']:.1f}"
        f" %, worst {100 * summary['speedup_turns_worst_abs_rel_err']:.1f} %; predicted inside "
        f"the measured interval for {summary['speedup_turns_inside']} of "
        f"{summary['speedup_turns_with_interval']}, the two intervals overlapping for "
        f"{summary['speedup_intervals_overlap']} (the predicted one from the profile's cost "
        f"replicates); {width}"
    )


def checked_line(summary: dict, checks) -> str:
    """'the profile scaled by its check (single x1.07, dist x1.11: ...): median |error| ...'."""
    scales = ", ".join(f"{b} x{s:.3g}" for b, s in check_scales(checks).items())
    by_backend = summary["checked_greedy_rel_err_by_backend"]
    greedy = ", ".join(f"{100 * e:+.1f} % ({b})" for b, e in by_backend.items())
    return (
        f"the profile scaled by its check ({scales}: the geometric mean of the checks' ratios, "
        "greedy steps of its own before and after the runs, not the runs): median |error| "
        f"{100 * summary['checked_median_abs_rel_err']:.1f} %, worst "
        f"{100 * summary['checked_worst_abs_rel_err']:.1f} %; greedy {greedy}"
    )


def _sentinel_note(summary: dict) -> str:
    """'85 windows; the runs' machine 1.10x the profile's; each prompt's own windows weighted
    0.20' (``measure.eval.paired``)."""
    level = summary.get("sentinel_level_over_profile")
    return (
        f"{summary['sentinel_windows']} windows"
        + ("" if level is None else f"; the runs' machine {level:.3g}x the profile's step time")
        + f"; each prompt's own windows weighted {summary['sentinel_weight']:.2f}"
    )


def _drift_note(summary: dict, prefix: str = "") -> str:
    """ ", with the machine's drift while timed: log-sd 15.9 %" where the profile recorded one."""
    sd = summary.get(f"{prefix}machine_drift_log_sd")
    floor = summary.get(f"{prefix}machine_drift_floor_log_sd")
    if sd is None:
        return ""
    note = f", with the machine's drift while timed: log-sd {100 * sd:.1f} %"
    if floor is not None and floor > sd:
        note += f" (the intervals carry the machine's floor, {100 * floor:.1f} %)"
    return note
