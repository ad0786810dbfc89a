"""A clock the test controls, for the planted-cost tests (issue 47: a suite that passes on a
busy machine).

A planted model (``tiny_models.planted_model(sleep=clock.sleep)``) does not wait: each planted
"sleep" advances a ``VirtualClock``, and ``installed()`` makes it the clock every measurement
of ``measure`` reads (``measure.clock.host_clock``, the one host clock; the CPU ``Clock`` and
the decoders read it). The tiny model's own compute then takes no time, so a profile measures
exactly the planted times and a validation's runs last exactly what the planted pieces add up
to, whatever else the machine runs. ``installed()`` also reports a quiet machine (no CPU-time
reading, load average 0), so no verdict turns on what other work did while the test ran.

What real sleeps on a real clock read on this machine is a measurement, not a test:
``benchmarks/planted_timing.py``.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

import measure.clock as clock_module
import measure.profile.cpu_share as cpu_share_module
import measure.profile.stats as stats_module


class VirtualClock:
    """Seconds that pass only when planted work sleeps (``sleep``); calling it reads them."""

    def __init__(self) -> None:
        self.now = 1000.0  # an arbitrary origin, as perf_counter's

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` (>= 0) at once."""
        assert seconds >= 0, seconds
        self.now += seconds

    @contextmanager
    def installed(self):
        """Within: ``measure`` reads this clock, and the machine reads as quiet."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(clock_module, "host_clock", self)
            patch.setattr(cpu_share_module, "snapshot", lambda: None)
            patch.setattr(stats_module, "load_average", lambda: 0.0)
            yield self
