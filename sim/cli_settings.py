"""The settings of ``ppd simulate`` and ``ppd plan``, declared once (``ppdmodel.options``): one
frozen value per concern, and one value per command holding them (``ppdmodel.options.Command``).

Each field carries its default, help and check; the commands derive their options from them,
grouped in ``--help`` by concern, and build the value from the parsed options. The paper's
symbols (--d, --d-bar, --k, --p, --ell) and --json/--out are ``ppdmodel.cli_settings``' fields
(``ppdmodel.options.like``: their type and check from there, this command's default and help).
Torch-free, so ``ppd --help`` builds them with the core install alone. Their refusals name the
options as the command line gives them (``--host-us require --engine NAME``), so, like the
other ``cli`` modules, they are checked by tests/test_cli_errors.py rather than by the API fuzz.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppdmodel import cli_costs
from ppdmodel.cli_args import (
    DEFAULT_D,
    existing_file,
    existing_path,
    nonnegative_float,
    nonnegative_int,
    output_file,
    positive_float,
    positive_int,
    probability,
)
from ppdmodel.cli_settings import DEFAULT_ELL, ModelParameters, OutputSettings
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS
from ppdmodel.options import Command, Settings, flag_of, like, option, part
from sim.hardware import ENGINE_PRESETS

# -- shared by both commands --------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SequenceSettings(Settings):
    """The simulated sequences: their length and the seed of their random draws."""

    GROUP = "sequences"

    ell: int = like(
        ModelParameters, "ell", DEFAULT_ELL,
        help=f"generated tokens per sequence (default {DEFAULT_ELL})",
    )  # fmt: skip
    seed: int = option(0, type=nonnegative_int, help="random seed (default 0)")


@dataclass(frozen=True, kw_only=True)
class JsonSettings(Settings):
    """What a command prints: text, or JSON."""

    GROUP = "output"

    json: bool = like(OutputSettings, "json", help="print JSON instead of text")


# -- ppd simulate -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConfigurationSettings(Settings):
    """The PPD configuration simulated (Algorithm 2): layers, early-prediction layer and
    candidates (a trace's own where a --trace is given)."""

    GROUP = "configuration"

    d: int | None = like(ModelParameters, "d", help=f"decoder layers (default {DEFAULT_D})")
    d_bar: int | None = like(
        ModelParameters, "d_bar", help="early-prediction layer (default: smallest layer >= d/2)"
    )
    k: int | None = like(ModelParameters, "k", help="candidates / sub-processes (default 3)")
    allow_below_half: bool = option(False, action="store_true", help="simulate d_bar < d/2")


@dataclass(frozen=True, kw_only=True)
class MatchSettings(Settings):
    """Where the early predictions' matches come from: a Bernoulli p, a trace or p_t."""

    GROUP = "matches"

    p: float | None = like(
        ModelParameters, "p", exclusive="source", help="Bernoulli match rate (default 0.5)"
    )
    trace: str | None = option(
        None, type=existing_file, exclusive="source",
        help="match-trace JSONL (sim.formats); replays its sequences with the trace's d, "
        "d_bar and k (select with --d-bar/--k/--trace-head when the file holds several)",
    )  # fmt: skip
    per_position: str | None = option(
        None, type=existing_file, exclusive="source",
        help="text/CSV file of p_t values for t = 2..ell",
    )  # fmt: skip
    trace_head: str | None = option(None, help="with --trace: shared | trained")


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings(Settings):
    """The schedule simulated and the GPUs it runs on."""

    GROUP = "schedule"

    schedule: str = option("ppd", choices=("ppd", "greedy"), help="the schedule (default ppd)")
    gpus: int | None = option(None, type=positive_int, help="modelled GPUs, 1..k+1 (default k+1)")
    per_layer_events: bool = option(False, action="store_true", help="one event per layer")


@dataclass(frozen=True, kw_only=True)
class CostSettings(Settings):
    """What a layer, a token and a hand-off cost: uniform layer units, a roofline of a GPU and
    a model shape, or measured per-layer times; the link between GPUs."""

    GROUP = "cost"

    cost: str = option(
        "uniform", choices=("uniform", "roofline", "measured"), help="cost model (default uniform)"
    )
    gpu_model: str = option("h100-sxm", help="a100-80gb | h100-sxm | h200")
    shape: str = option("vicuna-13b", help="model shape preset (roofline, links)")
    context_len: int | None = option(None, type=positive_int, help="override the shape's context")
    layer_times: str | None = option(
        None, type=existing_file, help="per-layer times CSV (sim.formats), for --cost measured"
    )
    flops_efficiency: float = option(
        0.6, type=positive_float, help="fraction of peak FLOP/s reached (default 0.6)"
    )
    bandwidth_efficiency: float = option(
        0.8, type=positive_float, help="fraction of peak HBM bandwidth reached (default 0.8)"
    )
    link: str | None = option(None, help="nvlink4 | pcie4-x16 | pcie5-x16 | loopback")
    per_token_overhead: float = option(0.0, type=nonnegative_float, help="seconds per token")
    per_handoff_overhead: float = option(0.0, type=nonnegative_float, help="seconds per hand-off")

    def check(self) -> None:
        if self.cost == "measured" and not self.layer_times:
            raise ValueError("--layer-times is required with --cost measured")


@dataclass(frozen=True, kw_only=True)
class MonteCarloSettings(SequenceSettings):
    """The simulated sequences and how many the Monte Carlo draws."""

    n: int = option(1, type=positive_int, help="Monte Carlo sequences (default 1)")


@dataclass(frozen=True, kw_only=True)
class SimulateOutputSettings(JsonSettings):
    """What ``ppd simulate`` writes besides its summary."""

    events_csv: str | None = option(
        None, type=output_file, help="write the first sequence's event log here"
    )
    gantt: str | None = option(
        None, type=output_file, help="write a Gantt PNG of the first sequence here"
    )


# -- ppd plan -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlanModelSettings(Settings):
    """The model planned: a shape preset, a Hugging Face config.json, or the profiled one."""

    GROUP = "model"

    shape: str | None = option(
        None, exclusive="model", help="model shape preset (default vicuna-13b)"
    )
    config: str | None = option(
        None, type=existing_path, exclusive="model",
        help="a Hugging Face config.json (or its directory)",
    )  # fmt: skip
    context_len: int | None = option(
        None, type=positive_int, help="tokens in the KV cache (default 1024, or the profile's)"
    )


PRESET_OPTIONS = ("engine", "host_us", "host_us_per_layer", "launch_us", "message_us",
                  "flops_efficiency", "bandwidth_efficiency", "link")  # fmt: skip
"""``ppd plan`` options that price datasheet presets, which a measured --profile does not use."""
ENGINE_OVERRIDES = {"host_us_per_layer": "host_per_layer_s", "launch_us": "launch_s",
                    "message_us": "message_s", "host_us": "host_per_step_s"}  # fmt: skip
"""``ppd plan`` options (microseconds) that replace an engine preset's field (seconds)."""


@dataclass(frozen=True, kw_only=True)
class PlanHardwareSettings(Settings):
    """The hardware planned for: GPU and link presets priced by an engine preset (or the
    ideal engine), or a measured cost profile; the devices available."""

    GROUP = "hardware"

    gpu: tuple[str, ...] | None = option(
        None, nargs="+", exclusive="hardware", help="GPU presets (default h100-sxm)"
    )
    profile: str | None = option(
        None, type=existing_file, exclusive="hardware",
        help="a measured cost profile (ppd measure profile's JSON)",
    )  # fmt: skip
    accept_wide_prices: bool = like(
        cli_costs.CostSettings, "accept_wide_prices",
        help="plan from a --profile whose prices are marked too wide (noted)",
    )  # fmt: skip
    link: tuple[str, ...] | None = option(
        None, nargs="+", help="link presets (with --gpu; default nvlink4)"
    )
    devices: int = option(8, type=positive_int, help="devices available")
    shared_slowdown: float | None = option(
        None, type=positive_float,
        help="slowdown (>= 1) of main and candidates on one GPU (default 2)",
    )  # fmt: skip
    engine: str | None = option(
        None, choices=tuple(sorted(ENGINE_PRESETS)),
        help="execution regime preset (sim/hardware.py cites each number): hf-eager "
        "(Hugging Face eager: Python launches every kernel), torch-compiled "
        "(CUDA graphs: one launch per step); default: an ideal engine (roofline)",
    )  # fmt: skip
    host_us: float | None = option(
        None, type=nonnegative_float,
        help="host us per token outside the layers (default 0, or the engine's)",
    )  # fmt: skip
    host_us_per_layer: float | None = option(
        None, type=nonnegative_float,
        help="host us to issue one layer's kernels (with --engine; yours measured)",
    )  # fmt: skip
    launch_us: float | None = option(
        None, type=nonnegative_float,
        help="host us per extra kernel launch: heads, all-reduces (with --engine)",
    )  # fmt: skip
    message_us: float | None = option(
        None, type=nonnegative_float,
        help="fixed us of one PPD message between processes (with --engine)",
    )  # fmt: skip
    flops_efficiency: float | None = option(
        None, type=probability,
        help="fraction of peak FLOP/s reached (default 0.6, or the engine's)",
    )  # fmt: skip
    bandwidth_efficiency: float | None = option(
        None, type=probability,
        help="fraction of peak HBM bandwidth reached (default 0.8, or the engine's)",
    )  # fmt: skip

    def check(self) -> None:
        """A --profile is measured: the preset options are refused beside it; the engine's
        overrides need --engine; the shared-GPU slowdown is a factor >= 1 of the ideal engine
        or a profile."""
        if self.shared_slowdown is not None and not self.shared_slowdown >= 1:
            raise ValueError(f"--shared-slowdown must be a factor >= 1, got {self.shared_slowdown}")
        if self.profile:
            unused = [flag_of(n) for n in PRESET_OPTIONS if getattr(self, n) not in (None, False)]
            if unused:
                raise ValueError(
                    f"{', '.join(unused)}: a --profile is measured already (its host, launch, "
                    "message and device figures are the profile's); give these with --gpu "
                    "presets instead, or leave them out"
                )
        elif self.engine:
            if self.shared_slowdown is not None:
                raise ValueError("--shared-slowdown: with --engine the slowdown follows the regime")
        else:
            tuned = [flag_of(n) for n in ENGINE_OVERRIDES if getattr(self, n) is not None]
            if tuned:
                raise ValueError(f"{', '.join(tuned)} require --engine NAME")


@dataclass(frozen=True, kw_only=True)
class PTableSettings(Settings):
    """The match rates p the plan reads: a shipped table, a file, or a measured folder."""

    GROUP = "p-table"

    table: str | None = option(
        None,
        help="p-table: 'paper' (Table 2), a shipped atlas ('smollm2'), a CSV/Parquet, "
        "or a ppd measure match-rate / ppd validate output folder (or its "
        "traces.jsonl: p per d_bar, k and head, with its token count) (default: "
        "the profiled model's shipped atlas; without --profile, Table 2)",
    )  # fmt: skip
    allow_other_model_table: bool = option(
        False, action="store_true",
        help="recommend from a p-table measured on another model than the profiled "
        "one (by default refused)",
    )  # fmt: skip
    table_d: int | None = option(
        None, type=positive_int, help="layers of the model a p-table file was measured on"
    )


@dataclass(frozen=True, kw_only=True)
class PlanSpaceSettings(Settings):
    """The configurations screened and the constraints of the recommendation."""

    GROUP = "search"

    workload: tuple[str, ...] | None = option(None, nargs="+", help="workloads (default: all)")
    head: tuple[str, ...] | None = option(None, nargs="+", help="head kinds (default: all)")
    d_bar: tuple[int, ...] | None = like(
        ModelParameters, "d_bar", nargs="+", help="early-prediction layers (default: all)"
    )
    k: tuple[int, ...] | None = like(
        ModelParameters, "k", nargs="+", help="candidates (default: all)"
    )
    early_head: tuple[str, ...] = like(
        cli_costs.CostSettings, "early_head", EARLY_HEAD_PLACEMENTS,
        help="where the early head runs (default: both)",
    )  # fmt: skip
    max_compute: float | None = option(
        None, type=positive_float,
        help="compute budget: busy device-seconds per token, x greedy on one device",
    )  # fmt: skip
    min_quality: float = option(
        1.0, type=probability,
        help="recommend only methods whose quality against greedy's output is at "
        "least this (exact methods 1.0; default 1.0: exact only, FREE shown "
        "but not recommended)",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AlternativesSettings(Settings):
    """The methods screened beside PPD and greedy: early exit, a draft model, FREE."""

    GROUP = "alternatives"

    draft_acceptance: float | None = option(
        None, type=probability,
        help="compare with a separate draft model of this acceptance rate",
    )  # fmt: skip
    draft_cost_ratio: float = option(
        0.05, type=nonnegative_float,
        help="its token time as a fraction of the target's (default 0.05)",
    )  # fmt: skip
    no_alternatives: bool = option(False, action="store_true", help="screen PPD and greedy only")
    free_table: str | None = option(
        None, type=existing_file,
        help="FREE measured per exit layer and threshold (CSV: exit_layer, threshold, "
        "exit_rate, quality; sim/formats.py; ppd validate --free writes "
        "free_table.csv); without it FREE is left out",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ConfirmSettings(SequenceSettings):
    """The sequences behind the plan's figures: the frontier's confirmation by simulation,
    the draws behind each interval, and where they run."""

    GROUP = "sequences and confirmation"

    confirm_n: int = option(
        64, type=nonnegative_int, help="simulated sequences per frontier point (0: skip)"
    )
    draws: int | None = option(
        None, type=nonnegative_int,
        help="draws behind each 95 %% interval (default 100; 0: no intervals)",
    )  # fmt: skip
    executor: str = option("local", help="local | dask | dask://HOST:PORT | ray | ray://HOST:PORT")
    workers: int | None = option(None, type=positive_int, help="local pool size")


@dataclass(frozen=True, kw_only=True)
class PlanOutputSettings(JsonSettings):
    """Where ``ppd plan`` writes its tables and figure, and what it prints."""

    out: str = like(OutputSettings, "out", "ppd-out/plan", help="output directory")
    verbose: bool = option(
        False, action="store_true",
        help="after the summary, print every frontier, the regimes and the speed-up "
        "per device budget (always in the CSV files)",
    )  # fmt: skip


# -- one value per command ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SimulateSettings(Command):
    """``ppd simulate``'s settings."""

    configuration: ConfigurationSettings = part(ConfigurationSettings)
    matches: MatchSettings = part(MatchSettings)
    schedule: ScheduleSettings = part(ScheduleSettings)
    cost: CostSettings = part(CostSettings)
    sequences: MonteCarloSettings = part(MonteCarloSettings)
    output: SimulateOutputSettings = part(SimulateOutputSettings)


@dataclass(frozen=True, kw_only=True)
class PlanSettings(Command):
    """``ppd plan``'s settings."""

    CHANGES = {"confirmation": {"ell": {"help": "tokens per sequence (default 128)"}}}

    model: PlanModelSettings = part(PlanModelSettings)
    hardware: PlanHardwareSettings = part(PlanHardwareSettings)
    table: PTableSettings = part(PTableSettings)
    space: PlanSpaceSettings = part(PlanSpaceSettings)
    alternatives: AlternativesSettings = part(AlternativesSettings)
    confirmation: ConfirmSettings = part(ConfirmSettings)
    output: PlanOutputSettings = part(PlanOutputSettings)


__all__ = [
    "AlternativesSettings",
    "ConfigurationSettings",
    "ConfirmSettings",
    "CostSettings",
    "JsonSettings",
    "MatchSettings",
    "MonteCarloSettings",
    "PTableSettings",
    "PlanHardwareSettings",
    "PlanModelSettings",
    "PlanOutputSettings",
    "PlanSettings",
    "PlanSpaceSettings",
    "ScheduleSettings",
    "SequenceSettings",
    "SimulateOutputSettings",
    "SimulateSettings",
]
