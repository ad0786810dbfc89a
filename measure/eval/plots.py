"""Figures of ``ppd validate``: a waterfall per configuration, predicted vs measured."""

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
    """'greedy', 'd_bar/k/head/backend' for PPD or 'EE L/g' for early exit."""
    if row["method"] == "greedy":
        return "greedy"
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
