"""``ppd app``'s page model: the page's inputs as one frozen value, the ``ppd plan`` command they
stand for, and every figure the page shows, computed through that command's own parser, its
own model and hardware builders and ``sim.plan`` (no Streamlit here: ``sim.cli_app_page``
only draws what ``page_view`` returns).

One model of everything: the page never prices anything itself. ``plan_argv`` writes the
``ppd plan`` command of the inputs, ``page_view`` parses it with ``ppd plan``'s parser, builds
the shape, hardware and p-table as ``ppd plan`` does and calls ``sim.plan.plan`` with the
arguments ``ppd plan`` passes; the decision text is ``sim.plan_summary.summary_lines``; the
speed-up against p is the PPD row's own linear law (``latency_per_p_s``, as
``sim.plan_summary.break_even_against``); the waterfall is ``ppdmodel.latency_waterfall`` of
the same row's ``sim.hardware_costs.decode_costs``; the regimes are ``sim.engine.regime_table``;
the preset evidence is ``sim.preset_error``'s. The page leaves the frontier's simulation out
(``--confirm-n 0``) and may draw fewer intervals than ``ppd plan``'s default
(``--draws``): both are in the command it shows.

Bad input raises ``InputError`` naming the page's field; every other failure is the
planner's ValueError, which names its parameter.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel.cli import Parser
from ppdmodel.cli_costs import WATERFALL_LABELS
from ppdmodel.waterfall import latency_waterfall
from sim import cli_plan, cli_plan_run
from sim.cli_plan_table import depth_note, read_ptable, settle_command
from sim.cli_settings import ENGINE_OVERRIDES, PlanSettings
from sim.engine import regime_table
from sim.hardware_costs import decode_costs
from sim.plan import Plan, plan
from sim.plan_grid import PlanSpace
from sim.plan_intervals import against_greedy, rival_of
from sim.plan_summary import summary_lines
from sim.preset_error import evidence_rows, preset_error

PAGE_DRAWS = 12
"""Draws behind each 95 % interval on the page (``ppd plan`` draws ``PLAN_DRAWS``): fewer, so a
widget change re-renders in about a second; the page says so and the command carries it."""
WHAT_IF_KS = (1,)
"""The k of a p set by hand: one p for every d_bar at k = 1 (a larger k at the same p only
costs compute)."""
WHAT_IF_RULE = (
    "p set by hand: that p at every layer from d/2 (PPD's d_bar range, and early "
    "exit's drafts from there) at k = 1, 0 below d/2, treated as this model's own"
)
"""The table a p set by hand stands for, in words (the page shows it)."""
WHAT_IF_WORKLOAD = "what-if"
"""The workload name of a p set by hand."""
P_GRID = np.linspace(0.0, 1.0, 101)
"""The p axis of the speed-up-against-p figure."""
OUT = "ppd-out/plan"
"""The ``--out`` folder the shown command writes to (the page writes nothing there)."""


class InputError(ValueError):
    """A page input the planner cannot use; ``field`` names it as the page labels it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True)
class PageInputs:
    """What the page's widgets set (each default is the page's)."""

    shape: str = "vicuna-13b"
    """Model shape preset (``sim.shape.SHAPE_PRESETS``); unused when ``config`` is given."""
    config: str | None = None
    """A Hugging Face config.json, or a local model folder holding one."""
    gpu: str = "h100-sxm"
    """GPU preset (``sim.hardware.GPU_PRESETS``)."""
    link: str = "nvlink4"
    """Link preset between devices."""
    devices: int = 8
    """Devices available."""
    engine: str | None = None
    """Engine preset (``sim.hardware.ENGINE_PRESETS``); None: the ideal engine (roofline)."""
    host_us: float | None = None
    """Your host us per token (None: the preset's)."""
    host_us_per_layer: float | None = None
    """Your host us per layer (with an engine; None: the preset's)."""
    launch_us: float | None = None
    """Your host us per extra kernel launch (with an engine)."""
    message_us: float | None = None
    """Your fixed us of one PPD message (with an engine)."""
    table: str = "paper"
    """p-table: a built-in name, a CSV/Parquet file, or a match-rate / validate folder."""
    table_d: int | None = None
    """Layers of the model a p-table file was measured on (None: the file's ``d`` column)."""
    p: float | None = None
    """One p set by hand (``WHAT_IF_KS``), instead of ``table``."""
    workload: str | None = None
    """The workload planned (None: every workload of the table)."""
    heads: tuple[str, ...] | None = None
    """Head kinds (None: every head of the table)."""
    min_quality: float = 1.0
    """Lowest quality against greedy's output a recommendation may have."""
    draws: int = PAGE_DRAWS
    """Draws behind each interval."""
    context_len: int = 1024
    """Tokens in the KV cache."""


def what_if_table(inputs: PageInputs, d: int, model: str, folder: Path) -> Path:
    """Write the p-table of a p set by hand (``WHAT_IF_RULE``, for a d-layer model named
    ``model``) under ``folder``; its path."""
    heads = inputs.heads or ("shared",)
    rows = [(WHAT_IF_WORKLOAD, h, layer, k, inputs.p if 2 * layer >= d else 0.0, d, model)
            for h in heads for layer in range(1, d + 1) for k in WHAT_IF_KS]  # fmt: skip
    table = pd.DataFrame(rows, columns=["workload", "head", "layer", "k", "p_correct", "d",
                                        "model"])  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"p-what-if-{inputs.p:.4f}-d{d}.csv"
    table.to_csv(path, index=False)
    return path


def plan_argv(inputs: PageInputs, table: str | None = None) -> list[str]:
    """The ``ppd plan`` arguments of ``inputs`` (``table``: the p-table path to give instead of
    ``inputs.table``, as for a p set by hand)."""
    argv = ["--config", inputs.config] if inputs.config else ["--shape", inputs.shape]
    argv += ["--gpu", inputs.gpu, "--link", inputs.link, "--devices", str(inputs.devices)]
    if inputs.engine:
        argv += ["--engine", inputs.engine]
    for name in ENGINE_OVERRIDES:
        value = getattr(inputs, name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", f"{value:g}"]
    argv += ["--table", table or inputs.table]
    if inputs.table_d is not None:
        argv += ["--table-d", str(inputs.table_d)]
    if inputs.workload:
        argv += ["--workload", inputs.workload]
    if inputs.heads:
        argv += ["--head", *inputs.heads]
    argv += ["--min-quality", f"{inputs.min_quality:g}", "--draws", str(inputs.draws),
             "--confirm-n", "0", "--context-len", str(inputs.context_len),
             "--out", OUT]  # fmt: skip
    return argv


def command_line(argv: list[str], shown: dict[str, str] | None = None) -> str:
    """``ppd plan ...`` ready to copy; ``shown`` replaces paths (an upload's saved copy) by the
    names the user knows them by."""
    shown = shown or {}
    return shlex.join(["ppd", "plan", *(shown.get(a, a) for a in argv)])


class _Refusing(Parser):
    """``ppd plan``'s parser, raising ValueError where the command line would exit."""

    def error(self, message: str):
        raise ValueError(message)


def parse_plan_args(argv: list[str]):
    """``argv`` parsed by ``ppd plan``'s own parser (``sim.cli_plan.register``)."""
    parser = _Refusing(prog="ppd")
    cli_plan.register(parser.add_subparsers(dest="command", parser_class=_Refusing))
    return parser.parse_args(["plan", *argv])


@dataclass(frozen=True)
class PageView:
    """Everything the page shows for one ``PageInputs``."""

    inputs: PageInputs
    argv: list[str]
    """The ``ppd plan`` arguments the figures come from."""
    plan: Plan
    summary: list[str]
    """``sim.plan_summary.summary_lines``, as ``ppd plan`` prints them."""
    sources: list[tuple[str, str]]
    """(source, what it rests on), as ``ppd plan`` prints them under 'what it rests on': each
    source of the intervals, then each head the decisions need."""
    settle: dict[str, str]
    """Per workload, the command that settles an open call ("" where clear)."""
    pareto: pd.DataFrame
    """Every method's frontier: speed-up and compute ratio against greedy on one device."""
    p_curve: pd.DataFrame
    """Per workload: PPD's speed-up at each p of ``P_GRID`` and its best alternative's."""
    waterfall: pd.DataFrame
    """Per workload: the decision's PPD configuration's seconds per token, term by term."""
    regimes: pd.DataFrame
    """``sim.engine.regime_table`` (rows only for an engine preset)."""
    evidence: pd.DataFrame
    """The published rows behind the engine preset's error."""
    preset: str
    """The preset's error in one phrase (``PresetError.describe``)."""
    d: int
    """Layers of the planned model."""
    notes: list[str] = field(default_factory=list)


def page_view(inputs: PageInputs, folder: Path) -> PageView:
    """Plan ``inputs`` as ``ppd plan`` would (module docstring); ``folder``: where a p set by
    hand is written as a table. InputError names the page's field a bad input came from."""
    argv = plan_argv(inputs)
    settings = _settings(argv)
    shape, model_name = _stage("model", cli_plan_run.model_shape, settings)
    d = shape.num_layers
    model = cli_plan_run.planned_model(settings.model, model_name)
    if inputs.p is not None:
        argv = plan_argv(inputs, str(what_if_table(inputs, d, model, folder)))
        settings = _settings(argv)
    hw, space_s, confirm = settings.hardware, settings.space, settings.confirmation
    hardware = _stage("hardware", cli_plan_run.plan_hardware, hw, shape)
    ptable = _stage("p-table", read_ptable, settings, model_name, d)
    workloads = space_s.workload[:1] if space_s.workload else None
    if workloads and workloads[0] not in ptable.workloads:
        raise InputError("workload", f"{workloads[0]!r} is not in p-table '{ptable.name}' "
                         f"(it has {list(ptable.workloads)})")  # fmt: skip
    space = PlanSpace(max_devices=hw.devices, heads=space_s.head, workloads=workloads,
                      early_heads=space_s.early_head, ell=confirm.ell)  # fmt: skip
    result = _stage("plan", plan, hardware, ptable, space, d=d, confirm_n=confirm.confirm_n,
                    max_compute=space_s.max_compute, seed=confirm.seed, keep_screened=True,
                    min_quality=space_s.min_quality,
                    draws=confirm.draws, model=model,
                    engines=[hw.engine] * len(hardware))  # fmt: skip
    screened = against_greedy(result.screened, result.screened)
    settle = {w: settle_command(settings, v, ptable, result.decisions.get(w))
              for w, v in result.verdicts.items()}  # fmt: skip
    heads = sorted({dec.head for dec in result.decisions.values() if dec.head})
    return PageView(
        inputs=inputs, argv=argv, plan=result, summary=summary_lines(result),
        sources=[*result.uncertainty.notes.items(), *(("head", h) for h in heads)],
        settle=settle, pareto=pareto_points(result),
        p_curve=p_curve(result, screened, space_s.max_compute, space_s.min_quality),
        waterfall=waterfall_terms(result, screened, hardware, d, space.ell),
        regimes=regime_table(hardware), evidence=evidence_rows(hw.engine, hardware[0].gpu.name),
        preset=preset_error(hw.engine, hardware[0].gpu.name).describe(), d=d,
        notes=[n for n in (depth_note(ptable, shape),) if n],
    )  # fmt: skip


FIELDS = {"--config": "model config.json", "--shape": "model shape", "--gpu": "GPU",
          "--link": "link", "--devices": "devices", "--engine": "engine",
          "--table": "p-table", "--table-d": "p-table layers", "--head": "head kinds",
          "--min-quality": "minimum quality", "--draws": "draws"}  # fmt: skip
"""The page's name of each ``ppd plan`` option it sets."""
STAGES = {"model": "model config.json", "hardware": "GPU and engine", "p-table": "p-table",
          "plan": "plan"}  # fmt: skip
"""The page's field behind each step of ``page_view``."""


def _settings(argv: list[str]) -> PlanSettings:
    """``argv`` parsed by ``ppd plan``'s parser, as ``ppd plan``'s settings (a refused
    combination of hardware options names the page's GPU and engine)."""
    return _stage("hardware", PlanSettings.from_args, _parse(argv))


def _parse(argv: list[str]):
    try:
        return parse_plan_args(argv)
    except ValueError as exc:
        words = str(exc)
        flag = next((f for f in sorted(FIELDS, key=len, reverse=True)
                     if f"argument {f}" in words or f"{f}:" in words), None)  # fmt: skip
        raise InputError(FIELDS.get(flag, "inputs"), words) from None


def _stage(stage: str, function, *args, **kwargs):
    """``function(*args, **kwargs)``, its ValueError or OSError as an InputError naming the
    page's field (``STAGES``)."""
    try:
        return function(*args, **kwargs)
    except InputError:
        raise
    except (ValueError, OSError, KeyError) as exc:
        raise InputError(STAGES[stage], str(exc).strip("'\"") or type(exc).__name__) from None


def pareto_points(result: Plan) -> pd.DataFrame:
    """Every method's frontier points: speed-up (with its interval) against compute ratio."""
    columns = ["workload", "method", "config", "compute_ratio", "speedup", "speedup_low",
               "speedup_high", "pareto", "recommended"]  # fmt: skip
    front = result.frontier
    return front[[c for c in columns if c in front]].reset_index(drop=True)


def p_curve(result: Plan, screened: pd.DataFrame, max_compute=None,
            min_quality: float = 1.0) -> pd.DataFrame:  # fmt: skip
    """Per workload: the decision's PPD configuration's speed-up at each p of ``P_GRID`` (its
    latency is linear in p: ``latency_per_p_s``) and that of the best other method on its
    devices, which it beats above the decision's break-even p."""
    out = []
    for workload, dec in result.decisions.items():
        if dec.ppd_row is None:
            continue
        row = screened.loc[dec.ppd_row]
        base = float(row.latency_s) * float(row.speedup)  # greedy on one device
        at_zero = float(row.latency_s) - float(row.latency_per_p_s) * float(row.p)
        latency = at_zero + float(row.latency_per_p_s) * P_GRID
        rival = rival_of(row, screened, max_compute, min_quality)
        rival_s = np.nan if rival is None else float(rival.latency_s)
        out.append(pd.DataFrame({"workload": workload, "p": P_GRID, "ppd_speedup": base / latency,
                                 "alternative_speedup": base / rival_s,
                                 "break_even_p": dec.break_even_p, "assumed_p": dec.assumed_p,
                                 "p_low": dec.p_range[0], "p_high": dec.p_range[1]}))  # fmt: skip
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def waterfall_terms(result: Plan, screened: pd.DataFrame, hardware, d: int,
                    ell: int) -> pd.DataFrame:  # fmt: skip
    """Per workload: the decision's PPD configuration's seconds per token from Theorem 4.1's
    ideal to the prediction, term by term (``ppdmodel.latency_waterfall`` of its costs), with
    greedy's beside it."""
    out = []
    for workload, dec in result.decisions.items():
        if dec.ppd_row is None:
            continue
        row = screened.loc[dec.ppd_row]
        shared = int(row.tp_candidates) == 0
        costs = decode_costs(hardware[int(row.hardware)], d_bar=int(row.d_bar), k=int(row.k),
                             early_head=row.early_head, head=row.head_kind,
                             tp_main=int(row.tp_main),
                             tp_candidates=None if shared else int(row.tp_candidates))  # fmt: skip
        split = latency_waterfall(d=d, d_bar=int(row.d_bar), p=float(row.p), k=int(row.k),
                                  costs=costs, early_head=row.early_head, ell=ell)  # fmt: skip
        terms = {**split.terms()}
        top = np.cumsum(list(terms.values()))
        out.append(pd.DataFrame({
            "workload": workload, "term": list(terms),
            "label": [WATERFALL_LABELS[t] for t in terms], "seconds": list(terms.values()),
            "start": top - np.array(list(terms.values())), "end": top,
            "total_s": float(split.total_s), "greedy_s": float(split.greedy_s),
            "config": dec.ppd, "plan_latency_s": float(row.latency_s),
        }))  # fmt: skip
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
