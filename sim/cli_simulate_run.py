"""``ppd simulate``'s workflow: from its settings (``sim.cli_settings.SimulateSettings``, one
value) to the match sources, the cost model, the simulated sequences and the files it writes
(the event log, the Gantt chart); ``sim.cli`` prints it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ppdmodel.cli_args import DEFAULT_D, default_d_bar, reading
from sim.cli_settings import ConfigurationSettings, CostSettings, MatchSettings, SimulateSettings


@dataclass(frozen=True)
class SimulateRun:
    """What ``simulate_run`` found."""

    config: object
    """The first simulated ``SimConfig`` (one, or the first of the replayed traces)."""
    example: object
    """The first sequence's ``SimResult``, with its events (``--gantt``, ``--events-csv``)."""
    summary: object
    """The ``MonteCarloSummary`` of every sequence."""
    baselines: dict
    """Greedy's latency and Theorem 4.1's (``_baselines``)."""

    def report(self) -> dict:
        """The ``--json`` report."""
        return {
            "config": self.config.to_dict(),
            "first": self.example.summary(),
            "monte_carlo": self.summary.to_dict(),
            **self.baselines,
        }


def simulate_run(settings: SimulateSettings) -> SimulateRun:
    """Simulate the settings' configuration: the Monte Carlo of its sequences (one run per
    sequence of a --trace), its first sequence with events, greedy's; writes the first
    sequence's event log and Gantt chart where the output settings ask for them."""
    from dataclasses import replace

    from sim.config import SimConfig
    from sim.hardware import Link
    from sim.run import monte_carlo, sequence_seed, simulate, summarise

    cost, schedule, seq = settings.cost, settings.schedule, settings.sequences
    sources, d, d_bar, k = _match_sources(settings.configuration, settings.matches)
    common = dict(
        d=d,
        d_bar=d_bar,
        k=k,
        cost=_cost(cost),
        n_gpus=schedule.gpus,
        link=None if cost.link is None else Link.from_name(cost.link),
        shape=_shape(cost) if cost.link or cost.cost == "roofline" else None,
        per_token_overhead_s=cost.per_token_overhead,
        per_handoff_overhead_s=cost.per_handoff_overhead,
        schedule=schedule.schedule,
        allow_below_half=settings.configuration.allow_below_half,
        per_layer_events=schedule.per_layer_events,
    )
    if settings.matches.trace:  # one run per recorded sequence, ell from each trace
        configs = [SimConfig(ell=s.ell, matches=s, **common) for s in sources]
        results = [simulate(c, record_events=False) for c in configs]
        summary = summarise(_samples(results))
        first, first_seed = configs[0], None
    else:
        first = SimConfig(ell=seq.ell, matches=sources[0], **common)
        configs = [first]
        summary = monte_carlo(first, n=seq.n, seed=seq.seed)
        first_seed = sequence_seed(seq.seed, 0)  # the Monte Carlo's own first sequence
    example = simulate(first, seed=first_seed)
    greedy = simulate(replace(first, schedule="greedy", n_gpus=1), record_events=False)
    if settings.output.events_csv:
        example.events.to_csv(settings.output.events_csv, index=False)
    if settings.output.gantt:
        _write_gantt(example, settings.output.gantt)
    return SimulateRun(first, example, summary, _baselines(configs, greedy))


def _cost(settings: CostSettings):
    from sim.cost import MeasuredCost, RooflineCost, UniformCost
    from sim.hardware import GPUSpec

    if settings.cost == "uniform":
        return UniformCost()
    if settings.cost == "roofline":
        return RooflineCost(
            _shape(settings),
            GPUSpec.from_name(settings.gpu_model),
            settings.flops_efficiency,
            settings.bandwidth_efficiency,
        )
    with reading("--layer-times", settings.layer_times):
        return MeasuredCost.from_csv(settings.layer_times)


def _shape(settings: CostSettings):
    from sim.shape import ModelShape

    shape = ModelShape.from_name(settings.shape)
    return shape if settings.context_len is None else shape.with_context(settings.context_len)


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


def _match_sources(config: ConfigurationSettings, matches: MatchSettings):
    """(match sources, d, d_bar, k): a trace's own shape, or the options' with their defaults."""

    from sim.formats import read_traces
    from sim.matches import Bernoulli, PerPosition, Replay

    if matches.trace:
        with reading("--trace", matches.trace):
            traces = read_traces(matches.trace)
        if not traces:
            raise ValueError(f"--trace {matches.trace}: no sequences")
        traces = select_traces(
            traces, d=config.d, d_bar=config.d_bar, k=config.k, head=matches.trace_head
        )
        first = traces[0]
        return [Replay.from_trace(trace) for trace in traces], first.d, first.d_bar, first.k
    d = DEFAULT_D if config.d is None else config.d
    d_bar = default_d_bar(d) if config.d_bar is None else config.d_bar
    k = DEFAULT_K if config.k is None else config.k
    if 2 * d_bar < d and not config.allow_below_half:
        raise ValueError(
            f"--d-bar {d_bar} is below d/2 = {d / 2:g}: outside Algorithm 2 and Theorem 4.1; "
            "add --allow-below-half to simulate it as an extension"
        )
    if matches.per_position:
        return [PerPosition(_read_p_t(matches.per_position))], d, d_bar, k
    return [Bernoulli(0.5 if matches.p is None else matches.p)], d, d_bar, k


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
