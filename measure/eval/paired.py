"""Each judged run priced at the machine's speed beside it: a sentinel timed around every run.

A shared machine changes speed in spells (on the 2-vCPU VM of this project a greedy step of
SmolLM2 switches between about 53 and 70-80 ms for seconds to minutes,
``benchmarks/machine_drift.py``). A prediction in seconds prices one machine; each judged run
meets the machine of its own moment, so a configuration's measured median moves with the
spells it happened to meet, and two validations of the same code differ by as much. Speed-ups
cancel that (greedy and PPD meet it alike, round by round); seconds do not.

``ppd validate --interleave-probes`` therefore also times the profile's sentinel
(``measure.profile.drift.DriftWatch``: a greedy step's layers, the median of a few steps, at
the profile's sentinel threads and context) right before every judged run, before every gap of
probes and once after the last run (``SentinelTimeline``). A run's *speed* is the geometric
mean of the windows just before and just after it, relative to a reference: the median of the
profile's own sentinel windows (the machine its prices were timed on), or the median of the
windows taken during the runs (the interleaved probes' prices). The *paired* error of a
configuration is then the median over its runs of (prediction x speed / run seconds) - 1: the
prediction moved to the machine each run met, by a measurement taken beside the run, never
from it. Offline, on 300 s of the VM's sentinel blocks (``benchmarks/machine_drift.py``),
pairing a 3-block run with the blocks before and after it cut the drift left in a
3-round median by about 30 % (log-sd 0.071 -> 0.050); it cannot remove a spell that starts
or ends inside a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SentinelTimeline:
    """Sentinel windows (seconds) and judged runs (by key), in the order they happened."""

    events: list[tuple[str, object]] = field(default_factory=list)

    def window(self, seconds: float) -> None:
        """A sentinel window's median (ignored unless finite and > 0: a clock that did not
        move reads no speed)."""
        if math.isfinite(seconds) and seconds > 0:
            self.events.append(("window", float(seconds)))

    def run(self, key) -> None:
        """A judged run of ``key`` (a method's config; None for greedy) starts now."""
        self.events.append(("run", key))

    @property
    def windows_s(self) -> list[float]:
        return [v for kind, v in self.events if kind == "window"]

    def speeds_s(self, key) -> list[float | None]:
        """For every run of ``key`` in order: the geometric mean of the nearest windows before
        and after it (the one there is where the other is missing; None for neither)."""
        out = []
        for i, (kind, value) in enumerate(self.events):
            if kind != "run" or value != key:
                continue
            before = next((v for k, v in reversed(self.events[:i]) if k == "window"), None)
            after = next((v for k, v in self.events[i + 1 :] if k == "window"), None)
            near = [v for v in (before, after) if v is not None]
            out.append(float(np.exp(np.mean(np.log(near)))) if near else None)
        return out


def paired_rel_err(predicted_s: float, totals_s, speeds_s, reference_s: float | None
                   ) -> float | None:  # fmt: skip
    """Median over runs of predicted_s x (speed / reference_s) / run seconds, minus 1: the
    prediction at the machine each run met (module doc). None where it cannot be paired (no
    reference, a run without a speed, or a count mismatch)."""
    if reference_s is None or not (math.isfinite(reference_s) and reference_s > 0):
        return None
    totals, speeds = list(totals_s), list(speeds_s)
    if not totals or len(totals) != len(speeds) or any(s is None for s in speeds):
        return None
    if not math.isfinite(predicted_s) or any(not (t > 0) for t in totals):
        return None
    ratios = [predicted_s * (s / reference_s) / t for s, t in zip(speeds, totals, strict=True)]
    return float(np.median(ratios)) - 1.0
