"""Point labels that do not overprint: a simple pairwise repulsion of their text boxes.

Each label starts beside its point; while two boxes overlap (with a small pad), both move
apart along the axis where they overlap least, and every box is kept inside the axes. Done in
display pixels with the boxes matplotlib itself measures, so what the test checks
(``overlapping``) is what the PNG shows. No dependency beyond matplotlib.
"""

from __future__ import annotations

import numpy as np
from matplotlib.text import Text

PAD_PX = 6.0
"""Gap left between two label boxes (pixels)."""
MAX_STEPS = 500
"""Repulsion rounds at most (each moves every overlapping pair apart once)."""
MARKER_PX = 10.0
"""Side of the square around each labelled point that labels keep clear of (pixels)."""


def repel_labels(ax, annotations, renderer, *, pad: float = PAD_PX) -> None:
    """Move ``annotations`` (``ax.annotate(..., textcoords="offset points")``, centred on
    their text) so that no two text boxes overlap, none covers a labelled point and each
    stays inside ``ax``; a leader line (the annotation's arrow) joins a label to its point."""
    if not annotations:
        return
    fig = ax.figure
    to_pt = 72.0 / fig.dpi
    anchors = np.array([ax.transData.transform(a.xy) for a in annotations])
    sizes = np.array([(b.width, b.height) for b in text_boxes(annotations, renderer)])
    centres = anchors + _away(anchors) * (sizes / 2 + pad)  # away from the crowd around it
    frame = ax.get_window_extent(renderer)
    low = np.array([frame.x0, frame.y0]) + sizes / 2
    high = np.maximum(low, np.array([frame.x1, frame.y1]) - sizes / 2)
    for points in (anchors, anchors[:0]):  # then once more without the points: labels first
        for _ in range(MAX_STEPS):
            moved = _step(centres, sizes, points, pad)
            np.clip(centres, low, high, out=centres)
            if not moved:
                break
    for a, centre, anchor in zip(annotations, centres, anchors, strict=True):
        a.set_position(tuple((centre - anchor) * to_pt))
        a.set_horizontalalignment("center")
        a.set_verticalalignment("center")


def _step(centres, sizes, points, pad: float) -> bool:
    """One round: each label leaves every point it covers, then each overlapping pair of
    labels moves apart along the axis where they overlap least (in place); True if any moved."""
    moved = False
    for i in range(len(centres)):
        for point in points:
            gap = (sizes[i] + MARKER_PX) / 2 + pad - np.abs(centres[i] - point)
            if (gap > 0).all():
                axis = int(gap[1] < gap[0])  # 0: x, 1: y (move the least)
                centres[i][axis] += (np.sign(centres[i][axis] - point[axis]) or 1.0) * gap[axis]
                moved = True
        for j in range(i + 1, len(centres)):
            gap = (sizes[i] + sizes[j]) / 2 + pad - np.abs(centres[i] - centres[j])
            if (gap <= 0).any():
                continue
            axis = int(gap[1] < gap[0])
            sign = np.sign(centres[i][axis] - centres[j][axis]) or 1.0
            centres[i][axis] += sign * gap[axis] / 2
            centres[j][axis] -= sign * gap[axis] / 2
            moved = True
    return moved


def _away(anchors, radius: float = 60.0):
    """Per point, a diagonal direction (+-1, +-1) pointing away from the points within
    ``radius`` pixels of it (up and right when it stands alone)."""
    out = np.ones_like(anchors)
    for i, point in enumerate(anchors):
        near = anchors[np.linalg.norm(anchors - point, axis=1) < radius]
        out[i] = np.where(point - near.mean(axis=0) < 0, -1.0, 1.0)
    return out


def text_boxes(annotations, renderer) -> list:
    """The text's own box of each annotation (display pixels), without its leader line."""
    return [Text.get_window_extent(a, renderer) for a in annotations]


def overlapping(boxes, *, pad: float = 0.0) -> list[tuple[int, int]]:
    """Pairs (i, j) of matplotlib ``Bbox``es that overlap by more than ``pad`` pixels."""
    pairs = []
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            b = boxes[j]
            if min(a.x1, b.x1) - max(a.x0, b.x0) > pad and min(a.y1, b.y1) - max(a.y0, b.y0) > pad:
                pairs.append((i, j))
    return pairs
