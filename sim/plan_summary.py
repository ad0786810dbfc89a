"""The decision first: a plan's answer per workload in a few lines, with what it rests on.

``decide`` turns a judged plan into one ``Decision`` per workload: the recommendation with its
speed-up interval and verdict, the best alternative, and the break-even p of PPD against the
best other method on the same devices (for the recommended PPD configuration, or PPD's
fastest one when another method is recommended; for a workload without p, the PPD
configuration that needs the least p), beside the p the table assumed there and its range.
``summary_lines`` prints them in at most ``SUMMARY_WIDTH`` characters a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ppdmodel.intervals import Interval
from ppdmodel.validation import as_int, as_real, check_instance
from sim.plan_intervals import Verdict, against_greedy, rival_of
from sim.plan_limits import check_min_quality, check_row, check_screened
from sim.plan_uncertainty import SOURCES

SUMMARY_WIDTH = 120
"""Widest line of the summary."""
HEAD_WORDS = {
    "shared": "the logit lens (the model's own LM head): nothing to train",
    "trained": "a trained head at d_bar: ppd measure train-head --kind full (one hidden x vocab "
    "matrix; the paper trained 1 epoch)",
    "translator": "a trained translator at d_bar: ppd measure train-head --kind translator",
}
"""What each head kind asks of the user before PPD runs."""


@dataclass(frozen=True)
class Decision:
    """A plan's answer for one workload."""

    workload: str
    recommended: str
    """The recommended configuration, in words (``sim.plan.label``)."""
    method: str
    speedup: Interval
    """Its speed-up over greedy on one device (95 %, every source)."""
    verdict: Verdict
    alternative: str = ""
    """The best other method it was judged against ("" when none)."""
    alternative_speedup: Interval | None = None
    ppd: str = ""
    """The PPD configuration the break-even is about ("" when PPD was not screened)."""
    ppd_row: int | None = None
    """Its row in the screened table."""
    beats: str = ""
    """The best other method on the PPD configuration's devices."""
    break_even_p: float = float("nan")
    """p at which that PPD configuration is as fast as ``beats`` (0: faster at any p; inf:
    never)."""
    assumed_p: float = float("nan")
    """The p the table assumed for it (nan: the table has no p for this workload)."""
    p_range: tuple[float, float] = (float("nan"), float("nan"))
    """The range its intervals drew p from."""
    head: str = ""
    """The early head the PPD configuration needs (``HEAD_WORDS``)."""
    d_bar: int = 0
    k: int = 0

    def __post_init__(self) -> None:
        for name in ("workload", "recommended", "method", "alternative", "ppd", "beats", "head"):
            check_instance(name, getattr(self, name), str)
        check_instance("speedup", self.speedup, Interval)
        check_instance("verdict", self.verdict, Verdict)
        if self.alternative_speedup is not None:
            check_instance("alternative_speedup", self.alternative_speedup, Interval)
        for name in ("break_even_p", "assumed_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{name} must be a number (nan: unknown), got {value!r:.60}")
        if not (isinstance(self.p_range, tuple) and len(self.p_range) == 2):
            raise ValueError(f"p_range must be a (low, high) pair, got {self.p_range!r:.60}")
        for name in ("d_bar", "k"):
            as_int(name, getattr(self, name), minimum=0, limit=10**5)

    @property
    def p_known(self) -> bool:
        return bool(np.isfinite(self.assumed_p))

    def to_dict(self) -> dict:
        """JSON-ready."""

        def interval(i):
            return None if i is None else [i.low, i.high]

        return {"workload": self.workload, "recommended": self.recommended,
                "method": self.method, "speedup": interval(self.speedup),
                "verdict": self.verdict.kind, "dominant_source": self.verdict.dominant,
                "settle": self.verdict.settle, "alternative": self.alternative,
                "alternative_speedup": interval(self.alternative_speedup), "ppd": self.ppd,
                "beats": self.beats, "break_even_p": _finite(self.break_even_p),
                "assumed_p": _finite(self.assumed_p),
                "p_range": [_finite(v) for v in self.p_range], "head": self.head,
                "d_bar": self.d_bar, "k": self.k}  # fmt: skip


def _finite(value: float):
    return float(value) if np.isfinite(value) else None


def break_even_against(ppd: pd.Series, other_latency_s: float) -> float:
    """The p at which PPD row ``ppd`` is as fast as ``other_latency_s`` (its latency is linear
    in p: ``latency_per_p_s``); 0 when faster at any p, inf when never."""
    check_row("ppd", ppd, ("latency_per_p_s", "p"))
    other_latency_s = as_real("other_latency_s", other_latency_s)
    if getattr(ppd, "method", "ppd") != "ppd" or not np.isfinite(float(ppd.latency_per_p_s)):
        raise ValueError("ppd must be a PPD row of a planner screen (with latency_per_p_s)")
    slope = float(ppd.latency_per_p_s)
    at_zero = float(ppd.latency_s) - slope * float(ppd.p)
    if at_zero <= other_latency_s:
        return 0.0
    if slope >= 0 or at_zero + slope > other_latency_s:
        return float("inf")
    return (other_latency_s - at_zero) / slope


def _ppd_for(workload, best, screened, no_p, max_compute, min_quality):
    """The PPD row the break-even is about, and the best other method on its devices."""
    rows = screened[(screened.workload == workload) & (screened.method == "ppd")]
    if max_compute is not None:
        base = best.compute_s / best.compute_ratio
        rows = rows[rows.compute_s <= max_compute * base * (1 + 1e-12)]
    if not len(rows):
        return None, None
    if best.method == "ppd":
        same = np.ones(len(rows), dtype=bool)
        for key in ("hardware", "d_bar", "k", "tp_main", "tp_candidates", "early_head",
                    "head_kind"):  # fmt: skip
            same &= (rows[key] == best[key]).to_numpy()
        ppd = rows[same].iloc[0] if same.any() else rows.loc[rows.latency_s.idxmin()]
    elif workload in no_p:  # the configuration that needs the least p
        needs = []
        for _, row in rows.iterrows():
            other = rival_of(row, screened, max_compute, min_quality)
            needs.append(np.inf if other is None else break_even_against(row, other.latency_s))
        ppd = rows.iloc[int(np.argmin(needs))]
    else:
        ppd = rows.loc[rows.latency_s.idxmin()]
    return ppd, rival_of(ppd, screened, max_compute, min_quality)


def decide(result, screened: pd.DataFrame, space, d: int, *, max_compute, min_quality,
           label) -> dict[str, Decision]:  # fmt: skip
    """Per workload of a judged plan (``sim.plan.Plan``), its ``Decision`` (module docstring)."""
    if not isinstance(getattr(result, "verdicts", None), dict) or getattr(
            result, "uncertainty", None) is None:  # fmt: skip
        raise ValueError("result must be a judged sim.plan.Plan (with verdicts and uncertainty)")
    check_screened("screened", screened)
    d = as_int("d", d, minimum=2, limit=10**5)
    depth = result.uncertainty.hardware[0].shape.num_layers
    if d != depth:
        raise ValueError(f"d = {d} but the plan's model has {depth} layers")
    if max_compute is not None:
        max_compute = as_real("max_compute", max_compute, minimum=1)
    min_quality = check_min_quality(min_quality)
    if not callable(label):
        raise TypeError(f"label must be callable, got {type(label).__name__}")
    uncertainty = result.uncertainty
    out = {}
    front = against_greedy(result.frontier, screened)
    screened = against_greedy(screened, screened)
    for workload, rows in result.frontier.groupby("workload", sort=False):
        best = rows[rows.recommended].iloc[0]
        v = result.verdicts.get(workload)
        speedup = v.recommended_speedup if v else Interval(best.speedup, best.speedup)
        ppd, beats = _ppd_for(workload, front.loc[best.name], screened, result.no_p,
                              max_compute, min_quality)  # fmt: skip
        extra = {}
        if ppd is not None:
            d_bar, k = int(ppd.d_bar), int(ppd.k)
            known = workload not in result.no_p
            low = high = float("nan")
            if known and uncertainty is not None:
                lo, hi = uncertainty.ptable.bounds(d, (workload,), (ppd.head_kind,),
                                                   borrowed=uncertainty.borrowed)  # fmt: skip
                low, high = float(lo[0, 0, d_bar, k]), float(hi[0, 0, d_bar, k])
            extra = dict(
                ppd=label(ppd), ppd_row=int(ppd.name), d_bar=d_bar, k=k,
                beats="" if beats is None else label(beats),
                break_even_p=float("nan") if beats is None else break_even_against(
                    ppd, float(beats.latency_s)),
                assumed_p=float(ppd.p) if known else float("nan"), p_range=(low, high),
                head=HEAD_WORDS.get(str(ppd.head_kind), f"a {ppd.head_kind} head at d_bar"),
            )  # fmt: skip
        out[workload] = Decision(workload, label(best), str(best.method), speedup, v,
                                 v.rival if v else "", v.rival_speedup if v else None,
                                 **extra)  # fmt: skip
    return out


SHORTER = (
    (r"PPD d_bar=(\d+) k=(\d+) (\w+) head on (\w+), main TP(\d+) \+ candidates (\w+) \((\d+) dev\)",
     r"PPD d_bar=\1 k=\2 (\3 head on \4, \7 dev)"),
    (r"greedy, TP(\d+) \((\d+) dev\)", r"greedy TP\1"),
    (r"early-exit L=(\d+) g=(\d+) (\w+) head(, reuse)?, TP(\d+) \((\d+) dev\)",
     r"early-exit L=\1 g=\2 TP\5"),
    (r" \((\d+) dev\)$", r" (\1 dev)"),
)  # fmt: skip
"""Patterns that shorten a configuration label (``sim.plan.label``) for the summary."""
SETTLE_COMMANDS = {"engine": "ppd measure profile --device cuda", "p": "ppd measure match-rate",
                   "profile": "ppd validate", "drift": "ppd validate"}  # fmt: skip
"""Per source, the command that settles a call it leaves open (the full one is printed below
the summary)."""


def short(text: str) -> str:
    """A configuration label shortened for the summary."""
    check_instance("text", text, str)
    for pattern, brief in SHORTER:
        text = re.sub(pattern, brief, text)
    return text


def _range(interval: Interval | None) -> str:
    return "" if interval is None else f"{interval.low:.2f}-{interval.high:.2f}x"


def summary_lines(result, *, sources_line: str = "") -> list[str]:
    """The decision first: a header, then per workload its decision, the best alternative and
    PPD's break-even p (each line at most ``SUMMARY_WIDTH`` characters)."""
    check_instance("sources_line", sources_line, str)
    decisions = getattr(result, "decisions", None)
    if not isinstance(decisions, dict) or getattr(result, "uncertainty", None) is None:
        raise ValueError("result must be a judged sim.plan.Plan (with decisions)")
    active = result.uncertainty.active() if result.uncertainty is not None else ()
    drawn = ", ".join(s for s in SOURCES if s in active) or "nothing"
    lines = [sources_line or "decision per workload (speed-up over greedy on one device, 95 % "
             f"intervals from {drawn}):"]  # fmt: skip
    for w, dec in decisions.items():
        v = dec.verdict
        kind = v.kind if v is not None else "clear"
        why = f" ({v.dominant or 'p'})" if v is not None and kind != "clear" else ""
        if not dec.p_known and dec.ppd:
            lines.append(f"{w}: no p measured for it: {short(dec.recommended)} "
                         f"{_range(dec.speedup)}; PPD not judged")  # fmt: skip
        else:
            lines.append(f"{w}: {kind}{why}: {short(dec.recommended)} {_range(dec.speedup)}")
        on_p = dec.alternative.startswith(("PPD", "early-exit"))
        if dec.alternative and (dec.p_known or not dec.ppd or not on_p):
            lines.append(f"  best alternative: {short(dec.alternative)} "
                         f"{_range(dec.alternative_speedup)}")  # fmt: skip
        if dec.ppd and dec.beats:
            lines.append("  " + _break_even_words(dec))
    return [_fit(line) for line in lines]


def _break_even_words(dec: Decision) -> str:
    where = f"PPD d_bar={dec.d_bar} k={dec.k} beats {short(dec.beats)}"
    if not np.isfinite(dec.break_even_p):
        return f"{where}: never, at any p"
    need = "at any p" if dec.break_even_p == 0 else f"if p > {dec.break_even_p:.2f}"
    if not dec.p_known:
        return f"{where} {need} (measure it: ppd measure match-rate)"
    low, high = dec.p_range
    spread = f", range {low:.2f}-{high:.2f}" if np.isfinite(low) and high > low else ""
    return f"{where} {need} (p assumed {dec.assumed_p:.2f}{spread})"


def _fit(line: str) -> str:
    return line if len(line) <= SUMMARY_WIDTH else line[: SUMMARY_WIDTH - 3] + "..."

