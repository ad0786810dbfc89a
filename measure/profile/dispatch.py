"""The dispatch delay of each pass of a run: how long after main's split its candidates start.

The closed form's delta (``ppdmodel.passes``): the candidates start delta after the split. On
the ``dist`` backend that is the message, its unpacking on the candidate rank and any time the
rank takes to wake or finish other work; the profile prices it from the link probe, and its
short real runs (``measure.profile.profile.dist_host_figures``) and ``ppd validate``'s term
check (``measure.eval.terms``, "candidate start") time it with this one definition.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.costs import check_early_head


def dispatch_delays(events, *, d: int, d_bar: int, early_head: str) -> dict[int, float]:
    """Per pass t of one sequence's trace ``events`` whose candidates for token t + 1 started:
    the seconds from main's split (the end of its prefix [0, d_bar) or [d - d_bar, d_bar)
    under ``early_head="candidates"``, of its early head under "main") to the start of the
    candidate side's first block for token t + 1 (its early head, or its batch under "main";
    the last rank's). The closed form's dispatch delay delta: the message, its unpacking and
    any time the rank takes to wake or finish other work; keyed by t."""
    early_head = check_early_head(early_head)
    e = d - d_bar
    split, start = {}, {}
    for ev in events:
        t, span, kind = ev["token"], (ev["layer_start"], ev["layer_end"]), ev["kind"]
        if ev["process"] == 0:
            prefix = kind == "layers" and span in ((0, d_bar), (e, d_bar))
            head = kind == "head" and span == (d_bar, d_bar)
            if prefix if early_head == "candidates" else head:
                split[t] = ev["end_s"]
        elif (kind == "head" and span == (d_bar, d_bar) if early_head == "candidates"
              else kind in ("layers", "abandoned") and span[0] == 0):  # fmt: skip
            start[t] = max(start.get(t, -np.inf), ev["start_s"])
    return {t: start[t + 1] - s for t, s in sorted(split.items()) if t + 1 in start}
