"""The one clock of ``measure``: time markers on a device, read back as seconds.

On the CPU a marker is ``perf_counter()``. On a GPU it is a CUDA event queued on a stream and
the device is synchronised once, when the markers are read (``resolve``); ``host_sync=True``
synchronises at every mark and reads the host clock instead, for timelines that span processes.
"""

from __future__ import annotations

import time

import torch

host_clock = time.perf_counter
"""The host clock (a module attribute so tests can replace it)."""


def synchronize(device: torch.device) -> None:
    """Wait for queued device work before reading a host clock."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Markers and the seconds between them on one device."""

    def __init__(self, device, host_sync: bool = False):
        self.device = torch.device(device)
        on_gpu = self.device.type == "cuda"
        self.cuda = on_gpu and not host_sync
        self.sync = on_gpu and host_sync

    def mark(self, stream=None):
        """A marker now: a host time, or a CUDA event queued on ``stream``."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record(stream)
            return event
        if self.sync:
            torch.cuda.synchronize(self.device)
        return host_clock()

    def resolve(self) -> None:
        """Make queued CUDA markers readable (one synchronize); a no-op on the host clock."""
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def seconds(self, start, end) -> float:
        """Seconds from marker ``start`` to marker ``end`` (call ``resolve`` first on CUDA)."""
        if self.cuda:
            return start.elapsed_time(end) / 1e3  # ms -> s
        return end - start
