"""``ppd plan``: the best PPD configuration for a model and hardware, against the alternatives.

The options are ``PlanSettings``' fields; the handler builds the value, hands it to the
workflow (``sim.cli_plan_run.plan_workflow``) and prints what it found."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from sim.cli_plan_run import PlanRun, plan_workflow
from sim.cli_plan_table import settle_command
from sim.cli_settings import PlanSettings

TABLE_COLUMNS = ("config", "hardware_name", "latency_s", "latency_low_s", "latency_high_s",
                 "compute_s", "speedup", "speedup_low", "speedup_high", "compute_ratio", "p",
                 "break_even_p", "quality")  # fmt: skip
"""Columns of the printed frontier (the CSV holds every column)."""
SHOW = 10
"""Frontier points printed per workload (evenly spaced along it)."""


def register(subparsers) -> None:
    """Add ``plan`` to the ``ppd`` command: its options are ``PlanSettings``' fields."""
    p = subparsers.add_parser(
        "plan",
        help="search PPD configurations and the alternatives; Pareto frontier and a recommendation",
        description=(
            "Screen every configuration (d_bar, k, devices, early-head placement, head kind) of "
            "PPD and of greedy + tensor parallelism, self-speculative early exit and (given) a "
            "draft model in closed form; confirm each method's Pareto frontier of latency per "
            "token against busy device-seconds per token by simulation; recommend the fastest "
            "configuration within the constraints. Writes plan.csv and plan.png under --out."
        ),
    )
    PlanSettings.add_to(p)
    p.set_defaults(func=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    """``ppd plan``: the settings of the options, planned (``plan_workflow``), printed."""
    from sim.plan_summary import summary_lines

    run = plan_workflow(PlanSettings.from_args(args))
    if run.settings.output.json:
        print(json.dumps(_json_report(run), indent=2))
        return 0
    out, verbose = run.out, run.settings.output.verbose
    print("\n".join(summary_lines(run.result)))
    _print_basis(run.result, run.commands, run.note)
    if verbose:
        _print(run.result, run.seconds, run.regimes, run.commands)
    extra = f", {out / 'regimes.csv'}" if len(run.regimes) else ""
    print(f"\n{run.result.n_screened} configurations screened, {len(run.result.frontier)} on "
          f"the frontiers, in {run.seconds:.1f} s; wrote {out / 'plan.csv'}, "
          f"{out / 'by_devices.csv'}{extra} and {out / 'plan.png'}" + ("" if verbose else
          " (--verbose: the frontiers, regimes and speed-up per device budget)"))  # fmt: skip
    return 0


def _json_report(run: PlanRun) -> dict:
    """The ``--json`` report of a plan."""
    from sim.plan_summary import summary_lines

    result, commands = run.result, run.commands
    return {
        "summary": summary_lines(result),
        "decisions": {w: d.to_dict() for w, d in result.decisions.items()},
        "sources": dict(result.uncertainty.notes),
        "n_screened": result.n_screened,
        "screen_s": result.screen_s,
        "confirm_s": result.confirm_s,
        "seconds": run.seconds,
        "note": run.note,
        "recommendations": result.recommendations,
        "intervals_cover": result.covers,
        "verdicts": {
            w: {
                "text": v.text,
                "kind": v.kind,
                "too_close": v.too_close,
                "dominant_source": v.dominant,
                "recommended": v.recommended,
                "rival": v.rival,
                "settle_command": commands[w],
                "validate_command": settle_command(
                    run.settings, replace(v, dominant="profile"), run.ptable
                ),
            }
            for w, v in result.verdicts.items()
        },  # fmt: skip
        "asked": []
        if result.asked is None
        else json.loads(result.asked.to_json(orient="records")),  # fmt: skip
        "regimes": json.loads(run.regimes.to_json(orient="records")),
        "frontier": json.loads(result.frontier.to_json(orient="records")),
    }


def _print_basis(result, commands: dict, note: str) -> None:
    """What the summary rests on, and how to settle each open call."""
    print("\nwhat it rests on:")
    for source, words in result.uncertainty.notes.items():
        print(f"  {source}: {words}")
    heads = {d.head for d in result.decisions.values() if d.head}
    for words in sorted(heads):
        print(f"  head: {words}")
    open_calls = {w: c for w, c in commands.items() if c}
    if open_calls:
        print("settle it (one measurement each):")
        for workload, command in open_calls.items():
            v = result.verdicts[workload]
            print(f"  {workload} ({v.dominant or 'p'}): {command}")
    if note:
        print(f"note: {note}")


def _print_verdict(result, workload: str, command: str) -> None:
    """The verdict line and, when too close to call, the command that settles it."""
    v = result.verdicts.get(workload)
    if v is None:
        return
    print(f"verdict: {v.text}")
    if v.too_close and command:
        print(f"settle it (greedy and these configurations only): {command}")
        if v.untimed:
            print("  not timed by it (tensor parallelism or a separate draft model; measure on "
                  f"the target hardware): {', '.join(v.untimed)}")  # fmt: skip
    elif v.too_close:
        print("settle it: one ppd validate command cannot time them all (tensor parallelism, "
              "a separate draft model, or two early heads); measure them on the target "
              "hardware")  # fmt: skip


def _print(result, seconds: float, regimes, commands: dict) -> None:
    """--verbose: the regimes, every workload's frontier, verdict and speed-up per budget."""
    import numpy as np
    import pandas as pd

    confirmed = f"{len(result.frontier)} frontier points simulated in {result.confirm_s:.1f} s"
    if "sim_latency_s" not in result.frontier:
        confirmed = "no simulation (--confirm-n 0)"
    print(f"\nscreened {result.n_screened} configurations in closed form in "
          f"{result.screen_s:.1f} s; {confirmed}; {seconds:.1f} s in all")  # fmt: skip
    if len(regimes):
        print("\ngreedy decoding per tensor-parallel degree, and what bounds it:")
        with pd.option_context("display.width", 250, "display.max_colwidth", 200,
                               "display.float_format", "{:.4g}".format):  # fmt: skip
            print(regimes.drop(columns="why").to_string(index=False))
        for r in regimes.itertuples():
            print(f"  {r.hardware_name} TP{r.tp}: {r.regime}: {r.why}")
    columns = list(TABLE_COLUMNS) + [c for c in ("sim_latency_s", "agrees")
                                     if c in result.frontier]  # fmt: skip
    with pd.option_context("display.width", 200, "display.max_colwidth", 80,
                           "display.float_format", "{:.4g}".format):  # fmt: skip
        for workload, rows in result.frontier.groupby("workload", sort=False):
            best = rows[rows.pareto]
            best = best.sort_values("compute_s")
            shown = best.iloc[np.unique(np.linspace(0, len(best) - 1, SHOW).round().astype(int))]
            print(
                f"\n== {workload}: Pareto frontier of all methods ({len(shown)} of "
                f"{len(best)} points; every method's frontier is in plan.csv) =="
            )
            print(shown[columns].to_string(index=False))
            free = rows[(rows.method == "free") & ~rows.pareto]
            if len(free):
                print("FREE (approximate; below --min-quality or not on that frontier):")
                print(free[["config", "latency_s", "compute_s", "speedup", "compute_ratio",
                            "quality"]].to_string(index=False))  # fmt: skip
            print(f"recommended: {result.recommendations[workload]}")
            _print_verdict(result, workload, commands.get(workload, ""))
            table = result.by_devices[result.by_devices.workload == workload]
            speedups = table.pivot(index="budget", columns="method", values="speedup")
            winner = table[table.wins].set_index("budget").method
            print("speed-up over greedy on one device, best of each method on <= n devices:")
            print(speedups.assign(fastest=winner).rename_axis("n devices").to_string())
    if result.asked is not None and (~result.asked.on_frontier).any():
        off = result.asked[~result.asked.on_frontier].sort_values("latency_s")
        print(f"\n{len(off)} configuration(s) asked for with --d-bar/--k are off the frontier "
              f"(plan.csv: asked, not on_frontier); the fastest:")  # fmt: skip
        with pd.option_context("display.width", 200, "display.max_colwidth", 80,
                               "display.float_format", "{:.4g}".format):  # fmt: skip
            print(off.head(SHOW)[["workload", "config", "latency_s", "speedup", "speedup_low",
                                  "speedup_high", "p"]].to_string(index=False))  # fmt: skip
