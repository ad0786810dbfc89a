"""Each judged run priced at the machine's speed beside it: a sentinel timed around every run.

A shared machine changes speed in spells (on the 2-vCPU VM of this project a greedy step of
SmolLM2 switches between about 53 and 70-80 ms for seconds to minutes,
``benchmarks/machine_drift.py``). A prediction in seconds prices one machine; each judged run
meets the machine of its own moment, so a configuration's measured median moves with the spells
it happened to meet, and two validations of the same code differ by as much. Speed-ups cancel
that (greedy and PPD meet it alike, round by round); seconds do not.

``ppd validate --interleave-probes`` therefore also times the profile's sentinel
(``measure.profile.drift.DriftWatch``: a greedy step's layers, the median of a few steps, at
the profile's sentinel threads and context) before every gap of probes, before every prompt of
every judged greedy and PPD run (``time_repeated(before_prompt=)``: a run then decodes one
prompt per call, the probe round before the run first) and once after the last run
(``SentinelTimeline``). A prompt's *speed* is the geometric mean of the windows just before and
just after it (after a run's last prompt, the next run's probe round lies between the two). Its
reference is the median of the windows of the profile the prediction comes from
(``MachineDrift.median_s``): the profile's own windows for the profile taken beforehand, the
windows taken during the runs for the interleaved probes' prices. The *paired* error of a
configuration is predicted / median over its runs of (the sum over its prompts of seconds x
reference / speed) - 1: each prompt's seconds moved to the reference machine, by a measurement
taken beside it, never from it; with every speed equal to the reference it is the plain error.
``python benchmarks/machine_drift.py`` prints what pairing leaves on a machine's own sentinel
blocks: on the 2-vCPU VM (300 s, 192 blocks of 20 steps) a 3-block run's median over 3 runs 44
blocks apart was off the pooled windows by a log-sd of 0.071, and by 0.050 paired with its
neighbouring blocks; a run of three one-block pieces, each paired with its own neighbours, was
off its machine by 0.051 where pairing the whole 5-block span left 0.083. Hence a window per
prompt: the shorter the piece, the less a spell can change inside it. Pairing cannot remove a
spell that starts or ends inside a piece.

What it assumes: every cost term moves with the sentinel (a greedy step's layers at the
sentinel's threads), including the ``dist`` link and host time, and the runs' thread counts;
the profile's reference is one number, so a drift inside the profile is not corrected.
Early-exit and FREE rows are not paired (one window is timed before each of their runs, as a
neighbour of the runs beside them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SentinelTimeline:
    """Sentinel windows (seconds) and judged runs (by key), in the order they happened."""

    threads: int
    """The sentinel's torch threads (a reference from another thread count is refused)."""
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
        """The windows' medians, in order."""
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


def paired_rel_err(predicted_s: float, runs, reference_s: float | None) -> float | None:
    """predicted_s / median over runs of (sum over the run's pieces of seconds x reference_s /
    speed) - 1: the prediction against each run moved to the reference machine (module doc).
    ``runs``: per run, its pieces (one per prompt), each (seconds, speed or None). Equal to the
    plain error when every speed is the reference. None where it cannot be paired (no
    reference, or a piece without a speed)."""
    runs = [list(r) for r in runs]
    if not runs or not all(runs):
        raise ValueError(f"runs must hold at least one run, each of at least one piece, got {runs}")
    if not (math.isfinite(predicted_s) and predicted_s > 0):
        raise ValueError(f"predicted_s must be finite and > 0, got {predicted_s!r}")
    pieces = [piece for r in runs for piece in r]
    if any(not (math.isfinite(t) and t > 0) for t, _ in pieces):
        raise ValueError(f"runs: every piece's seconds must be finite and > 0, got {runs}")
    if any(s is not None and not (math.isfinite(s) and s > 0) for _, s in pieces):
        raise ValueError(f"runs: every speed must be finite and > 0 (or None), got {runs}")
    if reference_s is None or any(s is None for _, s in pieces):
        return None
    if not (math.isfinite(reference_s) and reference_s > 0):
        raise ValueError(f"reference_s must be finite and > 0, got {reference_s!r}")
    moved = [sum(t * reference_s / s for t, s in r) for r in runs]
    return predicted_s / float(np.median(moved)) - 1.0
