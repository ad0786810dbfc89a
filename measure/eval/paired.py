"""Each judged run priced at the machine's speed beside it: a sentinel timed around every run.

A shared machine changes speed in spells (on the 2-vCPU VM of this project a greedy step of
SmolLM2 switches between about 53 and 70-80 ms for seconds to minutes,
``experiments/machine_drift.py``). A prediction in seconds prices one machine; each judged run
meets the machine of its own moment, so a configuration's measured median moves with the spells
it happened to meet, and two validations of the same code differ by as much. Speed-ups cancel
that (greedy and PPD meet it alike, round by round); seconds do not.

``ppd validate --interleave-probes`` therefore also times the profile's sentinel
(``measure.profile.drift.DriftWatch``: a greedy step's layers, the median of a few steps, at
the profile's sentinel threads and context) before every gap of probes, before every prompt of
every judged greedy and PPD run (``time_repeated(before_prompt=)``: greedy and PPD decode one
prompt per call, in turns, ``measure.eval.repeat``) and once after the last run
(``SentinelTimeline``). A prompt's *speed* is the geometric mean of the windows just before and
just after it (the next window is the one before the next method's piece; a probe round may lie
between the two).

One window reads its moment poorly: 8 steps started right after another workload. In
validations on the 2-vCPU VM, consecutive windows' logs correlated by only about 0.2, while the
windows' level over the runs (their median, ``level_s``, over dozens of windows) is read well.
So a prompt's seconds are moved to the machine a prediction was priced at in two parts: in full
by the level (reference / level, the reference being the median window of the profile the
prediction comes from: ``MachineDrift.median_s``; for the interleaved probes' prices, timed
over the runs, the level itself), and by its own deviation from the level shrunk by ``weight``,
the lag-1 autocorrelation of the windows' logs (clipped to [0, 1]; 0 with fewer than
``MIN_WINDOWS``): the share of a window's spread that persists to the next window, the
least-squares weight of one window as a reading of a moment beside it. A prompt's speed is
mostly the mean of two windows, whose least-squares weight would be 2 rho / (1 + rho) if the
machine held still between them (0.33 at rho = 0.2); the one-window weight is kept because it
does not (conservative: it moves a prompt less). The *paired* error of a configuration is
predicted / median over its runs of (the sum over its prompts of seconds x (reference / level)
x (level / speed)^weight) - 1: each prompt moved by readings taken beside it, never from it;
with every speed at the level and the level at the reference it is the plain error. All of it
comes from the windows; nothing is fitted on the judged runs.

``python experiments/machine_drift.py`` prints what pairing would leave on a machine's own
sentinel blocks (continuous 20-step blocks, whose lag-1 correlation is higher, 0.62 on the VM):
a 3-block run's median over 3 runs 44 blocks apart was off the pooled windows by a log-sd of
0.071, and by 0.050 paired in full with its neighbouring blocks; three one-block pieces, each
paired with its own neighbours, were off their machine by 0.051 where pairing the whole 5-block
span left 0.083. Hence a window per prompt. Pairing cannot remove a spell that starts or ends
inside a piece.

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

MIN_WINDOWS = 6
"""Fewer sentinel windows than this give no weight to a prompt's own windows."""


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

    @property
    def level_s(self) -> float | None:
        """The windows' median: the machine's level over the runs (None without windows)."""
        windows = self.windows_s
        return float(np.median(windows)) if windows else None

    @property
    def weight(self) -> float:
        """The lag-1 autocorrelation of the windows' logs, clipped to [0, 1]: how much of one
        window's deviation from the level a window beside it shares (module doc); 0 with fewer
        than MIN_WINDOWS windows or windows that do not vary."""
        logs = np.log(self.windows_s)
        if len(logs) < MIN_WINDOWS or np.ptp(logs) == 0:
            return 0.0
        x = logs - logs.mean()
        rho = float(np.dot(x[:-1], x[1:]) / np.dot(x, x))
        return min(max(rho, 0.0), 1.0)

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


def paired_rel_err(predicted_s: float, runs, reference_s: float | None, *, level_s: float,
                   weight: float) -> float | None:  # fmt: skip
    """predicted_s / median over runs of (sum over the run's pieces of seconds x (reference_s /
    level_s) x (level_s / speed)^weight) - 1: the prediction against each run moved to the
    reference machine (module doc). ``runs``: per run, its pieces (one per prompt), each
    (seconds, speed or None). The plain error when every speed is the level and the level the
    reference. None where it cannot be paired (no reference, or a piece without a speed)."""
    runs = [list(r) for r in runs]
    if not runs or not all(runs):
        raise ValueError(f"runs must hold at least one run, each of at least one piece, got {runs}")
    if not (math.isfinite(predicted_s) and predicted_s > 0):
        raise ValueError(f"predicted_s must be finite and > 0, got {predicted_s!r}")
    if not (math.isfinite(level_s) and level_s > 0):
        raise ValueError(f"level_s must be finite and > 0, got {level_s!r}")
    if not (math.isfinite(weight) and 0 <= weight <= 1):
        raise ValueError(f"weight must be in [0, 1], got {weight!r}")
    pieces = [piece for r in runs for piece in r]
    if any(not (math.isfinite(t) and t > 0) for t, _ in pieces):
        raise ValueError(f"runs: every piece's seconds must be finite and > 0, got {runs}")
    if any(s is not None and not (math.isfinite(s) and s > 0) for _, s in pieces):
        raise ValueError(f"runs: every speed must be finite and > 0 (or None), got {runs}")
    if reference_s is None or any(s is None for _, s in pieces):
        return None
    if not (math.isfinite(reference_s) and reference_s > 0):
        raise ValueError(f"reference_s must be finite and > 0, got {reference_s!r}")
    shift = reference_s / level_s
    moved = [sum(t * shift * (level_s / s) ** weight for t, s in r) for r in runs]
    return predicted_s / float(np.median(moved)) - 1.0
