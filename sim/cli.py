"""``ppd simulate``: run the discrete-event simulator from the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ppdmodel.cli_args import (
    DEFAULT_D,
    default_d_bar,
    existing_file,
    nonnegative_float,
    nonnegative_int,
    output_file,
    positive_float,
    positive_int,
    probability,
    reading,
)


def register(subparsers) -> None:
    """Add ``simulate`` to the ``ppd`` command."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate PPD (or greedy) layer schedules on modelled GPUs",
        description="Simulate Algorithm 2's layer schedule; prints a latency/compute summary.",
    )
    p.add_argument(
        "--d", type=positive_int, default=None, help=f"decoder layers (default {DEFAULT_D})"
    )
    p.add_argument(
        "--d-bar",
        type=positive_int,
        default=None,
        help="early-prediction layer (default: smallest layer >= d/2)",
    )
    p.add_argument(
        "--k", type=positive_int, default=None, help="candidates / sub-processes (default 3)"
    )
    p.add_argument("--ell", type=positive_int, default=128, help="generated tokens (default 128)")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--p", type=probability, default=None, help="Bernoulli match rate (default 0.5)"
    )
    src.add_argument(
        "--trace",
        type=existing_file,
        help="match-trace JSONL (sim.formats); replays its sequences with the trace's d, "
        "d_bar and k (select with --d-bar/--k/--trace-head when the file holds several)",
    )
    src.add_argument(
        "--per-position", type=existing_file, help="text/CSV file of p_t values for t = 2..ell"
    )
    p.add_argument("--trace-head", default=None, help="with --trace: shared | trained")
    p.add_argument("--schedule", choices=("ppd", "greedy"), default="ppd")
    p.add_argument(
        "--gpus", type=positive_int, default=None, help="modelled GPUs, 1..k+1 (default k+1)"
    )
    p.add_argument("--link", default=None, help="nvlink4 | pcie4-x16 | pcie5-x16 | loopback")
    p.add_argument("--cost", choices=("uniform", "roofline", "measured"), default="uniform")
    p.add_argument("--gpu-model", default="h100-sxm", help="a100-80gb | h100-sxm | h200")
    p.add_argument("--shape", default="vicuna-13b", help="model shape preset (roofline, links)")
    p.add_argument(
        "--context-len", type=positive_int, default=None, help="override the shape's context"
    )
    p.add_argument(
        "--layer-times",
        type=existing_file,
        help="per-layer times CSV (sim.formats), for --cost measured",
    )
    p.add_argument("--flops-efficiency", type=positive_float, default=0.6)
    p.add_argument("--bandwidth-efficiency", type=positive_float, default=0.8)
    p.add_argument(
        "--per-token-overhead", type=nonnegative_float, default=0.0, help="seconds per token"
    )
    p.add_argument(
        "--per-handoff-overhead", type=nonnegative_float, default=0.0, help="seconds per hand-off"
    )
    p.add_argument("--allow-below-half", action="store_true", help="simulate d_bar < d/2")
    p.add_argument("--per-layer-events", action="store_true", help="one event per layer")
    p.add_argument("--n", type=positive_int, default=1, help="Monte Carlo sequences (default 1)")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument(
        "--events-csv", type=output_file, help="write the first sequence's event log here"
    )
    p.add_argument("--gantt", type=output_file, help="write a Gantt PNG of the first sequence here")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run_simulate)


def _cost(args):
    from sim.cost import MeasuredCost, RooflineCost, UniformCost
    from sim.hardware import GPUSpec

    if args.cost == "uniform":
        return UniformCost()
    if args.cost == "roofline":
        return RooflineCost(
            _shape(args),
            GPUSpec.from_name(args.gpu_model),
            args.flops_efficiency,
            args.bandwidth_efficiency,
        )
    if not args.layer_times:
        raise ValueError("--layer-times is required with --cost measured")
    with reading("--layer-times", args.layer_times):
        return MeasuredCost.from_csv(args.layer_times)


def _shape(args):
    from sim.shape import ModelShape

    shape = ModelShape.from_name(args.shape)
    return shape if args.context_len is None else shape.with_context(args.context_len)


DEFAULT_K = 3


def select_traces(traces, *, d=None, d_bar=None, k=None, head=None) -> list:
    """The traces of one (d, d_bar, k, head); ValueError listing the choices if ambiguous.

    A match-rate run writes traces for every probed layer, k and head into one file; the
    options given narrow them down, and what remains must be a single configuration.
    """
    wanted = {"d": d, "d_bar": d_bar, "k": k, "head": head}
    kept = [t for t in traces if all(v is None or getattr(t, f) == v for f, v in wanted.items())]
    combos = sorted({(t.d, t.d_bar, t.k, t.head) for t in kept or traces})
    if not kept:
        raise ValueError(f"--trace: no sequence with {wanted}; the file holds {combos}")
    if len(combos) > 1:
        raise ValueError(
            f"--trace holds several (d, d_bar, k, head) configurations {combos}: "
            "choose one with --d-bar, --k and --trace-head"
        )
    return kept


def _match_sources(args) -> tuple[list, int, int, int]:
    """(match sources, d, d_bar, k): a trace's own shape, or the options' with their defaults."""

    from sim.formats import read_traces
    from sim.matches import Bernoulli, PerPosition, Replay

    if args.trace:
        with reading("--trace", args.trace):
            traces = read_traces(args.trace)
        if not traces:
            raise ValueError(f"--trace {args.trace}: no sequences")
        traces = select_traces(traces, d=args.d, d_bar=args.d_bar, k=args.k, head=args.trace_head)
        first = traces[0]
        return [Replay.from_trace(trace) for trace in traces], first.d, first.d_bar, first.k
    d = DEFAULT_D if args.d is None else args.d
    d_bar = default_d_bar(d) if args.d_bar is None else args.d_bar
    k = DEFAULT_K if args.k is None else args.k
    if 2 * d_bar < d and not args.allow_below_half:
        raise ValueError(
            f"--d-bar {d_bar} is below d/2 = {d / 2:g}: outside Algorithm 2 and Theorem 4.1; "
            "add --allow-below-half to simulate it as an extension"
        )
    if args.per_position:
        return [PerPosition(_read_p_t(args.per_position))], d, d_bar, k
    return [Bernoulli(0.5 if args.p is None else args.p)], d, d_bar, k


def _read_p_t(path: str):
    """p_t values (t = 2..ell) from a text or CSV file: numbers separated by commas or lines."""
    import numpy as np

    try:
        return np.loadtxt(path, delimiter=",", ndmin=1, dtype=float).ravel()
    except ValueError:
        raise ValueError(
            f"--per-position {path}: expected numbers p_t for t = 2..ell, separated by commas "
            "or newlines (a text or CSV file, not JSON)"
        ) from None


def run_simulate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from sim.config import SimConfig
    from sim.hardware import Link
    from sim.run import monte_carlo, sequence_seed, simulate, summarise

    sources, d, d_bar, k = _match_sources(args)
    common = dict(
        d=d,
        d_bar=d_bar,
        k=k,
        cost=_cost(args),
        n_gpus=args.gpus,
        link=None if args.link is None else Link.from_name(args.link),
        shape=_shape(args) if args.link or args.cost == "roofline" else None,
        per_token_overhead_s=args.per_token_overhead,
        per_handoff_overhead_s=args.per_handoff_overhead,
        schedule=args.schedule,
        allow_below_half=args.allow_below_half,
        per_layer_events=args.per_layer_events,
    )
    if args.trace:  # one run per recorded sequence, ell from each trace
        configs = [SimConfig(ell=s.ell, matches=s, **common) for s in sources]
        results = [simulate(c, record_events=False) for c in configs]
        summary = summarise(_samples(results))
        first, first_seed = configs[0], None
    else:
        first = SimConfig(ell=args.ell, matches=sources[0], **common)
        configs = [first]
        summary = monte_carlo(first, n=args.n, seed=args.seed)
        first_seed = sequence_seed(args.seed, 0)  # the Monte Carlo's own first sequence
    example = simulate(first, seed=first_seed)
    greedy = simulate(replace(first, schedule="greedy", n_gpus=1), record_events=False)
    if args.events_csv:
        example.events.to_csv(args.events_csv, index=False)
    if args.gantt:
        _write_gantt(example, args.gantt)
    baselines = _baselines(configs, greedy)
    report = {
        "config": first.to_dict(),
        "first": example.summary(),
        "monte_carlo": summary.to_dict(),
        **baselines,
    }
    if args.json:
        print(json.dumps(report, indent=2, default=float))
    else:
        _print_summary(example, summary, baselines)
    return 0


def _baselines(configs, greedy) -> dict:
    """Greedy's simulated latency and Theorem 4.1's expected latency (layer units), if defined.

    ``configs``: the simulated configurations (one, or one per replayed trace)."""
    out = {"greedy_latency_units": greedy.latency_units, "greedy_latency_s": greedy.latency_s}
    if all(c.schedule == "ppd" and not c.extension for c in configs):
        expected = [c.d * c.ell - (c.d - c.d_bar) * c.matches.mean_matches(c.ell) for c in configs]
        out["closed_form_latency_units"] = sum(expected) / len(expected)
    return out


def _samples(results):
    import pandas as pd

    rows = [(r.latency_units, r.latency_s, r.compute_units, r.n_runs) for r in results]
    return pd.DataFrame(rows, columns=["latency_units", "latency_s", "compute_units", "n_runs"])


def _write_gantt(result, path) -> None:
    import matplotlib.pyplot as plt

    from sim.gantt import plot_gantt

    ax = plot_gantt(result)
    ax.figure.tight_layout()
    fmt = Path(path).suffix[1:].lower() or "png"  # exactly ``path``: no ".png" appended
    try:
        ax.figure.savefig(path, dpi=120, format=fmt)
    finally:
        plt.close(ax.figure)


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
