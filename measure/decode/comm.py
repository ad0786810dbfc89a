"""Point-to-point messages of distributed PPD (the protocol is in ``measure.decode.dist``).

``Comm`` sends non-blocking, receives blocking, and on a candidate rank can receive main's next
header on a helper thread (``HeaderReader``) while the rank computes, so it can look for a
verdict between candidate layers; ``PendingRecv`` is a receive posted early and waited later.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist


class Comm:
    """Point-to-point messages of the protocol on the communication device."""

    def __init__(self, k: int, device: torch.device, group=None):
        self.width, self.device, self.group, self.pending = 6 + k, device, group, []
        self.reader: HeaderReader | None = None

    def send_header(self, dst: int, kind: int, a=-1, b=-1, c=-1, heads=0, dh=0, cands=()):
        header = torch.full((self.width,), -1, dtype=torch.long)
        header[:6] = torch.tensor([kind, a, b, c, heads, dh])
        header[6 : 6 + len(cands)] = torch.as_tensor(list(cands), dtype=torch.long)
        self.send(header.to(self.device), dst)

    def recv_header(self, src: int = 0) -> list[int]:
        if self.reader is not None and self.reader.pending:  # prefetched (from rank 0)
            return self.reader.take()
        return self._recv_header_now(src)

    def _recv_header_now(self, src: int) -> list[int]:
        header = torch.empty(self.width, dtype=torch.long, device=self.device)
        self._recv(header, src)
        return header.tolist()

    def prefetch_header(self) -> None:
        """Start receiving the next header from rank 0 on a helper thread (no-op if started)."""
        if self.reader is None:
            self.reader = HeaderReader(self._recv_prefetched)
        self.reader.start()

    def _recv_prefetched(self) -> list[int]:
        if self.device.type == "cuda":  # the current device is per thread
            torch.cuda.set_device(self.device)
        return self._recv_header_now(0)

    def arrived_header(self) -> list[int] | None:
        """The prefetched header if it has arrived (``recv_header`` still returns it), else None."""
        return self.reader.peek() if self.reader is not None else None

    def post_recv(self, shape, dtype, src: int) -> PendingRecv:
        """Post a receive now (the message may land while this rank computes); wait later."""
        out = torch.empty(shape, dtype=dtype, device=self.device)
        return PendingRecv(dist.irecv(out, src, group=self.group), out, src)

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        """Non-blocking send; buffers are kept until ``flush``."""
        tensor = tensor.contiguous()
        self.pending.append((dist.isend(tensor, dst, group=self.group), tensor))
        if len(self.pending) > 64:
            self.flush()

    def recv(self, shape, dtype, src: int) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=self.device)
        self._recv(out, src)
        return out

    def _recv(self, out: torch.Tensor, src: int) -> None:
        try:
            dist.recv(out, src, group=self.group)
        except RuntimeError as exc:  # say which peer went silent or away
            raise RuntimeError(f"waiting for a message from rank {src} failed: {exc}") from exc

    def flush(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending = []

    def close(self) -> None:
        """Flush, and end the header reader's thread (a rank runs many tasks, one Comm each)."""
        self.flush()
        if self.reader is not None:
            self.reader.stop()
            self.reader = None


class HeaderReader:
    """Receives one header at a time on a daemon thread, so its rank can compute meanwhile.

    ``start`` asks for the next header, ``peek`` returns it once it has arrived (never blocks),
    ``take`` waits for it; a failed receive is raised by ``peek`` or ``take``.
    """

    def __init__(self, receive):
        self.receive, self.pending, self.arrived = receive, False, None
        self.requests, self.replies = queue.SimpleQueue(), queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="ppd-header-reader").start()

    def _serve(self) -> None:
        while self.requests.get():  # False: stop
            try:
                self.replies.put(self.receive())
            except BaseException as exc:  # re-raised in the rank's own thread
                self.replies.put(exc)

    def start(self) -> None:
        if not self.pending:
            self.pending, self.arrived = True, None
            self.requests.put(True)

    def stop(self) -> None:
        """End the thread once it is idle (a header it still waits for ends it later)."""
        self.requests.put(False)

    def peek(self) -> list[int] | None:
        if self.pending and self.arrived is None:
            try:
                self.arrived = self.replies.get_nowait()
            except queue.Empty:
                return None
        return self._checked(self.arrived)

    def take(self) -> list[int]:
        header = self.arrived if self.arrived is not None else self.replies.get()
        self.pending, self.arrived = False, None
        return self._checked(header)

    @staticmethod
    def _checked(header):
        if isinstance(header, BaseException):
            raise header
        return header


@dataclass
class PendingRecv:
    """A posted receive (``Comm.post_recv``); ``wait`` returns the tensor."""

    work: object
    tensor: torch.Tensor
    src: int

    def wait(self) -> torch.Tensor:
        try:
            self.work.wait()
        except RuntimeError as exc:
            raise RuntimeError(f"waiting for a message from rank {self.src} failed: {exc}") from exc
        return self.tensor
