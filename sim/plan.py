"""Plan PPD for a model and hardware: screen, keep the Pareto frontier, confirm it, recommend.

``plan(hardware, ptable, space, d=...)``:

1. screens every configuration of PPD and its alternatives in closed form (``sim.plan_grid``);
2. keeps, per workload, the configurations within the constraints (devices; busy
   device-seconds per token at most ``max_compute`` times greedy decoding's on one device) and
   the Pareto frontier of latency per token against compute per token among them (FREE's, the
   one approximate method, also against its quality; the frontier of all methods only among
   rows of quality >= ``min_quality``);
3. confirms every frontier point by simulation through ``sim.sweep`` (any Executor): PPD and
   greedy with the SimPy schedule under their ``DecodeCosts``, the speculative methods with a
   Monte Carlo of their verify rule; the mean and its standard error per point;
4. recommends, per workload, the fastest feasible configuration of quality >= ``min_quality``
   (default 1.0: exact methods only, so FREE is shown but recommended only when the bar is
   lowered), and says why;
5. puts a 95 % interval on every latency and speed-up, covering every source the answer rests
   on (``sim.plan_uncertainty``: the engine preset's measured error, p's sampling error,
   interpolation and, where it is another model's, its prior range, the profile's replicates
   and the machine's drift) and says, per workload, whether the recommendation is clear of
   its rival and of greedy, conditional on a borrowed p, or too close to call, naming the
   source that dominates (``Plan.verdicts``);
6. states the decision first (``Plan.decisions``, ``sim.plan_summary``): per workload the
   decision with its interval and verdict, the best alternative and the p at which PPD beats
   it on the same devices, beside the p the table assumed.

A workload the p-table has no p for is planned without inventing one: p is 0 for its PPD and
early-exit rows, which are not recommended, and the decision gives the p PPD would need.

The configurations a user asked for (``space.d_bars``, ``space.ks``) are kept in
``Plan.asked`` with their intervals, on the frontier or not.
"""

from __future__ import annotations

import time
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from ppdmodel.alternatives import EXACT_QUALITY
from ppdmodel.intervals import MAX_DRAWS
from ppdmodel.validation import (
    as_int,
    as_real,
    check_columns,
    check_flag,
    check_instance,
    check_nonnegative,
)
from sim.plan_grid import METHOD_OF, PlanSpace, _check_space, _screen
from sim.plan_intervals import (
    P_METHODS,
    PLAN_DRAWS,
    Verdict,
    _against_greedy,
    _judge,
    _rival_of,
    check_replicates,
)
from sim.plan_limits import (
    MAX_CONFIRM_N,
    _check_confirm_work,
    check_cell,
    check_min_quality,
    check_plan_args,
    check_points,
    check_row,
    check_screened,
)
from sim.plan_summary import decide
from sim.plan_uncertainty import Uncertainty
from sim.ptable import PTable
from sim.run import POOL_MIN_WORK
from sim.sweep import run_sweep


@dataclass
class Plan:
    """The planner's result."""

    frontier: pd.DataFrame
    """Per workload, each method's Pareto-optimal configurations (``pareto``: optimal among
    all methods), closed form and ``sim_*`` once confirmed, with ``speedup`` and
    ``compute_ratio`` against greedy on one device, and ``recommended``."""
    recommendations: dict[str, str]
    """Per workload: the recommended configuration and why, in words."""
    n_screened: int
    """Configurations screened in closed form."""
    screened: pd.DataFrame | None = None
    """Every screened row (kept when asked: ``keep_screened``)."""
    by_devices: pd.DataFrame | None = None
    """Per workload and device budget n: each method's fastest configuration on at most n
    devices (within the compute budget); ``wins`` marks the fastest method."""
    screen_s: float = 0.0
    """Wall seconds of the closed-form screening."""
    confirm_s: float = 0.0
    """Wall seconds of the simulation of the frontier points."""
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    """Per workload: can the recommendation be told from its rival and greedy (intervals)?"""
    asked: pd.DataFrame | None = None
    """The PPD configurations the space names (``d_bars``, ``ks`` given), frontier or not:
    ``on_frontier`` marks those in ``frontier``; None when the space names none."""
    covers: str = ""
    """What the interval columns cover (``Uncertainty.covers``)."""
    uncertainty: Uncertainty | None = None
    """The sources behind the intervals."""
    decisions: dict = field(default_factory=dict)
    """Per workload: the ``sim.plan_summary.Decision``."""
    no_p: tuple[str, ...] = ()
    """Workloads the p-table has no p for (planned with p = 0, PPD not recommended)."""


def pareto_front(latency: np.ndarray, compute: np.ndarray, quality=None) -> np.ndarray:
    """Boolean mask of the points no other point beats on both latency and compute (lower is
    better; of equal points the first is kept); with ``quality`` (higher is better) on all
    three."""
    latency, compute = check_points(latency, compute)
    if quality is not None:
        quality = np.asarray(check_nonnegative("quality", quality), dtype=float)
        if quality.shape != latency.shape:
            raise ValueError(f"quality must have latency's shape {latency.shape}, got "
                             f"{quality.shape}")  # fmt: skip
    return _pareto_front(latency, compute, quality)


def _pareto_front(latency: np.ndarray, compute: np.ndarray, quality=None) -> np.ndarray:
    """``pareto_front`` of 1-d float arrays of one length (a planner frame's columns)."""
    if not latency.size:
        return np.zeros(0, dtype=bool)
    if quality is not None:
        return _pareto_3d(latency, compute, quality)
    order = np.lexsort((latency, compute))
    best = np.minimum.accumulate(latency[order])
    keep_sorted = np.concatenate([[True], latency[order][1:] < best[:-1]])
    mask = np.zeros(latency.size, dtype=bool)
    mask[order[keep_sorted]] = True
    return mask


def _pareto_3d(latency, compute, quality) -> np.ndarray:
    """``pareto_front`` on three axes (pairwise: for the few rows of one FREE table)."""
    no_worse = (
        (latency[None, :] <= latency[:, None])
        & (compute[None, :] <= compute[:, None])
        & (quality[None, :] >= quality[:, None])
    )  # [i, j]: j no worse than i
    equal = ((latency[None, :] == latency[:, None]) & (compute[None, :] == compute[:, None])
             & (quality[None, :] == quality[:, None]))  # fmt: skip
    earlier = np.tri(latency.size, k=-1, dtype=bool)  # [i, j]: j < i
    beaten = no_worse & (~equal | earlier)
    return ~beaten.any(axis=1)


def label(row) -> str:
    """A configuration in a few words."""
    check_row("row", row)
    return _label(row)


def _label(row) -> str:
    """``label`` of a row of the planner's own frames (its method's ``label_row``)."""
    return METHOD_OF[row.method].label_row(row)


def frontier_of(screened: pd.DataFrame, max_compute: float | None,
                min_quality: float = EXACT_QUALITY) -> pd.DataFrame:  # fmt: skip
    """Per workload: speed-up and compute against greedy on one device, the feasible rows,
    and the Pareto frontier of each method (FREE's also over quality; ``pareto``: on the
    frontier of all methods of quality >= ``min_quality``)."""
    check_screened("screened", screened)
    max_compute = None if max_compute is None else as_real("max_compute", max_compute, minimum=1)
    return _frontier_of(screened, max_compute, check_min_quality(min_quality))


def _frontier_of(screened, max_compute, min_quality) -> pd.DataFrame:
    """``frontier_of`` on checked inputs."""
    out = []
    for _, rows in _against_greedy(screened, screened).groupby("workload", sort=False):
        if max_compute is not None:
            rows = rows[rows.compute_ratio <= max_compute * (1 + 1e-12)]
        allowed = _allowed(rows, min_quality)
        overall = np.zeros(len(rows), dtype=bool)
        overall[allowed] = _pareto_front(rows.latency_s.to_numpy(float)[allowed],
                                         rows.compute_s.to_numpy(float)[allowed])  # fmt: skip
        rows = rows.assign(pareto=overall)
        for method, by_method in rows.groupby("method", sort=False):
            quality = by_method.quality.to_numpy(float) if method == "free" else None
            mask = _pareto_front(by_method.latency_s.to_numpy(float),
                                 by_method.compute_s.to_numpy(float), quality)  # fmt: skip
            out.append(by_method[mask].sort_values("compute_s", kind="stable"))
    return pd.concat(out).reset_index(drop=True)


def _allowed(rows: pd.DataFrame, min_quality: float) -> np.ndarray:
    """Rows of quality >= ``min_quality`` (a checked float; every row where no quality is
    given)."""
    if "quality" not in rows:
        return np.ones(len(rows), dtype=bool)
    return (rows.quality >= min_quality).to_numpy()


def best_by_devices(screened: pd.DataFrame, max_compute: float | None = None,
                    min_quality: float = EXACT_QUALITY) -> pd.DataFrame:  # fmt: skip
    """Each method's fastest configuration of quality >= ``min_quality`` per workload and
    device budget (at most n devices), with ``speedup`` against greedy on one device and
    ``wins`` for the fastest method."""
    check_screened("screened", screened)
    max_compute = None if max_compute is None else as_real("max_compute", max_compute, minimum=1)
    return _best_by_devices(screened, max_compute, check_min_quality(min_quality))


def _best_by_devices(screened, max_compute, min_quality) -> pd.DataFrame:
    """``best_by_devices`` on checked inputs."""
    out = []
    screened = screened[_allowed(screened, min_quality)]
    for _, rows in screened.groupby("workload", sort=False):
        base = rows[(rows.method == "greedy") & (rows.tp_main == 1)].latency_s.min()
        base_compute = rows[(rows.method == "greedy") & (rows.tp_main == 1)].compute_s.min()
        if max_compute is not None:
            rows = rows[rows.compute_s <= max_compute * base_compute * (1 + 1e-12)]
        for n in sorted(rows.devices.unique()):
            within = rows[rows.devices <= n]
            best = within.loc[within.groupby("method", sort=False).latency_s.idxmin()]
            best = best.assign(budget=n, speedup=base / best.latency_s,
                               compute_ratio=best.compute_s / base_compute)  # fmt: skip
            best["wins"] = best.latency_s == best.latency_s.min()
            out.append(best)
    table = pd.concat(out, ignore_index=True)
    table.insert(0, "config", [_label(r) for r in table.itertuples()])
    return table


def plan(
    hardware: list,
    ptable,
    space: PlanSpace | None = None,
    *,
    d: int,
    max_compute: float | None = None,
    confirm_n: int = 64,
    executor: Executor | None = None,
    seed=0,
    out_dir=None,
    keep_screened: bool = False,
    min_quality: float = EXACT_QUALITY,
    replicates=None,
    draws: int = PLAN_DRAWS,
    model: str | None = None,
    profile_drift: float | None = None,
    engines=None,
) -> Plan:
    """Screen, keep the frontier, confirm it by simulation (``confirm_n`` sequences per point;
    0 skips it), recommend and judge (module docstring). ``hardware``: ``HardwareModel``s;
    ``min_quality``: the lowest quality against greedy's output a recommendation may have;
    ``replicates``: per hardware model, its bootstrap replicates (``sim.plan_intervals.
    profile_replicates``; None: none, which widens by a stated default); ``draws``: draws per
    interval (0: points); ``model``: the planned model's name (a p-table of another or an
    unnamed model is borrowed: its p widens to the reference tables' range); ``profile_drift``:
    the profile's recorded drift log-sd; ``engines``: per hardware model the engine preset it
    was priced with (default: its own; ``sim.plan_uncertainty.Uncertainty.of``).

    Every input is checked here, once, before any work (ValueError naming the argument and
    what it may be); the helpers it calls trust them. Refuses (ValueError) a screen or
    confirmation above ``sim.plan_limits``' work limits before starting it; Ctrl-C or any
    exception ends the confirmation's local workers.
    """
    space = PlanSpace() if space is None else space
    # every input is checked here, once, before any work; the helpers below trust them
    min_quality = check_min_quality(min_quality)
    draws = as_int("draws", draws, minimum=0, limit=MAX_DRAWS)
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be the planned model's name or None, got {model!r:.60}")
    if profile_drift is not None:
        profile_drift = as_real("profile_drift", profile_drift, maximum=1.0)
    check_flag("keep_screened", keep_screened)
    seed = as_int("seed", seed, minimum=0)  # the confirmation's and the intervals' draws
    if max_compute is not None:  # a finite multiple of greedy's compute
        max_compute = as_real("max_compute", max_compute, minimum=1)
    d, confirm_n = check_plan_args(hardware, ptable, space, d, confirm_n)  # and work limits
    ptable, no_p = _with_unknown_workloads(ptable, space)
    pgrid = _check_space(ptable, space, d)  # d_bars and ks against d and the p-table
    replicates = check_replicates(replicates, hardware)
    started = time.perf_counter()
    screened = _screen(hardware, ptable, space, d, pgrid, given=False)
    front = _frontier_of(screened, max_compute, min_quality)
    screened_at = time.perf_counter()
    if confirm_n:
        front = _confirm(front, hardware, space, d=d, n=confirm_n, executor=executor, seed=seed,
                         out_dir=out_dir)  # fmt: skip
    confirmed_at = time.perf_counter()
    front["recommended"] = False
    reasons = {}
    for workload, rows in front.groupby("workload", sort=False):
        rows = rows[_allowed(rows, min_quality)]
        if workload in no_p:
            rows = rows[~rows.method.isin(P_METHODS)]
        best = _fastest(rows)
        front.loc[best, "recommended"] = True
        reasons[workload] = _explain(front.loc[best], rows, screened, max_compute, min_quality)
    front.insert(2, "config", [_label(r) for r in front.itertuples()])
    by_devices = _best_by_devices(screened, max_compute, min_quality)
    result = Plan(front, reasons, len(screened), screened if keep_screened else None,
                  by_devices, screened_at - started, confirmed_at - screened_at,
                  no_p=no_p)  # fmt: skip
    uncertainty = Uncertainty.of(hardware, ptable, model=model, replicates=replicates,
                                 profile_drift=profile_drift, engines=engines)  # fmt: skip
    result = _judge(result, screened, space, d, uncertainty=uncertainty, draws=draws, seed=seed,
                    max_compute=max_compute, min_quality=min_quality, label=_label)  # fmt: skip
    decisions = decide(result, screened, space, d, max_compute=max_compute,
                       min_quality=min_quality, label=_label)  # fmt: skip
    return replace(result, decisions=decisions)


METHOD_ORDER = ("greedy", "draft-model", "early-exit", "ppd", "free")
"""The simpler method first: of configurations equally fast within ``TIE_REL``, the planner
takes the one on fewer devices, then the simpler method, then the one with less compute."""
TIE_REL = 1e-9
"""Relative latency difference below which two configurations tie (floating-point noise)."""


def fastest(rows: pd.DataFrame):
    """The index of the fastest row, ties (``TIE_REL``) going to fewer devices, the simpler
    method (``METHOD_ORDER``), then less compute."""
    check_columns("rows", rows, ("method", "devices", "latency_s", "compute_s"))
    if not len(rows):
        raise ValueError("rows must hold at least one configuration")
    for column in ("devices", "latency_s", "compute_s"):
        values = rows[column].to_numpy()
        if values.dtype.kind not in "iuf" or not np.isfinite(values.astype(float)).all():
            raise ValueError(f"rows column {column!r} must hold finite numbers")
    return _fastest(rows)


def _fastest(rows: pd.DataFrame):
    """``fastest`` of a planner frame's rows (one at least)."""
    top = rows.latency_s.min()
    tied = rows[rows.latency_s <= top * (1 + TIE_REL)]
    rank = tied.method.map({m: i for i, m in enumerate(METHOD_ORDER)}).fillna(len(METHOD_ORDER))
    order = tied.assign(_rank=rank).sort_values(["devices", "_rank", "compute_s", "latency_s"],
                                                kind="stable")  # fmt: skip
    return order.index[0]


def with_unknown_workloads(ptable: PTable, space: PlanSpace) -> tuple[PTable, tuple[str, ...]]:
    """``ptable`` with p = 0 rows for every workload ``space`` names that it lacks (their PPD
    and early-exit rows are then never recommended), and those workloads."""
    check_instance("ptable", ptable, PTable)
    check_instance("space", space, PlanSpace)
    return _with_unknown_workloads(ptable, space)


def _with_unknown_workloads(ptable: PTable, space: PlanSpace) -> tuple[PTable, tuple[str, ...]]:
    missing = tuple(w for w in (space.workloads or ()) if w not in ptable.workloads)
    if not missing:
        return ptable, ()
    template = ptable.df[ptable.df.workload == ptable.workloads[0]]
    keep = [c for c in ("workload", "head", "layer", "k", "p_correct") if c in template]
    rows = [template[keep].assign(workload=w, p_correct=0.0) for w in missing]
    df = pd.concat([ptable.df, *rows], ignore_index=True)
    return replace(ptable, df=df), missing


def explain(best: pd.Series, front: pd.DataFrame, screened: pd.DataFrame, max_compute,
            min_quality: float = EXACT_QUALITY) -> str:  # fmt: skip
    """Why ``best`` is recommended: its gain, what it beats and, for PPD, its p margin."""
    check_row("best", best, ("speedup", "compute_ratio"))
    check_screened("front", front)
    check_screened("screened", screened)
    max_compute = None if max_compute is None else as_real("max_compute", max_compute, minimum=1)
    return _explain(best, front, screened, max_compute, check_min_quality(min_quality))


def _explain(best, front, screened, max_compute, min_quality) -> str:
    """``explain`` on checked inputs."""
    text = (
        f"{_label(best)} on {best.hardware_name}: {best.latency_s * 1e3:.3g} ms/token, "
        f"{best.speedup:.2f}x greedy on one device at {best.compute_ratio:.2f}x its compute"
    )
    rival = _rival_of(best, screened, max_compute, min_quality)
    if rival is not None:
        text += (
            f"; the best other method on at most {int(best.devices)} "
            f"device{'s' if best.devices > 1 else ''}, "
            f"{_label(rival)}, takes {rival.latency_s * 1e3:.3g} ms/token "
            f"({rival.latency_s / best.latency_s:.2f}x as long)"
        )
    if best.method == "free":
        text += (
            f"; approximate: quality {best.quality:.3f} against greedy's output "
            f"({best.quality_metric or 'as measured'}; minimum quality {min_quality:g})"
        )
    if best.method == "ppd":
        main = f"greedy on main's {int(best.tp_main)} device(s)"
        if not np.isfinite(best.break_even_p):
            text += f"; it never beats {main} at any p under these costs"
        elif best.break_even_p == 0:
            text += f"; no slower than {main} at any p (break-even p = 0), p_correct {best.p:.3f}"
        else:
            text += (f"; p_correct {best.p:.3f} against a break-even p of "
                     f"{best.break_even_p:.3f} (vs {main})")  # fmt: skip
        if np.isfinite(best.get("p_low", np.nan)):
            text += f" (95 % lower bound of p_correct {best.p_low:.3f})"
    if "sim_latency_s" in best and np.isfinite(best.sim_latency_s):
        text += (
            f"; simulated {best.sim_latency_s * 1e3:.3g} +- "
            f"{best.sim_latency_se * 1e3:.2g} ms/token"
        )
    return text + "."


def _cell(row, hardware, space: PlanSpace, d: int, n: int) -> dict:
    """What a confirmation task needs, JSON-ready: the method, n sequences and the method's
    own keys (its ``build_cell``: costs, a SimConfig or a step's seconds)."""
    hw = hardware[int(row.hardware)]
    cell = {"row": int(row.Index), "method": row.method, "n": n, "ell": space.ell,
            "tp_main": int(row.tp_main), "tp_candidates": int(row.tp_candidates)}  # fmt: skip
    cell.update(METHOD_OF[row.method].build_cell(row, hw, space.ell, d))
    return cell


def confirm_cell(cell: dict, seed: np.random.SeedSequence) -> dict:
    """Simulate one frontier point: mean seconds and busy device-seconds per token, with the
    standard error of the latency mean (a sweep task; ``sim.sweep.run_sweep``)."""
    check_cell(cell)
    check_instance("seed", seed, np.random.SeedSequence)
    return _confirm_cell(cell, seed)


def _confirm_cell(cell: dict, seed: np.random.SeedSequence) -> dict:
    """``confirm_cell`` of a cell the planner built (``_cell``): the confirmation's task."""
    n = cell["n"]
    lat, comp = METHOD_OF[cell["method"]].simulate_cell(cell, seed)
    se = float(lat.std(ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return {"row": cell["row"], "sim_latency_s": float(lat.mean()), "sim_latency_se": se,
            "sim_compute_s": float(comp.mean()), "sim_n": n}  # fmt: skip


FAMILY_ALPHA = 1e-3
"""False-alarm rate of ``agrees`` over a whole frontier (Bonferroni over its points)."""


def confirm(front, hardware, space, *, d, n, executor=None, seed=0, out_dir=None):
    """Add ``sim_latency_s``, ``sim_latency_se``, ``sim_compute_s`` and ``agrees`` to the frontier.

    ``agrees``: the closed form lies within t * s.e. of the simulated mean, t the Student
    quantile (n - 1 degrees of freedom) at which all m frontier points of a correct closed form
    pass together with probability 1 - ``FAMILY_ALPHA`` (Bonferroni: 1 - alpha / (2m) each;
    t ~ 4.6 for m = 100, n = 64); deterministic points (s.e. 0) to 1e-9 relative.
    """
    check_screened("front", front)
    n = as_int("n", n, minimum=0, limit=MAX_CONFIRM_N)
    d, n = check_plan_args(hardware, PTable.paper(), space, d, n, check_size=False)
    return _confirm(front, hardware, space, d=d, n=n, executor=executor, seed=seed,
                    out_dir=out_dir)  # fmt: skip


def _confirm(front, hardware, space, *, d, n, executor, seed, out_dir):
    """``confirm`` on checked inputs."""
    cells = [_cell(row, hardware, space, d, n) for row in front.itertuples()]
    small = _check_confirm_work(cells, n) < POOL_MIN_WORK  # less than starting workers takes
    with ThreadPoolExecutor(1) if small and executor is None else nullcontext(executor) as pool:
        results = run_sweep(_confirm_cell, cells, seed=seed, executor=pool, out_dir=out_dir,
                            progress="ppd plan: confirming the frontier")  # fmt: skip
    front = front.copy()
    front[["sim_latency_s", "sim_latency_se", "sim_compute_s"]] = np.nan
    idx = results["row"].to_numpy()
    for col in ("sim_latency_s", "sim_latency_se", "sim_compute_s"):
        front.loc[idx, col] = results[col].to_numpy()
    quantile = float(student_t.ppf(1 - FAMILY_ALPHA / (2 * len(front)), max(n - 1, 1)))
    front["sim_z"] = (front.sim_latency_s - front.latency_s) / front.sim_latency_se.where(
        front.sim_latency_se > 0
    )
    tolerance = quantile * front.sim_latency_se + 1e-9 * front.latency_s
    front["agrees"] = (front.sim_latency_s - front.latency_s).abs() <= tolerance
    return front
