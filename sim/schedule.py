"""SimPy processes for PPD (paper Algorithm 2, Figure 2) and greedy decoding on modelled GPUs.

Processes and GPUs
------------------
``main`` (PID 0) runs on GPU 0. Sub-process j = 1..k ("sub<j>") runs on GPU
``1 + (j - 1) % (n_gpus - 1)``, or on GPU 0 when ``n_gpus == 1``. Sub-processes that share a
GPU run as one batched block (``process`` reads e.g. ``sub1+sub3``): the cost model prices the
batch. A GPU shared by ``main`` and sub-processes (``n_gpus == 1``) is a
``simpy.PriorityResource``: each block (each layer with ``per_layer_events``) requests it;
a request of ``main`` goes ahead of queued sub-process requests (which are served first come,
first served), and a running block is never preempted. So on one GPU main keeps the GPU
until it has to wait for a sub-process (a hand-off), and speculation fills that idle time.
A queued speculation whose candidate main has already rejected (m_{t+1} = 0 known, or
t = ell) is dropped when it would get the GPU: Algorithm 2 disregards those sub-processes,
so their work never delays a later, useful one (with per-layer events a running one stops
at the next layer boundary).

The schedule, token t = 1..ell, with D = d - d_bar and s = min(D, d_bar) (s = D in the paper)
------------------------------------------------------------------------------------------------
1. ``prefix`` (main, token t): layers a..d_bar, then the early LM head. a = 1 for t = 1 and
   after a miss (m_t = 0; plus the embedding); a = s + 1 after a match (m_t = 1), because the
   accepted sub-process already ran layers 1..s of token t (Algorithm 2, line 11). With
   d_bar = d/2 this block is empty (a > d_bar): only the early head runs (kind ``head`` when
   it costs anything).
2. Dispatch (Algorithm 2, line 14): the k candidates for token t+1 go to the sub-processes,
   which ``speculate``: layers 1..s of token t+1 (embedding included; line 22). They start
   when the candidates arrive (one link message when a link is set) and their GPU is free.
3. ``suffix`` (main, token t, in parallel with 2): layers d_bar+1..d and the final LM head
   (lines 19-20). Then ``overhead`` (host, ``per_token_overhead_s``) when it is > 0.
4. If m_{t+1} = 1, sub1's state is handed to main (line 24) once both are done: ``handoff``,
   from ``sub1`` (the accepted candidate; which candidate matched is not modelled) carrying
   the hidden state at layer s and token t+1's KV entries of layers 1..s
   (``ModelShape.handoff_bytes(1, s)``), costing ``link.transfer_time`` (0 on the same GPU or
   without a link) plus ``per_handoff_overhead_s``. It is logged even when it costs 0.

Under UniformCost and no overheads, token 1 takes d and token t takes d - s = d_bar after a
match, d after a miss, so T = d_bar*ell + (d - d_bar)*N; main is never idle (T busy units)
and each of the k sub-processes runs s = d - d_bar layers for every token t = 1..ell (the
last one speculates token ell+1, as in Algorithm 2's loop), so compute = T + k(d - d_bar)ell.

Hand-derived example, d=4, d_bar=2, k=1, ell=3 (D = s = 2), records are
(process, gpu, token, layer_start, layer_end, start, end, kind); m = [m_2, m_3] = [1, 0]:
    main 0 t1 L1-2 [0,2] prefix;  main 0 t1 L3-4 [2,4] suffix;  sub1 1 t2 L1-2 [2,4] speculate
    sub1 -1 t2 L2-2 [4,4] handoff (match: main resumes token 2 at layer 3; its prefix is empty)
    main 0 t2 L3-4 [4,6] suffix;  sub1 1 t3 L1-2 [4,6] speculate          (miss for token 3)
    main 0 t3 L1-2 [6,8] prefix;  main 0 t3 L3-4 [8,10] suffix;  sub1 1 t4 L1-2 [8,10] speculate
T = 10 = 2*3 + 2*2 (N = 2); compute = 10 + 1*2*3 = 16.  (tests/sim hold all four m.)

Extension d_bar < d/2 (``allow_below_half``): a sub-process can run only s = d_bar layers
before main's early prediction would be needed, so it stops there; after a match main takes
the hidden state at layer d_bar, predicts early at once and runs layers d_bar+1..d.
Each match then saves d_bar (not d - d_bar) units. This is not in the paper.

Greedy baseline: main alone on GPU 0 runs ``forward`` (embedding, layers 1..d, head) per
token, then the per-token overhead: T = d*ell under UniformCost.

Two equivalent engines
----------------------
When no GPU is shared (n_gpus >= 2) and per-layer events are not asked for, nothing can
interrupt a block, so each token is one SimPy timeout of main and the blocks' start and end
times are computed when the token starts (fast path). Otherwise each block (or layer) is a
SimPy timeout inside generator processes holding GPU resources. Both give the same times.
"""

from __future__ import annotations

import simpy

from ppdmodel.validation import check_instance
from sim.config import SimConfig
from sim.matches import check_trace_m
from sim.passes import greedy_step_seconds, prefix_seconds, suffix_seconds

HOST = -1  # the ``gpu`` of host-side events (overhead, hand-off over a link)
TOKEN_ID_BYTES = 4  # one candidate token id (int32) in the dispatch message


class PPDSchedule:
    """Builds and runs one simulated sequence; results are plain attributes after ``run()``."""

    def __init__(self, config: SimConfig, m, record_events: bool = True) -> None:
        self.config = check_instance("config", config, SimConfig)
        self.m = check_trace_m(m)
        self.record_events = record_events
        self.env = simpy.Environment()
        self.records: list[tuple] = []
        self.busy_s = [0.0] * config.n_gpus
        self.latency_s = 0.0
        self.makespan_s = 0.0
        self.shared = config.n_gpus == 1
        self.fine = config.per_layer_events
        self.groups = _groups(config)
        self._layer_cache: dict[int, list[float]] = {}
        cost = config.cost
        d, d_bar, s = config.d, config.d_bar, config.spec_layers
        self.prefix_s = {  # keyed by the first layer of the prefix
            first: prefix_seconds(cost, first_layer=first, d_bar=d_bar) for first in (1, s + 1)
        }
        self.suffix_s = suffix_seconds(cost, d=d, d_bar=d_bar)
        self.spec_s = [
            cost.embed_seconds(len(subs)) + cost.block_seconds(1, s, len(subs))
            for _, _, subs in self.groups
        ]
        link = config.link
        self.dispatch_s = [
            link.transfer_time(TOKEN_ID_BYTES * config.k) if link and gpu != 0 else 0.0
            for _, gpu, _ in self.groups
        ]
        handoff = 0.0
        if link is not None and self.groups[0][1] != 0:
            handoff = link.transfer_time(config.shape.handoff_bytes(1, s))
        self.handoff_s = handoff + config.per_handoff_overhead_s

    # -- bookkeeping --------------------------------------------------------------------------
    def _log(self, process, gpu, token, a, b, start, end, kind) -> None:
        if gpu != HOST:
            self.busy_s[gpu] += end - start
        if self.record_events:
            self.records.append((process, gpu, token, a, b, start, end, kind))

    def run(self) -> PPDSchedule:
        cfg = self.config
        if cfg.schedule == "greedy":
            self.env.process(self.greedy_main())
        elif self.shared or self.fine:
            self.gpu_res = [simpy.PriorityResource(self.env, 1) for _ in range(cfg.n_gpus)]
            # Groups of equal batch on dedicated GPUs behave identically: one SimPy process
            # drives them in lockstep and logs every one of them.
            lockstep = not self.shared and len({len(g[2]) for g in self.groups}) == 1
            n = len(self.groups)
            lanes = [list(range(n))] if lockstep else [[i] for i in range(n)]
            self.inbox = [simpy.Store(self.env) for _ in lanes]
            self.spec_done: dict[int, simpy.Event] = {}
            self.rejected: set[int] = set()  # tokens whose speculation main has rejected
            for inbox, lane in zip(self.inbox, lanes, strict=True):
                self.env.process(self.speculating_group(inbox, lane))
            self.env.process(self.ppd_main())
        else:
            self.gpu_free_at = [0.0] * len(self.groups)
            self.env.process(self.ppd_main_fast())
        self.env.run()
        self.makespan_s = max(self.env.now, self.latency_s)
        return self

    # -- fast path: one timeout per token, no shared GPU -------------------------------------
    def ppd_main_fast(self):
        """Main process when no block can be interrupted: times are computed per token."""
        cfg, env, m = self.config, self.env, self.m
        d, d_bar, s, ell = cfg.d, cfg.d_bar, cfg.spec_layers, cfg.ell
        overhead = cfg.per_token_overhead_s
        first = 1
        for t in range(1, ell + 1):
            now = env.now
            end = now + self.prefix_s[first]
            self._log_prefix(t, first, now, end)
            for index, (label, gpu, _) in enumerate(self.groups):
                start = max(end + self.dispatch_s[index], self.gpu_free_at[index])
                self.gpu_free_at[index] = stop = start + self.spec_s[index]
                self._log(label, gpu, t + 1, 1, s, start, stop, "speculate")
            now, end = end, end + self.suffix_s
            self._log("main", 0, t, d_bar + 1, d, now, end, "suffix")
            if overhead:
                self._log("main", HOST, t, d, d, end, end + overhead, "overhead")
                end += overhead
            if t < ell and m[t - 1]:
                start = max(end, self.gpu_free_at[0])
                self._log("sub1", HOST, t + 1, s, s, start, start + self.handoff_s, "handoff")
                end, first = start + self.handoff_s, s + 1
            else:
                first = 1
            yield env.timeout(end - env.now)
        self.latency_s = env.now
        for stop in self.gpu_free_at:
            if stop > env.now:
                yield env.timeout(stop - env.now)

    def _log_prefix(self, t, first, start, end) -> None:
        d_bar = self.config.d_bar
        if first <= d_bar:
            self._log("main", 0, t, first, d_bar, start, end, "prefix")
        elif end > start:
            self._log("main", 0, t, d_bar, d_bar, start, end, "head")

    # -- general path: processes holding GPU resources ---------------------------------------
    def run_layers(self, process, gpu, token, a, b, batch, kind, embed=False, head=False, also=()):
        """Run layers a..b (plus embedding / LM head) on ``gpu``: one block or one per layer.

        ``also``: (process, gpu) pairs running the same block in lockstep on other GPUs."""
        cost = self.config.cost
        extra_first = cost.embed_seconds(batch) if embed else 0.0
        extra_last = cost.head_seconds(batch) if head else 0.0
        if a > b:  # no layers: only the LM head, if it costs anything
            if extra_last > 0:
                yield from self._hold(process, gpu, token, b, b, extra_last, "head", also)
            return
        if not self.fine:
            seconds = extra_first + cost.block_seconds(a, b, batch) + extra_last
            yield from self._hold(process, gpu, token, a, b, seconds, kind, also)
            return
        per_layer = self._per_layer_seconds(batch)
        if self.shared or extra_first or extra_last:
            for layer in range(a, b + 1):
                seconds = per_layer[layer]
                seconds += (extra_first if layer == a else 0.0) + (
                    extra_last if layer == b else 0.0
                )
                yield from self._hold(process, gpu, token, layer, layer, seconds, kind, also)
            return
        # Hot loop: a dedicated GPU, one timeout per layer and back to back, so each layer
        # ends at start + seconds (the same float sum SimPy's clock makes).
        env, append, log = self.env, self.records.append, self.record_events
        start = block_start = env.now
        lanes = [(process, gpu), *also]
        for layer in range(a, b + 1):
            seconds = per_layer[layer]
            yield env.timeout(seconds)
            end = start + seconds
            if log:
                for lane_process, lane_gpu in lanes:
                    append((lane_process, lane_gpu, token, layer, layer, start, end, kind))
            start = end
        for _, lane_gpu in lanes:
            self.busy_s[lane_gpu] += start - block_start

    def _per_layer_seconds(self, batch: int) -> list[float]:
        """Seconds of each layer 1..d at ``batch`` (index 0 unused), cached per batch."""
        cached = self._layer_cache.get(batch)
        if cached is None:
            cost = self.config.cost
            cached = [0.0] + [cost.block_seconds(i, i, batch) for i in range(1, self.config.d + 1)]
            self._layer_cache[batch] = cached
        return cached

    def _hold(self, process, gpu, token, a, b, seconds, kind, also=()):
        """Occupy ``gpu`` for ``seconds`` (queueing for it when it is shared) and log it."""
        if self.shared:
            priority = 0 if process == "main" else 1
            with self.gpu_res[gpu].request(priority=priority) as request:
                yield request
                if kind == "speculate" and token in self.rejected:
                    return  # main already rejected this candidate: drop, do not run it
                start = self.env.now
                yield self.env.timeout(seconds)
        else:
            start = self.env.now
            yield self.env.timeout(seconds)
        for lane_process, lane_gpu in [(process, gpu), *also]:
            self._log(lane_process, lane_gpu, token, a, b, start, self.env.now, kind)

    def ppd_main(self):
        """Main process (PID 0), Algorithm 2 lines 8-24, one token per loop."""
        cfg, env, m = self.config, self.env, self.m
        d, d_bar, s, ell = cfg.d, cfg.d_bar, cfg.spec_layers, cfg.ell
        first = 1
        for t in range(1, ell + 1):
            yield from self.run_layers(
                "main", 0, t, first, d_bar, 1, "prefix", embed=first == 1, head=True
            )
            self.spec_done[t + 1] = env.event()
            for inbox in self.inbox:
                inbox.put((t + 1, env.now))
            yield from self.run_layers("main", 0, t, d_bar + 1, d, 1, "suffix", head=True)
            if t == ell or not m[t - 1]:  # token t+1 is known now: its candidates are rejected
                self.rejected.add(t + 1)
            if cfg.per_token_overhead_s:
                start = env.now
                yield env.timeout(cfg.per_token_overhead_s)
                self._log("main", HOST, t, d, d, start, env.now, "overhead")
            first = 1
            if t < ell and m[t - 1]:
                yield self.spec_done[t + 1]
                start = env.now
                yield env.timeout(self.handoff_s)
                self._log("sub1", HOST, t + 1, s, s, start, env.now, "handoff")
                first = s + 1
        self.latency_s = env.now

    def speculating_group(self, inbox, lane):
        """Sub-processes sharing one GPU (batched): layers 1..s of each dispatched candidate.

        ``lane`` lists groups run in lockstep (identical GPUs and batch): the first is
        simulated, the others are logged with the same times on their own GPUs."""
        cfg, env = self.config, self.env
        label, gpu, subs = self.groups[lane[0]]
        also = [self.groups[i][:2] for i in lane[1:]]
        while True:
            token, sent_at = yield inbox.get()
            arrival = sent_at + self.dispatch_s[lane[0]]
            if arrival > env.now:
                yield env.timeout(arrival - env.now)
            yield from self.run_layers(
                label, gpu, token, 1, cfg.spec_layers, len(subs), "speculate", True, False, also
            )
            if lane[0] == 0:
                self.spec_done[token].succeed()
            if token == cfg.ell + 1:
                return

    def greedy_main(self):
        """Greedy decoding: every token runs embedding, layers 1..d and the head on GPU 0."""
        cfg, env = self.config, self.env
        if not self.fine:
            seconds = greedy_step_seconds(cfg.cost, cfg.d)
        for t in range(1, cfg.ell + 1):
            if self.fine:
                yield from self.run_layers("main", 0, t, 1, cfg.d, 1, "forward", True, True)
            else:
                start = env.now
                yield env.timeout(seconds)
                self._log("main", 0, t, 1, cfg.d, start, env.now, "forward")
            if cfg.per_token_overhead_s:
                start = env.now
                yield env.timeout(cfg.per_token_overhead_s)
                self._log("main", HOST, t, cfg.d, cfg.d, start, env.now, "overhead")
        self.latency_s = env.now


def _groups(config: SimConfig) -> list[tuple[str, int, list[int]]]:
    """(label, gpu, sub-process ids) per GPU hosting sub-processes; sub1's group first."""
    if config.n_gpus == 1:
        placement = {j: 0 for j in range(1, config.k + 1)}
    else:
        placement = {j: 1 + (j - 1) % (config.n_gpus - 1) for j in range(1, config.k + 1)}
    by_gpu: dict[int, list[int]] = {}
    for sub, gpu in placement.items():
        by_gpu.setdefault(gpu, []).append(sub)
    return [("+".join(f"sub{j}" for j in subs), gpu, subs) for gpu, subs in by_gpu.items()]
