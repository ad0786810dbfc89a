"""Fit the simulator's overhead terms (per token, per hand-off, link) to measured PPD runs.

Model of one measured pass t of the main process (seconds), the simulator's accounting:

    D_t = C_t + per_token_overhead_s + m_t * handoff_s

C_t is the layer and head time main spent (``MeasuredCost``: embedding, layers [a, d), the
early head on passes that made candidates, the final head); D_t is the time between tokens
t-1 and t becoming known. (per_token_overhead_s, handoff_s) come from non-negative least
squares over every pass of every run. The link's latency and bandwidth come from a second
least-squares fit, ``seconds = latency_s + bytes / bandwidth``, to timed point-to-point
messages (``PPDResult.link_samples``); per_handoff_overhead_s is what handoff_s leaves after
the link's transfer time of one hand-off message.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import nnls

from measure.profile.link import fit_link
from ppdmodel.costs import link_seconds
from sim import Link
from sim.passes import greedy_step_seconds, main_pass_seconds

__all__ = [
    "Calibration",
    "fit_link",
    "fit_overheads",
    "greedy_step_compute",
    "pass_durations",
    "ppd_pass_compute",
    "transfer_seconds",
]


@dataclass(frozen=True)
class Calibration:
    """Overhead terms fitted to measured runs (inputs of ``sim.SimConfig``)."""

    per_token_overhead_s: float
    """Fixed seconds per generated token beyond the measured layer/head times (PPD main)."""
    per_handoff_overhead_s: float
    """Fixed seconds per accepted hand-off beyond the link transfer."""
    link_latency_s: float
    """Link latency (0 when no link was probed, e.g. one process)."""
    link_bandwidth_bytes_per_s: float
    """Link bandwidth (inf when no link was probed)."""
    greedy_per_token_overhead_s: float = 0.0
    """Fixed seconds per token of plain greedy decoding beyond the measured layer/head times."""
    n_passes: int = 0
    """Passes (tokens) the PPD fit used."""
    rms_residual_s: float = 0.0
    """Root-mean-square residual of the per-pass fit, seconds."""

    def link(self):
        """The fitted ``sim.Link`` (None when no link was measured)."""
        if self.link_latency_s == 0 and math.isinf(self.link_bandwidth_bytes_per_s):
            return None
        bandwidth = min(self.link_bandwidth_bytes_per_s, sys.float_info.max)  # inf: latency only
        return Link("calibrated", self.link_latency_s, bandwidth)

    def to_dict(self) -> dict:
        """Plain values for strict JSON: an infinite bandwidth (no link probed) becomes None."""
        return {
            key: None if isinstance(value, float) and math.isinf(value) else value
            for key, value in asdict(self).items()
        }

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        values = {key: data[key] for key in cls.__dataclass_fields__ if key in data}
        if values.get("link_bandwidth_bytes_per_s", 0.0) is None:
            values["link_bandwidth_bytes_per_s"] = math.inf
        return cls(**values)


def transfer_seconds(latency_s: float, bandwidth: float, nbytes: float) -> float:
    """Link time of one message (``ppdmodel.link_seconds``, the one formula; an infinite
    bandwidth, no link probed, costs the latency alone)."""
    return link_seconds(latency_s=latency_s, nbytes=nbytes, bandwidth_bytes_per_s=bandwidth)


def pass_durations(token_times_s) -> np.ndarray:
    """D_t: seconds between consecutive tokens becoming known (token 0 at time 0)."""
    times = np.asarray(token_times_s, dtype=float)
    return np.diff(np.concatenate([[0.0], times]))


def ppd_pass_compute(cost, *, d: int, d_bar: int, m) -> np.ndarray:
    """C_t: main's layer and head seconds per pass (``sim.passes.main_pass_seconds``)."""
    return main_pass_seconds(cost, d=d, d_bar=d_bar, m=m)


def greedy_step_compute(cost, d: int) -> float:
    """Seconds of one greedy step's parts: embedding, d layers, head."""
    return greedy_step_seconds(cost, d)


def fit_overheads(ppd_results, cost, *, greedy_results=(), link_samples=None) -> Calibration:
    """Fit a Calibration to PPD runs (``PPDResult``) and optional greedy runs."""
    if not ppd_results:
        raise ValueError("ppd_results must hold at least one run")
    rows, targets = [], []
    for result in ppd_results:
        d, d_bar = result.trace.d, result.trace.d_bar
        residual = pass_durations(result.token_times_s) - ppd_pass_compute(
            cost, d=d, d_bar=d_bar, m=result.m
        )
        matched = np.concatenate([[0.0], np.asarray(result.m, dtype=float)])
        rows.append(np.stack([np.ones_like(matched), matched], axis=1))
        targets.append(residual)
    design, target = np.concatenate(rows), np.concatenate(targets)
    (per_token, handoff), _ = nnls(design, target)
    rms = float(np.sqrt(np.mean((design @ np.array([per_token, handoff]) - target) ** 2)))
    samples = link_samples if link_samples is not None else ppd_results[0].link_samples
    latency, bandwidth = fit_link(samples)
    link_s = transfer_seconds(latency, bandwidth, ppd_results[0].handoff_bytes) if samples else 0
    greedy = 0.0
    if greedy_results:
        d = ppd_results[0].trace.d
        per_step = greedy_step_compute(cost, d)
        greedy = float(
            max(
                0.0,
                np.mean(
                    np.concatenate(
                        [pass_durations(g.token_times_s) - per_step for g in greedy_results]
                    )
                ),
            )
        )
    return Calibration(
        per_token_overhead_s=float(per_token),
        per_handoff_overhead_s=float(max(0.0, handoff - link_s)),
        link_latency_s=latency,
        link_bandwidth_bytes_per_s=bandwidth,
        greedy_per_token_overhead_s=greedy,
        n_passes=len(target),
        rms_residual_s=rms,
    )
