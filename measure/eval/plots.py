"""Figures of ``ppd validate``: a waterfall per configuration, predicted vs measured, and the
stacked latency breakdown of greedy beside every configuration."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from measure.eval.verdict import TERM_LABELS

LABEL_OFFSETS = ((6, 8), (6, -14), (-40, 10), (-40, -16))
"""Point-label offsets (points) of predicted_vs_measured.png, cycled over the rows."""
MIN_SHOWN_SHARE = 0.002
"""Waterfall terms smaller than this share of the total are left out of the figure."""


def plot_waterfalls(validation, path) -> None:
    """Per configuration: Theorem 4.1's ideal, each cost term stacked on top, the prediction
    and, beside it, the measured median per token with its IQR (ms per token, PNG)."""
    from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone

    results = validation.results
    cols = min(3, len(results))
    rows = math.ceil(len(results) / cols)
    fig = Figure(figsize=(4.6 * cols, 3.6 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for ax, result in zip(axes, results, strict=False):
        _waterfall(ax, result)
    for ax in axes[len(results) :]:
        ax.set_visible(False)
    fig.suptitle(
        "where PPD's time per token goes: predicted from the profile vs measured", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


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
    ax.set_xticks(
        np.arange(len(labels) + 2), [*labels, "predicted", "measured"], rotation=60, fontsize=7
    )
    ax.set_ylabel("ms per token")
    c = result.config
    ax.set_title(
        f"d_bar={c.d_bar} k={c.k} {c.early_head} {c.backend}: error {100 * result.rel_err:+.1f} %",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="lower right")


def _point_name(row) -> str:
    """'greedy', 'd_bar/k/head/backend' for PPD, 'EE L/g' for early exit or 'FREE L_s/threshold'."""
    if row["method"] == "greedy":
        return "greedy"
    if row.get("threshold") is not None and row.get("threshold") == row.get("threshold"):
        return f"FREE {int(row['exit_layer'])}/{row['threshold']:.3g}"
    if row.get("exit_layer") is not None and row.get("exit_layer") == row.get("exit_layer"):
        return f"EE {int(row['exit_layer'])}/{int(row['draft_tokens'])}"
    return f"{int(row['d_bar'])}/{int(row['k'])}/{row['early_head'][0]}/{row['backend'][0]}"


def plot_predicted_vs_measured(validation, path) -> None:
    """Predicted (closed form and simulator; for early exit the step accounting and the
    i.i.d. closed form) against the measured median, with the IQR as error bars; the
    diagonal and the 5 % and 15 % bands (seconds over all prompts, PNG)."""
    from matplotlib.figure import Figure

    table = validation.table
    fig = Figure(figsize=(6.2, 5.2))
    ax = fig.subplots()
    measured = table["measured_s"].to_numpy()
    xerr = np.stack(
        [measured - table["measured_q1_s"].to_numpy(), table["measured_q3_s"].to_numpy() - measured]
    )
    early = (table["exit_layer"].notna() if "exit_layer" in table
             else pd.Series(False, index=table.index)).to_numpy(dtype=bool)  # fmt: skip
    ppd = ~early
    ax.errorbar(measured[ppd], table["predicted_s"][ppd], xerr=xerr[:, ppd], fmt="o", capsize=3,
                label="closed form")  # fmt: skip
    ax.plot(measured[ppd], table["simulated_s"][ppd], "x", color="tab:red", markersize=9,
            label="simulator")  # fmt: skip
    if early.any():
        ax.errorbar(
            measured[early],
            table["predicted_s"][early],
            xerr=xerr[:, early],
            fmt="s",
            color="tab:olive",
            capsize=3,
            label="early exit: exact step accounting",
        )
        ax.plot(measured[early], table["iid_s"][early], "+", color="tab:purple", markersize=9,
                label="early exit: i.i.d. closed form")  # fmt: skip
    for i, (_, row) in enumerate(table.iterrows()):  # cycling offsets keep close points legible
        ax.annotate(_point_name(row), (row["measured_s"], row["predicted_s"]), fontsize=6,
                    xytext=LABEL_OFFSETS[i % len(LABEL_OFFSETS)], textcoords="offset points",
                    arrowprops=dict(arrowstyle="-", linewidth=0.4, color="grey"))  # fmt: skip
    shown = pd.concat([table["predicted_s"], table.get("iid_s", pd.Series(dtype=float))])
    low = 0.8 * min(measured.min(), shown.min())
    high = 1.2 * max(measured.max(), shown.max())
    line = np.array([low, high])
    ax.plot(line, line, color="black", linewidth=1)
    for band, alpha in ((0.05, 0.25), (0.15, 0.1)):
        ax.fill_between(line, line * (1 - band), line * (1 + band), color="tab:green",
                        alpha=alpha, label=f"within {100 * band:.0f} %")  # fmt: skip
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured decode seconds (median over rounds, IQR bars)")
    ax.set_ylabel("predicted decode seconds (profile, nothing fitted)")
    ax.set_title(
        "labels: d_bar/k/early head (m|c)/backend (s|d); EE L/g: HF early exit, after the "
        "first step",
        fontsize=7,
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


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
        rows.append(dict(method=r.config.label, **parts,
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
