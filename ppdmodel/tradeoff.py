"""The paper's Figures 3 and 4: latency vs compute trade-off curves built from Table 2.

Each curve is one (dataset, trained head) pair; its points are k = 1, 3, 5 at one early-
prediction layer (the paper: layer 20 of d = 40, i.e. d_bar = d/2). Figure 3 plots normalized
latency per token (Eq. 3 / d) against compute per time unit (Eq. 5); Figure 4 plots it against
compute per token (Eq. 6 / d). Other layers use the generalised forms in ``ppdmodel.asymptotic``.
"""

from __future__ import annotations

from numbers import Real

import numpy as np
import pandas as pd

from ppdmodel.asymptotic import compute_per_time, compute_per_token, latency_per_token
from ppdmodel.validation import (
    as_int,
    as_real_array,
    check_columns,
    check_d_bar,
    check_flag,
    check_probability,
)

FIGURE_AXES = {
    3: ("compute_per_time", "Average compute resources per time unit"),
    4: ("normalized_compute_per_token", "Average compute resources per token (x d)"),
}
"""x column and label of each figure; the y axis is ``normalized_latency`` in both."""
TABLE_COLUMNS = ("dataset", "trained", "k", "layer", "p_correct")
"""Columns ``tradeoff_curves`` needs in its ``table`` (those of ``ppdmodel.paper.TABLE2``)."""
CURVE_COLUMNS = ("dataset", "trained", "k", "layer", "normalized_latency", "latency_per_token")
"""Columns ``plot_tradeoff`` needs besides the figure's x column."""


def tradeoff_curves(*, layer: int = 20, d: int = 40, table: pd.DataFrame | None = None):
    """Figure 3 and 4 curves as one tidy DataFrame, one row per (dataset, trained, k).

    ``layer`` is the early-prediction layer d_bar (must be in [d/2, d)); ``table`` defaults to
    ``ppdmodel.paper.TABLE2`` (``ppdmodel.ptables.table2_view`` gives other tables its
    columns). Columns: dataset, trained, k, layer, p_correct,
    latency_per_token (time units), normalized_latency (/ d: greedy = 1), compute_per_time,
    compute_per_token (compute units x time units), normalized_compute_per_token (/ d).
    """
    d, layer = _check_layer(d, layer)
    if table is None:
        from ppdmodel.paper import TABLE2 as table
    check_columns("table", table, TABLE_COLUMNS)
    _check_table_types(table)
    rows = table[table["layer"] == layer]
    if rows.empty:
        layers = sorted(table["layer"].dropna().unique().tolist())
        raise ValueError(f"layer must be one of the table's layers {layers}, got {layer!r}")
    order = {name: i for i, name in enumerate(dict.fromkeys(table["dataset"]))}  # paper order
    rows = rows.sort_values(["dataset", "trained", "k"], key=_order_key(order))
    rows = rows.reset_index(drop=True)
    p = check_probability("table column 'p_correct'", rows["p_correct"].to_numpy())
    k = rows["k"].to_numpy()
    out = rows[["dataset", "trained", "k", "layer", "p_correct"]].copy()
    out["latency_per_token"] = latency_per_token(d=d, d_bar=layer, p=p)
    out["normalized_latency"] = out["latency_per_token"] / d
    out["compute_per_time"] = compute_per_time(d=d, d_bar=layer, p=p, k=k)
    out["compute_per_token"] = compute_per_token(d=d, d_bar=layer, p=p, k=k)
    out["normalized_compute_per_token"] = out["compute_per_token"] / d
    return out


def _check_layer(d, layer) -> tuple[int, int]:
    """(d, layer) as ints with d/2 <= layer < d (``layer`` is the early-prediction layer)."""
    d, layer = as_int("d", d), as_int("layer", layer)
    try:
        check_d_bar(d, layer)
    except ValueError as err:
        raise ValueError(f"layer (the early-prediction layer d_bar): {err}") from None
    return d, layer


def _check_table_types(table: pd.DataFrame) -> None:
    """ValueError naming the column unless dataset holds names, trained booleans, k and layer
    numbers (p_correct is checked by the formulas)."""
    for column in ("layer", "k"):
        if not pd.api.types.is_numeric_dtype(table[column]) or table[column].dtype == bool:
            raise ValueError(f"table column {column!r} must hold integers")
    if not pd.api.types.is_numeric_dtype(table["p_correct"]) or table["p_correct"].dtype == bool:
        raise ValueError("table column 'p_correct' must hold numbers")
    if table["trained"].dtype != bool:
        raise ValueError("table column 'trained' must hold booleans")
    if not all(isinstance(name, str) for name in table["dataset"]):
        raise ValueError("table column 'dataset' must hold dataset names (strings)")


def _order_key(order: dict):
    """sort_values key that orders the dataset column by first appearance in the table."""
    return lambda col: col.map(order) if col.name == "dataset" else col


def curve_label(dataset: str, trained: bool) -> str:
    """Legend label in the paper's style: "SQuAD+tr" for a trained head."""
    if not isinstance(dataset, str):
        raise ValueError(f"dataset must be a name, got {dataset!r:.60}")
    check_flag("trained", trained)
    return f"{dataset}+tr" if trained else dataset


K_MARKERS = {1: "o", 3: "s", 5: "^"}
"""Marker of each k (other k: a diamond), so points need no text labels."""

MEASURED_COLUMNS = ("label", "p_correct", "k")
"""Columns of ``plot_tradeoff``'s ``measured`` points (optional: ``layer`` and ``d``)."""


def measured_points(measured: pd.DataFrame, *, layer: int, d: int) -> pd.DataFrame:
    """Figure 3/4 coordinates of measured (p, k) points (an atlas cell, a ``ppd run``), with
    each point's own ``layer`` and ``d`` when given, else the curves' layer and d."""
    check_columns("measured", measured, ())
    missing = [c for c in MEASURED_COLUMNS if c not in measured.columns]
    if missing:
        raise ValueError(f"measured must have columns {MEASURED_COLUMNS}; missing {missing}")
    d, layer = _check_layer(d, layer)
    p = check_probability(
        "measured.p_correct", as_real_array("measured.p_correct", measured["p_correct"].to_numpy())
    )
    k = measured["k"].to_numpy()
    d_col = measured["d"].to_numpy() if "d" in measured.columns else d
    layer_col = measured["layer"].to_numpy() if "layer" in measured.columns else layer
    out = measured[list(MEASURED_COLUMNS)].copy()
    out["normalized_latency"] = latency_per_token(d=d_col, d_bar=layer_col, p=p) / d_col
    out["compute_per_time"] = compute_per_time(d=d_col, d_bar=layer_col, p=p, k=k)
    out["normalized_compute_per_token"] = (
        compute_per_token(d=d_col, d_bar=layer_col, p=p, k=k) / d_col
    )
    return out


def plot_tradeoff(curves: pd.DataFrame | None = None, *, figure: int = 3, measured=None):
    """Plot Figure 3 (``figure=3``) or Figure 4 (``figure=4``); return a matplotlib Figure.

    ``curves`` defaults to ``tradeoff_curves()``; ``measured`` (columns ``MEASURED_COLUMNS``)
    adds measured (p, k) points as crosses. Greedy decoding is the point (1, 1). Nothing is shown
    or saved here: the caller decides (``fig.savefig(path)``); no GUI backend is needed.
    """
    if isinstance(figure, bool) or not isinstance(figure, Real) or figure not in (3, 4):
        raise ValueError(f"figure must be 3 or 4, got {figure!r}")
    curves = tradeoff_curves() if curves is None else curves
    x_col, x_label = FIGURE_AXES[int(figure)]
    check_columns("curves", curves, (*CURVE_COLUMNS, x_col))
    if curves.empty:
        raise ValueError("curves must hold at least one row (one point of a curve)")
    for column in ("k", "layer", "normalized_latency", x_col):  # plotted, k and layer label
        values = pd.to_numeric(curves[column], errors="coerce").to_numpy(dtype=float)
        if not np.isfinite(values).all():
            raise ValueError(f"curves column {column!r} must hold finite numbers")
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(7.2, 5.0), layout="constrained")
    ax = fig.subplots()
    colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(curves["dataset"]))}
    for (dataset, trained), curve in curves.groupby(["dataset", "trained"], sort=False):
        curve = curve.sort_values("k")
        ax.plot(
            curve[x_col],
            curve["normalized_latency"],
            color=colours[dataset],
            linestyle="--" if trained else "-",
            label=curve_label(dataset, trained),
        )
        for k, point in curve.groupby("k"):
            ax.plot(
                point[x_col],
                point["normalized_latency"],
                marker=K_MARKERS.get(int(k), "D"),
                color=colours[dataset],
                linestyle="none",
            )
    ax.plot([1], [1], marker="*", markersize=12, color="black", linestyle="none")
    ax.annotate("greedy", (1, 1), textcoords="offset points", xytext=(6, -4), fontsize=8)
    layer = int(curves["layer"].iloc[0]) if len(curves) else None
    d = (
        round(curves["latency_per_token"].iloc[0] / curves["normalized_latency"].iloc[0])
        if layer
        else 40
    )
    if measured is not None and len(measured):
        points = measured_points(measured, layer=layer, d=d)
        for i, row in enumerate(points.itertuples(index=False)):
            ax.plot(
                getattr(row, x_col),
                row.normalized_latency,
                marker="P",
                markersize=9,
                color=f"C{len(colours) + i}",
                linestyle="none",
                label=f"measured: {row.label} (k={row.k})",
            )
    handles, labels = ax.get_legend_handles_labels()
    handles += [
        Line2D([], [], color="grey", marker=m, linestyle="none") for m in K_MARKERS.values()
    ]
    labels += [f"k = {k}" for k in K_MARKERS]
    ax.set_xlabel(x_label)
    ax.set_ylabel("Normalized latency per token (greedy = 1)")
    ax.set_title(f"PPD trade-off (Figure {figure}), early prediction at layer {layer}")
    ax.grid(True, alpha=0.3)
    ax.legend(
        handles,
        labels,
        fontsize=7,
        title="solid: shared LM head; dashed (+tr):\nhead trained for that layer",
        title_fontsize=7,
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
    )
    return fig
