"""The simulator's one engine: SimPy processes for PPD (paper Algorithm 2, Figure 2) and greedy
decoding on modelled GPUs, priced by a ``sim.step_costs.StepCosts``.

Processes and GPUs
------------------
``main`` runs on GPU 0. Sub-process j = 1..k runs on GPU ``1 + (j - 1) % (n_gpus - 1)``, or
on GPU 0 when ``n_gpus == 1``; sub-processes on one GPU run as one batch (``process`` reads
e.g. ``sub1+sub3``). GPU 0 shared by main and a batch (``StepCosts.sharing``):
``exclusive``: one block (one layer with ``per_layer_events``) at a time, a request of main
ahead of queued sub-process requests, never preempted; a queued speculation main has already
rejected is dropped when it would get the GPU (Algorithm 2 disregards it). ``fluid``: both
compute, main slowed by ``slowdown`` and the batch by ``candidate_slowdown`` while the other
computes (``sim.device.SharedDevice``, streams ``main`` and ``candidates``; per layer, a
kernel's slowdown is fixed when it starts). ``serial``: main itself runs the
batch at the split, rejected or not.

The schedule, token t = 1..ell, with s = min(d - d_bar, d_bar) (s = d - d_bar in the paper)
------------------------------------------------------------------------------------------
1. ``prefix`` (main): layers a..d_bar, the embedding when a = 1 (t = 1 or after a miss),
   a = s + 1 after a match (the accepted sub-process ran layers 1..s, Algorithm 2 line 11;
   empty when d_bar = d/2). Then ``early_head`` on main (placement ``main``).
2. Dispatch (line 14): each group receives the candidates after ``dispatch`` (a HOST event
   when it costs anything), runs ``early_head`` there (placement ``candidates``), then
   ``speculate``: embedding and layers 1..s of token t+1 at its batch (line 22).
3. ``suffix`` (main, in parallel with 2): layers d_bar+1..d and the final head (lines 19-20);
   then ``overhead`` (host time) when it is > 0.
4. m_{t+1} = 1: main waits for sub1's group, then ``handoff`` (logged even when it costs 0;
   line 24); token t+1 resumes at layer s + 1. Otherwise token t+1 starts fresh, and with
   ``abandon_rejected`` a batch still running for it is cut (``abandoned``) after main's
   host time; without, it finishes its layers (the paper's accounting).

Under unit layers and no overheads token 1 takes d and token t takes d_bar after a match, d
after a miss, so T = d_bar*ell + (d - d_bar)*N and compute = T + k(d - d_bar)ell.

Hand-derived example, d=4, d_bar=2, k=1, ell=3, m = [m_2, m_3] = [1, 0]; records are
(process, gpu, token, layer_start, layer_end, start, end, kind):
    main 0 t1 L1-2 [0,2] prefix;  main 0 t1 L3-4 [2,4] suffix;  sub1 1 t2 L1-2 [2,4] speculate
    sub1 -1 t2 L2-2 [4,4] handoff (match: main resumes token 2 at layer 3; its prefix is empty)
    main 0 t2 L3-4 [4,6] suffix;  sub1 1 t3 L1-2 [4,6] speculate          (miss for token 3)
    main 0 t3 L1-2 [6,8] prefix;  main 0 t3 L3-4 [8,10] suffix;  sub1 1 t4 L1-2 [8,10] speculate
T = 10 = 2*3 + 2*2 (N = 2); compute = 10 + 1*2*3 = 16.  (tests/sim hold all four m.)

Extension d_bar < d/2 (``allow_below_half``): a sub-process can run only s = d_bar layers
before main's early prediction would be needed; each match then saves d_bar units. Not in
the paper. Greedy: main alone runs ``forward`` (embedding, layers 1..d, head), then host time.

A fast path computes the times of each token when nothing can interrupt a block (no group
on GPU 0, no abandoning, one event per block): the same records as the processes.

One engine for every method
---------------------------
``SimEngine`` holds what every schedule runs on: the SimPy environment, the modelled devices
(``sim.device.SharedDevice``; an exclusive GPU is a SimPy priority resource), the mailboxes
between processes and the plain record list. ``Schedule`` (PPD, greedy) and
``sim.free_schedule.FreeSchedule`` (FREE) are both ``SimEngine``s; no other module of ``sim``
creates an environment or a device (tests/sim/test_engine_architecture.py).
"""

from __future__ import annotations

import math

import simpy

from ppdmodel.validation import as_int, check_flag, check_instance
from sim.config import SimConfig
from sim.device import SharedDevice
from sim.matches import check_trace_m
from sim.step_costs import step_costs

HOST = -1  # the ``gpu`` of host-side events (overhead, messages over a link)
MAIN = "main"
CANDIDATES = "candidates"
"""The stream a candidate group computes as on a shared device (``SharedDevice`` factors)."""


MAX_GPUS = 10**6
"""Most modelled GPUs of one engine (``SimEngine``)."""


class SimEngine:
    """The simulator's one engine (module docstring): a SimPy environment, the modelled devices
    on it and a plain list of records; a schedule subclasses it and adds its processes.
    ``n_gpus``: the GPUs whose busy seconds it counts (an integer in [1, ``MAX_GPUS``]);
    ``record_events``: keep the records (False: count busy time only)."""

    def __init__(self, n_gpus: int = 1, record_events: bool = True) -> None:
        n_gpus = as_int("n_gpus", n_gpus, limit=MAX_GPUS)
        self.record_events = check_flag("record_events", record_events)
        self.env = simpy.Environment()
        self.devices: dict[int, SharedDevice] = {}
        """GPU index -> its device (``_add_device``)."""
        self.records: list[tuple] = []
        self.busy_s = [0.0] * n_gpus

    def _add_device(self, gpu: int, slowdown: float = 1.0, slowdowns=None) -> SharedDevice:
        """GPU ``gpu`` as a device whose streams slow each other (``SharedDevice``)."""
        self.devices[gpu] = device = SharedDevice(self.env, slowdown, slowdowns)
        return device

    def _exclusive_gpu(self) -> simpy.PriorityResource:
        """A GPU one block holds at a time, lower priority numbers first."""
        return simpy.PriorityResource(self.env, 1)

    def _mailbox(self) -> simpy.Store:
        """A queue from one process to another."""
        return simpy.Store(self.env)

    def _run(self, *processes) -> float:
        """Start ``processes`` (generators) and run until no event is left; the end time."""
        for process in processes:
            self.env.process(process)
        self.env.run()
        return self.env.now


class Schedule(SimEngine):
    """Builds and runs one simulated sequence; results are plain attributes after ``run()``."""

    def __init__(self, config: SimConfig, m, record_events: bool = True) -> None:
        self.config = check_instance("config", config, SimConfig)
        self.m = check_trace_m(m)
        self.costs = c = step_costs(config)
        super().__init__(config.n_gpus, record_events)
        self.latency_s = 0.0
        self.makespan_s = 0.0
        self.fine = config.per_layer_events
        self.on_main = c.early_head == "main"
        on_gpu0 = c.groups[0].gpu == 0
        self.exclusive = on_gpu0 and c.sharing == "exclusive" and config.schedule == "ppd"
        self.serial = on_gpu0 and c.sharing == "serial"
        self.rejected: set[int] = set()  # tokens whose candidates main has rejected
        self.spec_done: dict[int, simpy.Event] = {}

    def _log(self, process, gpu, token, a, b, start, end, kind, also=()) -> None:
        """Record one event (and the same on each (process, gpu) of ``also``)."""
        if gpu != HOST:
            self.busy_s[gpu] += end - start
        if self.record_events:
            self.records.append((process, gpu, token, a, b, start, end, kind))
        for lane in also:
            self._log(*lane, token, a, b, start, end, kind)

    def run(self) -> Schedule:
        c = self.costs
        fast = not (c.abandon_rejected or self.fine or c.groups[0].gpu == 0 or not self.on_main)
        if self.config.schedule == "greedy":
            self._add_device(0)
            end = self._run(self.greedy_main())
        elif fast:
            end = self._run(self.ppd_main_fast())
        else:
            self._start_processes()
            end = self._run()
        self.makespan_s = max(end, self.latency_s)
        return self

    def _start_processes(self) -> None:
        """The devices, mailboxes, candidate lanes and main of the general PPD schedule."""
        c, env, groups = self.costs, self.env, self.costs.groups
        # Groups with the same times on dedicated GPUs behave identically: one process drives
        # them in lockstep and logs every one of them.
        same = len({(g.layer_s, g.embedding_s, g.dispatch_s) for g in groups}) == 1
        n = len(groups)
        self.lanes = [list(range(n))] if same and groups[0].gpu != 0 else [[i] for i in range(n)]
        for lane in self.lanes:
            self._add_device(groups[lane[0]].gpu)
        fluid = c.sharing == "fluid"
        own = {CANDIDATES: c.slowdown if c.candidate_slowdown is None else c.candidate_slowdown}
        self._add_device(0, c.slowdown if fluid else 1.0, own if fluid else None)
        if self.exclusive:
            self.gpu0 = self._exclusive_gpu()
        self.inbox = [self._mailbox() for _ in self.lanes]
        self.working_on: list[int | None] = [None] * len(self.lanes)
        self.lane_procs = []
        if not self.serial:
            self.lane_procs = [env.process(self.speculating(i)) for i in range(len(self.lanes))]
        env.process(self.ppd_main())

    # -- device work ----------------------------------------------------------------------
    def _block(self, process, gpu, token, a, b, layer_s, kind, first=0.0, last=0.0, also=()):
        """Layers a..b at ``layer_s`` (per layer, 1-based), ``first`` (the embedding) and
        ``last`` (a head) on their ends; one event per layer with ``per_layer_events`` (a..b
        empty: one event for the head)."""
        seconds = first + _layers_s(layer_s, a, b) + last
        kernels = None
        if self.fine:
            kernels = list(layer_s[a - 1 : b]) or [0.0]
            kernels[0] += first
            kernels[-1] += last
        yield from self._compute(process, gpu, token, a, max(a, b), seconds, kind, kernels, also)

    def _compute(self, process, gpu, token, a, b, seconds, kind, kernels=None, also=()):
        """Device work on ``gpu``, logged; ``kernels``: one event per layer."""
        if seconds <= 0:
            return
        if self.exclusive and gpu == 0:
            yield from self._hold(process, token, a, b, seconds, kind, kernels)
            return
        device, span = self.devices[gpu], (a, b, self.env.now)  # span: what an abort cuts
        stream = MAIN if process == MAIN else CANDIDATES
        try:
            if kernels is None:
                yield from device.compute(seconds, stream)
            else:
                with device.streaming():
                    for layer, layer_s in enumerate(kernels, start=a):
                        span = (layer, layer, self.env.now)
                        yield from device.kernel(layer_s, stream)
                        self._log(process, gpu, token, layer, layer, span[2], self.env.now, kind,
                                  also)  # fmt: skip
                return
        except simpy.Interrupt:
            self._log(process, gpu, token, *span, self.env.now, "abandoned", also)
            raise
        self._log(process, gpu, token, a, b, span[2], self.env.now, kind, also)

    def _hold(self, process, token, a, b, seconds, kind, kernels):
        """Work on the exclusive GPU 0: each block (layer) waits for it, main first; a
        rejected speculation is dropped when it would get it."""
        pieces = [(a, b, seconds)] if kernels is None else [
            (layer, layer, s) for layer, s in enumerate(kernels, start=a)]  # fmt: skip
        for first, last, piece_s in pieces:
            with self.gpu0.request(priority=0 if process == MAIN else 1) as request:
                yield request
                if process != MAIN and token in self.rejected:
                    return
                start = self.env.now
                yield self.env.timeout(piece_s)
            self._log(process, 0, token, first, last, start, self.env.now, kind)

    def _wait(self, process, token, a, seconds, kind, also=(), always=False):
        """Host or link time (never slowed), logged on the HOST row."""
        if seconds > 0 or always:
            start = self.env.now
            yield self.env.timeout(seconds)
            lanes = [(lane_process, HOST) for lane_process, _ in also] if also else ()
            self._log(process, HOST, token, a, a, start, self.env.now, kind, lanes)

    # -- the processes --------------------------------------------------------------------
    def ppd_main(self):
        """Main process, Algorithm 2 lines 8-24: one pass per token (module docstring)."""
        cfg, c, env = self.config, self.costs, self.env
        d, d_bar, s, main = cfg.d, cfg.d_bar, cfg.spec_layers, self.costs.main_layer_s
        resumed = False
        for t in range(1, cfg.ell + 1):
            if resumed:
                yield from self._block(MAIN, 0, t, s + 1, d_bar, main, "prefix")
            else:
                yield from self._block(MAIN, 0, t, 1, d_bar, main, "prefix", c.embedding_s)
            if self.on_main:
                yield from self._block(MAIN, 0, t, d_bar, d_bar - 1, main, "early_head",
                                       last=c.early_head_s)  # fmt: skip
            if self.serial:  # the whole batch now, on main's device, then main's suffix
                yield from self.candidate_work([0], t + 1, env.now)
            else:
                self.spec_done[t + 1] = env.event()
                for inbox in self.inbox:
                    inbox.put((t + 1, env.now))
            yield from self._block(MAIN, 0, t, d_bar + 1, d, main, "suffix", last=c.final_head_s)
            accepted = t < cfg.ell and bool(self.m[t - 1])
            if not accepted:  # token t+1 is known now: its candidates are rejected
                self.rejected.add(t + 1)
            yield from self._wait(MAIN, t, d, c.host_s, "overhead")
            if accepted:
                if not self.serial:
                    yield self.spec_done[t + 1]
                yield from self._wait(c.groups[0].label, t + 1, s, c.handoff_s, "handoff",
                                      always=True)  # fmt: skip
            elif c.abandon_rejected:
                for i, process in enumerate(self.lane_procs):
                    if self.working_on[i] == t + 1:
                        process.interrupt("rejected")
            resumed = accepted
        self.latency_s = env.now

    def candidate_work(self, lane, token, sent_at):
        """Step 2 for ``token`` on the groups of ``lane`` (the first simulated, the others
        logged alike): the dispatch, the early head (placement ``candidates``), the batch."""
        c, cfg, group = self.costs, self.config, self.costs.groups[lane[0]]
        label, gpu = group.label, group.gpu
        also = [(c.groups[i].label, c.groups[i].gpu) for i in lane[1:]]
        yield from self._wait(label, token, 0, sent_at + group.dispatch_s - self.env.now,
                              "dispatch", also)  # fmt: skip
        if not self.on_main:
            yield from self._block(label, gpu, token, cfg.d_bar, cfg.d_bar - 1, (),
                                   "early_head", last=c.early_head_s, also=also)  # fmt: skip
        yield from self._block(label, gpu, token, 1, cfg.spec_layers, group.layer_s,
                               "speculate", group.embedding_s, also=also)  # fmt: skip

    def speculating(self, index):
        """Candidate groups of lane ``index``: each dispatched token's batch, in turn."""
        lane = self.lanes[index]
        while True:
            token, sent_at = yield self.inbox[index].get()
            self.working_on[index] = token
            try:
                yield from self.candidate_work(lane, token, sent_at)
                if lane[0] == 0:
                    self.spec_done[token].succeed()
            except simpy.Interrupt:
                pass
            self.working_on[index] = None
            if token == self.config.ell + 1:
                return

    def greedy_main(self):
        """Greedy decoding: embedding, layers 1..d and the final head, then host time."""
        cfg, c = self.config, self.costs
        for t in range(1, cfg.ell + 1):
            yield from self._block(MAIN, 0, t, 1, cfg.d, c.main_layer_s, "forward",
                                   c.embedding_s, c.final_head_s)  # fmt: skip
            yield from self._wait(MAIN, t, cfg.d, c.host_s, "overhead")
        self.latency_s = self.env.now

    def ppd_main_fast(self):
        """Main when no block can be interrupted: each token's times computed at its start."""
        cfg, c, env, m = self.config, self.costs, self.env, self.m
        d, d_bar, s, ell, block = cfg.d, cfg.d_bar, cfg.spec_layers, cfg.ell, _layers_s
        prefix_s = {1: c.embedding_s + block(c.main_layer_s, 1, d_bar),
                    s + 1: block(c.main_layer_s, s + 1, d_bar)}  # fmt: skip
        suffix_s = block(c.main_layer_s, d_bar + 1, d) + c.final_head_s
        spec_s = [g.embedding_s + block(g.layer_s, 1, s) for g in c.groups]
        free = [0.0] * len(c.groups)
        first = 1
        for t in range(1, ell + 1):
            split = env.now
            for kind, a, b, seconds in (("prefix", first, d_bar, prefix_s[first]),
                                        ("early_head", d_bar, d_bar, c.early_head_s)):  # fmt: skip
                if seconds > 0:
                    self._log(MAIN, 0, t, a, b, split, split + seconds, kind)
                    split += seconds
            for i, group in enumerate(c.groups):
                arrival, idle = split + group.dispatch_s, max(split, free[i])
                if arrival > idle:
                    self._log(group.label, HOST, t + 1, 0, 0, idle, arrival, "dispatch")
                start = max(arrival, free[i])
                free[i] = start + spec_s[i]
                if spec_s[i] > 0:
                    self._log(group.label, group.gpu, t + 1, 1, s, start, free[i], "speculate")
            end = split + suffix_s
            if suffix_s > 0:
                self._log(MAIN, 0, t, d_bar + 1, d, split, end, "suffix")
            if c.host_s > 0:
                self._log(MAIN, HOST, t, d, d, end, end + c.host_s, "overhead")
                end += c.host_s
            first = 1
            if t < ell and m[t - 1]:
                start = max(end, free[0])
                end = start + c.handoff_s
                self._log(c.groups[0].label, HOST, t + 1, s, s, start, end, "handoff")
                first = s + 1
            yield env.timeout(end - env.now)
        self.latency_s = env.now
        for stop in free:
            if stop > env.now:
                yield env.timeout(stop - env.now)


def _layers_s(layer_s: tuple[float, ...], a: int, b: int) -> float:
    """Seconds of layers a..b (1-based, inclusive; 0 when a > b), correctly rounded: n equal
    layers give exactly n * layer (as the closed form's products)."""
    return math.fsum(layer_s[a - 1 : b]) if a <= b else 0.0
