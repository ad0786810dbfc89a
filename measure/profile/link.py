"""A link between two ranks as latency + bytes / bandwidth, fitted to timed messages (the
time of one message is ``ppdmodel.link_seconds``)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls


def fit_link(samples) -> tuple[float, float]:
    """(latency_s, bandwidth_bytes_per_s) from (bytes, seconds) samples by least squares.

    The fit uses the median time of each message size (one descheduled probe on a busy host
    must not set the latency). Fewer than two distinct sizes: latency = median, bandwidth = inf.
    """
    if not samples:
        return 0.0, math.inf
    sizes = sorted({float(s[0]) for s in samples})
    nbytes = np.array(sizes)
    seconds = np.array([np.median([s[1] for s in samples if s[0] == b]) for b in sizes])
    if len(sizes) < 2:
        return float(seconds[0]), math.inf
    design = np.stack([np.ones_like(nbytes), nbytes], axis=1)
    (latency, per_byte), _ = nnls(design, seconds)
    return float(latency), (float(1.0 / per_byte) if per_byte > 0 else math.inf)
