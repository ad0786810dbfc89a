"""Point-to-point messages of distributed PPD (the protocol is in ``measure.decode.dist``).

``Comm`` sends non-blocking, receives blocking, and on a candidate rank can receive main's next
header on a helper thread (``HeaderReader``) while the rank computes, so it can look for a
verdict between candidate layers; ``PendingRecv`` is a receive posted early and waited later.

Payloads (main's hidden state and KV entries that follow a CANDS or HIDDEN header) travel on
their own tag, ``PAYLOAD_TAG``, and a candidate rank keeps the receive of the next one posted
(``post_payload``) in a buffer at least as large as any payload of its task: gloo fills a
larger posted buffer from its start. A message whose receive is posted only once its header
has arrived waits for the sender's side of gloo to answer, and main is computing its suffix
by then: on two CPU cores that took 3-4 ms per pass (median; 0.2 ms with the receive posted
first), which held back the candidate batch on most passes after a miss
(``experiments/dist_timeline.py``). A task's first payload is received after its header: the
rank learns the payloads' size from it.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import torch
import torch.distributed as dist

PAYLOAD_TAG = 1
"""The tag of payload messages; every other message uses tag 0."""


class Comm:
    """Point-to-point messages of the protocol on the communication device."""

    def __init__(self, k: int, device: torch.device, group=None):
        self.width, self.device, self.group, self.pending = 6 + k, device, group, []
        self.reader: HeaderReader | None = None
        self.payload: PendingRecv | None = None  # a candidate rank's posted payload receive
        self.payload_peers: set[int] = set()  # main: ranks that sized and posted one
        # gloo matches messages by tag; NCCL has no tags (and in-order receives), so a payload
        # receive is posted early on the CPU only
        self.early_payloads = device.type == "cpu"
        self.payload_tag = PAYLOAD_TAG if self.early_payloads else 0

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

    def send(self, tensor: torch.Tensor, dst: int, tag: int = 0) -> None:
        """Non-blocking send; buffers are kept until ``flush``."""
        tensor = tensor.contiguous()
        self.pending.append((dist.isend(tensor, dst, group=self.group, tag=tag), tensor))
        if len(self.pending) > 64:
            self.flush()

    def send_payload(self, tensor: torch.Tensor, dst: int, *, sized: bool = False) -> None:
        """Main: a payload to candidate rank ``dst``; ``sized``: its header gave the rank the
        KV shapes, from which it posts its next payload receive (``post_payload``)."""
        self.send(tensor, dst, tag=self.payload_tag)
        if sized and self.early_payloads:
            self.payload_peers.add(dst)

    def drain_payloads(self, dtype: torch.dtype) -> None:
        """Main, at the end of a task: one element to every rank whose payload receive is
        still posted, so none is left to catch a later task's messages."""
        for dst in sorted(self.payload_peers):
            self.send_payload(torch.zeros(1, dtype=dtype, device=self.device), dst)
        self.payload_peers = set()

    def post_payload(self, numel: int, dtype: torch.dtype) -> None:
        """A candidate rank: post the receive of the next payload, ``numel`` elements at most
        (a no-op where payloads are not received early)."""
        if not self.early_payloads:
            return
        if self.payload is not None:
            raise RuntimeError("a payload receive is posted already")
        out = torch.empty(numel, dtype=dtype, device=self.device)
        work = dist.irecv(out, 0, group=self.group, tag=self.payload_tag)
        self.payload = PendingRecv(work, out, 0)

    def recv_payload(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A candidate rank: the next payload (``numel`` elements), from the posted receive if
        there is one (its first elements), else received now."""
        if self.payload is None:
            return self.recv((numel,), dtype, 0, tag=self.payload_tag)
        posted, self.payload = self.payload, None
        if posted.tensor.numel() < numel or posted.tensor.dtype != dtype:
            raise RuntimeError(f"payload of {numel} {dtype} elements does not fit the posted "
                               f"{posted.tensor.numel()} {posted.tensor.dtype}")  # fmt: skip
        return posted.wait()[:numel]

    def wait_posted_payload(self) -> None:
        """A candidate rank, at the end of a task: take main's ``drain_payloads`` element."""
        if self.payload is not None:
            posted, self.payload = self.payload, None
            posted.wait()

    def recv(self, shape, dtype, src: int, tag: int = 0) -> torch.Tensor:
        out = torch.empty(shape, dtype=dtype, device=self.device)
        self._recv(out, src, tag)
        return out

    def _recv(self, out: torch.Tensor, src: int, tag: int = 0) -> None:
        try:
            dist.recv(out, src, group=self.group, tag=tag)
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
