"""Timing and the in-process candidate executor of PPD (CPU sequential, CUDA two streams)."""

from __future__ import annotations

import time

import torch

from measure.kv_ops import append_entries, last_entries, share_prefix
from measure.layer_split import LayerSplitModel

MAIN, CANDIDATES = 0, 1
"""Process ids used in trace events: the main process and the (batched) candidate process."""


def synchronize(device: torch.device) -> None:
    """Wait for queued device work before reading a host clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Recorder:
    """Timed events of one run: host clock on CPU, CUDA events on a GPU (resolved at the end)."""

    def __init__(self, device: torch.device, host_clock: bool = False):
        self.device = device
        self.sync = host_clock and device.type == "cuda"
        self.cuda = device.type == "cuda" and not host_clock
        self.records: list[tuple] = []
        self.origin = self.mark()
        self.origin_host = time.perf_counter()

    def mark(self, stream=None):
        """A time marker now (on `stream` for CUDA)."""
        if not self.cuda:
            if self.sync:
                torch.cuda.synchronize(self.device)
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def add(self, process, token, layer_start, layer_end, kind, start, end) -> None:
        """Record a block [layer_start, layer_end) of `token` run by `process`."""
        self.records.append((process, token, layer_start, layer_end, start, end, kind))

    def host_seconds(self) -> float:
        """Host seconds since the origin."""
        return time.perf_counter() - self.origin_host

    def events(self) -> list[dict]:
        """Events as dicts with keys ``sim.formats.EVENT_KEYS``, seconds since the origin."""
        if self.cuda:
            torch.cuda.synchronize()

        def sec(marker):
            if self.cuda:
                return self.origin.elapsed_time(marker) / 1e3
            return marker - self.origin

        return [
            dict(
                process=p, token=t, layer_start=a, layer_end=b, start_s=sec(s), end_s=sec(e), kind=k
            )
            for p, t, a, b, s, e, k in self.records
        ]


class LocalCandidates:
    """The candidate process in the main process: one batch of k rows over layers [0, e).

    On CPU the rows run at once (sequential emulation); on CUDA they are queued on their own
    stream so they overlap main's layers [d_bar, d).
    """

    def __init__(self, lsm: LayerSplitModel, cache, e: int, recorder: Recorder):
        self.lsm, self.cache, self.e, self.rec = lsm, cache, e, recorder
        cuda = lsm.device.type == "cuda"
        self.stream = torch.cuda.Stream(lsm.device) if cuda else None
        self.h = self.rows = self.done = None

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        """Run candidate tokens cands [1, k] at `position` through layers [0, e)."""
        k = cands.shape[-1]
        if self.stream is None:
            self._run(cands, position, token, k)
            return
        main = torch.cuda.current_stream(self.lsm.device)
        self.stream.wait_stream(main)  # candidates and prefix KV are ready
        cands.record_stream(self.stream)  # main may drop these tensors while the stream reads
        for i in range(self.e):
            self.cache.layers[i].keys.record_stream(self.stream)
            self.cache.layers[i].values.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            self._run(cands, position, token, k)
            self.done = torch.cuda.Event()
            self.done.record(self.stream)

    def _run(self, cands, position, token, k) -> None:
        start = self.rec.mark(self.stream)
        rows = self.lsm.new_cache()
        share_prefix(self.cache, rows, range(self.e), k)
        pos = torch.full((k, 1), position, dtype=torch.long, device=cands.device)  # [k, 1]
        h = self.lsm.embed(cands.reshape(k, 1), pos)  # [k, 1, H]
        self.h = self.lsm.run_layers(h, 0, self.e, rows, pos)  # [k, 1, H]
        self.rows = rows
        self.rec.add(CANDIDATES, token, 0, self.e, "layers", start, self.rec.mark(self.stream))

    def accept(self, j: int, token_id: int, position: int, token: int) -> torch.Tensor:
        """Hand row j to main: append its KV for layers [0, e); return h [1, 1, H] at layer e."""
        start = self.rec.mark()
        if self.stream is not None:
            torch.cuda.current_stream(self.lsm.device).wait_event(self.done)
        entries = last_entries(self.rows, range(self.e), j)
        h = self.h[j : j + 1]
        if self.stream is not None:
            main = torch.cuda.current_stream(self.lsm.device)
            for t in (h, *(x for pair in entries for x in pair)):
                t.record_stream(main)
        append_entries(self.cache, range(self.e), entries)
        self.rec.add(MAIN, token, self.e, self.e, "handoff", start, self.rec.mark())
        self.h = self.rows = None
        return h

    def reject(self, token_id: int, position: int, token: int) -> None:
        """No candidate matched: drop the rows (main recomputes the token from layer 0)."""
        self.h = self.rows = None
