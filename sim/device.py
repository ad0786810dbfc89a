"""A modelled device whose concurrent streams slow each other.

Work is given in *solo seconds* (its time on an otherwise idle device). While n >= 2 streams
compute at once, each is ``slowdown`` times slower (the measured slowdown of two decode streams
on one device, ``DecodeCosts.shared_device_slowdown``); alone, it runs at full speed. Two models:

* ``compute``: fluid sharing. A stream that starts or stops changes the others' rate at that
  instant, so the slowdown applies exactly to the overlapped span (what ``ppdmodel.passes``
  assumes; the closed form is exact for it).
* ``kernel`` inside ``streaming``: a kernel's (a layer's) rate is fixed when it starts: slowed if
  another stream is computing then, for the whole kernel. The closed form approximates this.

With slowdown 1 (separate devices, or no contention) work is one timeout.
"""

from __future__ import annotations

from contextlib import contextmanager

import simpy

from ppdmodel.validation import as_real, check_instance


class SharedDevice:
    """One device shared by streams (main, the candidate batch); ``compute`` is a generator."""

    def __init__(self, env: simpy.Environment, slowdown: float = 1.0) -> None:
        check_instance("env", env, simpy.Environment)
        if as_real("slowdown", slowdown, minimum=1.0) < 1:
            raise ValueError(f"slowdown must be >= 1, got {slowdown}")
        self.env = env
        self.slowdown = float(slowdown)
        self.active = 0
        """Streams computing now."""
        self._changed = env.event()

    def _notify(self) -> None:
        """Wake every computing stream: the number of streams (so their rate) changed."""
        changed, self._changed = self._changed, self.env.event()
        changed.succeed()

    def compute(self, solo_seconds: float):
        """Occupy the device for ``solo_seconds`` of work; slower while others compute.

        An Interrupt thrown in (an abandoned candidate batch) stops the work at once."""
        env = self.env
        if self.slowdown == 1.0:
            yield env.timeout(solo_seconds)
            return
        remaining = solo_seconds
        self.active += 1
        self._notify()
        try:
            while remaining > 0:
                factor = self.slowdown if self.active > 1 else 1.0
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

    def kernel(self, solo_seconds: float):
        """One kernel inside ``streaming``: slowed for its whole length if, when it starts,
        another stream is computing."""
        factor = self.slowdown if self.active > 1 else 1.0
        yield self.env.timeout(solo_seconds * factor)
