"""``ppd plan``'s workflow: from its settings (``sim.cli_settings.PlanSettings``, one value) to
the model shape, the hardware models, the p-table, ``sim.plan.plan``'s result and the files it
writes (plan.csv, by_devices.csv, regimes.csv, plan.png); ``sim.cli_plan`` prints it. The
what-if page (``sim.cli_app_view``) builds its inputs with the same functions."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

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
from sim.cli_settings import (
    ENGINE_OVERRIDES,
    AlternativesSettings,
    PlanHardwareSettings,
    PlanModelSettings,
    PlanSettings,
)

if TYPE_CHECKING:
    import pandas as pd

    from sim.plan import Plan
    from sim.ptable import PTable


@dataclass(frozen=True)
class PlanRun:
    """What ``plan_workflow`` found and wrote."""

    settings: PlanSettings
    result: Plan
    hardware: list
    """The hardware models planned for (``plan_hardware``)."""
    ptable: PTable
    regimes: pd.DataFrame
    """The regime of each tensor-parallel degree of --engine hardware (``_advise``)."""
    note: str
    """The notes on what the plan assumed, joined."""
    commands: dict[str, str]
    """Per workload, the command that settles its open call ("" where clear)."""
    seconds: float
    """Wall-clock seconds of the search."""

    @property
    def out(self) -> Path:
        return Path(self.settings.output.out)


def plan_workflow(settings: PlanSettings) -> PlanRun:
    """Plan the settings' model on their hardware from their p-table (``sim.plan.plan``);
    writes plan.csv, by_devices.csv, regimes.csv (with --engine) and plan.png under
    ``settings.output.out``."""
    from sim.plan import plan
    from sim.plan_grid import DraftModel, PlanSpace
    from sim.plan_intervals import PLAN_DRAWS
    from sim.sweep import open_executor

    hw, space_s, alt, confirm = (settings.hardware, settings.space, settings.alternatives,
                                 settings.confirmation)  # fmt: skip
    shape, model_name = model_shape(settings)
    hardware = plan_hardware(hw, shape)
    wide = _wide_notes(hw)
    ptable = read_ptable(settings, model_name, shape.num_layers)
    workloads = space_s.workload
    free_table = _free_table(alt, shape.num_layers, workloads or ptable.workloads)
    draft = None
    if alt.draft_acceptance is not None:
        draft = DraftModel(alt.draft_acceptance, alt.draft_cost_ratio)
    space = PlanSpace(
        max_devices=hw.devices, d_bars=space_s.d_bar, ks=space_s.k,
        early_heads=space_s.early_head, heads=space_s.head, workloads=workloads,
        ell=confirm.ell, draft_model=draft, alternatives=not alt.no_alternatives,
        free_table=free_table,
    )  # fmt: skip
    out = Path(settings.output.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open_executor(confirm.executor, confirm.workers) as executor:
        result = plan(hardware, ptable, space, d=shape.num_layers,
                      max_compute=space_s.max_compute, confirm_n=confirm.confirm_n,
                      executor=executor, seed=confirm.seed,
                      out_dir=out / "confirm" if confirm.confirm_n else None,
                      keep_screened=True, min_quality=space_s.min_quality,
                      replicates=replicates_of(settings, hardware),
                      draws=PLAN_DRAWS if confirm.draws is None else confirm.draws,
                      model=planned_model(settings.model, model_name),
                      profile_drift=profile_drift(hw.profile) if hw.profile else None,
                      engines=[hw.engine] * len(hardware))  # fmt: skip
    seconds = time.perf_counter() - started
    regimes = _advise(result, hardware, hw.devices)
    plan_table(result).to_csv(out / "plan.csv", index=False)
    result.by_devices.to_csv(out / "by_devices.csv", index=False)
    if len(regimes):
        regimes.to_csv(out / "regimes.csv", index=False)
    hardware_names = ", ".join(hw.name for hw in hardware)
    model = settings.model
    title = (
        f"{model.config or model.shape or model_name or 'vicuna-13b'} on {hardware_names}; "
        f"p-table {ptable.name}"
    )
    _write_png(result, out / "plan.png", title)
    notes = (depth_note(ptable, shape), _free_note(alt),
             other_model_note(settings, ptable, model_name),
             coverage_note(ptable, result.screened, shape.num_layers),
             sharing_note(hardware, result.screened), *wide)  # fmt: skip
    commands = {w: settle_command(settings, v, ptable, result.decisions.get(w))
                for w, v in result.verdicts.items()}  # fmt: skip
    return PlanRun(settings, result, hardware, ptable, regimes, "; ".join(filter(None, notes)),
                   commands, seconds)  # fmt: skip


def model_shape(settings: PlanSettings):
    """(model shape, profiled model name or ""): --config, --shape, or the profile's model."""
    from sim.hardware_costs import profile_model
    from sim.shape import ModelShape

    model, profile = settings.model, settings.hardware.profile
    if profile and not (model.config or model.shape):
        return profile_model(profile, context_len=model.context_len)
    name = profile_entry(profile).get("name", "") if profile else ""
    context = model.context_len or 1024
    if model.config:
        return ModelShape.from_hf_config(model.config, context_len=context), name
    return ModelShape.from_name(model.shape or "vicuna-13b").with_context(context), name


def plan_hardware(settings: PlanHardwareSettings, shape) -> list:
    """The hardware models of ``ppd plan``'s hardware settings (checked as they were built:
    ``PlanHardwareSettings.check``): a profile's backends, or each --gpu and --link priced by
    --engine (or the ideal engine); shared with the what-if page."""
    from sim.hardware import GPUSpec, Link
    from sim.hardware_costs import SHARED_GPU_SLOWDOWN, RooflineHardware, load_profile

    s = settings
    if s.profile:
        backends = load_profile(s.profile, shape)
        if s.shared_slowdown is not None:
            slowdown = s.shared_slowdown
            backends = [replace(hw, base=replace(hw.base, shared_device_slowdown=slowdown))
                        for hw in backends if hw.layout == "shared"] + [
                        hw for hw in backends if hw.layout != "shared"]  # fmt: skip
        return backends
    if s.engine:
        return _engine_hardware(s, shape)
    slowdown = SHARED_GPU_SLOWDOWN if s.shared_slowdown is None else s.shared_slowdown
    return [
        RooflineHardware(shape, GPUSpec.from_name(gpu), Link.from_name(link),
                         max_tp=s.devices, flops_efficiency=_or(s.flops_efficiency, 0.6),
                         bandwidth_efficiency=_or(s.bandwidth_efficiency, 0.8),
                         shared_device_slowdown=slowdown, host_s=_or(s.host_us, 0.0) * 1e-6)
        for gpu in s.gpu or ["h100-sxm"]
        for link in s.link or ["nvlink4"]
    ]  # fmt: skip


def _or(value, default):
    return default if value is None else value


def _engine_hardware(settings: PlanHardwareSettings, shape) -> list:
    """--engine: one EngineHardware per GPU and link, the preset with the user's numbers."""
    from sim.engine import EngineHardware
    from sim.hardware import Engine, GPUSpec, Link

    s = settings
    overrides = {field: getattr(s, name) * 1e-6 for name, field in ENGINE_OVERRIDES.items()
                 if getattr(s, name) is not None}  # fmt: skip
    engine = Engine.from_name(s.engine).with_overrides(
        flops_efficiency=s.flops_efficiency, bandwidth_efficiency=s.bandwidth_efficiency,
        **overrides)  # fmt: skip
    return [EngineHardware(shape, GPUSpec.from_name(gpu), Link.from_name(link), engine,
                           max_tp=s.devices)
            for gpu in s.gpu or ["h100-sxm"] for link in s.link or ["nvlink4"]]  # fmt: skip


def planned_model(settings: PlanModelSettings, model_name: str) -> str:
    """The name of the model being planned: the profile's, the --config folder's, or the
    --shape preset's (default vicuna-13b)."""
    from sim.ptable import model_key

    if model_name and not (settings.config or settings.shape):
        return model_name
    if settings.config:
        path = Path(settings.config)
        return model_key(path.parent if path.is_file() else path)
    return settings.shape or "vicuna-13b"


def profile_drift(path) -> float | None:
    """The drift log-sd a profile recorded (``machine.applied_log_sd``), None where none."""
    from ppdmodel.cost_profile import read_profile_data

    machine = read_profile_data(path).get("machine")
    value = machine.get("applied_log_sd", machine.get("log_sd")) if isinstance(
        machine, dict) else None  # fmt: skip
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        return None
    return float(value)


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


def _free_table(settings: AlternativesSettings, d: int, workloads):
    """--free-table, read and checked against the model's depth and the plan's workloads (a
    row naming a workload applies to it alone; None without it)."""
    from sim.formats import read_free_table

    path = settings.free_table
    if path is None:
        return None
    table = read_free_table(path)
    if (table.exit_layer >= d).any():
        deepest = int(table.exit_layer.max())
        raise ValueError(f"--free-table {path}: exit_layer {deepest} is not below "
                         f"the model's d = {d}")  # fmt: skip
    named = set(table.workload.astype(str))
    if "" not in named and not named & set(workloads):
        raise ValueError(f"--free-table {path}: its rows name the workloads "
                         f"{sorted(named)}, none of the plan's {list(workloads)}: FREE "
                         "would be left out (a row with no workload applies to all)")  # fmt: skip
    return table


def _wide_notes(settings: PlanHardwareSettings) -> list[str]:
    """A measured --profile with prices marked too wide: refused (ValueError naming the price)
    unless --accept-wide-prices, then one note per price (``check_wide_prices``)."""
    from ppdmodel.cost_profile import (
        PROFILE_FORMAT,
        check_wide_prices,
        parse_cost_profile,
        read_profile_data,
    )

    if not settings.profile:
        return []
    data = read_profile_data(settings.profile)
    if data.get("format") != PROFILE_FORMAT:
        return []
    notes = check_wide_prices(parse_cost_profile(data), accept=settings.accept_wide_prices)
    return [n.removeprefix("note: ") for n in notes]


def _free_note(settings: AlternativesSettings) -> str:
    if settings.free_table is None and not settings.no_alternatives:
        return ("FREE (approximate early exit) left out: give --free-table FILE with its exit "
                "rate and quality per threshold, as ppd validate --free measures them")  # fmt: skip
    return ""


def _write_png(result, path, title: str) -> None:
    import matplotlib.pyplot as plt

    from sim.plan_plot import plot_plan

    fig = plot_plan(result, result.screened, title=title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
