"""``ppd simulate``: run the discrete-event simulator from the command line.

The options are ``SimulateSettings``' fields; the handler builds the value, hands it to the
workflow (``sim.cli_simulate_run.simulate_run``) and prints what it found."""

from __future__ import annotations

import argparse
import json

from sim.cli_settings import SimulateSettings
from sim.cli_simulate_run import simulate_run


def register(subparsers) -> None:
    """Add ``simulate`` to the ``ppd`` command: its options are ``SimulateSettings``' fields."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate PPD (or greedy) layer schedules on modelled GPUs",
        description="Simulate Algorithm 2's layer schedule; prints a latency/compute summary.",
    )
    SimulateSettings.add_to(p)
    p.set_defaults(func=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """``ppd simulate``: the settings of the options, simulated (``simulate_run``), printed."""
    settings = SimulateSettings.from_args(args)
    run = simulate_run(settings)
    if settings.output.json:
        print(json.dumps(run.report(), indent=2, default=float))
    else:
        _print_summary(run.example, run.summary, run.baselines)
    return 0


def _print_summary(example, summary, baselines: dict) -> None:
    """A text summary: the simulated latency beside greedy's and the closed form's."""
    cfg = example.config
    uniform = type(cfg.cost).__name__ == "UniformCost" and cfg.costs is None
    print(
        f"{cfg.schedule}: d={cfg.d} d_bar={cfg.d_bar} k={cfg.k} ell={cfg.ell} "
        f"gpus={cfg.n_gpus}" + ("  [extension: d_bar < d/2]" if cfg.extension else "")
    )
    unit = "layer units" if uniform else f"layer units of {example.unit_s:.4g} s"
    print(f"sequences        {summary.n}  (time in {unit})")
    spread = (
        f"  std {summary.std:.4g}  95% CI of the mean [{summary.ci_low:.4g}, "
        f"{summary.ci_high:.4g}]  p50 {summary.p50:.4g}  p99 {summary.p99:.4g}"
        if summary.n > 1
        else ""
    )
    print(f"latency          mean {summary.mean:.4g}{spread}")
    greedy = baselines["greedy_latency_units"]
    print(f"greedy           {greedy:.4g}  (PPD / greedy = {summary.mean / greedy:.4f})")
    closed = baselines.get("closed_form_latency_units")
    if closed is not None:
        print(
            f"closed form      {closed:.4g}  (Theorem 4.1, E[T]; simulated / closed = "
            f"{summary.mean / closed:.4f})"
        )
    if not uniform:
        print(
            f"latency (s)      mean {summary.samples['latency_s'].mean():.6g}  "
            f"greedy {baselines['greedy_latency_s']:.6g}"
        )
    print(
        f"compute          mean {summary.compute_mean:.4g}"
        + (f"  std {summary.compute_std:.4g}" if summary.n > 1 else "")
    )
    print(f"runs N           mean {summary.samples['n_runs'].mean():.4g}")
    util = ", ".join(f"{u:.3f}" for u in example.utilisation)
    print(
        f"first sequence   latency {example.latency_units:.4g}, N = {example.n_runs}, "
        f"utilisation per GPU {util} (the sequence behind --gantt and --events-csv)"
    )
