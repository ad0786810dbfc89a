"""Gantt chart of one simulated schedule, one row per process, in the style of Figure 2."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from ppdmodel.validation import check_flag, check_instance
from sim.run import SimResult

KIND_COLOURS = {
    "prefix": "#4c72b0",
    "suffix": "#55a868",
    "speculate": "#dd8452",
    "forward": "#4c72b0",
    "head": "#8172b3",
    "handoff": "#c44e52",
    "overhead": "#937860",
}


def plot_gantt(result, ax=None, units: bool = True, label_tokens: bool = True):
    """Draw ``result.events`` as bars (x: time units, or seconds with ``units=False``)."""
    check_instance("result", result, SimResult, "the output of sim.simulate")
    if ax is not None:
        check_instance("ax", ax, Axes, "a matplotlib Axes or None")
    check_flag("units", units)
    check_flag("label_tokens", label_tokens)
    events = result.events
    if events.empty:
        raise ValueError("result has no events: simulate with record_events=True to plot it")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * max(1, events["process"].nunique())))
    scale = result.unit_s if units else 1.0
    rows = sorted(events["process"].unique(), key=lambda p: (p != "main", p))
    lanes = {process: i for i, process in enumerate(rows)}
    for rec in events.itertuples(index=False):
        y = lanes[rec.process]
        start, width = rec.start / scale, (rec.end - rec.start) / scale
        colour = KIND_COLOURS.get(rec.kind, "grey")
        if width == 0:  # a free hand-off: a marker, not a bar
            ax.plot([start, start], [y - 0.4, y + 0.4], color=colour, lw=2)
            continue
        ax.barh(y, width, left=start, height=0.8, color=colour, edgecolor="black", lw=0.5)
        if label_tokens:
            ax.text(start + width / 2, y, f"t{rec.token}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("time (units)" if units else "time (s)")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k])
        for k in KIND_COLOURS
        if k in set(events["kind"])
    ]
    ax.legend(
        handles,
        [k for k in KIND_COLOURS if k in set(events["kind"])],
        fontsize=7,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),  # above the axes, beside the title: never over a bar
        ncol=4,
        frameon=False,
    )
    cfg = result.config
    ax.set_title(
        f"{cfg.schedule}: d={cfg.d}, d_bar={cfg.d_bar}, k={cfg.k}, ell={cfg.ell}, "
        f"T={result.latency_units:g} units",
        loc="left",
        fontsize=10,
    )
    return ax
