"""Published batch-1 decode measurements against the engine presets' predictions.

``ppdmodel/data/published_decode.csv`` holds one row per published measurement: its source
(with the address it was read from), model, GPU and power cap, engine, dtype, devices (tensor
parallelism), context and tokens/s, the shape, GPU, link and engine presets that model it, a
``role`` (``calibrate``: a preset was fitted on it; ``judge``: held out; ``context``: shown, not
judged, with the reason in ``note``) and how far the source is trusted.

``compare_published()`` predicts every row with ``sim.engine.EngineHardware`` (greedy seconds
per token, as ``ppd plan --engine`` prices it) and returns the table with the relative error;
``error_summary`` gives the median and worst |error| of the judged rows; ``table3_on_engines``
prices the paper's Table 3 runs on each engine preset.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import ppdmodel
from ppdmodel.overheads import TABLE3_D_BAR, table3_rows
from ppdmodel.paper import TABLE3_TOKENS
from ppdmodel.seconds import expected_latency_seconds
from ppdmodel.theorem import expected_latency
from ppdmodel.validation import check_columns, check_input_file, check_instance
from sim.engine import EngineHardware
from sim.hardware import ENGINE_PRESETS, Engine, GPUSpec, Link
from sim.hardware_costs import decode_costs
from sim.shape import ModelShape

PUBLISHED_PATH = Path(ppdmodel.__file__).resolve().parent / "data" / "published_decode.csv"
"""The shipped table of published measurements."""
PUBLISHED_COLUMNS = ("source", "url", "model", "shape_preset", "gpu", "gpu_preset", "link_preset",
                     "power_cap_w", "engine", "engine_preset", "dtype", "tp", "context_tokens",
                     "tokens_per_s", "role", "trust", "note")  # fmt: skip
"""Columns of the table (see the module docstring)."""
ROLES = ("calibrate", "judge", "context")
"""What a row is for."""


def read_published(path: str | Path = PUBLISHED_PATH) -> pd.DataFrame:
    """The published measurements (``PUBLISHED_COLUMNS``); ValueError if malformed."""
    check_input_file("path", path)
    where = f"published table path {str(path)!r}"
    try:
        frame = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as exc:  # pandas' parser errors are ValueErrors
        raise ValueError(f"{where}: not a CSV table ({exc})") from None
    check_columns(where, frame, PUBLISHED_COLUMNS)
    bad = sorted(set(map(str, frame["role"])) - set(ROLES))
    if bad:
        raise ValueError(f"{where}: role must be one of {ROLES}, got {bad}")
    for column in ("tokens_per_s", "tp"):
        if not pd.api.types.is_numeric_dtype(frame[column]):
            raise ValueError(f"{where}: column {column} must hold numbers")
    if not (frame["tokens_per_s"] > 0).all() or not (frame["tp"] >= 1).all():
        raise ValueError(f"{where}: tokens_per_s must be > 0 and tp >= 1")
    return frame


def check_row_keys(row) -> None:
    """Refuse anything but a row of the published table (a Series or a dict of its columns)."""
    if not isinstance(row, pd.Series | dict):
        raise ValueError(f"row must be a row of the published table, got {type(row).__name__}")
    missing = [c for c in ("shape_preset", "context_tokens", "gpu_preset", "link_preset",
                           "engine_preset", "tp") if c not in row]  # fmt: skip
    if missing:
        raise ValueError(f"row is missing {missing}")


def hardware_for(row, engine: Engine | None = None) -> EngineHardware:
    """The ``EngineHardware`` that models one published row (its presets; ``engine`` overrides
    the row's engine preset)."""
    check_row_keys(row)
    if engine is not None:
        check_instance("engine", engine, Engine)
    shape = ModelShape.from_name(row["shape_preset"]).with_context(int(row["context_tokens"]))
    return EngineHardware(shape, GPUSpec.from_name(row["gpu_preset"]),
                          Link.from_name(row["link_preset"]),
                          engine or Engine.from_name(row["engine_preset"]),
                          max_tp=int(row["tp"]))  # fmt: skip


def compare_published(frame: pd.DataFrame | None = None, engines: dict | None = None):
    """Every row with ``measured_ms``, ``predicted_ms``, ``error`` ((predicted - measured) /
    measured), the ``regime`` and its ``why``. ``engines``: preset name -> Engine to use
    instead of the preset (a refit, a user's own numbers)."""
    if frame is not None:
        check_columns("published table (frame)", frame, PUBLISHED_COLUMNS)
    frame = read_published() if frame is None else frame.copy()
    check_columns("published table", frame, PUBLISHED_COLUMNS)
    if engines is not None and not isinstance(engines, dict):
        raise ValueError(f"engines must be a dict of preset name -> Engine, got "
                         f"{type(engines).__name__}")  # fmt: skip
    engines = engines or {}
    for name, engine in engines.items():
        check_instance(f"engines[{name!r}]", engine, Engine)
    predicted, regime, why = [], [], []
    for _, row in frame.iterrows():
        hw = hardware_for(row, engines.get(row["engine_preset"]))
        r = hw.regime(int(row["tp"]))
        predicted.append(r.token_s * 1e3)
        regime.append(r.regime)
        why.append(r.why)
    frame["measured_ms"] = 1e3 / frame["tokens_per_s"]
    frame["predicted_ms"] = predicted
    frame["error"] = frame["predicted_ms"] / frame["measured_ms"] - 1.0
    frame["regime"], frame["why"] = regime, why
    return frame


def error_summary(compared: pd.DataFrame, role: str = "judge") -> dict:
    """Median and worst |error| (fractions) and the row count of the rows with ``role``."""
    check_columns("compared", compared, ("role", "error"))
    check_instance("role", role, str)
    errors = np.abs(compared.loc[compared["role"] == role, "error"].to_numpy())
    if not errors.size:
        raise ValueError(f"no rows with role {role!r}")
    return {"n": int(errors.size), "median_abs_error": float(np.median(errors)),
            "worst_abs_error": float(errors.max())}  # fmt: skip


def table3_on_engines(gpu: str = "a100-80gb", link: str = "nvlink3", d_bar: int = TABLE3_D_BAR):
    """The paper's Table 3 rows (LLaMA-2-13B, their measured p and k) priced on each engine
    preset: greedy and PPD ms per token (candidates as one k-row batch on a second device, the
    early head on the candidate side, the engine's messages), the speed-up, Theorem 4.1's and
    the published one."""
    rows = table3_rows()
    shape = ModelShape.from_name("llama2-13b")
    d, ell = shape.num_layers, TABLE3_TOKENS
    out = []
    for name, engine in ENGINE_PRESETS.items():
        hw = EngineHardware(shape, GPUSpec.from_name(gpu), Link.from_name(link), engine, max_tp=2)
        greedy = hw.greedy_token_seconds(1)
        for row in rows.itertuples():
            k = int(row.k)
            costs = decode_costs(hw, d_bar=d_bar, k=k, early_head="candidates", tp_candidates=1)
            ppd = expected_latency_seconds(d=d, d_bar=d_bar, ell=ell, p=row.p, k=k, costs=costs,
                                           early_head="candidates") / ell  # fmt: skip
            theorem = d * ell / expected_latency(d=d, d_bar=d_bar, ell=ell, p=row.p)
            out.append({"engine": name, "dataset": row.dataset, "k": k, "p": row.p,
                        "greedy_ms": greedy * 1e3, "ppd_ms": float(ppd) * 1e3,
                        "speedup": greedy / float(ppd), "theorem_speedup": float(theorem),
                        "published_speedup": row.greedy_latency_s / row.latency_s})  # fmt: skip
    return pd.DataFrame(out)
