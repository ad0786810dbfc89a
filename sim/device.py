"""A modelled device whose concurrent streams slow each other.

Work is given in *solo seconds* (its time on an otherwise idle device). While n >= 2 streams
compute at once, each is slower by its own factor: the device's ``slowdown`` (the measured
slowdown of two decode streams on one device, ``DecodeCosts.shared_device_slowdown``), or
the factor ``slowdowns`` gives the stream by name (the candidate batch's own,
``DecodeCosts.candidate_slowdown``); alone, it runs at full speed. Two models:

* ``compute``: fluid sharing. A stream that starts or stops changes the others' rate at that
  instant, so each stream's factor applies exactly to its own work in the overlapped span
  (what ``ppdmodel.passes`` assumes; the closed form is exact for it).
* ``kernel`` inside ``streaming``: a kernel's (a layer's) rate is fixed when it starts: slowed if
  another stream is computing then, for the whole kernel. The closed form approximates this.

With every factor 1 (separate devices, or no contention) work is one timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager

import simpy

from ppdmodel.validation import as_real, check_instance


class SharedDevice:
    """One device shared by streams (main, the candidate batch); ``compute`` is a generator."""

    def __init__(
        self, env: simpy.Environment, slowdown: float = 1.0, slowdowns: Mapping | None = None
    ) -> None:
        check_instance("env", env, simpy.Environment)
        slowdowns = {} if slowdowns is None else slowdowns
        check_instance("slowdowns", slowdowns, Mapping, "stream name -> factor >= 1")
        factors = {"slowdown": slowdown, **{f"slowdowns[{k!r}]": v for k, v in slowdowns.items()}}
        for name, value in factors.items():
            as_real(name, value, minimum=1.0)
        self.env = env
        self.slowdown = float(slowdown)
        """The factor of a stream ``slowdowns`` does not name."""
        self.slowdowns = {name: float(v) for name, v in slowdowns.items()}
        """Stream name -> its own factor while another stream computes."""
        self.contended = self.slowdown != 1.0 or any(v != 1.0 for v in self.slowdowns.values())
        """False when no stream can slow: work is then one timeout."""
        self.active = 0
        """Streams computing now."""
        self._changed = env.event()

    def factor(self, stream=None) -> float:
        """The factor of ``stream`` (a name, or None) while another stream computes."""
        if stream is not None and not isinstance(stream, str):
            raise ValueError(f"stream must be a stream name or None, got {stream!r:.60}")
        return self.slowdowns.get(stream, self.slowdown)

    def _notify(self) -> None:
        """Wake every computing stream: the number of streams (so their rate) changed."""
        changed, self._changed = self._changed, self.env.event()
        changed.succeed()

    def compute(self, solo_seconds: float, stream=None):
        """Occupy the device for ``solo_seconds`` of work as ``stream`` (its own factor while
        others compute; None: ``slowdown``).

        An Interrupt thrown in (an abandoned candidate batch) stops the work at once."""
        env = self.env
        if not self.contended:
            yield env.timeout(solo_seconds)
            return
        slowed = self.factor(stream)
        remaining = solo_seconds
        self.active += 1
        self._notify()
        try:
            while remaining > 0:
                factor = slowed if self.active > 1 else 1.0
                start, changed = env.now, self._changed
                done = env.timeout(remaining * factor)
                yield done | changed
                if done.processed:  # (a timeout due at the same instant is processed first)
                    break
                remaining -= (env.now - start) / factor
        finally:
            self.active -= 1
            self._notify()

    @contextmanager
    def streaming(self):
        """Count the caller as computing while its kernels run back to back (``kernel``)."""
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1

    def kernel(self, solo_seconds: float, stream=None):
        """One kernel inside ``streaming``: slowed by the factor of ``stream`` for its whole
        length if, when it starts, another stream is computing."""
        factor = self.factor(stream) if self.active > 1 else 1.0
        yield self.env.timeout(solo_seconds * factor)
