"""Figures of ``ppd validate``: a waterfall per configuration, predicted vs measured, each
block's time in the runs beside the profile's price, and the stacked latency breakdown of
greedy beside every configuration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from measure.eval.plot_labels import repel_labels
from measure.eval.terms import price_intervals
from measure.eval.verdict import TERM_LABELS

WATERFALL_COLUMNS = 4
"""Panels per row of waterfall.png."""
MIN_SHOWN_SHARE = 0.002
"""Waterfall terms smaller than this share of the total are left out of the figure."""


def plot_waterfalls(validation, path):
    """Per configuration: Theorem 4.1's ideal, each cost term stacked on top, the prediction
    and, beside it, the measured median per token with its IQR (ms per token, PNG). Returns
    the Figure; constrained layout keeps the title above the panels' titles."""
    from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone

    results = validation.results
    cols = min(WATERFALL_COLUMNS, len(results))
    rows = math.ceil(len(results) / cols)
    fig = Figure(figsize=(max(4.6 * cols, 7.5), 3.6 * rows + 0.9), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, result in zip(axes, results, strict=False):
        _waterfall(ax, result)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    fig.suptitle(
        "where PPD's time per token goes: predicted from the profile vs measured", fontsize=11
    )
    fig.legend(handles=_waterfall_key(), loc="outside lower center", fontsize=8,
               ncols=5 if cols > 2 else 2)  # fmt: skip
    fig.savefig(path, dpi=110)
    return fig


def _waterfall_key() -> list:
    """One legend for every panel of waterfall.png."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    return [
        Patch(color="tab:blue", label="cost term (predicted, stacked)"),
        Patch(color="tab:purple", label="negative term (predicted)"),
        Patch(color="tab:green", label="predicted total"),
        Patch(color="tab:orange", label="measured median (IQR bar)"),
        Line2D([], [], color="grey", linestyle="--", linewidth=1, label="greedy, measured"),
    ]


def _waterfall(ax, result) -> None:
    terms = list(result.predicted.terms().items())
    total = sum(v for _, v in terms)
    shown = [(k, v) for k, v in terms if k == "ideal_s" or abs(v) >= MIN_SHOWN_SHARE * total]
    labels, bottoms, heights = [], [], []
    level = peak = 0.0
    for name, value in shown:
        labels.append(TERM_LABELS[name].replace(" (Theorem 4.1)", "\n(Thm 4.1)"))
        bottoms.append(level)
        heights.append(value)
        level += value
        peak = max(peak, level)
    other = total - level
    if abs(other) > 1e-9 * abs(total):
        labels.append("other")
        bottoms.append(level)
        heights.append(other)
    x = np.arange(len(labels))
    scale = 1e3
    colors = ["tab:blue" if h >= 0 else "tab:purple" for h in heights]
    ax.bar(x, np.array(heights) * scale, bottom=np.array(bottoms) * scale, color=colors)
    tokens = result.predicted.tokens
    meas = result.measured
    ax.bar(len(labels), total * scale, color="tab:green")
    med = meas.median / tokens * scale
    err = [[med - meas.q1 / tokens * scale], [meas.q3 / tokens * scale - med]]
    ax.bar(len(labels) + 1, med, color="tab:orange", yerr=err, capsize=3)
    greedy = result.greedy_measured.median / result.greedy_predicted.tokens * scale
    ax.axhline(greedy, color="grey", linestyle="--", linewidth=1, label="greedy, measured")
    top = max(peak * scale, total * scale, meas.q3 / tokens * scale, greedy)
    ax.set_ylim(0, 1.08 * top)
    ax.set_xticks(np.arange(len(labels) + 2), [*labels, "predicted", "measured (IQR)"],
                  rotation=55, ha="right", rotation_mode="anchor", fontsize=7)  # fmt: skip
    ax.set_ylabel("ms per token")
    ax.set_title(f"{result.label}: error {100 * result.rel_err:+.1f} %", fontsize=8)


def point_names(table: pd.DataFrame) -> list[str]:
    """Each row's method label; a label that stands on several rows (greedy, priced on each
    backend) with its backend."""
    counts = table["method"].value_counts()
    return [f"{m}, {b}" if counts[m] > 1 else str(m)
            for m, b in zip(table["method"], table["backend"], strict=True)]  # fmt: skip


def point_table(table: pd.DataFrame) -> list[str]:
    """The key of predicted_vs_measured.png: one line per numbered point (monospace)."""
    names = point_names(table)
    width = max(len("method"), *map(len, names))
    lines = [f"{'#':>3} {'method':<{width}} {'measured':>8} {'predicted':>9} {'error':>7}"]
    for i, (name, (_, row)) in enumerate(zip(names, table.iterrows(), strict=True), start=1):
        lines.append(f"{i:>3} {name:<{width}} {row['measured_s']:>8.3g} "
                     f"{row['predicted_s']:>9.3g} {100 * row['rel_err']:>+6.1f}%")  # fmt: skip
    return lines


def plot_predicted_vs_measured(validation, path):
    """Predicted (the closed form on the runs' own traces; beside it the simulator, the
    interleaved probes' closed form and the i.i.d. closed form, each where a method made one)
    against the measured median, with the IQR as error bars; the diagonal and the 5 % and
    15 % bands (seconds over all prompts, PNG). Points are numbered
    (labels pushed apart, ``measure.eval.plot_labels``) and keyed in a table beside the plot.
    Returns the Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    table = validation.table
    key = point_table(table)
    height = max(5.2, 1.0 + 0.17 * len(key))  # the scatter grows with the points it holds
    fig = Figure(figsize=(height + 4.4, height), layout="constrained")
    ax, side = fig.subplots(1, 2, width_ratios=[height - 0.6, 4.4])
    measured = table["measured_s"].to_numpy()
    xerr = np.stack(
        [measured - table["measured_q1_s"].to_numpy(), table["measured_q3_s"].to_numpy() - measured]
    )
    nan = pd.Series(np.nan, index=table.index)
    ax.errorbar(measured, table["predicted_s"], xerr=xerr, fmt="o", capsize=3, markersize=4,
                label="closed form on the runs' traces, profile (the key's column)")  # fmt: skip
    forms = (("simulated_s", "x", "tab:red", 7, "simulator"),
             ("interleaved_predicted_s", "D", "tab:orange", 4,
              "closed form, interleaved probes (of record)"),
             ("iid_s", "+", "tab:purple", 9, "i.i.d. closed form at the pooled rate"))  # fmt: skip
    for column, marker, color, size, label in forms:  # each where a method made it
        values = table.get(column, nan)
        if values.notna().any():
            ax.plot(measured, values, marker, color=color, markersize=size, label=label)
    shown = pd.concat([table.get(c, nan) for c in ("predicted_s", *(f[0] for f in forms))])
    low = 0.85 * min(measured.min(), shown.min())
    high = 1.15 * max(measured.max(), shown.max())
    line = np.array([low, high])
    ax.plot(line, line, color="black", linewidth=1)
    for band, alpha in ((0.05, 0.25), (0.15, 0.1)):
        ax.fill_between(line, line * (1 - band), line * (1 + band), color="tab:green",
                        alpha=alpha, label=f"within {100 * band:.0f} %")  # fmt: skip
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured decode seconds (median over rounds, IQR bars)")
    ax.set_ylabel("predicted decode seconds (nothing fitted)")
    ax.set_title("predicted vs measured: numbered points, keyed on the right", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    labels = [
        ax.annotate(str(i), (m, pr), fontsize=7, textcoords="offset points", xytext=(0, 0),
                    arrowprops=dict(arrowstyle="-", linewidth=0.6, color="0.35", shrinkA=0,
                                    shrinkB=2))
        for i, (m, pr) in enumerate(zip(measured, table["predicted_s"], strict=True), start=1)
    ]  # fmt: skip
    side.set_axis_off()
    side.text(0.0, 1.0, "\n".join(key), family="monospace", fontsize=7, va="top",
              transform=side.transAxes)  # fmt: skip
    side.set_title("seconds over all prompts", fontsize=8, loc="left")
    canvas = FigureCanvasAgg(fig)  # the renderer measures the labels' boxes
    canvas.draw()  # fixes the layout, so the labels are placed where they will be drawn
    repel_labels(ax, labels, canvas.get_renderer())
    fig.savefig(path, dpi=120)
    return fig


BREAKDOWN_PARTS = tuple(TERM_LABELS)
"""Parts of ``latency_breakdown`` in stacking order (``ppdmodel.LatencyWaterfall`` terms and
the last-pass correction); greedy has the layers, embedding, final head and host time."""


def latency_breakdown(validation) -> pd.DataFrame:
    """Predicted seconds per token of greedy and every configuration, split into parts.

    One row per method (greedy first): a column per ``BREAKDOWN_PARTS`` name (they sum to
    the closed form's seconds per token), ``predicted_s``, the measured median and quartiles
    per token (``measured_s``, ``measured_q1_s``, ``measured_q3_s``) and ``saved_s``: the
    layer time greedy pays and PPD does not (accepted predictions skip d - d_bar layers).
    """
    first = validation.results[0]
    g_costs, g_tokens = first.greedy_predicted.costs, first.greedy_predicted.tokens
    greedy = dict.fromkeys(BREAKDOWN_PARTS, 0.0)
    greedy.update(
        ideal_s=validation.profile.d * g_costs.layer_s,
        embedding_s=g_costs.embedding_s,
        final_head_s=g_costs.final_head_s,
        host_s=g_costs.host_s,
    )
    rows = [dict(method="greedy", **greedy, **_measured(first.greedy_measured, g_tokens))]
    for r in validation.results:
        parts = dict.fromkeys(BREAKDOWN_PARTS, 0.0) | r.predicted.terms()
        rows.append(dict(method=r.label, **parts,
                         **_measured(r.measured, r.predicted.tokens)))  # fmt: skip
    table = pd.DataFrame(rows).set_index("method")
    table["predicted_s"] = table[list(BREAKDOWN_PARTS)].sum(axis=1)
    table["saved_s"] = greedy["ideal_s"] - table["ideal_s"]
    return table


def _measured(spread, tokens: int) -> dict:
    return dict(measured_s=spread.median / tokens, measured_q1_s=spread.q1 / tokens,
                measured_q3_s=spread.q3 / tokens)  # fmt: skip


def plot_latency_breakdown(validation, *, title: str | None = None):
    """Stacked bars of ``latency_breakdown`` (ms per token) with the measured median and IQR
    beside each bar, and per configuration what accepted predictions saved against what
    PPD added: the reason it wins or loses here. Returns a matplotlib Figure (not saved)."""
    from matplotlib.figure import Figure

    table = latency_breakdown(validation) * 1e3
    parts = [p for p in BREAKDOWN_PARTS if table[p].abs().max() > 1e-12]
    fig = Figure(figsize=(max(6.0, 1.5 * len(table) + 3.5), 4.6), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(table))
    up, down = np.zeros(len(table)), np.zeros(len(table))
    for i, part in enumerate(parts):
        values = table[part].to_numpy()
        bottom = np.where(values >= 0, up, down)
        ax.bar(x - 0.15, values, 0.5, bottom=bottom, color=f"C{i}", label=TERM_LABELS[part])
        up, down = up + np.maximum(values, 0), down + np.minimum(values, 0)
    total = table["predicted_s"].to_numpy()
    ax.plot(x - 0.15, total, "_", color="black", ms=30, mew=2, label="predicted (sum of parts)")
    med = table["measured_s"].to_numpy()
    err = np.stack([med - table["measured_q1_s"], table["measured_q3_s"] - med])
    ax.errorbar(x + 0.22, med, yerr=err, fmt="D", color="black", capsize=3,
                label="measured (median, IQR)")  # fmt: skip
    greedy_total = table["predicted_s"].iloc[0]
    ax.axhline(greedy_total, color="grey", ls="--", lw=1, label="greedy, predicted")
    for xi, (_, row) in zip(x[1:], table.iloc[1:].iterrows(), strict=True):
        added = row["predicted_s"] - greedy_total + row["saved_s"]
        ax.annotate(f"saves {row['saved_s']:.2g} ms\nadds {added:.2g} ms", (xi - 0.15, up[xi]),
                    xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)  # fmt: skip
    labels = [
        m.replace("ppd ", "").replace(" main", "").replace(" single", "") for m in table.index
    ]
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylim(min(0.0, down.min() * 1.2), 1.18 * max(up.max(), table["measured_q3_s"].max()))
    ax.set_ylabel("ms per token (predicted parts; measured beside)")
    ax.set_title(title or "where each token's time goes: ms saved by accepted predictions vs "
                 "ms added by PPD", fontsize=9)  # fmt: skip
    fig.legend(fontsize=7, loc="outside right upper")
    return fig


BACKEND_COLORS = {"single": "tab:blue", "dist": "tab:orange"}
"""Marker colour of each backend in layer_times.png."""


def block_times(validation) -> pd.DataFrame:
    """The term check of every configuration (``measure.eval.terms``) with the price's 95 %
    interval over the profile's cost replicates (``price_low_s``, ``price_high_s``; NaN for
    a profile without samples), configurations grouped by backend."""
    frames = []
    for r in sorted(validation.results, key=lambda r: r.predicted.backend != "single"):
        if r.terms is None or r.terms.empty:
            continue
        bands = price_intervals(validation.profile, r.config)
        frame = r.terms.assign(method=r.label, backend=r.predicted.backend)
        frame["price_low_s"] = [bands[b].low if b in bands else np.nan for b in frame["block"]]
        frame["price_high_s"] = [bands[b].high if b in bands else np.nan for b in frame["block"]]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def plot_block_times(validation, path):
    """layer_times.png of a validation: per block of a pass (one panel each), every
    configuration's median time inside the judged runs (dot, coloured by backend; measured /
    price written beside) against the profile's price (bar: its 95 % interval over the cost
    replicates, tick: the price). Returns the Figure; ValueError without any timed block."""
    from matplotlib.figure import Figure

    table = block_times(validation)
    if table.empty:
        raise ValueError("validation has no block timed in its runs (no term check)")
    methods = list(dict.fromkeys(table["method"]))
    place = table.assign(at=table.groupby("method").cumcount()).groupby("block")["at"].mean()
    blocks = list(place.sort_values(kind="stable").index)  # in the order of a pass
    cols = min(5, len(blocks))
    rows = math.ceil(len(blocks) / cols)
    height = 0.6 + 0.2 * len(methods)
    fig = Figure(figsize=(2.6 * cols + 2.2, height * rows + 1.0), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True)).ravel()
    y = {m: len(methods) - 1 - i for i, m in enumerate(methods)}  # first method on top
    for ax, block in zip(axes, blocks, strict=False):
        _block_panel(ax, table[table["block"] == block], y)
        ax.set_title(block, fontsize=8)
    for ax in axes[len(blocks) :]:
        ax.set_visible(False)
    names = [m.replace("ppd ", "") for m in methods]
    for ax in axes[::cols]:
        ax.set_yticks([y[m] for m in methods], names, fontsize=7)
    fig.suptitle(
        f"{validation.profile.model_name}: each block's median time inside the judged runs (dot) "
        "vs the profile's price (tick; bar: 95 % interval over its cost replicates)",
        fontsize=10,
    )
    key = _block_key(dict.fromkeys(table["backend"]))
    fig.legend(handles=key, loc="outside lower center", fontsize=8, ncols=len(key))
    fig.savefig(path, dpi=110)
    return fig


def _block_panel(ax, rows: pd.DataFrame, y: dict) -> None:
    """One block: price (tick, interval bar) and measured median (dot) per configuration."""
    ys = rows["method"].map(y).to_numpy()
    price = rows["price_s"].to_numpy() * 1e3
    measured = rows["measured_median_s"].to_numpy() * 1e3
    low = rows["price_low_s"].fillna(rows["price_s"]).to_numpy() * 1e3
    high = rows["price_high_s"].fillna(rows["price_s"]).to_numpy() * 1e3
    ax.barh(ys, high - low, left=low, height=0.6, color="0.8")
    ax.plot(price, ys, "|", color="black", markersize=8)
    colors = [BACKEND_COLORS.get(b, "tab:grey") for b in rows["backend"]]
    ax.scatter(measured, ys, s=14, c=colors, zorder=3)
    right = 1.3 * max(np.nanmax(measured), np.nanmax(high), 1e-3)  # an all-zero block: 1 us
    for yi, ratio in zip(ys, rows["ratio"], strict=True):
        if ratio == ratio:  # NaN for a zero price
            ax.text(right, yi, f"x{ratio:.2f}", fontsize=6, ha="right", va="center")
    ax.set_xlim(0, right)
    ax.set_ylim(-0.7, max(y.values()) + 0.7)
    ax.set_xlabel("ms", fontsize=7)
    ax.tick_params(labelsize=7)
    ax.grid(axis="x", linewidth=0.3)


def _block_key(backends) -> list:
    """One legend for every panel of layer_times.png (measured dots of ``backends``)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    dots = [Line2D([], [], marker="o", linestyle="", color=c, label=f"measured in the runs, {b}")
            for b, c in BACKEND_COLORS.items() if b in backends]  # fmt: skip
    return [*dots, Line2D([], [], marker="|", linestyle="", color="black", label="profile's price"),
            Patch(color="0.8", label="price's 95 % interval (cost replicates)")]  # fmt: skip
