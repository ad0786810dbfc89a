"""How far an engine preset's greedy seconds are from published measurements, as a spread.

An engine preset (``sim.hardware.ENGINE_PRESETS``) is fitted on a few published rows
(``ppdmodel/data/published_decode.csv``, role ``calibrate``) and judged on the others (``judge``,
held out; ``context`` rows are measurements of another setting, shown apart). The planner's
intervals carry the preset's error (``sim.plan_uncertainty``) as a lognormal factor on each
cost term family, with the log-sd ``PresetError.log_sd``:

* where the preset has at least ``MIN_ROWS`` held-out rows on the planned GPU's class: the
  root mean square of their log errors (bias included), at least ``FLOOR``;
* where it has none there (``torch-compiled`` on an H100 today): the same over every GPU class
  of that preset, times ``UNCOVERED_WIDEN``, at least ``UNCOVERED_FLOOR``: a class the preset
  was never checked on is not assumed to be as good as one it was;
* ``--engine`` not given (the ideal engine: roofline at fixed efficiencies, no host time): the
  ideal engine's log errors over every held-out row, whatever its engine.

Only held-out rows count: the preset was fitted on the ``calibrate`` rows, and a ``context``
row measured another setting (its note says which); ``evidence_rows`` lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ppdmodel.validation import as_int, as_real, check_flag, check_instance
from sim.hardware import ENGINE_PRESETS, GPUSpec
from sim.hardware_costs import RooflineHardware, greedy_costs
from sim.published import compare_published, hardware_for, read_published

IDEAL = "ideal"
"""The engine name of a plan without ``--engine`` (roofline, no host time)."""
FLOOR = 0.05
"""Smallest log-sd given to a preset on a GPU class it was judged on."""
UNCOVERED_WIDEN = 2.0
"""Factor on the log-sd where the preset has no row of the planned GPU class."""
UNCOVERED_FLOOR = 0.15
"""Smallest log-sd on a GPU class without rows."""
MIN_ROWS = 2
"""Held-out rows a GPU class needs before its own spread is used."""
EVIDENCE_ROLES = ("judge",)
"""Roles of the rows that measure a preset's error."""


def gpu_class(name: str) -> str:
    """The GPU family of a preset name: ``a100-80gb-pcie`` -> ``a100``, ``h100-sxm`` ->
    ``h100``."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a GPU preset name (str), got {name!r:.60}")
    return name.split("-")[0].lower()


@dataclass(frozen=True)
class PresetError:
    """The measured error of one engine preset, for one GPU class."""

    engine: str
    """The preset's name (``IDEAL`` without ``--engine``)."""
    gpu: str
    """The planned GPU preset."""
    log_sd: float
    """Log-sd of the factor the intervals draw (0 for a user's own measured numbers)."""
    rows: int
    """Published rows behind ``log_sd``."""
    classes: tuple[str, ...]
    """GPU classes of those rows."""
    covered: bool
    """True when rows of the planned GPU's class are among them."""
    median_abs: float = 0.0
    """Median |relative error| of those rows."""
    worst_abs: float = 0.0
    """Worst |relative error| of those rows."""

    def __post_init__(self) -> None:
        check_instance("engine", self.engine, str)
        check_instance("gpu", self.gpu, str)
        object.__setattr__(self, "log_sd", as_real("log_sd", self.log_sd, maximum=10.0))
        object.__setattr__(self, "rows", as_int("rows", self.rows, minimum=0, limit=10**6))
        if isinstance(self.classes, str) or not isinstance(self.classes, tuple) or not all(
                isinstance(c, str) for c in self.classes):  # fmt: skip
            raise ValueError(f"classes must be a tuple of GPU class names, got "
                             f"{self.classes!r:.60}")  # fmt: skip
        check_flag("covered", self.covered)
        for name in ("median_abs", "worst_abs"):
            object.__setattr__(self, name, as_real(name, getattr(self, name)))

    def describe(self) -> str:
        """One phrase: the preset, its rows and its spread."""
        if not self.rows:
            return f"{self.engine}: no published rows (log-sd {self.log_sd:.0%} assumed)"
        where = "/".join(self.classes)
        scope = f"{self.rows} held-out rows on {where}"
        if not self.covered:
            scope = f"no row on {gpu_class(self.gpu)}, {scope} widened x{UNCOVERED_WIDEN:g}"
        low, high = np.exp(-1.96 * self.log_sd), np.exp(1.96 * self.log_sd)
        text = (f"{self.engine} engine: {scope} (median |error| {self.median_abs:.0%}, worst "
                f"{self.worst_abs:.0%}): x{low:.2f}-x{high:.2f}")
        if self.engine == IDEAL:
            text += " (no --engine: a roofline without host time; give --engine to narrow it)"
        return text


@cache
def _errors():
    """Each published row's log error under its preset and under the ideal engine."""
    compared = compare_published(read_published())
    ideal = []
    for _, row in compared.iterrows():
        hw = hardware_for(row)
        flat = RooflineHardware(hw.shape, hw.gpu, hw.link, max_tp=int(row["tp"]))
        seconds = greedy_costs(flat, tp=int(row["tp"])).greedy_token_seconds(hw.shape.num_layers)
        ideal.append(seconds * 1e3 / row["measured_ms"] - 1.0)
    compared["ideal_error"] = ideal
    compared["gpu_class"] = [gpu_class(g) for g in compared["gpu_preset"]]
    return compared


def preset_error(engine: str | None, gpu: str) -> PresetError:
    """The error of ``engine`` (a preset name, or None: the ideal engine) on GPU preset
    ``gpu`` (module docstring)."""
    if engine is not None and (not isinstance(engine, str) or engine not in ENGINE_PRESETS):
        raise ValueError(f"engine must be one of {sorted(ENGINE_PRESETS)} or None, got "
                         f"{engine!r:.60}")  # fmt: skip
    GPUSpec.from_name(gpu)  # ValueError naming the known GPUs
    rows = _errors()
    wanted = gpu_class(gpu)
    held_out = rows[rows.role.isin(EVIDENCE_ROLES)]
    if engine is None:
        errors, classes = held_out["ideal_error"].to_numpy(), held_out["gpu_class"].to_numpy()
        name = IDEAL
    else:
        mine = held_out[held_out.engine_preset == engine]
        errors, classes = mine["error"].to_numpy(), mine["gpu_class"].to_numpy()
        name = engine
    here = classes == wanted
    covered = int(here.sum()) >= MIN_ROWS
    used = errors[here] if covered else errors
    if not used.size:
        return PresetError(name, gpu, UNCOVERED_FLOOR * UNCOVERED_WIDEN, 0, (), False)
    rms = float(np.sqrt(np.mean(np.log1p(used) ** 2)))
    log_sd = max(rms, FLOOR) if covered else max(rms * UNCOVERED_WIDEN, UNCOVERED_FLOOR)
    kept = classes[here] if covered else classes
    return PresetError(name, gpu, log_sd, int(used.size), tuple(sorted(set(kept))), covered,
                       float(np.median(np.abs(used))), float(np.abs(used).max()))  # fmt: skip


def evidence_rows(engine: str | None, gpu: str):
    """The published rows behind ``preset_error(engine, gpu)``: source, model, GPU, devices,
    role, measured and predicted ms, error (the ideal engine's for ``None``)."""
    preset_error(engine, gpu)  # the same checks
    rows = _errors()
    if engine is not None:
        rows = rows[rows.engine_preset == engine]
    out = rows[["source", "model", "gpu_preset", "engine_preset", "tp", "role", "measured_ms",
                "predicted_ms", "error", "ideal_error"]].copy()  # fmt: skip
    if engine is None:
        out["error"] = out.pop("ideal_error")
    else:
        out = out.drop(columns="ideal_error")
    out["same_class"] = [gpu_class(g) == gpu_class(gpu) for g in out.gpu_preset]
    return out.reset_index(drop=True)

