"""SimPy PPD (and greedy) schedule under ``ppdmodel.DecodeCosts`` (this project's extension).

Used when ``SimConfig.costs`` is set. Main runs on GPU 0; the k candidates run as ONE k-row
batch ("sub1+...+subk") on GPU 1, or on GPU 0 when ``n_gpus == 1`` (one shared device: both
streams slow by ``shared_device_slowdown`` while both compute, ``sim.device.SharedDevice``).
Token t, with D = d - d_bar (Algorithm 2 with every cost of ``ppdmodel.passes``):

1. ``prefix`` (main): embedding and layers 1..d_bar (fresh: t = 1 or after a miss), or layers
   D+1..d_bar after a match (the accepted candidate ran 1..D); then ``early_head`` on main
   when ``early_head == "main"``.
2. The split: main sends the k ids (early_head "main") or its layer-d_bar hidden state
   ("candidates") to the candidate side, which receives it after ``dispatch`` seconds, runs
   ``early_head`` there (placement "candidates"), then ``speculate``: embedding and layers 1..D
   of token t+1 for the k rows at the batch's per-layer time.
3. Meanwhile main runs ``suffix`` (layers d_bar+1..d, final head), then ``overhead`` (host).
4. Match (m_{t+1} = 1): main waits for the batch, then ``handoff``; token t+1 resumes at D+1.
   Miss (or t = ell): the candidate batch is ``abandoned`` at once (it was for nothing) and
   token t+1 starts fresh.
On a serial device (``DecodeCosts.serial_device``: the single backend, one stream at a time)
main itself runs step 2 at the split, logged under the batch's label on GPU 0: the dispatch,
the early head (placement "candidates") and the whole batch, rejected or not; then step 3.
Nothing is slowed, and on a match the batch is already done (no wait).
With ``per_layer_events`` every layer is its own event (the embedding and a head attached to
the first and last layer of a block, as in ``sim.schedule``) and, on a shared device, its own
kernel whose slowdown is fixed when it starts (``SharedDevice.kernel``); otherwise a block's
work is shared fluidly (``SharedDevice.compute``).
Latency is when main ends token ell. Separate devices: every time is a sum of the costs, so
the latency equals ``ppdmodel.trace_latency_seconds`` for the trace. ``busy_s`` adds each
block's wall time on its GPU (on a shared device, per stream: overlapped spans count twice).
"""

from __future__ import annotations

import simpy

from ppdmodel.validation import check_instance
from sim.config import SimConfig
from sim.device import SharedDevice
from sim.matches import check_trace_m
from sim.schedule import HOST


class CostsSchedule:
    """Builds and runs one simulated sequence under ``config.costs``; as ``PPDSchedule``."""

    def __init__(self, config: SimConfig, m, record_events: bool = True) -> None:
        self.config = check_instance("config", config, SimConfig)
        self.m = check_trace_m(m)
        if config.costs is None:
            raise ValueError("config must carry DecodeCosts (SimConfig(costs=...)) for this engine")
        self.record_events = record_events
        self.env = simpy.Environment()
        self.records: list[tuple] = []
        self.busy_s = [0.0] * config.n_gpus
        self.latency_s = 0.0
        self.makespan_s = 0.0
        costs = config.costs
        self.cand_gpu = 0 if config.n_gpus == 1 else 1
        self.serial = costs.serial_device
        main_device = SharedDevice(self.env, 1.0 if self.serial else costs.shared_device_slowdown)
        self.devices = (
            [main_device] if config.n_gpus == 1 else [main_device, SharedDevice(self.env)]
        )
        self.label = "+".join(f"sub{j}" for j in range(1, config.k + 1))
        self.on_main = config.early_head == "main"
        self.dispatch_s = costs.dispatch_seconds(config.early_head)
        self.layer_k = costs.candidate_layer_seconds(config.k)
        self.inbox = simpy.Store(self.env)
        self.spec_done: dict[int, simpy.Event] = {}
        self.working_on: int | None = None  # the token the candidate side is busy with

    def _log(self, process, gpu, token, a, b, start, end, kind) -> None:
        if gpu != HOST:
            self.busy_s[gpu] += end - start
        if self.record_events:
            self.records.append((process, gpu, token, a, b, start, end, kind))

    def _compute(self, process, gpu, token, a, b, seconds, kind, kernels=None):
        """Device work on ``gpu`` (slowed while the other stream computes there), logged.

        ``kernels`` (with ``per_layer_events``): the block's per-layer times, each its own
        event whose rate is fixed when it starts (``SharedDevice.kernel``)."""
        if seconds <= 0:
            return
        device, span = self.devices[gpu], (a, b, self.env.now)  # span: what an abort cuts
        try:
            if kernels is None:
                yield from device.compute(seconds)
            else:
                with device.streaming():
                    for layer, layer_s in enumerate(kernels, start=a):
                        span = (layer, layer, self.env.now)
                        yield from device.kernel(layer_s)
                        self._log(process, gpu, token, layer, layer, span[2], self.env.now, kind)
                return
        except simpy.Interrupt:
            self._log(process, gpu, token, *span, self.env.now, "abandoned")
            raise
        self._log(process, gpu, token, a, b, span[2], self.env.now, kind)

    def _block(self, process, gpu, token, a, b, layer_s, kind, first=0.0, last=0.0):
        """Layers a..b at ``layer_s`` each, ``first`` (embedding) and ``last`` (a head) on
        their ends; per-layer kernels when ``per_layer_events`` (a..b empty: one kernel)."""
        n = b - a + 1
        seconds = first + n * layer_s + last
        kernels = None
        if self.config.per_layer_events:
            kernels = [layer_s] * n if n > 0 else [0.0]
            kernels[0] += first
            kernels[-1] += last
        yield from self._compute(process, gpu, token, a, max(a, b), seconds, kind, kernels)

    def _wait(self, process, token, a, seconds, kind):
        """Host or link time (never slowed), logged on the HOST row."""
        if seconds > 0:
            start = self.env.now
            yield self.env.timeout(seconds)
            self._log(process, HOST, token, a, a, start, self.env.now, kind)

    def run(self) -> CostsSchedule:
        if self.config.schedule == "greedy":
            self.env.process(self.greedy_main())
        elif self.serial:
            self.env.process(self.ppd_main())
        else:
            self.candidate_side = self.env.process(self.speculating_batch())
            self.env.process(self.ppd_main())
        self.env.run()
        self.makespan_s = max(self.env.now, self.latency_s)
        return self

    def ppd_main(self):
        """Main process: one pass per token (module docstring, steps 1-4)."""
        cfg, costs, env = self.config, self.config.costs, self.env
        d, d_bar, gap = cfg.d, cfg.d_bar, cfg.d - cfg.d_bar
        resumed = False
        for t in range(1, cfg.ell + 1):
            L, head = costs.layer_s, costs.early_head_s
            if resumed:  # the accepted candidate ran layers 1..D of token t
                yield from self._block("main", 0, t, gap + 1, d_bar, L, "prefix")
            else:
                yield from self._block("main", 0, t, 1, d_bar, L, "prefix", costs.embedding_s)
            if self.on_main:
                yield from self._block("main", 0, t, d_bar, d_bar - 1, L, "early_head", head)
            if self.serial:  # the whole batch now, on main's device, then main's suffix
                yield from self.candidate_work(t + 1, env.now)
            else:
                self.spec_done[t + 1] = env.event()
                self.inbox.put((t + 1, env.now))
            yield from self._block("main", 0, t, d_bar + 1, d, L, "suffix", 0, costs.final_head_s)
            yield from self._wait("main", t, d, costs.host_s, "overhead")
            resumed = t < cfg.ell and bool(self.m[t - 1])
            if resumed:
                if not self.serial:
                    yield self.spec_done[t + 1]
                yield from self._wait(self.label, t + 1, gap, costs.handoff_s, "handoff")
            elif self.working_on == t + 1 and not self.serial:  # rejected: abandon the batch
                self.candidate_side.interrupt("rejected")
        self.latency_s = env.now

    def candidate_work(self, token, sent_at):
        """Step 2 for ``token``: the dispatch, the early head (placement "candidates"), then
        embedding and layers 1..D of the k rows as one batch."""
        cfg, costs, env = self.config, self.config.costs, self.env
        gap, gpu = cfg.d - cfg.d_bar, self.cand_gpu
        yield from self._wait(self.label, token, 0, sent_at + self.dispatch_s - env.now,
                              "dispatch")  # fmt: skip
        if not self.on_main:
            yield from self._block(self.label, gpu, token, cfg.d_bar, cfg.d_bar - 1, 0.0,
                                   "early_head", costs.early_head_s)  # fmt: skip
        yield from self._block(self.label, gpu, token, 1, gap, self.layer_k,
                               "speculate", costs.embedding_s)  # fmt: skip

    def speculating_batch(self):
        """The candidate side: the k rows of each dispatched token as one batch."""
        cfg = self.config
        while True:
            token, sent_at = yield self.inbox.get()
            self.working_on = token
            try:
                yield from self.candidate_work(token, sent_at)
                self.spec_done[token].succeed()
            except simpy.Interrupt:
                pass
            self.working_on = None
            if token == cfg.ell + 1:
                return

    def greedy_main(self):
        """Greedy decoding: embedding, layers 1..d and the final head, then host time."""
        cfg, costs = self.config, self.config.costs
        for t in range(1, cfg.ell + 1):
            yield from self._block("main", 0, t, 1, cfg.d, costs.layer_s, "forward",
                                   costs.embedding_s, costs.final_head_s)  # fmt: skip
            yield from self._wait("main", t, cfg.d, costs.host_s, "overhead")
        self.latency_s = self.env.now
