"""What a plan's answer rests on, and the draws that carry each source into its intervals.

A planned latency is a point of a model whose inputs are estimates. ``Uncertainty`` names
each source and draws it (draw i re-prices every hardware model and the p-table, and the
planner re-screens the rows in question, ``sim.plan_intervals``):

* ``engine``: a datasheet hardware model priced by an engine preset (or the ideal engine) is
  off by the preset's measured error (``sim.preset_error``): per draw, three lognormal factors
  of that log-sd scale the device's speed (bandwidth and FLOP/s), the host's time (per layer,
  per launch, per step) and communication (all-reduces, messages, the link), so that a greedy
  token is off by about the preset's error in whichever regime bounds it, and methods that
  lean on different terms move apart;
* ``p``: the p-table's sampling error where it is this model's, the bracket of every layer
  nobody measured, and, where it is another model's (or either model is unnamed), the prior
  range of the reference tables (``sim.ptable.PTable.p_draws``);
* ``profile``: a measured profile's bootstrap replicates (its sampling error and the drift its
  windows recorded, common to its backends); a profile without them gets ``MISSING_LOG_SD``;
* ``drift``: the machine's drift between two figures timed at different moments: each backend
  of a profile (timed minutes apart) gets its own factor exp(N(0, sd)), sd the profile's
  ``applied_log_sd`` or ``DEFAULT_DRIFT_LOG_SD`` where it recorded none.

A source that is missing widens an interval (a stated default), never narrows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ppdmodel.costs import SECONDS_FIELDS, DecodeCosts
from ppdmodel.intervals import MISSING_LOG_SD
from ppdmodel.validation import as_int, as_real, check_columns, check_instance, check_names
from sim.engine import EngineHardware
from sim.hardware import ENGINE_PRESETS
from sim.hardware_costs import HardwareModel, ProfileHardware, RooflineHardware
from sim.preset_error import PresetError, preset_error
from sim.ptable import PTable, p_origin

SOURCES = ("engine", "p", "profile", "drift")
"""The sources of a plan's uncertainty, in the order the output names them."""
DEFAULT_DRIFT_LOG_SD = 0.10
"""Log-sd of the machine's drift over minutes where a profile recorded none: the project's
2-vCPU VM's, ``experiments/machine_drift.py`` (80 s windows; ``measure.profile.drift``)."""


def perturbed(hw, device: float = 1.0, host: float = 1.0, comm: float = 1.0):
    """``hw`` with its device work ``device`` times as long, its host time ``host`` times and
    its communication ``comm`` times (datasheet models; a profile: every figure by ``device``)."""
    check_instance("hw", hw, (ProfileHardware, EngineHardware, RooflineHardware))
    device, host, comm = (as_real(n, v, strict=True, maximum=1e6) for n, v in
                          (("device", device), ("host", host), ("comm", comm)))  # fmt: skip
    if isinstance(hw, ProfileHardware):
        return scaled_profile(hw, device)
    gpu = replace(hw.gpu, peak_flops_bf16=hw.gpu.peak_flops_bf16 / device,
                  hbm_bytes_per_s=hw.gpu.hbm_bytes_per_s / device)  # fmt: skip
    link = replace(hw.link, latency_s=hw.link.latency_s * comm,
                   bandwidth_bytes_per_s=hw.link.bandwidth_bytes_per_s / comm)  # fmt: skip
    if isinstance(hw, EngineHardware):
        e = hw.engine
        engine = replace(e, host_per_layer_s=e.host_per_layer_s * host, launch_s=e.launch_s * host,
                         host_per_step_s=e.host_per_step_s * host,
                         allreduce_s=e.allreduce_s * comm,
                         allreduce_per_device_s=e.allreduce_per_device_s * comm,
                         message_s=e.message_s * comm)  # fmt: skip
        return replace(hw, gpu=gpu, link=link, engine=engine)
    return replace(hw, gpu=gpu, link=link, host_s=hw.host_s * host)


def scaled_profile(hw: ProfileHardware, factor: float) -> ProfileHardware:
    """A profile backend with every timed figure ``factor`` times as long (its sharing
    factors, ratios, unchanged)."""
    check_instance("hw", hw, ProfileHardware)
    factor = as_real("factor", factor, strict=True, maximum=1e6)
    base = hw.base
    values = {name: getattr(base, name) * factor for name in SECONDS_FIELDS}
    by_k = tuple((k, s * factor) for k, s in base.candidate_layer_s_by_k)
    costs: DecodeCosts = replace(base, candidate_layer_s_by_k=by_k, **values)
    steps = {key: value * factor for key, value in hw.per_candidate_layer_s.items()}
    return replace(hw, base=costs, per_candidate_layer_s=steps)


@dataclass(frozen=True)
class Uncertainty:
    """The sources behind a plan's intervals (module docstring) and their draws."""

    hardware: tuple
    """The hardware models of the plan."""
    ptable: PTable
    model: str | None = None
    """The planned model's name (None or "": unnamed, so the p-table counts as borrowed)."""
    replicates: tuple = ()
    """Per hardware model, its profile's bootstrap replicates (() where none)."""
    engine_errors: tuple = ()
    """Per hardware model, its ``PresetError`` (None for a profile backend)."""
    drift_log_sd: tuple = ()
    """Per hardware model, the log-sd of its drift against the others (0: none)."""
    notes: dict = field(default_factory=dict)
    """Per source, what it rests on, in words."""
    _bounds: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_instance("hardware", self.hardware, tuple)
        check_instance("ptable", self.ptable, PTable)
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError(f"model must be a model name or None, got {self.model!r:.60}")
        n = len(self.hardware)
        for name in ("replicates", "engine_errors", "drift_log_sd"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or len(value) != n:
                raise ValueError(f"{name} must be a tuple of one entry per hardware model ({n}), "
                                 f"got {value!r:.60}")  # fmt: skip
        for i, hw in enumerate(self.hardware):
            check_instance(f"hardware[{i}]", hw, HardwareModel)
            if self.engine_errors[i] is not None:
                check_instance(f"engine_errors[{i}]", self.engine_errors[i], PresetError)
            as_real(f"drift_log_sd[{i}]", self.drift_log_sd[i], maximum=1.0)
            check_instance(f"replicates[{i}]", self.replicates[i], tuple)
        check_instance("notes", self.notes, dict)

    @classmethod
    def of(cls, hardware, ptable: PTable, *, model: str | None = None, replicates=None,
           profile_drift: float | None = None, engines=None) -> Uncertainty:  # fmt: skip
        """The sources of a plan on ``hardware`` with ``ptable``. ``replicates``: per hardware
        model its replicates (``sim.plan_intervals.profile_replicates``); ``profile_drift``:
        the profile's recorded drift log-sd (None: none recorded); ``engines``: per hardware
        model the engine preset name it was priced with (None: the ideal engine; default:
        each ``EngineHardware``'s own engine name, the ideal engine otherwise)."""
        check_instance("hardware", hardware, (list, tuple))
        check_instance("ptable", ptable, PTable)
        hardware = tuple(hardware)
        if replicates is not None:
            check_instance("replicates", replicates, (list, tuple))
            for i, reps in enumerate(replicates):
                check_instance(f"replicates[{i}]", reps, (list, tuple))
        if profile_drift is not None:
            profile_drift = as_real("profile_drift", profile_drift, maximum=1.0)
        reps = tuple(tuple(r) for r in (replicates or [[] for _ in hardware]))
        if len(reps) != len(hardware):
            raise ValueError(f"replicates must give one list per hardware model "
                             f"({len(hardware)}), got {len(reps)}")  # fmt: skip
        if engines is None:
            engines = [hw.engine.name if isinstance(hw, EngineHardware) else None
                       for hw in hardware]  # fmt: skip
        if isinstance(engines, str) or not isinstance(engines, list | tuple) or len(
                engines) != len(hardware) or not all(e is None or isinstance(e, str)
                                                     for e in engines):  # fmt: skip
            raise ValueError(f"engines must give one engine preset name (or None) per hardware "
                             f"model ({len(hardware)}), got {engines!r:.60}")  # fmt: skip
        for i, hw in enumerate(hardware):
            check_instance(f"hardware[{i}]", hw, HardwareModel)
        errors, drifts = [], []
        profiled = [hw for hw in hardware if isinstance(hw, ProfileHardware)]
        for hw, engine in zip(hardware, engines, strict=True):
            if isinstance(hw, ProfileHardware):
                errors.append(None)
                sd = DEFAULT_DRIFT_LOG_SD if profile_drift is None else float(profile_drift)
                drifts.append(sd if len(profiled) > 1 else 0.0)
            else:
                known = engine if engine in ENGINE_PRESETS else None
                errors.append(preset_error(known, hw.gpu.name))
                drifts.append(0.0)
        notes = _notes(hardware, ptable, model, reps, errors, drifts, profile_drift)
        return cls(hardware, ptable, model, reps, tuple(errors), tuple(drifts), notes)

    @property
    def origin(self) -> str:
        """Whose p the table holds (``sim.ptable.p_origin``)."""
        return p_origin(self.ptable, self.model)

    @property
    def borrowed(self) -> bool:
        """True when p is not this model's own measurement."""
        return self.origin != "own"

    def active(self) -> tuple[str, ...]:
        """The sources that spread something in this plan."""
        out = []
        if any(e is not None and e.log_sd > 0 for e in self.engine_errors):
            out.append("engine")
        out.append("p")  # every table has a bracket, a prior or n; p_draws says if not
        if any(isinstance(hw, ProfileHardware) for hw in self.hardware):
            out.append("profile")
        if any(sd > 0 for sd in self.drift_log_sd):
            out.append("drift")
        return tuple(out)

    def hardware_draws(self, draws: int, sources=SOURCES, *, seed: int = 0) -> list[list]:
        """Per draw, the hardware models with the hardware ``sources`` drawn."""
        draws = as_int("draws", draws, minimum=0, limit=100_000)
        seed = as_int("seed", seed, minimum=0)
        if isinstance(sources, str) or not isinstance(sources, list | tuple) or not all(
                isinstance(x, str) and x in SOURCES for x in sources):  # fmt: skip
            raise ValueError(f"sources must name some of {SOURCES}, got {sources!r:.60}")
        rng = np.random.default_rng([seed, 0x5EED])
        out = []
        for i in range(draws):
            row = []
            for j, hw in enumerate(self.hardware):
                drawn = hw
                reps = self.replicates[j] if j < len(self.replicates) else ()
                engine, drift = self.engine_errors[j], self.drift_log_sd[j]
                noise = rng.standard_normal(4)  # drawn whatever is active: draws stay paired
                if "profile" in sources and isinstance(hw, ProfileHardware):
                    drawn = reps[i % len(reps)] if reps else scaled_profile(
                        hw, float(np.exp(MISSING_LOG_SD * noise[3])))  # fmt: skip
                if "engine" in sources and engine is not None and engine.log_sd > 0:
                    f = np.exp(engine.log_sd * noise[:3])
                    drawn = perturbed(drawn, float(f[0]), float(f[1]), float(f[2]))
                if "drift" in sources and drift > 0:
                    drawn = scaled_profile(drawn, float(np.exp(drift * noise[0])))
                row.append(drawn)
            out.append(row)
        return out

    def p_draws(self, d: int, workloads, heads, draws: int, *, seed: int = 0):
        """[draws, w, h, layer, k] draws of p (``PTable.p_draws``), or None when p spreads
        nothing."""
        d = as_int("d", d, minimum=2, limit=10**5)
        workloads, heads = check_names("workloads", workloads), check_names("heads", heads)
        key = (d, workloads, heads)
        if key not in self._bounds:
            self._bounds[key] = self.ptable.bounds(d, workloads, heads, borrowed=self.borrowed)
        return self.ptable.p_draws(d, workloads, heads, draws=draws, seed=seed,
                                   borrowed=self.borrowed, bounds=self._bounds[key])  # fmt: skip

    def columns(self, frame, d: int):
        """``frame`` (planner rows) with what each row's interval rests on: ``interval_sources``
        (the sources drawn, joined by +), ``engine_log_sd`` and ``drift_log_sd`` of its hardware,
        ``p_origin`` and, for the methods that rest on p, ``p_bound_low``/``p_bound_high`` (the
        range its draws of p spanned)."""
        check_columns("frame", frame, ("hardware", "method", "workload", "head_kind", "d_bar",
                                       "k", "exit_layer"))  # fmt: skip
        d = as_int("d", d, minimum=2, limit=10**5)
        hw = frame["hardware"].to_numpy()
        if hw.dtype.kind not in "iu" or ((hw < 0) | (hw >= len(self.hardware))).any():
            raise ValueError(f"frame column 'hardware' must index the {len(self.hardware)} "
                             "hardware models")  # fmt: skip
        out = frame.copy()
        hw = out["hardware"].astype(int).to_numpy()
        engine = np.array([0.0 if e is None else e.log_sd for e in self.engine_errors])
        drift = np.array(self.drift_log_sd, dtype=float)
        out["interval_sources"] = "+".join(self.active())
        out["engine_log_sd"] = engine[hw]
        out["drift_log_sd"] = drift[hw]
        out["p_origin"] = self.origin
        out["p_bound_low"] = out["p_bound_high"] = np.nan
        on_p = out.method.isin(("ppd", "early-exit")).to_numpy()
        if on_p.any():
            workloads = tuple(dict.fromkeys(out.workload[on_p]))
            heads = tuple(dict.fromkeys(out.head_kind[on_p]))
            key = (d, workloads, heads)
            if key not in self._bounds:
                self._bounds[key] = self.ptable.bounds(d, workloads, heads,
                                                       borrowed=self.borrowed)  # fmt: skip
            low, high = self._bounds[key]
            rows = out[on_p]
            w = pd.Index(workloads).get_indexer(rows.workload)
            h = pd.Index(heads).get_indexer(rows.head_kind)
            layer = np.where(rows.method == "ppd", rows.d_bar, rows.exit_layer).astype(int)
            k = np.where(rows.method == "ppd", rows.k, 1).astype(int)
            out.loc[on_p, "p_bound_low"] = low[w, h, layer, k]
            out.loc[on_p, "p_bound_high"] = high[w, h, layer, k]
        return out

    def covers(self) -> str:
        """What the intervals cover, in words (one clause per source)."""
        return "; ".join(f"{s}: {self.notes[s]}" for s in SOURCES if s in self.notes)


def p_words(ptable: PTable, model: str | None) -> str:
    """Where p came from, in words."""
    check_instance("ptable", ptable, PTable)
    origin = p_origin(ptable, model)
    if ptable.model == "vicuna-13b" and ptable.name == "paper Table 2":
        whose = "the paper's Table 2 (Vicuna-13B, trained and logit-lens heads)"
    else:
        whose = f"'{ptable.name}'" + (f" ({ptable.model})" if ptable.model else "")
    if origin == "own":
        return f"this model's own, measured: {whose}"
    if origin == "other":
        return f"borrowed from another model: {whose}, widened to the reference tables' range"
    return f"{whose}, not known to be this model's: widened to the reference tables' range"


def _notes(hardware, ptable, model, reps, errors, drifts, profile_drift) -> dict:
    notes = {}
    shown = {}
    for e in errors:
        if isinstance(e, PresetError):
            shown.setdefault((e.engine, e.gpu), e.describe())
    if shown:
        notes["engine"] = "; ".join(shown.values())
    notes["p"] = p_words(ptable, model)
    if any(isinstance(hw, ProfileHardware) for hw in hardware):
        if any(len(r) for r in reps):
            notes["profile"] = "the profile's bootstrap replicates"
        else:
            notes["profile"] = (f"no replicates in the profile: +-{1.96 * MISSING_LOG_SD:.0%} "
                                "assumed")  # fmt: skip
    if any(sd > 0 for sd in drifts):
        sd = max(drifts)
        where = ("the profile's" if profile_drift is not None else
                 f"none recorded: the VM's {DEFAULT_DRIFT_LOG_SD:.0%} assumed")  # fmt: skip
        notes["drift"] = f"backends timed apart, log-sd {sd:.0%} each ({where})"
    return notes
