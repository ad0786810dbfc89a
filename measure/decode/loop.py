"""Real PPD decoding (paper Algorithm 2) whose output is exactly greedy decoding.

Schedule (d layers, early prediction at d_bar, e = d - d_bar candidate layers, k candidates).
The prompt minus its last token is prefilled; then each generated token t = 1..ell is one
*pass* of the main process over the previous token:

1. main runs layers [a, d_bar) of the pass (a = 0, or a = e after a hand-off);
2. the early head at d_bar gives the top-k candidates for the pass's output token: on main
   (``early_head="main"``, the paper's Algorithm 2) or on the candidate side, which receives
   main's layer-d_bar hidden state h [1, 1, H] (``early_head="candidates"``, this project's
   extension: the head leaves main's critical path);
3. the k candidates run as ONE batch of k rows through layers [0, e) at the next position,
   sharing the prefix KV cache, while main runs layers [d_bar, d) and the LM head (under
   "candidates" main never computes the early head: it asks the candidate side for the k ids
   when it has its own token, ``CandidateExecutor.candidate_ids``);
4. if the final token is candidate j, row j's hidden state at layer e and its KV entries for
   layers [0, e) are handed to main, and the next pass starts at layer e (m_t = 1); otherwise
   the next pass starts at layer 0 (m_t = 0) and the batch is rejected.

Main's own computation is the greedy computation, so the tokens are greedy's whatever the
placement (or, sampled, ``generate``'s with the same seed: main samples its final token as
transformers does and the candidate side never draws, ``measure.decode.sampling``; a match is
the sampled token among the candidates, paper Appendix B); after a hand-off main's cache
equals greedy's up to the rounding of the batched candidate rows (exactly so at k = 1 on
CPU). Latency in layer units is d_bar*ell + e*N (N = 1 + sum(1 - m_t)).

Trace events (``sim.formats.EVENT_KEYS``; ``process`` 0 = main, 1.. = candidate side; layers
0-based, [layer_start, layer_end)): main's ``layers`` blocks [a, d_bar) and [d_bar, d) of
token t, its final ``head`` (d, d); the early ``head`` (d_bar, d_bar) on main for token t
under "main", on the candidate process for token t + 1 under "candidates"; the candidates'
``layers`` (0, e) of token t + 1; ``handoff`` (e, e); and on ``dist`` an ``abandoned`` block
(0, i) for a rejected batch stopped after i layers.

A rejected batch (the closed form, ``ppdmodel.passes``, assumes it is abandoned at once):
- ``single`` on CPU is a sequential emulation: every batch, rejected or not, runs to the end
  before main goes on, so its wall time counts every batch (it is not PPD's latency);
- ``single`` on CUDA: a batch's kernels are queued on the candidate stream when it starts and
  cannot be recalled; a rejected one finishes on that stream while main's next pass runs (the
  two share the GPU) and main never waits for it; the next batch queues behind it, which
  delays a hand-off only if the rejected batch outlasts main's whole next prefix;
- ``dist``: the candidate rank checks for main's verdict between candidate layers and stops a
  batch as soon as it is rejected (or the sequence ends), so a rejected batch costs at most one
  more layer on its rank and never delays main or the next batch beyond that.

Backends: ``single`` (one process; sequential emulation on CPU, main and candidates on two CUDA
streams on a GPU) and ``dist`` (torch.distributed ranks, see ``measure.decode.dist``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from measure import clock as clocks
from measure.clock import Clock, synchronize
from measure.decode.executor import CandidateExecutor
from measure.decode.sampling import NextToken

MAIN, CANDIDATES = 0, 1
"""Process ids used in trace events: the main process and the (batched) candidate process."""


class Recorder:
    """Timed blocks of one run on ``measure.clock.Clock`` markers (resolved at the end)."""

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
    next_token: NextToken,
    candidates_factory: CandidatesFactory,
    host_clock=False,
    early_head="main",
):
    """The main process of PPD (shared by both backends); returns (result fields, cache).

    ``candidates_factory(cache, e, recorder)`` gives the ``CandidateExecutor`` of the backend;
    ``early_head`` (``"main"`` or ``"candidates"``, already checked) places the early head;
    ``next_token`` chooses main's token from its final logits and says when the sequence ends
    (``measure.decode.sampling``: greedy up to EOS, or sampled as ``generate`` samples).
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
        started = t < max_new_tokens
        if started and early_head == "main":
            cands = torch.topk(lsm.early_logits(h)[:, -1].float(), k, dim=-1).indices  # [1, k]
            rec.add(MAIN, t, d_bar, d_bar, "head", early, rec.mark())
            cand.start(cands, position + 1, t + 1)
            early = rec.mark()
        elif started:  # the candidate side runs the early head on h: [1, 1, H]
            cand.start_from_hidden(h, position + 1, t + 1)
            early = rec.mark()
        h = lsm.run_layers(h, d_bar, d, cache, pos)
        late = rec.mark()
        rec.add(MAIN, t, d_bar, d, "layers", early, late)
        nxt = next_token.choose(lsm.logits(h)[:, -1])  # logits [1, V]
        rec.add(MAIN, t, d, d, "head", late, rec.mark())
        tokens.append(nxt)
        times.append(rec.host_seconds())
        if next_token.stop(nxt) or not started:
            break
        hits = [j for j, c in enumerate(cand.candidate_ids()) if c == nxt]
        if hits:
            handed = cand.accept(hits[0], nxt, position + 1, t + 1)
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
        early_head=early_head,
    ), cache
