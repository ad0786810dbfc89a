"""PPD across torch.distributed ranks: rank 0 is the main process, ranks 1.. run candidates.

Launch: ``ppd_dist_many`` spawns ``world_size`` monitored processes (free port from the OS),
or ``torchrun --nproc-per-node W -m measure.decode.launch --model DIR --prompt-ids FILE
--d-bar N --out DIR``
(reads RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT). Backend gloo on CPU, NCCL on GPUs.
Every rank loads the same model. The k candidates of a pass are split round-robin over the
W - 1 candidate ranks (W = 2: one rank runs all k as one batch, the default).

Protocol (rank 0 <-> rank r, point-to-point, in order). A header is an int64 tensor of
length 6 + k: ``[kind, a, b, c, heads, dh, cand_0 .. cand_{k-1}]`` (unused slots -1).

=========  ==========================  ==================================================
kind       a, b, c, heads, dh          then
=========  ==========================  ==================================================
PROMPT 1   P                           int64 [P] prompt ids; r prefills all but the last
CANDS 2    position, n_r, pass t,      if heads > 0, SYNC: main's K and V of the current
           heads, dh                   token for layers [0, e) (flat ``[e, 2, heads, dh]``,
                                       model dtype), appended to r's cache; then r runs
                                       its n_r candidates as one batch over [0, e)
VERDICT 3  row j or -1, token, pos     j >= 0: r sends HANDOFF and keeps row j's KV;
                                       j = -1: r drops its rows
END 4      -                           r sends EVENTS (its timed blocks), waits for PROMPT
PING 5     n (float32 elements)        float32 [n]; r echoes it back (link probe)
STOP 6     -                           r leaves the task
=========  ==========================  ==================================================

HANDOFF (r -> 0): one flat tensor in the model dtype: hidden state at layer e ``[H]`` then,
for each layer i < e, K and V of the new position ``[kv_heads, Dh]`` (``kv_ops.pack``).
EVENTS (r -> 0): int64 [1] count n, then float64 [n, 6]: token, layer_start, layer_end,
start, end (host perf_counter seconds; one clock per host), kind code (0 layers, 1 handoff).

Each candidate rank keeps a copy of main's KV for layers [0, e): it keeps the accepted row
of its own hand-off, and otherwise receives main's entries (SYNC) with the next candidates,
so the copies are bit-identical to main's and the candidate rank never recomputes a token.

Failures: a rank that raises reports its traceback; a rank that hangs trips the process
group's timeout on its peers and the parent's watchdog (``timeout_s`` without progress);
the parent then kills every rank and raises ``RuntimeError`` naming the rank.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from measure.hf.kv_ops import append_entries, last_entries, pack, share_prefix, unpack
from measure.profile.clock import Clock

PROMPT, CANDS, VERDICT, END, PING, STOP = 1, 2, 3, 4, 5, 6
KIND_CODES = {"layers": 0, "handoff": 1}
LINK_PROBE_BYTES = (256, 4096, 65536, 524288)
"""Message sizes of the link probe (bytes), each sent ``LINK_PROBE_REPEATS`` times."""
LINK_PROBE_REPEATS = 5


@dataclass
class DistTask:
    """One model and its prompts, decoded with fixed PPD parameters."""

    model_dir: str
    """Local model directory every rank loads."""
    prompts: list[list[int]]
    """Prompt token ids."""
    d_bar: int
    """Early-prediction layer."""
    k: int
    """Number of candidates."""
    max_new_tokens: int
    """Tokens to generate per prompt."""
    eos_token_id: list[int] = field(default_factory=list)
    """Token ids that end a sequence."""
    head_dir: str | None = None
    """Directory of a trained early head (``.save`` of a full or translator head), loaded on
    rank 0 only (``measure.train.head_io.load_head``)."""
    sequences: list[str] | None = None
    """Names of the prompts in the traces (default "0", "1", ...)."""


@dataclass
class DistJob:
    """Everything the ranks need: tasks, world size, dtype, device and the failure hooks."""

    tasks: list[DistTask]
    """Models and prompts, run in order by the same ranks."""
    world_size: int = 2
    """Ranks: 1 main + world_size - 1 candidate ranks (2..k+1)."""
    dtype: str = "float32"
    """Model dtype on every rank."""
    device: str = "cpu"
    """``cpu`` (gloo) or ``cuda`` (NCCL; rank r uses cuda:r)."""
    attn_implementation: str | None = None
    """Attention kernel (None: the model directory's default)."""
    timeout_s: float = 120.0
    """Seconds a rank may wait for a peer, and the watchdog's limit without progress."""
    startup_s: float = 120.0
    """Extra seconds allowed for start-up (imports, model loading) before the first progress."""
    num_threads: int = 1
    """torch intra-op threads per rank."""
    link_probe: bool = True
    """Time point-to-point messages of several sizes once (link calibration)."""
    fail: str | None = None
    """Test hook: ``crash`` or ``hang`` makes ``fail_rank`` fail at its first candidates."""
    fail_rank: int = 1
    """Rank that fails when ``fail`` is set."""
    master_addr: str = "127.0.0.1"
    """Rendezvous address (spawned ranks)."""
    master_port: int = 0
    """Rendezvous port (0: pick a free one)."""


def free_port() -> int:
    """A TCP port the OS reports free on localhost."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Comm:
    """Point-to-point messages of the protocol on the communication device."""

    def __init__(self, k: int, device: torch.device, group=None):
        self.width, self.device, self.group, self.pending = 6 + k, device, group, []

    def send_header(self, dst: int, kind: int, a=-1, b=-1, c=-1, heads=0, dh=0, cands=()):
        header = torch.full((self.width,), -1, dtype=torch.long)
        header[:6] = torch.tensor([kind, a, b, c, heads, dh])
        header[6 : 6 + len(cands)] = torch.as_tensor(list(cands), dtype=torch.long)
        self.send(header.to(self.device), dst)

    def recv_header(self, src: int = 0) -> list[int]:
        header = torch.empty(self.width, dtype=torch.long, device=self.device)
        self._recv(header, src)
        return header.tolist()

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


def owner(j: int, world_size: int) -> tuple[int, int]:
    """Rank holding candidate j and its row there (round-robin over ranks 1..W-1)."""
    return 1 + j % (world_size - 1), j // (world_size - 1)


class RemoteCandidates:
    """Main-side proxy of the candidate ranks: the ``CandidateExecutor`` of the ``dist`` backend."""

    def __init__(self, lsm, cache, e, rec, comm: Comm, world_size: int):
        self.lsm, self.cache, self.e, self.rec = lsm, cache, e, rec
        self.comm, self.world = comm, world_size
        self.holder = None  # the rank that handed over the current token (it has its KV)

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        flat = cands[0].tolist()
        entries = last_entries(self.cache, range(self.e), 0)  # the current token, [0, e)
        _, heads, _, dh = entries[0][0].shape
        kv = None
        for r in range(1, self.world):
            share = flat[r - 1 :: self.world - 1]
            if r == self.holder:
                self.comm.send_header(r, CANDS, position, len(share), token, cands=share)
                continue
            self.comm.send_header(r, CANDS, position, len(share), token, heads, dh, share)
            if kv is None:
                kv = pack(entries[0][0][:0], entries).to(self.comm.device)
            self.comm.send(kv, r)
        self.holder = None

    def accept(self, j: int, token_id: int, position: int, token: int) -> torch.Tensor:
        start = self.rec.mark()
        rank, row = owner(j, self.world)
        for r in range(1, self.world):
            self.comm.send_header(r, VERDICT, row if r == rank else -1, token_id, position)
        hidden_size = self.lsm.model.config.get_text_config().hidden_size
        shapes = [self.cache.layers[i].keys[:, :, -1:].shape for i in range(self.e)]
        n = hidden_size + 2 * sum(int(torch.Size(s).numel()) for s in shapes)
        flat = self.comm.recv((n,), self.cache.layers[0].keys.dtype, rank)
        hidden, entries = unpack(flat.to(self.lsm.device), (1, 1, hidden_size), shapes)
        append_entries(self.cache, range(self.e), entries)
        self.holder = rank
        self.rec.add(0, token, self.e, self.e, "handoff", start, self.rec.mark())
        return hidden

    def reject(self, token_id: int, position: int, token: int) -> None:
        for r in range(1, self.world):
            self.comm.send_header(r, VERDICT, -1, token_id, position)

    def finish(self) -> None:
        for r in range(1, self.world):
            self.comm.send_header(r, END)
        for r in range(1, self.world):
            n = int(self.comm.recv((1,), torch.long, r)[0])
            rows = self.comm.recv((n, 6), torch.float64, r).cpu().tolist()
            kinds = {v: key for key, v in KIND_CODES.items()}
            for token, a, b, s, e, code in rows:
                self.rec.add(r, int(token), int(a), int(b), kinds[int(code)], s, e)
        self.comm.flush()


class CandidateWorker:
    """A candidate rank: mirrors main's KV for layers [0, e) and runs candidate batches."""

    def __init__(self, lsm, comm: Comm, rank: int, d_bar: int):
        self.lsm, self.comm, self.rank = lsm, comm, rank
        self.e = lsm.num_layers - d_bar
        self.cache = self.h = self.rows = None
        self.events: list[list[float]] = []
        self.clock = Clock(lsm.device, host_sync=True)  # one host timeline with rank 0

    def _block(self, token, a, b, kind, start) -> None:
        self.events.append([token, a, b, start, self.clock.mark(), KIND_CODES[kind]])

    def prompt(self, ids: torch.Tensor) -> None:
        """The same prefill as main (all but the last prompt token)."""
        self.cache, self.events = self.lsm.new_cache(), []
        if ids.shape[1] > 1:
            self.lsm.prefill(ids[:, :-1], self.cache)

    def sync(self, flat: torch.Tensor, heads: int, dh: int) -> None:
        """Append main's KV of the current token for layers [0, e) (a packed SYNC message)."""
        _, entries = unpack(flat.to(self.lsm.device), (0,), [(1, heads, 1, dh)] * self.e)
        append_entries(self.cache, range(self.e), entries)

    def candidates(self, position: int, cands: list[int], token: int) -> None:
        start = self.clock.mark()
        n = len(cands)
        self.rows = self.lsm.new_cache()
        share_prefix(self.cache, self.rows, range(self.e), n)
        ids = torch.tensor(cands, dtype=torch.long, device=self.lsm.device)[:, None]  # [n, 1]
        pos = torch.full((n, 1), position, dtype=torch.long, device=self.lsm.device)
        self.h = self.lsm.run_layers(self.lsm.embed(ids, pos), 0, self.e, self.rows, pos)
        self._block(token, 0, self.e, "layers", start)

    def verdict(self, row: int, token_id: int, position: int, token: int) -> None:
        start = self.clock.mark()
        if row >= 0:
            entries = last_entries(self.rows, range(self.e), row)
            self.comm.send(pack(self.h[row], entries).to(self.comm.device), 0)
            append_entries(self.cache, range(self.e), entries)
            self._block(token, self.e, self.e, "handoff", start)
        self.h = self.rows = None  # rejected rows are dropped; main sends the KV it computes

    def send_events(self) -> None:
        self.comm.send(
            torch.tensor([len(self.events)], dtype=torch.long, device=self.comm.device), 0
        )
        rows = torch.tensor(self.events, dtype=torch.float64).reshape(-1, 6)
        self.comm.send(rows.to(self.comm.device), 0)
        self.comm.flush()
