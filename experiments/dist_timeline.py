"""Where a ``dist`` pass with the early head on the candidate side waits, from a validation's
traces (``ppd validate`` / ``ppd run`` ``traces.jsonl``: every block each rank timed, on one
host clock). No model, no timing: it reads what the judged runs recorded.

With ``early_head="candidates"`` main sends its hidden state at d_bar (HIDDEN), goes on with
its suffix and final head, and needs the candidate rank's ids (IDS, sent after the rank's early
head) before it can decide the match. The closed form (``ppdmodel.passes``) prices the message
at the link's latency and lets a missed pass end with main's own work. Per pass, this prints
(milliseconds, 10th / 50th / 90th percentile and mean over the passes):

- ``send``: main's gap between its prefix and its suffix (posting HIDDEN);
- ``rank start``: from the end of main's prefix to the start of the last candidate rank's
  early head (``measure.profile.dispatch``: the message, the rank's unpacking of
  it, and any time the rank takes to wake or finish other work; the closed form's delta,
  which ``ppd validate``'s term check prices as "candidate start");
- ``ids late``: the end of the last rank's early head after the end of main's final head
  (> 0: main waits for the ids; the ids travel after it, so this is a lower bound);
- ``main gap``: main's time from the end of its final head to its next prefix (host time and
  any wait for the ids; the profile prices it as ``dist_host_s``).

Only passes followed by another pass are counted (a sequence's last pass, which may end at an
end-of-sequence token without waiting for the ids, is left out).

Usage: python experiments/dist_timeline.py FOLDER_OR_TRACES [...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from measure.profile.dispatch import dispatch_delays
from sim.formats import MatchTrace
from sim.formats import read_traces as read_trace_file

COLUMNS = ("send", "rank start", "ids late", "main gap")


def passes(trace: MatchTrace) -> pd.DataFrame:
    """One row per pass t of a ``dist`` trace with the early head on the candidate side that
    is followed by pass t + 1: the seconds of ``COLUMNS``."""
    d, d_bar = trace.d, trace.d_bar
    prefixes = {(0, d_bar), (d - d_bar, d_bar)}  # fresh, and resumed after a hand-off
    main: dict[int, dict[str, dict]] = {}
    heads: dict[int, list[dict]] = {}
    for ev in trace.events or ():
        if ev["process"] != 0:
            if ev["kind"] == "head":
                heads.setdefault(ev["token"], []).append(ev)  # one per candidate rank
            continue
        span = (ev["layer_start"], ev["layer_end"])
        name = None
        if ev["kind"] == "layers":
            name = "prefix" if span in prefixes else "suffix" if span == (d_bar, d) else None
        elif ev["kind"] == "head" and span == (d, d):
            name = "final"
        if name is not None:
            main.setdefault(ev["token"], {})[name] = ev
    rank_start = dispatch_delays(trace.events or (), d=d, d_bar=d_bar, early_head="candidates")
    rows = []
    for t in sorted(main):
        blocks, ranks, nxt = main[t], heads.get(t + 1), main.get(t + 1, {})
        if not {"prefix", "suffix", "final"} <= set(blocks) or not ranks or "prefix" not in nxt:
            continue
        prefix_end, final_end = blocks["prefix"]["end_s"], blocks["final"]["end_s"]
        rows.append({
            "token": t,
            "send": blocks["suffix"]["start_s"] - prefix_end,
            "rank start": rank_start[t],
            "ids late": max(h["end_s"] for h in ranks) - final_end,
            "main gap": nxt["prefix"]["start_s"] - final_end,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=["token", *COLUMNS])


def read_traces(path: Path) -> list[MatchTrace]:
    """The traces of a validation folder (its ``traces.jsonl``) or of a traces file."""
    file = path / "traces.jsonl" if path.is_dir() else path
    if not file.is_file():
        raise SystemExit(f"no traces.jsonl at {path}")
    return read_trace_file(file)


def summary(traces: list[MatchTrace]) -> pd.DataFrame:
    """Per k: passes and the 10th / 50th / 90th percentile and mean of every column, in ms."""
    out = []
    for k in sorted({t.k for t in traces}):
        chosen = [t for t in traces
                  if t.backend == "dist" and t.early_head == "candidates" and t.k == k]  # fmt: skip
        if not chosen:
            continue
        table = pd.concat([passes(t) for t in chosen], ignore_index=True)
        row = {"k": k, "passes": len(table)}
        for c in COLUMNS:
            x = 1e3 * table[c].dropna().to_numpy()
            q = np.percentile(x, [10, 50, 90]) if len(x) else [np.nan] * 3
            row.update({f"{c} p10": q[0], f"{c} p50": q[1], f"{c} p90": q[2],
                        f"{c} mean": x.mean() if len(x) else np.nan})  # fmt: skip
        row["ids late > 0"] = float((table["ids late"] > 0).mean())
        out.append(row)
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="validation folders or traces.jsonl")
    args = parser.parse_args(argv)
    for path in args.paths:
        table = summary(read_traces(path))
        print(f"== {path}")
        if table.empty:
            print("no dist traces with the early head on the candidate side")
            continue
        for _, r in table.iterrows():
            cells = "; ".join(
                f"{c} {r[f'{c} p10']:.2f} / {r[f'{c} p50']:.2f} / {r[f'{c} p90']:.2f} "
                f"(mean {r[f'{c} mean']:.2f})"
                for c in COLUMNS
            )
            waited = 100 * r["ids late > 0"]
            print(f"k={int(r['k'])}, {int(r['passes'])} passes, ms p10 / p50 / p90: {cells}; "
                  f"main waited for the ids in {waited:.0f} % of passes")  # fmt: skip


if __name__ == "__main__":
    main()
