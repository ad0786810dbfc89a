"""Host time per pass of a PPD run: what main spends outside the blocks its trace times.

A pass (the work on one token) is timed from the previous token to this one; the decoder's
trace times its device blocks (layers, heads, the hand-off). The rest is host time: Python
bookkeeping, posting messages (``dist``: the candidate header and KV entries, the verdict),
waiting for the candidate ids, and being preempted by the communication threads. Greedy's host
time is a few tens of microseconds (``DecodeProbe.step``); on the ``dist`` backend it is not,
so the profile measures it on short real ``dist`` runs (``measure.profile.profile``) with this
one definition, which ``ppd validate``'s term check (``measure.eval.terms``) also applies to
the judged runs.
"""

from __future__ import annotations

import numpy as np


def host_seconds(run, backend: str) -> list[float]:
    """Per pass of ``run`` (a PPDResult with trace events): the time from the previous token to
    this one minus main's timed blocks of this token; on the ``single`` backend also minus the
    candidate blocks it ran inside the pass (the batch for token t + 1 runs in pass t)."""
    events = run.trace.events
    times = np.concatenate([[0.0], np.asarray(run.token_times_s, dtype=float)])
    out = []
    for t in range(1, len(run.token_times_s) + 1):
        busy = sum(ev["end_s"] - ev["start_s"] for ev in events
                   if ev["process"] == 0 and ev["token"] == t)  # fmt: skip
        if backend == "single":
            busy += sum(ev["end_s"] - ev["start_s"] for ev in events
                        if ev["process"] != 0 and ev["token"] == t + 1)  # fmt: skip
        out.append(float(times[t] - times[t - 1] - busy))
    return out
