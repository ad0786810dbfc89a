"""How much the machine's speed moved while a profile was measured, and what that does to its
intervals.

A profile's figures are medians of samples taken within a few seconds each, and a bootstrap of
those samples gives their sampling error only. A shared machine also changes speed over tens of
seconds: on the 2-vCPU VM of this project a greedy step of SmolLM2 took 53-56 ms for a while,
then 70-75 ms for a minute or two, then 53-56 ms again (``experiments/machine_drift.py``). A
figure timed in one spell then prices a run made in the other, and no spread within the profile
shows it.

``DriftWatch`` times the same sentinel (a greedy step's layers, ``SENTINEL_STEPS`` steps at
fixed threads on its own ``DecodeProbe``) at several points of a profile (``window()``: before,
halfway through, between and after the parts it measures); the windows' medians are the
machine's speed as the profile went along. The estimate is rough (3-7 windows; a window's own
sampling noise is in it too), so it errs wide; the interleaved probes' windows (before every
gap and every judged run, ``measure.eval.interleaved``) scale their profile the same way, which
is conservative there too: the runs average over the same span. Those windows also pair each
judged run with the machine it met (``measure.eval.paired``). ``drift_factors`` turns their
spread into one multiplicative factor per bootstrap replicate (lognormal, centred on 1, the
log-spread of the windows), applied to every timed figure of that replicate in every backend
alike: a prediction's interval in seconds then carries the machine's drift, while a speed-up (a
ratio taken within one replicate) does not. (The ``dist`` messages, priced by the fitted link,
are not scaled: a small part of a pass, so a ``dist`` speed-up is nearly, not exactly, free of
it.)

A profile that met a quiet spell reads a small drift and gets narrow intervals that a run
minutes later need not respect: on the VM, a profile whose windows spread by a log-sd of 1.3 %
had intervals of +-2-4 %, and 5 of its 10 configurations measured outside them by 2.4-5.0 %
(issue 24). ``floor_log_sd`` (``ppd measure profile --drift-floor``) is the machine's own drift
over minutes, measured once apart from any profile (``experiments/machine_drift.py`` prints it:
the log-sd of its 80 s windows' medians, 0.10 on the VM); the factors then use the larger of
the two (``applied_log_sd``). The interleaved probes' profile (``measure.eval.interleaved``)
takes none: its windows sit beside the runs it prices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from measure.profile.probes import DecodeProbe

SENTINEL_STEPS = 8
"""Greedy steps per window; the window's figure is their median."""
DRIFT_WARN = 0.10
"""A profile whose windows' max / min - 1 exceeds this warns that the machine moved."""


@dataclass(frozen=True)
class MachineDrift:
    """The sentinel's window medians (seconds, in the order taken) and what they imply."""

    windows_s: tuple[float, ...]
    threads: int
    sentinel: str = "greedy step's layers"
    floor_log_sd: float = 0.0
    """The machine's drift over minutes measured apart from this profile (``--drift-floor``,
    from ``experiments/machine_drift.py``): a profile that happened to meet a quiet spell does not
    make its intervals narrower than this."""

    def __post_init__(self) -> None:
        floor = self.floor_log_sd
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor < 1:
            raise ValueError(f"the drift floor must be a log-sd in [0, 1), got {floor!r}")

    @property
    def log_sd(self) -> float:
        """Sample standard deviation of the windows' log medians (0 for fewer than two)."""
        if len(self.windows_s) < 2:
            return 0.0
        return float(np.std(np.log(self.windows_s), ddof=1))

    @property
    def applied_log_sd(self) -> float:
        """The log-sd the profile's intervals carry: its windows', or the floor if larger."""
        return max(self.log_sd, float(self.floor_log_sd))

    def with_floor(self, floor_log_sd: float) -> MachineDrift:
        """The same windows with ``floor_log_sd`` (ValueError outside [0, 1))."""
        return MachineDrift(self.windows_s, self.threads, self.sentinel, floor_log_sd)

    @property
    def median_s(self) -> float | None:
        """The windows' median: the machine's speed the profile's prices stand for (None
        without windows)."""
        return float(np.median(self.windows_s)) if self.windows_s else None

    @property
    def rel_range(self) -> float:
        """max / min - 1 of the window medians (0 for fewer than two)."""
        if len(self.windows_s) < 2:
            return 0.0
        return max(self.windows_s) / min(self.windows_s) - 1.0

    def to_dict(self) -> dict:
        return {"sentinel": self.sentinel, "threads": self.threads,
                "windows_s": list(self.windows_s), "log_sd": self.log_sd,
                "rel_range": self.rel_range, "floor_log_sd": float(self.floor_log_sd),
                "applied_log_sd": self.applied_log_sd}  # fmt: skip

    @classmethod
    def from_dict(cls, data) -> MachineDrift | None:
        """The drift a profile recorded (``data["machine"]``), or None where it has none or it
        is malformed (older profiles: no drift is applied)."""
        if not isinstance(data, dict):
            return None
        windows = data.get("windows_s")
        threads = data.get("threads")
        if not isinstance(windows, list) or not isinstance(threads, int):
            return None
        try:
            values = tuple(float(w) for w in windows)
        except (TypeError, ValueError):
            return None
        if not all(np.isfinite(v) and v > 0 for v in values):
            return None
        floor = data.get("floor_log_sd", 0.0)
        if isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor < 1:
            floor = 0.0  # (malformed: the profile's own windows only)
        return cls(values, threads, str(data.get("sentinel", cls.sentinel)), float(floor))

    def describe(self) -> str:
        """'machine: greedy step's layers 53.8-72.4 ms over 5 windows (34.6 %, log-sd 12.1 %)'."""
        if not self.windows_s:
            return "machine: no drift windows"
        lo, hi = 1e3 * min(self.windows_s), 1e3 * max(self.windows_s)
        floor = ""
        if self.floor_log_sd > self.log_sd:
            floor = f"; the intervals carry the machine's floor, {100 * self.floor_log_sd:.1f} %"
        return (
            f"machine: {self.sentinel} {lo:.4g}-{hi:.4g} ms over {len(self.windows_s)} windows "
            f"at {self.threads} thread(s) ({100 * self.rel_range:.1f} %, log-sd "
            f"{100 * self.log_sd:.1f} %{floor})"
        )

    def warning(self) -> str | None:
        """A warning when the windows moved by more than DRIFT_WARN, else None."""
        if self.rel_range <= DRIFT_WARN:
            return None
        return (
            f"the machine's speed moved {100 * self.rel_range:.0f} % while profiling "
            f"({self.describe().removeprefix('machine: ')}): predictions in seconds carry it "
            "(their intervals include it), speed-ups cancel it; `ppd validate`'s interleaved "
            "probes (on by default) re-time the prices beside the runs"
        )


class DriftWatch:
    """Times the sentinel on demand (``window()``); ``drift()`` gives the MachineDrift."""

    def __init__(self, model, *, context_tokens: int, threads: int, steps: int = SENTINEL_STEPS):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
        self.threads, self.steps = threads, steps
        previous = torch.get_num_threads()
        try:
            torch.set_num_threads(threads)
            self.probe = DecodeProbe(model, context_tokens=context_tokens)
        finally:
            torch.set_num_threads(previous)
        self.windows: list[float] = []

    def window(self) -> float:
        """Time one window now (at the watch's threads); its median layers seconds."""
        previous = torch.get_num_threads()
        try:
            torch.set_num_threads(self.threads)
            samples = [self.probe.step()["layers_s"] for _ in range(self.steps)]
        finally:
            torch.set_num_threads(previous)
        median = float(np.median(samples))
        if median > 0:  # (a clock that did not move is no reading of the machine's speed)
            self.windows.append(median)
        return median

    def midway(self, done: int, total: int) -> None:
        """A window halfway through a run of ``total`` rounds (``run_interleaved``'s progress
        callback): a profile of one backend then still has three windows."""
        if done == total // 2 and total >= 2:
            self.window()

    def drift(self) -> MachineDrift:
        return MachineDrift(tuple(self.windows), self.threads)


def drift_factors(drift: MachineDrift | None, replicates: int, *, seed: int = 0) -> np.ndarray:
    """One factor per replicate: exp(N(0, drift.applied_log_sd)), seeded (the same for every backend
    of a profile, so a ratio of two backends' figures within a replicate cancels it); all ones
    without a drift."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise ValueError(f"replicates must be an integer >= 1, got {replicates!r}")
    sd = 0.0 if drift is None else drift.applied_log_sd
    if sd == 0.0:
        return np.ones(replicates)
    rng = np.random.default_rng([seed, 0xD21F7])
    return np.exp(rng.normal(0.0, sd, size=replicates))
