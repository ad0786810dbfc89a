"""The atlas figure: p_correct against relative depth (layer / d), with bands, beside the paper.

Each panel is one k; each head (logit lens, translator, full head) is a line with its 95 %
bootstrap band; the paper's Vicuna-13B Table 2 (``ppdmodel.paper.TABLE2``, layer / 40) is
overlaid at the same relative depth: open markers for its shared head, filled for its trained
heads, one marker shape per dataset.
"""

from __future__ import annotations

import pandas as pd

from measure.match.atlas import POOLED
from measure.match.config import ATLAS_KINDS, check_records
from ppdmodel import paper
from ppdmodel.validation import check_instance

HEAD_LABELS = {"shared": "logit lens", "translator": "translator", "trained": "full head"}
"""Legend labels of the record head names."""
PAPER_MARKERS = {"SQuAD": "o", "WMT": "s", "CNN/DM": "^"}


def plot_atlas(table: pd.DataFrame, *, prompt_set: str = POOLED, title: str | None = None):
    """A matplotlib Figure with one panel per k; nothing is saved or shown here."""
    from matplotlib.figure import Figure

    table = check_records(table, "table", ATLAS_KINDS, required=())
    check_instance("prompt_set", prompt_set, str)
    if title is not None:
        check_instance("title", title, str)
    rows = table[table["prompt_set"] == prompt_set]
    if rows.empty:
        sets = sorted(table["prompt_set"].unique())
        raise ValueError(f"prompt_set must be one of {sets}, got {prompt_set!r}")
    ks = sorted(int(k) for k in rows["k"].unique())
    fig = Figure(figsize=(4.2 * len(ks), 4.2), layout="constrained")
    axes = fig.subplots(1, len(ks), sharey=True, squeeze=False)[0]
    heads = [h for h in HEAD_LABELS if h in set(rows["head"])]
    heads += sorted(set(rows["head"]) - set(heads))
    for ax, k in zip(axes, ks, strict=True):
        for i, head in enumerate(heads):
            line = rows[(rows["head"] == head) & (rows["k"] == k)].sort_values("layer")
            colour = f"C{i}"
            ax.fill_between(
                line["relative_depth"], line["boot_low"], line["boot_high"], color=colour, alpha=0.2
            )
            ax.plot(
                line["relative_depth"],
                line["p_correct"],
                marker="." if len(line) > 8 else "o",
                color=colour,
                label=HEAD_LABELS.get(head, head),
            )
        _paper_points(ax, k)
        ax.set_title(f"k = {k}")
        ax.set_xlabel("relative depth (layer / d)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("p_correct (95 % bootstrap band over prompts)")
    axes[-1].legend(fontsize=7, loc="upper left")
    n = int(rows["n_tokens"].max())
    fig.suptitle(title or f"p_correct atlas, prompt set {prompt_set!r} (up to n = {n} tokens)")
    return fig


def _paper_points(ax, k: int) -> None:
    """Table 2 of the paper (Vicuna-13B, d = 40) at relative depth layer / 40."""
    rows = paper.TABLE2[paper.TABLE2["k"] == k]
    for dataset, marker in PAPER_MARKERS.items():
        for trained in (False, True):
            sel = rows[(rows["dataset"] == dataset) & (rows["trained"] == trained)]
            ax.plot(
                sel["layer"] / paper.MODEL_LAYERS,
                sel["p_correct"],
                linestyle="none",
                marker=marker,
                markersize=4,
                color="0.35",
                markerfacecolor="0.35" if trained else "none",
                label=f"paper {dataset} ({'trained' if trained else 'shared'})",
            )
