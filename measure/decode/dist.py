"""PPD across torch.distributed ranks: rank 0 is the main process, ranks 1.. run candidates.

Launch: ``measure.decode.rank_group.RankGroup`` spawns ``world_size`` monitored processes
once (free port from the OS), each loading the model once, and runs any number of tasks on them
(``ppd_dist_many``: a group for one task); or ``torchrun --nproc-per-node W -m
measure.decode.launch --model DIR --prompt-ids FILE --d-bar N --out DIR`` (reads RANK /
WORLD_SIZE / MASTER_ADDR / MASTER_PORT). Backend gloo on CPU, NCCL on GPUs. Every rank loads
the same model. A task with k candidates runs on the first ``task_ranks(k, W)`` = min(W, k + 1)
ranks (the others sit it out); the k candidates of a pass are split round-robin over its
candidate ranks (2 ranks: one rank runs all k as one batch, the default).

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
STOP 6     -                           r leaves the task (and waits for the next one)
HIDDEN 7   position, n_r, pass t,      (early_head="candidates", instead of CANDS) one flat
           heads, dh                   tensor, model dtype: main's hidden state at d_bar
                                       ``[H]``, then if heads > 0 the SYNC entries as in
                                       CANDS; r appends them, runs the early head and the
                                       top-k on the hidden state, sends IDS, then runs its
                                       n_r candidates (top-k ids j = r-1, r-1 + (W-1), ...)
=========  ==========================  ==================================================

Payloads (the SYNC entries after CANDS, the flat tensor after HIDDEN) travel on their own tag
(``comm.PAYLOAD_TAG``, gloo): a candidate rank posts the receive of its next payload as soon as
it has taken one with the KV shapes (``CandidateWorker.payload``; a task's first payload is
received after its header), so a payload does not wait for main, which is computing its suffix
by then, to answer the receive (3-4 ms per pass on two CPU cores; see ``measure.decode.comm``);
main sends every rank with a receive still posted one element at the end of the task
(``Comm.drain_payloads``, taken at STOP).

IDS (r -> 0, after HIDDEN): int64 [n_r], the candidate ids r runs, in row order. Main posts
its receive when it sends HIDDEN and waits for it only when it has its own token and must
decide the match (``RemoteCandidates.candidate_ids``); it then sends VERDICT as under "main".
Main decides from the ids each rank reports, so ranks that break top-k ties differently
could only lower the match rate, never make the output differ from greedy.
HANDOFF (r -> 0): one flat tensor in the model dtype: hidden state at layer e ``[H]`` then,
for each layer i < e, K and V of the new position ``[kv_heads, Dh]`` (``kv_ops.pack``).
EVENTS (r -> 0): int64 [1] count n, then float64 [n, 6]: token, layer_start, layer_end,
start, end (host perf_counter seconds; one clock per host), kind code (``KIND_CODES``: 0
layers, 1 handoff, 2 head, 3 abandoned).

Abandoning a rejected batch: while r runs a candidate batch, a helper thread already receives
the next header from main (``Comm.prefetch_header``); before each candidate layer r looks
at it, and a VERDICT that rejects its rows (j = -1), or END, stops the batch there (an
``abandoned`` event of the layers it ran). So a rejected batch costs its rank at most one
more layer after the verdict arrives and delays neither main nor the next batch beyond that
(the closed form, ``ppdmodel.passes``, assumes it costs nothing after the verdict). An
accepted batch (j >= 0) runs to the end; main waits for its HANDOFF.

Each candidate rank keeps a copy of main's KV for layers [0, e): it keeps the accepted row
of its own hand-off, and otherwise receives main's entries (SYNC) with the next candidates,
so the copies are bit-identical to main's and the candidate rank never recomputes a token.

Failures: a rank that raises reports its traceback; a rank that hangs trips the process
group's timeout on its peers and the parent's watchdog (``timeout_s`` without progress); a rank
that dies is found by its exit code or signal (also while a group waits for its next task, at
that task). The parent then kills every rank and raises ``DistRunError``, one line naming the
rank that failed first; a group then refuses further tasks. Ranks never outlive the parent:
each dies with it (``measure.lifeline``).
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass, field

import torch

from measure.clock import Clock
from measure.decode.comm import Comm, PendingRecv
from measure.hf.kv_ops import append_entries, last_entries, pack, share_prefix, unpack

PROMPT, CANDS, VERDICT, END, PING, STOP, HIDDEN = 1, 2, 3, 4, 5, 6, 7
KIND_CODES = {"layers": 0, "handoff": 1, "head": 2, "abandoned": 3}
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
    """Directory of a trained early head (``.save`` of a full or translator head, loaded by
    ``measure.train.head_io.load_head``), loaded on rank 0 (and on the candidate ranks when
    ``early_head == "candidates"``)."""
    sequences: list[str] | None = None
    """Names of the prompts in the traces (default "0", "1", ...)."""
    early_head: str = "main"
    """Where the early head runs: ``main`` (rank 0) or ``candidates`` (the candidate ranks)."""
    decoding: dict | None = None
    """Main's rule (``measure.decode.sampling.Decoding.to_dict``); None: greedy."""
    seeds: list[int | None] | None = None
    """Sampled: per prompt, the seed of rank 0's global generator before decoding it."""
    generator_state: list[int] | None = None
    """Sampled: the state (``torch.Generator.get_state``) of the generator rank 0 draws from,
    for every prompt in turn (instead of seeds); candidate ranks never draw."""
    warmup: bool = False
    """Decode ``WARMUP_TOKENS`` (``measure.decode.settings``) of the first prompt through the
    ranks first, greedy (it draws nothing) and untimed, as ``ppd_many``'s warm-up on
    ``single``."""


@dataclass
class DistJob:
    """Everything the ranks need: tasks, world size, dtype, device and the failure hooks."""

    tasks: list[DistTask]
    """Models and prompts, run in order by the same ranks (a group's come later, one by one)."""
    world_size: int = 2
    """Ranks: 1 main + world_size - 1 candidate ranks; a task uses ``task_ranks`` of them."""
    model_dir: str | None = None
    """Model every rank loads when it starts (a group's); None: each task's, when it comes."""
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
    """Test hook: ``crash`` (raise), ``hang`` or ``kill`` (SIGKILL itself) makes ``fail_rank``
    fail at its first candidates."""
    fail_rank: int = 1
    """Rank that fails when ``fail`` is set."""
    master_addr: str = "127.0.0.1"
    """Rendezvous address (spawned ranks)."""
    master_port: int = 0
    """Rendezvous port (0: pick a free one)."""

    def to_dict(self) -> dict:
        """Plain data (a spawned rank unpickles it before it imports torch)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DistJob:
        return cls(**{**data, "tasks": [DistTask(**task) for task in data["tasks"]]})


def task_ranks(k: int, world_size: int) -> int:
    """Ranks a task with k candidates runs on: main + at most one rank per candidate."""
    return min(world_size, k + 1)


def free_port() -> int:
    """A TCP port the OS reports free on localhost."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def share(items: list, rank: int, world_size: int) -> list:
    """The items of candidate rank ``rank``: j = rank-1, rank-1 + (W-1), ... (see ``owner``)."""
    return items[rank - 1 :: world_size - 1]


def owner(j: int, world_size: int) -> tuple[int, int]:
    """Rank holding candidate j and its row there (round-robin over ranks 1..W-1)."""
    return 1 + j % (world_size - 1), j // (world_size - 1)


class RemoteCandidates:
    """Main-side proxy of the candidate ranks: the ``CandidateExecutor`` of the ``dist`` backend."""

    def __init__(self, lsm, cache, e, rec, comm: Comm, world_size: int, k: int | None = None):
        self.lsm, self.cache, self.e, self.rec = lsm, cache, e, rec
        self.comm, self.world = comm, world_size
        self.k = comm.width - 6 if k is None else k
        self.holder = None  # the rank that handed over the current token (it has its KV)
        self.ids: list[int] | None = None  # the current batch's k ids, once known
        self.id_msgs: dict[int, PendingRecv] = {}  # IDS still to receive, per rank

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        flat = cands[0].tolist()
        self.ids = flat
        entries = last_entries(self.cache, range(self.e), 0)  # the current token, [0, e)
        _, heads, _, dh = entries[0][0].shape
        kv = None
        for r in range(1, self.world):
            mine = share(flat, r, self.world)
            if r == self.holder:
                self.comm.send_header(r, CANDS, position, len(mine), token, cands=mine)
                continue
            self.comm.send_header(r, CANDS, position, len(mine), token, heads, dh, mine)
            if kv is None:
                kv = pack(entries[0][0][:0], entries).to(self.comm.device)
            self.comm.send_payload(kv, r, sized=True)
        self.holder = None

    def start_from_hidden(self, h: torch.Tensor, position: int, token: int) -> None:
        """HIDDEN to every candidate rank (with SYNC where needed); post the IDS receives."""
        entries = last_entries(self.cache, range(self.e), 0)  # the current token, [0, e)
        _, heads, _, dh = entries[0][0].shape
        hidden = h.reshape(-1).to(self.comm.device)  # [H]
        with_kv = None
        self.ids = None
        for r in range(1, self.world):
            n = len(share(range(self.k), r, self.world))
            if r == self.holder:
                self.comm.send_header(r, HIDDEN, position, n, token)
                self.comm.send_payload(hidden, r)
            else:
                self.comm.send_header(r, HIDDEN, position, n, token, heads, dh)
                if with_kv is None:
                    with_kv = pack(h, entries).to(self.comm.device)
                self.comm.send_payload(with_kv, r, sized=True)
            self.id_msgs[r] = self.comm.post_recv((n,), torch.long, r)
        self.holder = None

    def candidate_ids(self) -> list[int]:
        """The k ids (under "candidates": each rank's IDS, merged back into top-k order)."""
        if self.ids is None:
            shares = {r: msg.wait().tolist() for r, msg in self.id_msgs.items()}
            self.id_msgs = {}
            self.ids = [shares[r][row] for r, row in (owner(j, self.world) for j in range(self.k))]
        return self.ids

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
        for msg in self.id_msgs.values():  # IDS of a batch the sequence did not wait for
            msg.wait()
        self.id_msgs = {}
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

    def __init__(self, lsm, comm: Comm, rank: int, d_bar: int, k: int = 1, world_size: int = 2):
        self.lsm, self.comm, self.rank = lsm, comm, rank
        self.d_bar, self.e = d_bar, lsm.num_layers - d_bar
        self.k, self.world = k, world_size
        self.hidden_size = lsm.model.config.get_text_config().hidden_size
        self.cache = self.h = self.rows = None
        self.kv_shape: tuple[int, int] | None = None  # (KV heads, head dim), from main's SYNC
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

    def hidden_numel(self, heads: int, dh: int) -> int:
        """Elements of a HIDDEN payload: [H], plus the SYNC entries when heads > 0."""
        return self.hidden_size + (2 * self.e * heads * dh if heads > 0 else 0)

    def payload(self, numel: int, heads: int, dh: int) -> torch.Tensor:
        """The payload after a CANDS or HIDDEN header (``numel`` elements), then the receive
        of the next one posted, once a header has given the KV shapes (heads > 0): sized for
        the largest payload of the task, [H] and the SYNC entries."""
        flat = self.comm.recv_payload(numel, self.lsm.model.dtype)
        if heads > 0:
            self.kv_shape = (heads, dh)
        if self.kv_shape is not None:
            self.comm.post_payload(self.hidden_numel(*self.kv_shape), self.lsm.model.dtype)
        return flat

    def from_hidden(self, position: int, n: int, token: int, flat, heads: int, dh: int) -> None:
        """HIDDEN: append the SYNC entries, early head + top-k on main's h, send IDS, run."""
        shapes = [(1, heads, 1, dh)] * self.e if heads > 0 else []
        h, entries = unpack(flat.to(self.lsm.device), (1, 1, self.hidden_size), shapes)
        if entries:
            append_entries(self.cache, range(self.e), entries)
        start = self.clock.mark()
        top = torch.topk(self.lsm.early_logits(h)[:, -1].float(), self.k, dim=-1).indices[0]
        mine = share(top, self.rank, self.world)  # [n]
        self._block(token, self.d_bar, self.d_bar, "head", start)
        if len(mine) != n:
            raise RuntimeError(f"rank {self.rank}: HIDDEN asks for {n} candidates, has {len(mine)}")
        self.comm.send(mine.to(self.comm.device), 0)  # IDS
        self.candidates(position, mine.tolist(), token)

    def candidates(self, position: int, cands: list[int], token: int) -> None:
        """Run ``cands`` as one batch over [0, e); stop early if main rejects it meanwhile."""
        start = self.clock.mark()
        n = len(cands)
        self.rows = self.lsm.new_cache()
        share_prefix(self.cache, self.rows, range(self.e), n)
        ids = torch.tensor(cands, dtype=torch.long, device=self.lsm.device)[:, None]  # [n, 1]
        pos = torch.full((n, 1), position, dtype=torch.long, device=self.lsm.device)
        h = self.lsm.embed(ids, pos)  # [n, 1, H]
        self.comm.prefetch_header()  # the verdict may come while the batch runs
        kwargs = self.lsm.layer_kwargs(h, 0, self.rows, pos)
        for i in range(self.e):
            if i > 0 and self._rejected():
                self.h = self.rows = None
                self._block(token, 0, i, "abandoned", start)
                return
            h = self.lsm.run_layer(i, h, kwargs)  # as run_layers(h, 0, e, rows, pos)
        self.h = h
        self._block(token, 0, self.e, "layers", start)

    def _rejected(self) -> bool:
        """True once main's next message has arrived and is not a VERDICT accepting a row here."""
        header = self.comm.arrived_header()
        return header is not None and not (header[0] == VERDICT and header[1] >= 0)

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
