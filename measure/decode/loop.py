"""Real PPD decoding (paper Algorithm 2) whose output is exactly greedy decoding.

Schedule (d layers, early prediction at d_bar, e = d - d_bar candidate layers, k candidates).
The prompt minus its last token is prefilled; then each generated token t = 1..ell is one
*pass* of the main process over the previous token:

1. main runs layers [a, d_bar) of the pass (a = 0, or a = e after a hand-off);
2. the early head at d_bar gives the top-k candidates for the pass's output token;
3. the k candidates run as ONE batch of k rows through layers [0, e) at the next position,
   sharing the prefix KV cache, while main runs layers [d_bar, d) and the LM head;
4. if the final token is candidate j, row j's hidden state at layer e and its KV entries for
   layers [0, e) are handed to main, and the next pass starts at layer e (m_t = 1); otherwise
   the next pass starts at layer 0 (m_t = 0).

Main's own computation is the greedy computation, so the tokens are greedy's; after a hand-off
main's cache equals greedy's up to the rounding of the batched candidate rows (exactly so at
k = 1 on CPU). Latency in layer units is d_bar*ell + e*N (N = 1 + sum(1 - m_t)).

Backends: ``single`` (one process; sequential emulation on CPU, main and candidates on two CUDA
streams on a GPU) and ``dist`` (torch.distributed ranks, see ``measure.decode.dist``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from measure.decode.executor import CandidateExecutor
from measure.profile import clock as clocks
from measure.profile.clock import Clock, synchronize

MAIN, CANDIDATES = 0, 1
"""Process ids used in trace events: the main process and the (batched) candidate process."""


class Recorder:
    """Timed blocks of one run on ``measure.profile.clock.Clock`` markers (resolved at the end)."""

    def __init__(self, device: torch.device, host_clock: bool = False):
        self.clock = Clock(device, host_sync=host_clock)
        self.records: list[tuple] = []
        self.origin = self.clock.mark()
        self.origin_host = _host_now()

    def mark(self, stream=None):
        """A time marker now (on `stream` for CUDA)."""
        return self.clock.mark(stream)

    def add(self, process, token, layer_start, layer_end, kind, start, end) -> None:
        """Record a block [layer_start, layer_end) of `token` run by `process`."""
        self.records.append((process, token, layer_start, layer_end, start, end, kind))

    def host_seconds(self) -> float:
        """Host seconds since the origin."""
        return _host_now() - self.origin_host

    def events(self) -> list[dict]:
        """Events as dicts with keys ``sim.formats.EVENT_KEYS``, seconds since the origin."""
        self.clock.resolve()
        sec = self.clock.seconds
        return [
            dict(
                process=p,
                token=t,
                layer_start=a,
                layer_end=b,
                start_s=sec(self.origin, s),
                end_s=sec(self.origin, e),
                kind=k,
            )
            for p, t, a, b, s, e, k in self.records
        ]


def _host_now() -> float:
    return clocks.host_clock()


CandidatesFactory = Callable[[object, int, Recorder], CandidateExecutor]
"""``(main's cache, e, recorder) -> CandidateExecutor``: how a backend plugs into ``run_main``."""


def run_main(
    lsm,
    ids,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos,
    candidates_factory: CandidatesFactory,
    host_clock=False,
):
    """The main process of PPD (shared by both backends); returns (result fields, cache).

    ``candidates_factory(cache, e, recorder)`` gives the ``CandidateExecutor`` of the backend.
    """
    d = lsm.num_layers
    e = d - d_bar
    device = lsm.device
    cache = lsm.new_cache()
    t0 = clocks.host_clock()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)  # positions 0..P-2
    synchronize(device)
    prefill_s = clocks.host_clock() - t0
    rec = Recorder(device, host_clock=host_clock)
    cand = candidates_factory(cache, e, rec)
    token, position = ids[:, -1:], ids.shape[1] - 1  # token: [1, 1]
    handed = None  # h [1, 1, H] at layer e after a hand-off
    tokens, m, times = [], [], []
    for t in range(1, max_new_tokens + 1):
        if t > 1:
            m.append(int(handed is not None))
        pos = torch.full((1, 1), position, dtype=torch.long, device=device)  # [1, 1]
        a = e if handed is not None else 0
        start = rec.mark()
        h = handed if handed is not None else lsm.embed(token, pos)  # [1, 1, H]
        h = lsm.run_layers(h, a, d_bar, cache, pos)
        early = rec.mark()
        rec.add(MAIN, t, a, d_bar, "layers", start, early)
        cands = None
        if t < max_new_tokens:
            cands = torch.topk(lsm.early_logits(h)[:, -1].float(), k, dim=-1).indices  # [1, k]
            launched = rec.mark()
            rec.add(MAIN, t, d_bar, d_bar, "head", early, launched)
            cand.start(cands, position + 1, t + 1)
            early = rec.mark()
        h = lsm.run_layers(h, d_bar, d, cache, pos)
        late = rec.mark()
        rec.add(MAIN, t, d_bar, d, "layers", early, late)
        nxt = int(lsm.logits(h)[:, -1].float().argmax(-1))
        rec.add(MAIN, t, d, d, "head", late, rec.mark())
        tokens.append(nxt)
        times.append(rec.host_seconds())
        if nxt in eos or cands is None:
            break
        hits = (cands[0] == nxt).nonzero()
        if len(hits):
            handed = cand.accept(int(hits[0, 0]), nxt, position + 1, t + 1)
        else:
            handed = None
            cand.reject(nxt, position + 1, t + 1)
        token = torch.full((1, 1), nxt, dtype=torch.long, device=device)
        position += 1
    synchronize(device)
    wall_s = rec.host_seconds()  # the last token is known; collecting peer events is not timed
    cand.finish()
    return dict(
        tokens=tokens,
        m=m,
        token_times_s=times,
        wall_s=wall_s,
        prefill_s=prefill_s,
        events=rec.events(),
        cand=cand,
    ), cache
