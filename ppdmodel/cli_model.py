"""``ppd latency | compute | tradeoff``: evaluate the closed form and redraw Figures 3 and 4.

``latency`` and ``compute`` also take the cost terms of ``ppdmodel.DecodeCosts`` (flags, or a
profile file from ``ppd measure profile`` via ``--costs``; this project's extension) and then
print PPD vs greedy seconds per token, the speed-up and the break-even p, and with
``--waterfall`` where PPD's time per token goes.
"""

from __future__ import annotations

import itertools
import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ppdmodel.cli_args import DEFAULT_D, default_d_bar
from ppdmodel.cli_costs import (
    LATENCY_K_CHANGE,
    CostSettings,
    CostTerms,
    add_cost_settings,
    format_waterfall,
    with_costs,
)
from ppdmodel.cli_settings import (
    DEFAULT_ELL,
    DEFAULT_OUT,
    TRADEOFF_D_HELP,
    LayerSeconds,
    ModelGrid,
    ModelParameters,
    OutputSettings,
    TradeoffTable,
    parse_paper_positions,
)


def register(subparsers) -> None:
    """Add the ``latency``, ``compute`` and ``tradeoff`` sub-commands."""
    latency = subparsers.add_parser(
        "latency", help="expected PPD latency (Theorem 4.1), its exact law and ell->inf figure"
    )
    ModelGrid.add_to(latency, changes={"k": LATENCY_K_CHANGE})
    OutputSettings.add_to(latency, only=["json"])
    LayerSeconds.add_to(latency)
    add_cost_settings(latency)
    latency.set_defaults(func=run_latency)

    compute = subparsers.add_parser(
        "compute", help="expected PPD compute (Theorem 4.1) and ell->inf per-token figures"
    )
    ModelGrid.add_to(compute)
    OutputSettings.add_to(compute, only=["json"])
    add_cost_settings(compute)
    compute.set_defaults(func=run_compute)

    tradeoff = subparsers.add_parser(
        "tradeoff", help="redraw the paper's Figures 3 and 4 from its Table 2 (PNG + CSV)"
    )
    TradeoffTable.add_to(tradeoff)
    ModelParameters.add_to(tradeoff, only=["d"], changes={"d": {"help": TRADEOFF_D_HELP}})
    OutputSettings.add_to(tradeoff, only=["out"], changes={"out": {"default": DEFAULT_OUT}})
    tradeoff.set_defaults(func=run_tradeoff)


def _paper_positions(spec: str):
    """'squad:3:Y:20' -> (label, per-position p_t, ell, layer, k) from the paper's Tables 6-8."""
    from ppdmodel import paper

    dataset, k, trained, layer = parse_paper_positions(spec)
    p_t = paper.per_position_p(dataset=dataset, k=k, trained=trained, layer=layer)
    return f"Tables 6-8 {spec}", p_t, p_t.size + 1, layer, k


def _grid(model: ModelGrid, profile_d: int | None, with_k: bool):
    """All parameter combinations of ``model``, as keyword dicts (d defaults to the profile's
    depth, else DEFAULT_D)."""
    ds = model.d or [profile_d or DEFAULT_D]
    d_bars = model.d_bar or [None]
    ells = model.ell or [DEFAULT_ELL]
    ks = (model.k or [1]) if with_k else [None]
    p_values = model.p
    if model.paper_positions:
        label, p_t, table_ell, layer, table_k = _paper_positions(model.paper_positions)
        p_values, ells, d_bars = [(label, p_t)], model.ell or [table_ell], model.d_bar or [layer]
        ks = (model.k or [table_k]) if with_k else [None]
        bad = [ell for ell in ells if not 2 <= ell <= table_ell]
        if bad:
            raise ValueError(
                f"ell must be in [2, {table_ell}] with --paper-positions {model.paper_positions}"
                f" (the table covers {table_ell} tokens), got {bad[0]}"
            )
    for d, d_bar, ell, p, k in itertools.product(ds, d_bars, ells, p_values, ks):
        if isinstance(p, tuple):  # per-position: p_t for t = 2..ell
            p = (p[0], p[1][: ell - 1])
        d_bar = default_d_bar(d) if d_bar is None else d_bar
        yield {"d": d, "d_bar": d_bar, "ell": ell, "p": p, **({"k": k} if with_k else {})}


def _describe_p(row: dict, params: dict) -> dict:
    """Replace a per-position (label, p_t) by its label and the mean p_t, for printing."""
    if isinstance(params["p"], tuple):
        row["p"], p_t = params["p"]
        row["p_mean"] = float(p_t.mean())
        params["p"] = p_t
    return row


def latency_row(params: dict, seconds: dict | None) -> dict:
    """One output row of ``ppd latency``."""
    import ppdmodel

    row = _describe_p(dict(params), params)
    law = ppdmodel.latency_distribution(**params)
    row["expected_latency"] = ppdmodel.expected_latency(**params)
    row["normalized_latency"] = row["expected_latency"] / (params["d"] * params["ell"])
    row["std"] = law.std
    row["p50"] = law.p50
    row["p99"] = law.p99
    row["latency_per_token_inf"] = ppdmodel.latency_per_token(
        d=params["d"], d_bar=params["d_bar"], p=row.get("p_mean", params["p"])
    )
    row["normalized_per_token_inf"] = row["latency_per_token_inf"] / params["d"]
    if seconds is not None:
        row["expected_latency_s"] = ppdmodel.expected_latency_seconds(**params, **seconds)
    return row


def compute_row(params: dict) -> dict:
    """One output row of ``ppd compute``."""
    import ppdmodel

    row = _describe_p(dict(params), params)
    theorem = {key: params[key] for key in ("d", "d_bar", "ell", "p")}
    limit = {key: params[key] for key in ("d", "d_bar", "k")}
    limit["p"] = row.get("p_mean", params["p"])
    row["expected_latency"] = ppdmodel.expected_latency(**theorem)
    row["expected_compute"] = ppdmodel.expected_compute(**params)
    row["compute_ratio"] = row["expected_compute"] / row["expected_latency"]
    row["compute_per_time_inf"] = ppdmodel.compute_per_time(**limit)
    row["compute_per_token_inf"] = ppdmodel.compute_per_token(**limit)
    return row


def _finite_or_none(row: dict) -> dict:
    """``row`` with non-finite floats replaced by None."""
    return {
        key: None if isinstance(v, float) and not math.isfinite(v) else v for key, v in row.items()
    }


LATENCY_LEGEND = (
    "normalized_latency: E[T] / (d ell) at the given ell (greedy decoding = 1); "
    "latency_per_token_inf: E[T] / ell as ell -> infinity, in layer units; "
    "normalized_per_token_inf: the same over d (Theorem 4.1: 1 - p (d - d_bar) / d)"
)
"""What the columns of ``ppd latency`` that look alike mean (printed under the table)."""


def _print_rows(rows: list[dict], as_json: bool, legend: str | None = None) -> None:
    """Print rows as JSON records or as an aligned table (with ``legend`` under it)."""
    if as_json:  # strict JSON: an unreachable break-even p (inf) is null
        print(json.dumps([_finite_or_none(row) for row in rows], indent=2, allow_nan=False))
        return
    import pandas as pd

    table = [{k: v for k, v in row.items() if k != "waterfall_s"} for row in rows]
    print(pd.DataFrame(table).to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    if legend:
        print(textwrap.fill(legend, width=100))
    for row in rows:
        if "waterfall_s" in row:
            print()
            print(format_waterfall(row))


def latency_rows(model: ModelGrid, seconds: LayerSeconds, costs: CostSettings) -> list[dict]:
    """The rows of ``ppd latency``: one per combination of ``model`` (and per k and early-head
    placement with cost terms), in layer units, seconds from ``seconds`` or ``costs``."""
    terms = CostTerms.given(costs, model.d)
    per_layer = seconds.terms()
    if per_layer is not None and terms is not None:
        raise ValueError(
            "give either --seconds-per-layer (and the two overheads) or the cost terms "
            "(--costs, --layer-s, ...), not both"
        )
    if model.k is not None and terms is None:
        raise ValueError("--k of ppd latency applies to the cost terms: give --costs or a flag")
    pairs = []
    for params in _grid(model, terms and terms.profile_d, with_k=False):
        for k in model.k or [None]:
            row = latency_row(params, per_layer)
            if k is not None:  # k right after the paper's symbols, before the figures
                keys = list(row)
                at = keys.index("p") + 1
                row = {**{x: row[x] for x in keys[:at]}, "k": k, **{x: row[x] for x in keys[at:]}}
            pairs.append((row, {**params, **({"k": k} if k else {})}))
    return with_costs(pairs, terms)


def compute_rows(model: ModelGrid, costs: CostSettings) -> list[dict]:
    """The rows of ``ppd compute``: one per combination of ``model`` (and per early-head
    placement with cost terms)."""
    terms = CostTerms.given(costs, model.d)
    grid = _grid(model, terms and terms.profile_d, with_k=True)
    return with_costs([(compute_row(params), params) for params in grid], terms)


def run_latency(args) -> int:
    """Handler of ``ppd latency``."""
    model, seconds = ModelGrid.from_args(args), LayerSeconds.from_args(args)
    rows = latency_rows(model, seconds, CostSettings.from_args(args))
    _print_rows(rows, OutputSettings.from_args(args).json, LATENCY_LEGEND)
    return 0


def run_compute(args) -> int:
    """Handler of ``ppd compute``."""
    rows = compute_rows(ModelGrid.from_args(args), CostSettings.from_args(args))
    _print_rows(rows, OutputSettings.from_args(args).json)
    return 0


def _endpoint(curves, column: str, pick: str) -> str:
    """'0.629 (SQuAD+tr, k=5)' for the row where ``column`` is smallest/largest."""
    from ppdmodel.tradeoff import curve_label

    row = curves.loc[getattr(curves[column], pick)()]
    return f"{row[column]:.3f} ({curve_label(row['dataset'], row['trained'])}, k={row['k']})"


@dataclass(frozen=True)
class TradeoffFigures:
    """What ``write_tradeoff`` drew: from which table, at which layer of which depth, the
    endpoints of its curves (text) and the files it wrote."""

    source: str
    layer: int
    d: int
    latency_range: tuple[str, str]
    compute_range: tuple[str, str]
    paths: dict[str, Path]


def write_tradeoff(
    table: TradeoffTable, model: ModelParameters, output: OutputSettings
) -> TradeoffFigures:
    """Figures 3 and 4 and the curves CSV of ``table`` at its layer of ``model.d`` layers,
    written under ``output.out`` (default DEFAULT_OUT)."""
    import matplotlib

    matplotlib.use("Agg")
    from ppdmodel.tradeoff import plot_tradeoff, tradeoff_curves

    p_table, source = None, "the paper's Table 2"
    if table.table != "paper":
        from ppdmodel import ptables

        p_table, source = ptables.table2_view(table.table), f"the built-in {table.table} atlas"
    d = model.d if model.d is not None else (40 if p_table is None else int(p_table["d"].iloc[0]))
    layer = table.layer
    if layer is None:
        layer = 20 if p_table is None else default_d_bar(d)
    curves = tradeoff_curves(layer=layer, d=d, table=p_table)
    out = Path(output.out or DEFAULT_OUT)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder (new or existing), got the file {out}")
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": out / "tradeoff_curves.csv",
        "fig3": out / "fig3_latency_vs_compute_per_time.png",
        "fig4": out / "fig4_latency_vs_compute_per_token.png",
    }
    curves.to_csv(paths["csv"], index=False, float_format="%.6g")
    for figure in (3, 4):
        plot_tradeoff(curves, figure=figure).savefig(paths[f"fig{figure}"], dpi=120)
    ends = ("idxmin", "idxmax")
    return TradeoffFigures(
        source=source,
        layer=layer,
        d=d,
        latency_range=tuple(_endpoint(curves, "normalized_latency", n) for n in ends),
        compute_range=tuple(_endpoint(curves, "compute_per_time", n) for n in ends),
        paths=paths,
    )


def run_tradeoff(args) -> int:
    """Handler of ``ppd tradeoff``: write fig3/fig4 PNGs and the curves CSV, print endpoints."""
    table, model = TradeoffTable.from_args(args), ModelParameters.from_args(args)
    drawn = write_tradeoff(table, model, OutputSettings.from_args(args))
    print(f"PPD trade-off from {drawn.source}: layer {drawn.layer} of d={drawn.d}")
    print("normalized latency per token: {} .. {}".format(*drawn.latency_range))
    print("compute per time unit:        {} .. {}".format(*drawn.compute_range))
    for path in drawn.paths.values():
        print(f"wrote {path}")
    return 0
