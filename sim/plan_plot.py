"""The planner's figure: latency per token against compute per token, one panel per workload."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import ScalarFormatter

from ppdmodel.validation import check_instance
from sim.plan import Plan
from sim.plan_limits import check_screened

METHOD_STYLE = {
    "ppd": ("tab:blue", "o", "PPD"),
    "greedy": ("tab:gray", "s", "greedy + tensor parallel"),
    "early-exit": ("tab:green", "^", "self-speculative early exit"),
    "draft-model": ("tab:orange", "D", "speculative, separate draft"),
    "free": ("tab:purple", "v", "FREE (approximate; quality labelled)"),
}
"""Colour, marker and legend text of each method."""


def plot_plan(plan, screened=None, *, title: str = "", max_points: int = 20_000, seed: int = 0):
    """One panel per workload: each method's Pareto frontier (lines, with each point's 95 %
    latency interval), the frontier of all methods (black), the screened grid (grey dots, a
    sample) and the recommendation (star), under ``title``. Returns the figure."""
    check_instance("plan", plan, Plan)
    check_instance("title", title, str)
    if screened is not None:
        check_screened("screened", screened)
    front = plan.frontier
    workloads = list(dict.fromkeys(front["workload"]))
    width = max(5.2 * len(workloads), 8.0)
    fig, axes = plt.subplots(1, len(workloads), figsize=(width, 4.4), squeeze=False, sharey=True)
    for ax, workload in zip(axes[0], workloads, strict=True):
        rows = front[front.workload == workload]
        if screened is not None:
            grid = screened[screened.workload == workload]
            grid = grid.sample(min(max_points, len(grid)), random_state=seed)
            ax.scatter(grid.compute_s * 1e3, grid.latency_s * 1e3, s=2, c="0.85",
                       rasterized=True, label="screened (sample)")  # fmt: skip
        for method, (colour, marker, text) in METHOD_STYLE.items():
            part = rows[rows.method == method].sort_values("compute_s")
            if len(part):
                ax.plot(part.compute_s * 1e3, part.latency_s * 1e3, marker=marker, ms=4,
                        color=colour, lw=0 if method == "free" else 1.2, label=text)  # fmt: skip
            if len(part) and "latency_low_s" in part:  # the 95 % interval of each point
                low = (part.latency_s - part.latency_low_s).clip(lower=0).fillna(0)
                high = (part.latency_high_s - part.latency_s).clip(lower=0).fillna(0)
                ax.errorbar(part.compute_s * 1e3, part.latency_s * 1e3,
                            yerr=[low * 1e3, high * 1e3], fmt="none", ecolor=colour,
                            elinewidth=0.7, alpha=0.6)  # fmt: skip
            if method == "free":  # quality is FREE's third axis: written beside each point
                for r in part.itertuples():
                    ax.annotate(f"{r.quality:.2f}", (r.compute_s * 1e3, r.latency_s * 1e3),
                                textcoords="offset points", xytext=(7, -11), fontsize=6,
                                color=colour, zorder=6)  # fmt: skip
        best = rows[rows.pareto].sort_values("compute_s")
        ax.step(best.compute_s * 1e3, best.latency_s * 1e3, where="post", color="black",
                lw=0.8, ls="--", label="frontier, all methods")  # fmt: skip
        rec = rows[rows.recommended]
        ax.scatter(rec.compute_s * 1e3, rec.latency_s * 1e3, marker="*", s=220, c="gold",
                   edgecolors="black", zorder=5, label="recommended")  # fmt: skip
        if "sim_latency_s" in rows:
            ax.errorbar(rows.sim_compute_s * 1e3, rows.sim_latency_s * 1e3,
                        yerr=4 * rows.sim_latency_se * 1e3, fmt="none", ecolor="red",
                        elinewidth=0.8, label="simulated (4 s.e.)")  # fmt: skip
        base = rows.latency_s.to_numpy() * rows.speedup.to_numpy()  # greedy on one device
        ax.axhline(base.max() * 1e3, color="0.4", lw=0.8, ls=":")
        ax.annotate(
            "greedy, one device",
            (rows.compute_s.min() * 1e3, base.max() * 1e3),
            textcoords="offset points",
            xytext=(2, 3),
            fontsize=7,
            color="0.3",
        )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(ScalarFormatter())
        lo, hi = rows.compute_s.min() * 1e3, rows.compute_s.max() * 1e3
        ax.set_xlim(lo / 1.25, hi * 1.25)
        top = min(max(rows.latency_s.max() * 1.08, base.max() * 1.3), base.max() * 3)
        ax.set_ylim(0, top * 1e3)  # every method's frontier, up to 3x greedy's latency
        ax.set_title(str(workload))
        ax.set_xlabel("compute per token (busy device-ms)")
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("latency per token (ms); zoomed to the frontiers")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
