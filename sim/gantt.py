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
    "handoff": "#c44e52",
    "overhead": "#937860",
    "early_head": "#8172b3",
    "dispatch": "#da8bc3",
    "abandoned": "#cccccc",
}


MAX_LABELLED_TOKENS = 25
"""At most about this many token labels per row; beyond it every n-th token is labelled
(n = 2, 5, 10, 20, 50, ...)."""


def plot_gantt(result, ax=None, units: bool | None = None, label_tokens: bool = True):
    """Draw ``result.events`` as bars, one row per process, readable at any ell.

    ``units``: x in time units (layers) or in seconds; by default units under a uniform cost
    and seconds under roofline or measured costs. Token labels are thinned to at most
    ``MAX_LABELLED_TOKENS`` per row; bar edges are dropped when bars get too narrow for them.
    """
    check_instance("result", result, SimResult, "the output of sim.simulate")
    if ax is not None:
        check_instance("ax", ax, Axes, "a matplotlib Axes or None")
    if units is not None:
        check_flag("units", units)
    check_flag("label_tokens", label_tokens)
    events = result.events
    if events.empty:
        raise ValueError("result has no events: simulate with record_events=True to plot it")
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * max(1, events["process"].nunique())))
    if units is None:
        units = _uniform(result.config)
    scale = result.unit_s if units else 1.0
    rows = sorted(events["process"].unique(), key=lambda p: (p != "main", p))
    lanes = {process: i for i, process in enumerate(rows)}
    n_tokens = int(events["token"].max()) if len(events) else 0
    stride = _nice_stride(n_tokens / MAX_LABELLED_TOKENS)
    edge = 0.5 if n_tokens <= 2 * MAX_LABELLED_TOKENS else 0.0
    labelled: set[tuple[str, int]] = set()
    for rec in events.itertuples(index=False):
        y = lanes[rec.process]
        start, width = rec.start / scale, (rec.end - rec.start) / scale
        colour = KIND_COLOURS.get(rec.kind, "grey")
        if width == 0:  # a free hand-off: a marker, not a bar
            ax.plot([start, start], [y - 0.4, y + 0.4], color=colour, lw=2 if edge else 1)
            continue
        ax.barh(y, width, left=start, height=0.8, color=colour, edgecolor="black", lw=edge)
        key = (rec.process, rec.token)
        if label_tokens and rec.token % stride == 0 and (stride == 1 or key not in labelled):
            labelled.add(key)  # thinned: one label per labelled token and row
            ax.text(start + width / 2, y, f"t{rec.token}", ha="center", va="center", fontsize=7)
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("time (layer units)" if units else "time (s)")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=KIND_COLOURS[k])
        for k in KIND_COLOURS
        if k in set(events["kind"])
    ]
    ax.legend(
        handles,
        [k for k in KIND_COLOURS if k in set(events["kind"])],
        fontsize=7,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.28),  # below the time axis: never over a bar or the title
        ncol=len(handles),
        frameon=False,
    )
    cfg = result.config
    ax.set_title(
        f"{cfg.schedule}: d={cfg.d}, d_bar={cfg.d_bar}, k={cfg.k}, ell={cfg.ell}, "
        + (f"T={result.latency_units:.6g} layer units" if units else f"T={result.latency_s:.4g} s")
        + (f" (every {stride}th token labelled)" if label_tokens and stride > 1 else ""),
        loc="left",
        fontsize=10,
    )
    return ax


def _uniform(config) -> bool:
    """True when time units are the natural axis: every layer costs one unit, nothing else."""
    return type(config.cost).__name__ == "UniformCost" and getattr(config, "costs", None) is None


def _nice_stride(ratio: float) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= ratio."""
    stride = 1
    while stride < ratio:
        stride = stride * 5 // 2 if str(stride).startswith("2") else stride * 2
    return stride
