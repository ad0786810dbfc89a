"""``ppd plan``: the best PPD configuration for a model and hardware, against the alternatives."""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from ppdmodel.cli_args import (
    existing_file,
    existing_path,
    nonnegative_float,
    nonnegative_int,
    output_dir,
    positive_float,
    positive_int,
    probability,
)
from sim.cli_plan_table import (
    coverage_note,
    depth_note,
    other_model_note,
    profile_entry,
    read_ptable,
    replicates_of,
    settle_command,
    sharing_note,
)
from sim.hardware import ENGINE_PRESETS

TABLE_COLUMNS = ("config", "hardware_name", "latency_s", "latency_low_s", "latency_high_s",
                 "compute_s", "speedup", "speedup_low", "speedup_high", "compute_ratio", "p",
                 "break_even_p", "quality")  # fmt: skip
"""Columns of the printed frontier (the CSV holds every column)."""
SHOW = 10
"""Frontier points printed per workload (evenly spaced along it)."""


def register(subparsers) -> None:
    """Add ``plan`` to the ``ppd`` command."""
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
    # fmt: off
    model = p.add_mutually_exclusive_group()
    model.add_argument("--shape", default=None, help="model shape preset (default vicuna-13b)")
    model.add_argument("--config", type=existing_path,
                       help="a Hugging Face config.json (or its directory)")
    p.add_argument("--context-len", type=positive_int, default=None,
                   help="tokens in the KV cache (default 1024, or the profile's)")
    hw = p.add_mutually_exclusive_group()
    hw.add_argument("--gpu", nargs="+", default=None, help="GPU presets (default h100-sxm)")
    hw.add_argument("--profile", type=existing_file,
                    help="a measured cost profile (ppd measure profile's JSON)")
    p.add_argument("--accept-wide-prices", action="store_true",
                   help="plan from a --profile whose prices are marked too wide (noted)")
    p.add_argument("--link", nargs="+", default=None,
                   help="link presets (with --gpu; default nvlink4)")
    p.add_argument("--devices", type=positive_int, default=8, help="devices available")
    p.add_argument("--shared-slowdown", type=positive_float, default=None,
                   help="slowdown (>= 1) of main and candidates on one GPU (default 2)")
    p.add_argument("--engine", choices=sorted(ENGINE_PRESETS), default=None,
                   help="execution regime preset (sim/hardware.py cites each number): hf-eager "
                        "(Hugging Face eager: Python launches every kernel), torch-compiled "
                        "(CUDA graphs: one launch per step); default: an ideal engine (roofline)")
    p.add_argument("--host-us", type=nonnegative_float, default=None,
                   help="host us per token outside the layers (default 0, or the engine's)")
    p.add_argument("--host-us-per-layer", type=nonnegative_float, default=None,
                   help="host us to issue one layer's kernels (with --engine; yours measured)")
    p.add_argument("--launch-us", type=nonnegative_float, default=None,
                   help="host us per extra kernel launch: heads, all-reduces (with --engine)")
    p.add_argument("--message-us", type=nonnegative_float, default=None,
                   help="fixed us of one PPD message between processes (with --engine)")
    p.add_argument("--flops-efficiency", type=probability, default=None,
                   help="fraction of peak FLOP/s reached (default 0.6, or the engine's)")
    p.add_argument("--bandwidth-efficiency", type=probability, default=None,
                   help="fraction of peak HBM bandwidth reached (default 0.8, or the engine's)")
    p.add_argument("--table", default=None,
                   help="p-table: 'paper' (Table 2), a shipped atlas ('smollm2'), a CSV/Parquet, "
                        "or a ppd measure match-rate / ppd validate output folder (or its "
                        "traces.jsonl: p per d_bar, k and head, with its token count) (default: "
                        "the profiled model's shipped atlas; without --profile, Table 2)")
    p.add_argument("--allow-other-model-table", action="store_true",
                   help="recommend from a p-table measured on another model than the profiled "
                        "one (by default refused)")
    p.add_argument("--draws", type=nonnegative_int, default=None,
                   help="draws behind each 95 %% interval (default 100; 0: no intervals)")
    p.add_argument("--table-d", type=positive_int, default=None,
                   help="layers of the model a p-table file was measured on")
    p.add_argument("--workload", nargs="+", default=None, help="workloads (default: all)")
    p.add_argument("--head", nargs="+", default=None, help="head kinds (default: all)")
    p.add_argument("--d-bar", nargs="+", type=positive_int, default=None)
    p.add_argument("--k", nargs="+", type=positive_int, default=None)
    p.add_argument("--early-head", nargs="+", choices=("main", "candidates"),
                   default=["main", "candidates"])
    p.add_argument("--ell", type=positive_int, default=128, help="tokens per sequence")
    p.add_argument("--max-compute", type=positive_float, default=None,
                   help="compute budget: busy device-seconds per token, x greedy on one device")
    p.add_argument("--draft-acceptance", type=probability, default=None,
                   help="compare with a separate draft model of this acceptance rate")
    p.add_argument("--draft-cost-ratio", type=nonnegative_float, default=0.05,
                   help="its token time as a fraction of the target's (default 0.05)")
    p.add_argument("--no-alternatives", action="store_true", help="screen PPD and greedy only")
    p.add_argument("--free-table", type=existing_file, default=None,
                   help="FREE measured per exit layer and threshold (CSV: exit_layer, threshold, "
                        "exit_rate, quality; sim/formats.py; ppd validate --free writes "
                        "free_table.csv); without it FREE is left out")
    p.add_argument("--min-quality", type=probability, default=1.0,
                   help="recommend only methods whose quality against greedy's output is at "
                        "least this (exact methods 1.0; default 1.0: exact only, FREE shown "
                        "but not recommended)")
    p.add_argument("--confirm-n", type=nonnegative_int, default=64,
                   help="simulated sequences per frontier point (0: skip)")
    p.add_argument("--executor", default="local",
                   help="local | dask | dask://HOST:PORT | ray | ray://HOST:PORT")
    p.add_argument("--workers", type=positive_int, default=None, help="local pool size")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--out", type=output_dir, default="ppd-out/plan", help="output directory")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--verbose", action="store_true",
                   help="after the summary, print every frontier, the regimes and the speed-up "
                        "per device budget (always in the CSV files)")
    # fmt: on
    p.set_defaults(func=run_plan)


def model_shape(args):
    """(model shape, profiled model name or ""): --config, --shape, or the profile's model."""
    from sim.hardware_costs import profile_model
    from sim.shape import ModelShape

    if args.profile and not (args.config or args.shape):
        return profile_model(args.profile, context_len=args.context_len)
    name = profile_entry(args.profile).get("name", "") if args.profile else ""
    context = args.context_len or 1024
    if args.config:
        return ModelShape.from_hf_config(args.config, context_len=context), name
    return ModelShape.from_name(args.shape or "vicuna-13b").with_context(context), name


def plan_hardware(args, shape) -> list:
    """The hardware models of ``ppd plan``'s arguments: a profile's backends, or each --gpu and
    --link priced by --engine (or the ideal engine); shared with the what-if page."""
    if args.shared_slowdown is not None and not args.shared_slowdown >= 1:
        raise ValueError(f"--shared-slowdown must be a factor >= 1, got {args.shared_slowdown}")
    from sim.hardware import GPUSpec, Link
    from sim.hardware_costs import SHARED_GPU_SLOWDOWN, RooflineHardware, load_profile

    if args.profile:
        unused = [f"--{n.replace('_', '-')}" for n in PRESET_OPTIONS
                  if getattr(args, n) not in (None, False)]  # fmt: skip
        if unused:
            raise ValueError(f"{', '.join(unused)}: a --profile is measured already (its host, "
                             "launch, message and device figures are the profile's); give "
                             "these with --gpu presets instead, or leave them out")  # fmt: skip
        backends = load_profile(args.profile, shape)
        if args.shared_slowdown is not None:
            slowdown = args.shared_slowdown
            backends = [replace(hw, base=replace(hw.base, shared_device_slowdown=slowdown))
                        for hw in backends if hw.layout == "shared"] + [
                        hw for hw in backends if hw.layout != "shared"]  # fmt: skip
        return backends
    if args.engine:
        return _engine_hardware(args, shape)
    tuned = [f"--{n.replace('_', '-')}" for n in ENGINE_OVERRIDES if getattr(args, n) is not None]
    if tuned:
        raise ValueError(f"{', '.join(tuned)} require --engine NAME")
    slowdown = SHARED_GPU_SLOWDOWN if args.shared_slowdown is None else args.shared_slowdown
    return [
        RooflineHardware(shape, GPUSpec.from_name(gpu), Link.from_name(link),
                         max_tp=args.devices, flops_efficiency=_or(args.flops_efficiency, 0.6),
                         bandwidth_efficiency=_or(args.bandwidth_efficiency, 0.8),
                         shared_device_slowdown=slowdown, host_s=_or(args.host_us, 0.0) * 1e-6)
        for gpu in args.gpu or ["h100-sxm"]
        for link in args.link or ["nvlink4"]
    ]  # fmt: skip


PRESET_OPTIONS = ("engine", "host_us", "host_us_per_layer", "launch_us", "message_us",
                  "flops_efficiency", "bandwidth_efficiency", "link")  # fmt: skip
"""``ppd plan`` options that price datasheet presets, which a measured --profile does not use."""
ENGINE_OVERRIDES = {"host_us_per_layer": "host_per_layer_s", "launch_us": "launch_s",
                    "message_us": "message_s", "host_us": "host_per_step_s"}  # fmt: skip
"""``ppd plan`` options (microseconds) that replace an engine preset's field (seconds)."""


def _or(value, default):
    return default if value is None else value


def _engine_hardware(args, shape) -> list:
    """--engine: one EngineHardware per GPU and link, the preset with the user's numbers."""
    from sim.engine import EngineHardware
    from sim.hardware import Engine, GPUSpec, Link

    if args.profile:
        raise ValueError("--engine prices a model shape on --gpu presets; a --profile is "
                         "measured already: give one or the other")  # fmt: skip
    if args.shared_slowdown is not None:
        raise ValueError("--shared-slowdown: with --engine the slowdown follows the regime")
    overrides = {field: getattr(args, name) * 1e-6 for name, field in ENGINE_OVERRIDES.items()
                 if getattr(args, name) is not None}  # fmt: skip
    engine = Engine.from_name(args.engine).with_overrides(
        flops_efficiency=args.flops_efficiency, bandwidth_efficiency=args.bandwidth_efficiency,
        **overrides)  # fmt: skip
    return [EngineHardware(shape, GPUSpec.from_name(gpu), Link.from_name(link), engine,
                           max_tp=args.devices)
            for gpu in args.gpu or ["h100-sxm"] for link in args.link or ["nvlink4"]]  # fmt: skip


def run_plan(args: argparse.Namespace) -> int:
    from sim.plan import plan
    from sim.plan_grid import DraftModel, PlanSpace
    from sim.plan_intervals import PLAN_DRAWS
    from sim.plan_summary import summary_lines
    from sim.sweep import open_executor

    shape, model_name = model_shape(args)
    hardware = plan_hardware(args, shape)
    wide = _wide_notes(args)
    ptable = read_ptable(args, model_name, shape.num_layers)
    workloads = tuple(args.workload) if args.workload else None
    free_table = _free_table(args, shape.num_layers, workloads or ptable.workloads)
    draft = None
    if args.draft_acceptance is not None:
        draft = DraftModel(args.draft_acceptance, args.draft_cost_ratio)
    space = PlanSpace(
        max_devices=args.devices, d_bars=tuple(args.d_bar) if args.d_bar else None,
        ks=tuple(args.k) if args.k else None, early_heads=tuple(args.early_head),
        heads=tuple(args.head) if args.head else None, workloads=workloads, ell=args.ell,
        draft_model=draft, alternatives=not args.no_alternatives, free_table=free_table,
    )  # fmt: skip
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open_executor(args.executor, args.workers) as executor:
        result = plan(hardware, ptable, space, d=shape.num_layers, max_compute=args.max_compute,
                      confirm_n=args.confirm_n, executor=executor, seed=args.seed,
                      out_dir=out / "confirm" if args.confirm_n else None,
                      keep_screened=True, min_quality=args.min_quality,
                      replicates=replicates_of(args, hardware),
                      draws=PLAN_DRAWS if args.draws is None else args.draws,
                      model=planned_model(args, model_name),
                      profile_drift=profile_drift(args.profile) if args.profile else None,
                      engines=[args.engine] * len(hardware))  # fmt: skip
    seconds = time.perf_counter() - started
    regimes = _advise(result, hardware, args.devices)
    plan_table(result).to_csv(out / "plan.csv", index=False)
    result.by_devices.to_csv(out / "by_devices.csv", index=False)
    if len(regimes):
        regimes.to_csv(out / "regimes.csv", index=False)
    hardware_names = ", ".join(hw.name for hw in hardware)
    title = (
        f"{args.config or args.shape or model_name or 'vicuna-13b'} on {hardware_names}; "
        f"p-table {ptable.name}"
    )
    _write_png(result, out / "plan.png", title)
    notes = (depth_note(ptable, shape), _free_note(args),
             other_model_note(args, ptable, model_name),
             coverage_note(ptable, result.screened, shape.num_layers),
             sharing_note(hardware, result.screened), *wide)  # fmt: skip
    note = "; ".join(filter(None, notes))
    commands = {w: settle_command(args, v, ptable, result.decisions.get(w))
                for w, v in result.verdicts.items()}  # fmt: skip
    summary = summary_lines(result)
    if args.json:
        report = {
            "summary": summary,
            "decisions": {w: d.to_dict() for w, d in result.decisions.items()},
            "sources": dict(result.uncertainty.notes),
            "n_screened": result.n_screened,
            "screen_s": result.screen_s,
            "confirm_s": result.confirm_s,
            "seconds": seconds,
            "note": note,
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
                    "validate_command": settle_command(args, replace(v, dominant="profile"),
                                                       ptable),
                }
                for w, v in result.verdicts.items()
            },  # fmt: skip
            "asked": []
            if result.asked is None
            else json.loads(result.asked.to_json(orient="records")),  # fmt: skip
            "regimes": json.loads(regimes.to_json(orient="records")),
            "frontier": json.loads(result.frontier.to_json(orient="records")),
        }
        print(json.dumps(report, indent=2))
        return 0
    print("\n".join(summary))
    _print_basis(result, hardware, args, commands, note)
    if args.verbose:
        _print(result, seconds, out, regimes, commands)
    extra = f", {out / 'regimes.csv'}" if len(regimes) else ""
    print(f"\n{result.n_screened} configurations screened, {len(result.frontier)} on the "
          f"frontiers, in {seconds:.1f} s; wrote {out / 'plan.csv'}, {out / 'by_devices.csv'}"
          f"{extra} and {out / 'plan.png'}" + ("" if args.verbose else " (--verbose: the "
          "frontiers, regimes and speed-up per device budget)"))  # fmt: skip
    return 0


def planned_model(args, model_name: str) -> str:
    """The name of the model being planned: the profile's, the --config folder's, or the
    --shape preset's (default vicuna-13b)."""
    from sim.ptable import model_key

    if model_name and not (args.config or args.shape):
        return model_name
    if args.config:
        path = Path(args.config)
        return model_key(path.parent if path.is_file() else path)
    return args.shape or "vicuna-13b"


def profile_drift(path) -> float | None:
    """The drift log-sd a profile recorded (``machine.applied_log_sd``), None where none."""
    from ppdmodel.cost_profile import read_profile_data

    machine = read_profile_data(path).get("machine")
    value = machine.get("applied_log_sd", machine.get("log_sd")) if isinstance(
        machine, dict) else None  # fmt: skip
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        return None
    return float(value)


def _print_basis(result, hardware, args, commands: dict, note: str) -> None:
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


def plan_table(result):
    """plan.csv: the frontier (``on_frontier``) and the PPD configurations asked for with
    --d-bar/--k (``asked``), off the frontier or not."""
    import pandas as pd

    asked = result.asked
    front = result.frontier.assign(
        on_frontier=True, asked=(result.frontier.method == "ppd") & (asked is not None)
    )
    if asked is None:
        return front
    extra = asked[~asked.on_frontier].assign(asked=True, recommended=False, pareto=False)
    return pd.concat([front, extra], ignore_index=True)


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


def _advise(result, hardware, devices: int):
    """The regime table of --engine hardware, and each recommendation's regime sentence."""
    from sim.engine import regime_advice, regime_table

    by_name = {hw.name: hw for hw in hardware}
    for workload, rows in result.frontier.groupby("workload", sort=False):
        best = rows[rows.recommended].iloc[0]
        table = result.by_devices[result.by_devices.workload == workload]
        advice = regime_advice(by_name[best.hardware_name], table, int(best.tp_main),
                               min(devices, 2))  # fmt: skip
        if advice:
            result.recommendations[workload] += " " + advice
    return regime_table(hardware)


def _free_table(args, d: int, workloads):
    """--free-table, read and checked against the model's depth and the plan's workloads (a
    row naming a workload applies to it alone; None without it)."""
    from sim.formats import read_free_table

    if args.free_table is None:
        return None
    table = read_free_table(args.free_table)
    if (table.exit_layer >= d).any():
        deepest = int(table.exit_layer.max())
        raise ValueError(f"--free-table {args.free_table}: exit_layer {deepest} is not below "
                         f"the model's d = {d}")  # fmt: skip
    named = set(table.workload.astype(str))
    if "" not in named and not named & set(workloads):
        raise ValueError(f"--free-table {args.free_table}: its rows name the workloads "
                         f"{sorted(named)}, none of the plan's {list(workloads)}: FREE "
                         "would be left out (a row with no workload applies to all)")  # fmt: skip
    return table


def _wide_notes(args) -> list[str]:
    """A measured --profile with prices marked too wide: refused (ValueError naming the price)
    unless --accept-wide-prices, then one note per price (``check_wide_prices``)."""
    from ppdmodel.cost_profile import (
        PROFILE_FORMAT,
        check_wide_prices,
        parse_cost_profile,
        read_profile_data,
    )

    if not args.profile:
        return []
    data = read_profile_data(args.profile)
    if data.get("format") != PROFILE_FORMAT:
        return []
    notes = check_wide_prices(parse_cost_profile(data), accept=args.accept_wide_prices)
    return [n.removeprefix("note: ") for n in notes]


def _free_note(args) -> str:
    if args.free_table is None and not args.no_alternatives:
        return ("FREE (approximate early exit) left out: give --free-table FILE with its exit "
                "rate and quality per threshold, as ppd validate --free measures them")  # fmt: skip
    return ""


def _write_png(result, path, title: str) -> None:
    import matplotlib.pyplot as plt

    from sim.plan_plot import plot_plan

    fig = plot_plan(result, result.screened, title=title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _print(result, seconds: float, out: Path, regimes, commands: dict) -> None:
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

