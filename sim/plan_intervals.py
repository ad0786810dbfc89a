"""The planner's intervals, and its verdict when it cannot tell two configurations apart.

A planned latency rests on estimates: the engine preset or the cost profile, the machine it
was timed on, and p (``sim.plan_uncertainty``). ``draw_intervals`` re-screens the rows in
question once per draw with every source drawn (``Uncertainty``) and gives each row the
central 95 % of its latency and of its speed-up over greedy on one device (the ratio taken
within each draw, so what moves both cancels) as ``INTERVAL_COLUMNS``.

``judge`` puts them on a plan's frontier and on the configurations asked for. ``verdict``: the
recommendation is "too close to call" when its speed-up interval overlaps its rival's (the
fastest configuration of another method, ``rival_of``) or greedy's on one device, naming the
source that spreads the two most (``dominant_source``) and the measurement that removes it
(``SETTLES``); "conditional" when they are apart only on a p borrowed from another model;
"clear" otherwise. The ``ppd validate`` flags that time the recommendation and every close
rival are ``validate_flags``, ``merge_flags``, ``validate_command``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ppdmodel.cost_profile import CostProfile
from ppdmodel.intervals import LEVEL, MAX_DRAWS, Interval, check_level, spread_interval
from ppdmodel.validation import as_int, as_real, check_columns, check_instance
from sim.hardware_costs import HardwareModel, ProfileHardware
from sim.plan_grid import PlanSpace, _mesh_of, _ppd_rows, _screen
from sim.plan_limits import SCREEN_COLUMNS, check_min_quality, check_row, check_screened
from sim.plan_uncertainty import SOURCES, Uncertainty

PLAN_DRAWS = 40
"""Draws behind a planner interval (``spread_interval``: with 40, their minimum and maximum,
a 95 % prediction interval whatever the draws' distribution)."""
SOURCE_DRAWS = 12
"""Draws per source when ``dominant_sources`` weighs the sources one at a time."""
BATCH_DRAWS = 40
"""Draws screened together in one call of ``sim.plan_grid.screen``."""
"""Draws per source when ``dominant_source`` weighs the sources one at a time."""
INTERVAL_COLUMNS = ("latency_low_s", "latency_high_s", "speedup_low", "speedup_high")
"""The interval columns of the planner's tables (95 %: ``LEVEL``)."""
KEYS = ("workload", "hardware", "method", "tp_main", "tp_candidates", "d_bar", "k", "early_head",
        "head_kind", "g", "exit_layer", "reuse", "threshold", "free_mode")  # fmt: skip
"""Columns that identify a screened configuration (those present)."""


def profile_replicates(profile: CostProfile, hardware: Sequence) -> list[list[ProfileHardware]]:
    """Per hardware model, the bootstrap replicates of its backend in ``profile`` as
    ProfileHardware (same shape, layout, name and base sharing factors; each with its own
    redrawn pair factors where the model prices k with the profile's, as ``ppd validate``'s
    replicates do); [] for a model that is not a backend of this profile or a profile without
    replicates."""
    check_instance("profile", profile, CostProfile)
    check_instance("hardware", hardware, (list, tuple))
    out = []
    for hw in hardware:
        check_instance("hardware[...]", hw, HardwareModel, "RooflineHardware or ProfileHardware")
        backend = hw.name.rpartition(":")[2] if isinstance(hw, ProfileHardware) else ""
        reps = profile.backends[backend].replicates if backend in profile.backends else ()
        paired = isinstance(hw, ProfileHardware) and hw.entry is not None
        out.append([
            ProfileHardware(replace(r.base, shared_device_slowdown=hw.shared_device_slowdown,
                                    candidate_device_slowdown=hw.base.candidate_device_slowdown),
                            hw.shape, hw.layout, r.per_candidate_layer_s, name=hw.name,
                            entry=r if paired else None)
            for r in reps
        ])  # fmt: skip
    return out


def check_replicates(replicates, hardware=None) -> list[list]:
    """``replicates``: None, or per hardware model a list of replicate hardware models
    (``profile_replicates``'), one per model of ``hardware`` when given; as lists ([] per
    model for None)."""
    n = None if hardware is None else len(check_instance("hardware", hardware, (list, tuple)))
    if replicates is None:
        return [[] for _ in range(n or 0)]
    if (
        isinstance(replicates, str | bytes)
        or not isinstance(replicates, list | tuple)
        or any(isinstance(r, str | bytes) or not isinstance(r, list | tuple) for r in replicates)
    ):
        raise ValueError(f"replicates must be None or one list of hardware models per hardware "
                         f"model (profile_replicates), got {replicates!r:.60}")  # fmt: skip
    for i, reps in enumerate(replicates):
        for j, hw in enumerate(reps):
            check_instance(f"replicates[{i}][{j}]", hw, HardwareModel)
    if n is not None and replicates and len(replicates) != n:
        raise ValueError(f"replicates must give one list per model of hardware ({n}), got "
                         f"{len(replicates)}")  # fmt: skip
    return [list(r) for r in replicates] or [[] for _ in range(n or 0)]


def _sub_space(space: PlanSpace, rows: pd.DataFrame, d: int) -> PlanSpace:
    """``space`` narrowed to what ``rows`` need (fewer configurations screened per draw)."""
    ppd = rows[rows.method == "ppd"]
    early = rows[rows.method == "early-exit"]
    heads = tuple(dict.fromkeys(pd.concat([ppd.head_kind, early.head_kind])))
    return replace(
        space,
        d_bars=tuple(int(b) for b in sorted(set(ppd.d_bar))) if len(ppd) else (d - 1,),
        ks=tuple(int(k) for k in sorted(set(ppd.k))) if len(ppd) else (1,),
        heads=heads or space.heads,
        workloads=tuple(dict.fromkeys(rows.workload)),
        exit_layers=tuple(int(x) for x in sorted(set(early.exit_layer))) if len(early) else (1,),
        draft_lengths=tuple(int(g) for g in sorted(set(early.g))) if len(early) else (1,),
    )  # fmt: skip


def draw_matrix(rows: pd.DataFrame, uncertainty: Uncertainty, space: PlanSpace, *, d: int,
                draws: int = PLAN_DRAWS, seed: int = 0,
                sources: Sequence[str] = SOURCES) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """[rows, draws] latency and speed-up over greedy on one device of ``rows`` (screened
    configurations), each draw re-screened with ``sources`` of ``uncertainty`` drawn (the
    speed-up a ratio within each draw: what the draw moves in both cancels)."""
    check_columns("rows", rows, SCREEN_COLUMNS)
    check_instance("uncertainty", uncertainty, Uncertainty)
    check_instance("space", space, PlanSpace)
    d = as_int("d", d, limit=10**5)
    draws = as_int("draws", draws, minimum=1, limit=MAX_DRAWS)
    unknown = sorted(set(sources) - set(SOURCES))
    if isinstance(sources, str) or unknown:
        raise ValueError(f"sources must name some of {SOURCES}, got {sources!r:.60}")
    return _draw_matrix(rows, uncertainty, space, d=d, draws=draws, seed=seed, sources=sources)


def _draw_matrix(rows, uncertainty, space, *, d, draws, seed, sources=SOURCES):
    """``draw_matrix`` on checked inputs (the planner's rows, space and uncertainty)."""
    ptable = uncertainty.ptable
    sub = _sub_space(space, rows, d)
    workloads, heads = sub.workloads or ptable.workloads, sub.heads or ptable.heads
    samples = uncertainty.p_draws(d, workloads, heads, draws, seed=seed) if "p" in sources else (
        None)  # fmt: skip
    fixed = ptable.grid(d, workloads, heads)
    drawn = uncertainty.hardware_draws(draws, sources, seed=seed)
    n_hw = len(uncertainty.hardware)
    keys = [c for c in KEYS if c in rows.columns]
    is_ppd = (rows.method == "ppd").to_numpy()
    ppd = rows[is_ppd].assign(w=pd.Index(workloads).get_indexer(rows.workload[is_ppd]))
    given = {j: _mesh_of(ppd[(ppd.hardware == j).to_numpy()], uncertainty.hardware[j], sub, heads,
                         len(workloads))
             for j in range(len(uncertainty.hardware)) if (ppd.hardware == j).any()}  # fmt: skip
    alt = replace(sub, include_ppd=False)  # PPD's rows priced apart, below
    latency = np.full((len(rows), draws), np.nan)
    greedy = np.empty((len(rows), draws))
    for start in range(0, draws, BATCH_DRAWS):  # one screen per batch of draws
        batch = range(start, min(draws, start + BATCH_DRAWS))
        hardware = [hw for i in batch for hw in drawn[i]]
        pgrid = np.stack([fixed if samples is None else samples[i] for i in batch
                          for _ in range(n_hw)])  # fmt: skip
        grid = _screen(hardware, ptable, alt, d, pgrid, given=True)
        grid["draw"] = grid.hardware.to_numpy() // n_hw + start
        grid["hardware"] = grid.hardware.to_numpy() % n_hw
        grid = grid.drop_duplicates([*keys, "draw"])
        base = grid[(grid.method == "greedy") & (grid.tp_main == 1)]
        ref = base.groupby(["draw", "workload"]).latency_s.min()
        for i in batch:
            index = pd.MultiIndex.from_arrays([np.full(len(rows), i), rows.workload])
            greedy[:, i] = ref.reindex(index).to_numpy()
            if (~is_ppd).any():
                left = rows[~is_ppd][keys]
                right = grid.loc[grid.draw == i, [*keys, "latency_s"]]
                mixed = {k: object for k in keys if left[k].dtype != right[k].dtype}
                found = left.astype(mixed).merge(right.astype(mixed), on=keys, how="left")
                latency[~is_ppd, i] = found.latency_s.to_numpy()
            p_i = fixed if samples is None else samples[i]
            for j, mesh in given.items():
                mine = (ppd.hardware == j).to_numpy()
                priced = _ppd_rows(drawn[i][j], j, p_i, d, sub, sub.d_bars, sub.ks, heads,
                                   only=mesh)  # fmt: skip
                latency[np.flatnonzero(is_ppd)[mine], i] = priced.latency_s.to_numpy()
    speedup = greedy / latency
    return latency, speedup


def draw_intervals(rows: pd.DataFrame, uncertainty: Uncertainty, space: PlanSpace, *, d: int,
                   draws: int = PLAN_DRAWS, level: float = LEVEL,
                   seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """``rows`` (screened configurations) with ``INTERVAL_COLUMNS``: the central ``level`` of
    ``draw_matrix``'s draws with every source of ``uncertainty`` (``draws`` 0: the points)."""
    check_screened("rows", rows)
    draws = as_int("draws", draws, minimum=0, limit=MAX_DRAWS)
    level = check_level(level)
    if draws:
        check_instance("uncertainty", uncertainty, Uncertainty)
        check_instance("space", space, PlanSpace)
        d = as_int("d", d, limit=10**5)
    return _draw_intervals(rows, uncertainty, space, d=d, draws=draws, level=level, seed=seed)


def _draw_intervals(rows, uncertainty, space, *, d, draws, level=LEVEL, seed=0) -> pd.DataFrame:
    """``draw_intervals`` on checked inputs."""
    out = rows.copy()
    if not draws:
        for low, high, column in (("latency_low_s", "latency_high_s", "latency_s"),
                                  ("speedup_low", "speedup_high", "speedup")):  # fmt: skip
            out[low] = out[high] = out[column] if column in out else np.nan
        return out
    latency, speedup = _draw_matrix(rows, uncertainty, space, d=d, draws=draws, seed=seed)
    for j, (lat, gain) in enumerate(zip(latency, speedup, strict=True)):
        if np.isfinite(lat).all():
            lo, hi = spread_interval(lat, level=level), spread_interval(gain, level=level)
            out.loc[out.index[j], list(INTERVAL_COLUMNS)] = [lo.low, lo.high, hi.low, hi.high]
        else:
            out.loc[out.index[j], list(INTERVAL_COLUMNS)] = np.nan
    return out


def dominant_sources(
    pairs: Sequence,
    uncertainty: Uncertainty,
    space: PlanSpace,
    *,
    d: int,
    draws: int = SOURCE_DRAWS,
    seed: int = 0,
) -> list[tuple[str, dict]]:
    """Per (best, rival) pair of rows: the source whose draws alone spread the ratio of the
    two speed-ups most (95 % width of its log), and each active source's width (one batch of
    draws per source for every pair)."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Sequence):
        raise ValueError(f"pairs must be a sequence of (best, rival) rows, got {pairs!r:.60}")
    check_instance("uncertainty", uncertainty, Uncertainty)
    for i, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise ValueError(f"pairs[{i}] must be a (best, rival) pair of planner rows")
        check_row(f"pairs[{i}][0]", pair[0])
        check_row(f"pairs[{i}][1]", pair[1])
    if not pairs:
        return []
    check_instance("space", space, PlanSpace)
    d = as_int("d", d, limit=10**5)
    draws = as_int("draws", draws, minimum=1, limit=MAX_DRAWS)
    return _dominant_sources(pairs, uncertainty, space, d=d, draws=draws, seed=seed)


def _dominant_sources(pairs, uncertainty, space, *, d, draws, seed) -> list[tuple[str, dict]]:
    """``dominant_sources`` on checked inputs (one pair at least)."""
    rows = pd.DataFrame([row for pair in pairs for row in pair])
    widths = [{} for _ in pairs]
    for source in uncertainty.active():
        _, gain = _draw_matrix(rows, uncertainty, space, d=d, draws=draws, seed=seed,
                               sources=(source,))  # fmt: skip
        for i in range(len(pairs)):
            ratio = np.log(gain[2 * i] / gain[2 * i + 1])
            ratio = ratio[np.isfinite(ratio)]
            widths[i][source] = float(np.subtract(*np.percentile(ratio, [97.5, 2.5]))) if len(
                ratio) else 0.0  # fmt: skip
    return [(max(w, key=w.get) if w else "", w) for w in widths]


def against_greedy(rows: pd.DataFrame, screened: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``speedup`` and ``compute_ratio`` against the fastest greedy on one
    device of their workload in ``screened``."""
    check_columns("rows", rows, SCREEN_COLUMNS)
    check_screened("screened", screened)
    return _against_greedy(rows, screened)


def _against_greedy(rows: pd.DataFrame, screened: pd.DataFrame) -> pd.DataFrame:
    """``against_greedy`` of the planner's own frames."""
    base = screened[(screened.method == "greedy") & (screened.tp_main == 1)]
    ref = base.sort_values("latency_s", kind="stable").groupby("workload").first()
    ref = ref.reindex(rows.workload)
    if ref.latency_s.isna().any():
        raise ValueError("screened must hold greedy on one device for every workload of rows")
    return rows.assign(
        speedup=ref.latency_s.to_numpy() / rows.latency_s.to_numpy(),
        compute_ratio=rows.compute_s.to_numpy() / ref.compute_s.to_numpy(),
    )


def judge(result, screened, space, d, *, uncertainty, draws, seed, max_compute, min_quality,
          label):  # fmt: skip
    """``result`` (a ``sim.plan.Plan``) with interval columns on its frontier, the asked
    configurations and the verdicts (module docstring); ``label`` names a row."""
    if not callable(label):
        raise TypeError(f"label must be callable, got {type(label).__name__}")
    front = getattr(result, "frontier", None)
    check_screened("result.frontier", front)
    check_columns("result.frontier", front, ("recommended",))
    check_screened("screened", screened)
    check_instance("space", space, PlanSpace)
    check_instance("uncertainty", uncertainty, Uncertainty)
    d = as_int("d", d, limit=10**5)
    draws = as_int("draws", draws, minimum=0, limit=MAX_DRAWS)
    seed = as_int("seed", seed, minimum=0)
    max_compute = None if max_compute is None else as_real("max_compute", max_compute, minimum=1)
    min_quality = check_min_quality(min_quality)
    return _judge(result, screened, space, d, uncertainty=uncertainty, draws=draws, seed=seed,
                  max_compute=max_compute, min_quality=min_quality, label=label)  # fmt: skip


def _judge(result, screened, space, d, *, uncertainty, draws, seed, max_compute, min_quality,
           label):  # fmt: skip
    """``judge`` on checked inputs (``sim.plan.plan``'s)."""
    front = result.frontier.copy()
    asked = None
    if space.d_bars is not None or space.ks is not None:
        ppd = screened[screened.method == "ppd"]
        asked = _against_greedy(ppd, screened) if len(ppd) else None
    bests = front[front.recommended]
    rivals = {}  # the fastest other method on at most the best's devices, and on any
    for _, b in bests.iterrows():
        for devices in (None, math.inf):
            r = _rival_of(b, screened, max_compute, min_quality, max_devices=devices)
            if r is not None:
                rivals.setdefault(r.name, r)
    rivals = sorted(rivals.values(), key=lambda r: r.latency_s)
    rival_rows = _against_greedy(screened.loc[[r.name for r in rivals]], screened) if rivals else (
        None)  # fmt: skip
    parts = [p for p in (front, asked, rival_rows) if p is not None]
    done = _draw_intervals(pd.concat(parts, ignore_index=True), uncertainty, space, d=d,
                           draws=draws, seed=seed)  # fmt: skip
    columns = list(INTERVAL_COLUMNS)
    front[columns] = done[columns].iloc[: len(front)].to_numpy()
    start = len(front)
    if asked is not None:
        asked = asked.copy()
        asked[columns] = done[columns].iloc[start : start + len(asked)].to_numpy()
        start += len(asked)
        keys = [c for c in KEYS if c in asked.columns]
        on = asked[keys].merge(front[keys].assign(on_frontier=True), on=keys, how="left")
        asked.insert(0, "config", [label(r) for r in asked.itertuples()])
        asked["on_frontier"] = on.on_frontier.eq(True).to_numpy()
    if rival_rows is not None:
        rival_rows = rival_rows.assign(**dict(zip(columns, done[columns].iloc[start:]
                                                  .to_numpy().T, strict=True)))  # fmt: skip
    verdicts, rivals_of = {}, {}
    for _, best in front[front.recommended].iterrows():
        workload = best.workload
        greedy = front[(front.workload == workload) & (front.method == "greedy")
                       & (front.tp_main == 1)].nsmallest(1, "latency_s")  # fmt: skip
        rival = None if rival_rows is None else rival_rows[rival_rows.workload == workload]
        others = [*(r for _, r in (rival.iterrows() if rival is not None else ())),
                  *(r for _, r in greedy.iterrows())]  # fmt: skip
        others = [r for r in others if label(r) != label(best)]
        verdicts[workload] = _verdict(best, others, uncertainty.covers(), label,
                                      borrowed=uncertainty.borrowed)  # fmt: skip
        named = [r for r in others if label(r) == verdicts[workload].rival]
        rivals_of[workload] = (best, named[0] if named else None)
    open_calls = [w for w, v in verdicts.items() if v.too_close and rivals_of[w][1] is not None]
    if open_calls and draws:
        found = _dominant_sources([rivals_of[w] for w in open_calls], uncertainty, space, d=d,
                                  draws=min(SOURCE_DRAWS, draws), seed=seed)  # fmt: skip
        for w, (source, widths) in zip(open_calls, found, strict=True):
            verdicts[w] = replace(verdicts[w], dominant=source,
                                  widths=tuple(sorted(widths.items())))  # fmt: skip
    front = uncertainty.columns(front, d)
    asked = None if asked is None else uncertainty.columns(asked, d)
    return replace(result, frontier=front, verdicts=verdicts, asked=asked,
                   covers=uncertainty.covers(), uncertainty=uncertainty)  # fmt: skip


P_METHODS = ("ppd", "early-exit")
"""Methods whose latency rests on p (a borrowed p leaves their comparison conditional)."""


def rival_of(best, screened: pd.DataFrame, max_compute=None, min_quality: float = 1.0, *,
             max_devices=None):  # fmt: skip
    """The fastest configuration of another method than ``best``'s on at most ``max_devices``
    devices (None: ``best``'s own; ``math.inf``: any the plan screened), within the compute
    budget and of quality >= ``min_quality`` (a screened row), or None. The verdict weighs
    both: a slower median on more devices may still overlap the recommendation's interval."""
    check_row("best", best, ("compute_ratio",))
    check_screened("screened", screened)
    max_compute = None if max_compute is None else as_real("max_compute", max_compute, minimum=1)
    min_quality = check_min_quality(min_quality)
    if max_devices is not None and max_devices != math.inf:
        max_devices = as_real("max_devices", max_devices, minimum=1)
    return _rival_of(best, screened, max_compute, min_quality, max_devices=max_devices)


def _rival_of(best, screened, max_compute, min_quality, *, max_devices=None):
    """``rival_of`` on checked inputs."""
    devices = best.devices if max_devices is None else max_devices
    others = screened[(screened.workload == best.workload) & (screened.method != best.method)]
    others = others[others.devices <= devices]
    if "quality" in others:
        others = others[others.quality >= min_quality]
    if max_compute is not None:
        base = best.compute_s / best.compute_ratio
        others = others[others.compute_s <= max_compute * base * (1 + 1e-12)]
    return others.nsmallest(1, "latency_s").iloc[0] if len(others) else None


def validate_flags(row) -> list[str] | None:
    """The ``ppd validate`` flags that time configuration ``row`` beside greedy ([] for greedy
    on one device), or None where ``ppd validate`` cannot time it (tensor parallelism, a
    separate draft model)."""
    check_row("row", row)
    return _validate_flags(row)


def _validate_flags(row) -> list[str] | None:
    if int(row.tp_main) != 1 or int(row.tp_candidates) > 1:
        return None
    if row.method == "greedy":
        return []
    if row.method == "ppd":
        backend = "single" if row.tp_candidates == 0 else "dist"
        flags = ["--d-bar", str(int(row.d_bar)), "--k", str(int(row.k)), "--early-head",
                 row.early_head, "--backend", backend]  # fmt: skip
        if row.head_kind == "shared":
            return flags
        return [*flags, "--head-dir", f"HEAD_DIR_{row.head_kind}_L{int(row.d_bar)}"]
    if row.method == "early-exit":
        return ["--early-exit", str(int(row.exit_layer)), "--draft-tokens", str(int(row.g))]
    if row.method == "free":
        return ["--free", str(int(row.exit_layer)), "--threshold", f"{row.threshold:g}"]
    return None


SETTLES = {
    "engine": "measure the engine on your GPU (ppd measure profile --device cuda)",
    "p": "measure this model's p (ppd measure match-rate)",
    "profile": "time both on this machine (ppd validate)",
    "drift": "time both in one interleaved run (ppd validate)",
}
"""Per source, the one measurement that removes it."""


@dataclass(frozen=True)
class Verdict:
    """Whether the planner can tell its recommendation from the nearest other choice.

    ``kind``: ``clear`` (the 95 % intervals, every source included, are apart and p is this
    model's or not needed), ``conditional`` (apart, but on a p borrowed from another model),
    ``too close to call`` (they overlap; ``dominant`` names the source that spreads the two
    most, and ``SETTLES`` the measurement that removes it)."""

    workload: str
    recommended: str
    """The recommended configuration, in words."""
    recommended_speedup: Interval
    """Its speed-up over greedy on one device (interval)."""
    rival: str = ""
    """The configuration it was compared with ("" when there is none)."""
    rival_speedup: Interval | None = None
    too_close: bool = False
    """The two speed-up intervals overlap: the planner cannot tell which is faster."""
    covers: str = ""
    """What the intervals cover (``Uncertainty.covers``)."""
    validate_flags: tuple[str, ...] | None = None
    """``ppd validate`` flags that time the recommendation and every rival whose interval
    overlaps it, else the nearest rival (None: one command cannot time the recommendation
    beside them)."""
    untimed: tuple[str, ...] = ()
    """Those rivals ``ppd validate`` cannot time (tensor parallelism, a separate draft model),
    left out of ``validate_flags``."""
    kind: str = "clear"
    """``clear``, ``conditional`` or ``too close to call`` (class docstring)."""
    dominant: str = ""
    """The source that spreads the comparison most (``sim.plan_uncertainty.SOURCES``)."""
    widths: tuple = ()
    """(source, 95 % width of log(speed-up ratio)) of each source alone."""

    @property
    def settle(self) -> str:
        """The measurement that settles it ("" when clear)."""
        return "" if self.kind == "clear" else SETTLES.get(self.dominant, SETTLES["profile"])

    @property
    def text(self) -> str:
        """The verdict line."""
        mine = f"{self.recommended} {_show(self.recommended_speedup)}"
        if not self.rival:
            return f"nothing to compare {mine} with"
        other = f"{self.rival} {_show(self.rival_speedup)}"
        level = f"{100 * self.recommended_speedup.level:g} %"
        if self.kind == "too close to call":
            return (f"too close to call: {mine} against {other}: their {level} intervals "
                    f"overlap, mostly from {self.dominant or 'p'}")  # fmt: skip
        if self.kind == "conditional":
            return (f"conditional on p: {mine} against {other}: apart on the p range assumed, "
                    "but that p is borrowed from another model")  # fmt: skip
        return f"clear: {mine} against {other}, {level} intervals apart, every source included"


def _show(interval: Interval | None) -> str:
    return "" if interval is None else f"({interval.low:.2f}x to {interval.high:.2f}x greedy)"


def _speedup(row) -> Interval:
    low = getattr(row, "speedup_low", row.speedup)
    high = getattr(row, "speedup_high", row.speedup)
    if not (np.isfinite(low) and np.isfinite(high)):
        low = high = row.speedup
    return Interval(float(min(low, high)), float(max(low, high)))


def verdict(best, rivals: Sequence, covers: str, label, *, borrowed: bool = False) -> Verdict:
    """The verdict on ``best`` (a row with ``speedup`` and ``INTERVAL_COLUMNS``) against the
    first of ``rivals`` (rows, fastest first; greedy on one device among them) whose
    speed-up interval overlaps its own, else the first; ``label`` names a row; ``borrowed``:
    p is another model's (a comparison that rests on it is at most ``conditional``)."""
    check_row("best", best, ("speedup",))
    if not callable(label):
        raise TypeError(f"label must be callable, got {type(label).__name__}")
    check_instance("covers", covers, str)
    check_instance("borrowed", borrowed, bool)
    if isinstance(rivals, str | bytes) or not isinstance(rivals, Sequence):
        raise ValueError(f"rivals must be a sequence of planner rows, got {rivals!r:.60}")
    rivals = [r for r in rivals if r is not None]
    for i, rival in enumerate(rivals):
        check_row(f"rivals[{i}]", rival, ("speedup",))
    return _verdict(best, rivals, covers, label, borrowed=borrowed)


def _verdict(best, rivals, covers, label, *, borrowed) -> Verdict:
    """``verdict`` on the planner's own rows."""
    rivals = [r for r in rivals if r is not None]
    mine = _speedup(best)
    if not rivals:
        return Verdict(str(best.workload), label(best), mine, covers=covers)
    close = [r for r in rivals if _speedup(r).overlaps(mine)]
    rival = (close or rivals)[0]
    compared = close or [rival]
    untimed = tuple(label(r) for r in compared if _validate_flags(r) is None)
    timed = [_validate_flags(r) for r in (best, *compared)]
    flags = None if timed[0] is None else merge_flags([f for f in timed if f is not None])
    on_p = best.method in P_METHODS or rival.method in P_METHODS
    kind = "too close to call" if close else "conditional" if borrowed and on_p else "clear"
    return Verdict(str(best.workload), label(best), mine, label(rival), _speedup(rival),
                   bool(close), covers, flags, untimed, kind,
                   "p" if kind == "conditional" else "")  # fmt: skip


SINGLE_VALUED = ("--head-dir",)
"""``ppd validate`` options that take one value for every configuration of a command."""


def merge_flags(flag_lists: Sequence) -> tuple[str, ...] | None:
    """One ``ppd validate`` argument list that times every configuration of ``flag_lists``
    (``validate_flags``' lists): each option once with its values merged in order. ``ppd
    validate`` times the product of a method's options, so two PPD configurations that differ
    in more than one option give a superset. None where one list is None or the lists need two
    values of a ``SINGLE_VALUED`` option, or PPD configurations with and without one (two
    heads: one command cannot time both; ``validate_flags`` names a head by its kind and
    layer)."""
    if isinstance(flag_lists, str | bytes) or not isinstance(flag_lists, Sequence):
        raise ValueError(f"flag_lists must be a sequence of flag lists, got {flag_lists!r:.60}")
    for i, flags in enumerate(flag_lists):
        if flags is not None and (
            isinstance(flags, str | bytes)
            or not isinstance(flags, Sequence)
            or len(flags) % 2
            or not all(isinstance(word, str) for word in flags)
        ):
            raise ValueError(f"flag_lists[{i}] must be None or option, value pairs of text "
                             f"(validate_flags), got {flags!r:.80}")  # fmt: skip
    if any(f is None for f in flag_lists):
        return None
    values: dict[str, list[str]] = {}
    for flags in flag_lists:
        for option, value in zip(flags[::2], flags[1::2], strict=True):
            got = values.setdefault(str(option), [])
            if str(value) not in got:
                got.append(str(value))
    ppd = [f for f in flag_lists if "--d-bar" in f]
    for option in SINGLE_VALUED:
        if len(values.get(option, ())) > 1 or len({option in f for f in ppd}) > 1:
            return None
    return tuple(w for option, vs in values.items() for w in (option, *vs))


def validate_command(flags: Sequence[str], *, model: str = "MODEL", prompts: str = "PROMPTS",
                     profile: str | None = None, ell: int = 128,
                     out: str = "ppd-out/settle") -> str:  # fmt: skip
    """The ``ppd validate`` command that times greedy and the configurations of ``flags``."""
    if isinstance(flags, str) or not isinstance(flags, Sequence):
        raise ValueError(f"flags must be a sequence of ppd validate arguments, got {flags!r:.60}")
    for name, value in (("model", model), ("prompts", prompts), ("out", out)):
        check_instance(name, value, str)
    ell = as_int("ell", ell, limit=10**7)
    words = ["ppd", "validate", "--model", model, "--prompts", prompts, "--max-new-tokens",
             str(ell)]  # fmt: skip
    if profile is not None:
        words += ["--profile", str(profile)]
    return shlex.join([*words, *map(str, flags), "--out", out])
