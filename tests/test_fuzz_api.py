"""Fuzz every public function of ppdmodel and sim with malformed input (issues 10 and 25).

Targets: an explicit ``Target`` (valid arguments chosen by hand) for the public API, and for
every other public function, class and method of every module of ``ppdmodel`` and ``sim``
(enumerated from the modules, so new code is covered without editing this file) one built
from its signature, with valid values by parameter name (``VALID_BY_NAME``). A numeric result
must be finite and >= 0 unless the target is exempt (``NON_FINITE_OK``, ``NON_NEGATIVE_EXEMPT``).

Each target starts from valid keyword arguments and replaces one or more of them with
malformed values: wrong types, None, strings, NaN, infinities, negatives, zero, huge
integers, booleans, empty or mis-shaped arrays, small integer dtypes and malformed
DataFrames. Whatever the input, a call must return or raise ValueError or TypeError naming
an offending parameter, and end within ``CALL_TIME_BOUND_S``.

Naming (``names_a_parameter``, ``offending_names``): the message must name a parameter the
call replaced with a malformed value (or one the target has no valid value for), or a column,
key or field of its valid value (a DataFrame's columns, a dict's keys, a dataclass's fields),
or the name a checker was told to report under (its ``name`` argument): quoted, or as a whole
word followed by what marks a name (``NAMING``: "d_bar must", "cell['n']", "rows:", "gpu
name", "d, exit_layer and q must", "hw_index 3"). Python's own errors for a call ("missing 1
required positional argument: 'x'") quote the name and count; "The truth value of an array",
"unhashable type: 'list'" or "could not convert string to float" name nothing and do not. An
error that names none counts as ``unnamed`` and fails the test.

Outcomes are counted (ok, ValueError, TypeError, unnamed, other, over 5 s) and printed at the
end of the module with the unnamed calls. The strategies draw in a fixed order (lists, not
sets, sorted names) and the targets are enumerated in module and definition order, so a
profile's examples and counts do not depend on ``PYTHONHASHSEED``.

Profiles: the CI profile (default) runs ``CI_EXAMPLES`` examples per target, deterministically.
The slow profile runs ``SLOW_EXAMPLES`` random examples per target (>= 10^4 calls in all) and
then each ``FIXED_BAD`` value in each parameter of each target (``test_fuzz_sweep_slow``); it
is selected with ``PPD_FUZZ=slow python -m pytest tests/test_fuzz_api.py -m slow``. Set
``PPD_FUZZ_REPORT`` to a path to also write the counts there as JSON.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, is_dataclass
from numbers import Number
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import simpy  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import ppdmodel  # noqa: E402
import sim  # noqa: E402
from ppdmodel import paper, symbolic  # noqa: E402
from ppdmodel.cli_settings import ModelParameters  # noqa: E402
from ppdmodel.compute_seconds import compute_terms  # noqa: E402
from ppdmodel.cost_profile import WidePrice, parse_cost_profile  # noqa: E402
from ppdmodel.distribution import poisson_binomial_pmf  # noqa: E402
from ppdmodel.overheads import PaidOverheads, table3_rows  # noqa: E402
from sim.device import SharedDevice  # noqa: E402
from sim.engine import EngineHardware  # noqa: E402
from sim.formats import (  # noqa: E402
    LAYER_TIMES_COLUMNS,
    MatchTrace,
    validate_layer_times,
    write_layer_times,
)
from sim.hardware import Engine  # noqa: E402
from sim.hardware_costs import RooflineHardware, load_profile  # noqa: E402
from sim.plan import label as plan_label  # noqa: E402
from sim.plan import plan  # noqa: E402
from sim.plan_grid import DraftModel, PlanSpace, screen  # noqa: E402
from sim.plan_intervals import profile_replicates  # noqa: E402
from sim.plan_uncertainty import Uncertainty  # noqa: E402
from sim.preset_error import preset_error  # noqa: E402
from sim.progress import Progress  # noqa: E402
from sim.ptable import PTable  # noqa: E402
from sim.published import compare_published, read_published  # noqa: E402
from sim.run import summarise  # noqa: E402
from tests.ppdmodel.profiles import minimal_profile  # noqa: E402

CI_EXAMPLES = 200
"""Examples per explicit target in the CI profile (85 targets; with the ~280 automatic ones
~26,000 calls)."""
SLOW_EXAMPLES = 1000
"""Examples per explicit target in the slow profile (~150,000 calls with the automatic ones)."""
AUTO_CI_EXAMPLES = 40
"""Examples per automatically built target (every other public function) in the CI profile."""
AUTO_SLOW_EXAMPLES = 300
"""Examples per automatically built target in the slow profile."""
CALL_TIME_BOUND_S = 5.0
"""No single call may take longer (the size and work limits keep valid calls short)."""
FUZZ_WORK_LIMITS = {"sim.config.MAX_WORK": 10**6, "sim.run.MAX_WORK": 10**6,
                    "sim.free_schedule.MAX_WORK": 10**6,
                    "sim.plan_limits.MAX_CONFIRM_WORK": 10**6}  # fmt: skip
"""The simulator's and the planner's work caps while fuzzing: about a second of simulation
(for users, 5 s a sequence and an hour a confirmation). A valid but large request (the
planner confirming 127 sequences per point) is then refused by name, as a larger one is for a
user, and no valid call outlasts ``CALL_TIME_BOUND_S``."""
ALLOWED = ("ok", "ValueError", "TypeError")
"""Outcomes a call may have; a ValueError or TypeError counts only when its message names an
offending parameter (``names_a_parameter``), else it is ``unnamed``."""
PACKAGES = (ppdmodel, sim)
"""Every public function and class (and their public methods) of every module of these is
fuzzed: by an explicit ``Target`` below, or by one built from its signature (``auto_target``)."""
SKIPPED_MODULES = ("cli", "__main__")
"""Module names (last part, prefix) left to tests/test_cli_errors.py: argparse handlers."""

COUNTS: Counter = Counter()
"""Outcome of every fuzzed call: ok, ValueError, TypeError, unnamed, or ``other`` (a crash, a
silent non-finite or negative result); ``over 5 s`` counts the calls over the bound."""
UNNAMED: list[str] = []
"""The calls whose ValueError or TypeError named no offending parameter (printed at the end)."""


# -- malformed values ----------------------------------------------------------------------


class Opaque:
    """An object of a type no function expects."""

    def __repr__(self) -> str:
        return "Opaque()"


FIXED_BAD = [
    None, "", "abc", "40", "nan", b"1", True, False, np.bool_(True), 0, -1, -0.0, 0.5, 2.5,
    -2.5, float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, 2**53 + 1, 2**63,
    2**64, 10**30, -(2**70), 10**400, np.int8(-128), np.int8(127), np.int16(-1),
    np.uint64(2**64 - 1), np.float16(65504), np.float32("nan"), np.float64("inf"), 1j,
    complex(1, 1), [], [[]], [1, [2, 3]], (), {}, {"a": 1}, set(), Opaque(), print,
    np.array([]), np.empty((0, 3)), np.zeros((2, 3, 4)), np.array([np.nan]),
    np.array([np.inf, 1.0]), np.array(["a", "b"]), np.array([1, 2], dtype=np.int8),
    np.array([100, 120], dtype=np.int8), np.array([True, False]), np.array(None, dtype=object),
    np.array([1, "a"], dtype=object), pd.DataFrame(), pd.DataFrame({"x": [1]}),
    pd.Series([1.0, 2.0]),
]  # fmt: skip

scalars = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=2**53 + 1),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=4),
)
arrays = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4).map(np.array),
    st.lists(st.integers(-(2**7), 2**7 - 1), max_size=4).map(lambda x: np.array(x, np.int8)),
    st.lists(st.lists(st.floats(0, 1), max_size=3), max_size=3),  # ragged or 2-D
    st.lists(st.booleans(), max_size=4).map(np.array),
)
malformed = st.one_of(st.sampled_from(FIXED_BAD), scalars, arrays)


def frame_mutations(frame: pd.DataFrame) -> st.SearchStrategy:
    """Malformed versions of a valid DataFrame: columns dropped, renamed, emptied or spoiled."""
    columns = list(frame.columns)
    spoil = st.sampled_from(["text", None, np.nan, np.inf, -1, 2**70, 1.5, True])

    def drop(column):
        return frame.drop(columns=column)

    def rename(column):
        return frame.rename(columns={column: column.upper()})

    def spoiled(args):
        column, value = args
        out = frame.copy()
        out[column] = value
        return out

    def one_cell(args):
        column, value = args
        out = frame.copy().astype({column: object})
        out.loc[out.index[0], column] = value
        return out

    return st.one_of(
        st.sampled_from(columns).map(drop),
        st.sampled_from(columns).map(rename),
        st.tuples(st.sampled_from(columns), spoil).map(spoiled),
        st.tuples(st.sampled_from(columns), spoil).map(one_cell),
        st.just(frame.iloc[:0]),
        st.just(frame.to_dict()),
        st.just(frame.to_numpy()),
    )


# -- targets --------------------------------------------------------------------------------


@dataclass
class Target:
    """A public callable, valid keyword arguments, and extra strategies per argument."""

    name: str
    func: object
    valid: dict
    special: dict = field(default_factory=dict)
    examples: int | None = None
    unset: tuple = ()
    """Parameters without a valid value (given None): malformed in every call."""

    def strategy(self) -> st.SearchStrategy:
        names = sorted(self.valid)
        if not names:  # nothing to spoil: the call itself
            return st.just({})

        @st.composite
        def kwargs(draw):
            size = min(3, len(names))  # a list, not a set: the draws' order is the hash seed's
            chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=size, unique=True))
            out = dict(self.valid)
            for name in chosen:
                extra = self.special.get(name)
                out[name] = draw(malformed if extra is None else st.one_of(malformed, extra))
            return out

        return kwargs()


P_T = paper.per_position_p(dataset="SQuAD", k=3, trained=True, layer=20)  # ell = 16
THEOREM = dict(d=40, d_bar=20, ell=16, p=0.5, per_position=None)
LAW = ppdmodel.latency_distribution(d=8, d_bar=4, ell=6, p=0.5)
SMALL = dict(d=4, d_bar=2, k=1, ell=3)
SHAPE = sim.ModelShape.from_name("llama2-7b")
GPU = sim.GPUSpec.from_name("h200")
ROOFLINE = sim.RooflineCost(SHAPE, GPU)
LAYER_TIMES = pd.DataFrame(
    [("layer", i, b, 1e-3 * (1 + i) * b, 1e-5, 5) for i in range(4) for b in (1, 3)]
    + [("embed", -1, 1, 1e-4, 0.0, 5), ("head", -1, 1, 2e-4, 0.0, 5)],
    columns=list(LAYER_TIMES_COLUMNS),
)
MEASURED = sim.MeasuredCost(LAYER_TIMES)
RESULT = sim.simulate(sim.SimConfig(**SMALL), seed=0)
CONFIG_DICT = sim.SimConfig(**SMALL, cost=MEASURED, matches=sim.Bernoulli(0.3)).to_dict()
SAMPLES = sim.monte_carlo(sim.SimConfig(**SMALL), n=4, seed=0).samples
CURVES = ppdmodel.tradeoff_curves()
RNG = np.random.default_rng(0)
COSTS = ppdmodel.DecodeCosts(
    layer_s=1e-3,
    embedding_s=1e-4,
    early_head_s=5e-3,
    final_head_s=5e-3,
    host_s=1e-4,
    shared_device_slowdown=1.2,
)
COSTS_ARGS = dict(d=30, d_bar=15, k=3, costs=COSTS, early_head="main")
GRID = ppdmodel.DecodeCostsGrid(layer_s=[1e-3, 2e-3], candidate_layer_s=1.5e-3, early_head_s=5e-3)
cost_values = st.sampled_from([COSTS, ppdmodel.DecodeCosts.unit(), "main", "candidates", "cpu"])

sim_values = st.sampled_from(
    [SHAPE, GPU, ROOFLINE, MEASURED, RESULT, sim.Link.from_name("nvlink4"), sim.UniformCost(),
     sim.Bernoulli(0.5), sim.Replay([1, 0]), sim.PerPosition([0.5] * 3), "nvlink4", "h200"]
)  # fmt: skip
config_dict_mutations = st.builds(
    lambda key, value: {**CONFIG_DICT, key: value},
    st.sampled_from(sorted(CONFIG_DICT)),
    st.one_of(
        malformed,
        st.just({"type": "uniform"}),
        st.just({"type": "bernoulli"}),
        st.just({"type": "roofline", "shape": 3}),
        st.just({"type": "measured", "rows": "x"}),
    ),
)

TARGETS = [
    # ppdmodel.__all__
    Target("Interval", ppdmodel.Interval, dict(low=1.0, high=2.0, level=0.95)),
    Target("p_draws", ppdmodel.p_draws, dict(p=0.5, n=100, draws=50, seed=0)),
    Target(
        "prediction_interval",
        ppdmodel.prediction_interval,
        dict(
            predict=lambda costs, p: costs.layer_s * (1 - p),
            costs=COSTS,
            replicates=[COSTS],
            p=0.5,
            n=100,
            level=0.9,
            draws=20,
            seed=0,
        ),
        {"costs": cost_values, "replicates": st.just([COSTS, "x"])},
    ),  # fmt: skip
    Target("expected_latency", ppdmodel.expected_latency, THEOREM, {"p": st.just(P_T)}),
    Target("expected_compute", ppdmodel.expected_compute, {**THEOREM, "k": 3}),
    Target("latency_variance", ppdmodel.latency_variance, THEOREM),
    Target("latency_per_token", ppdmodel.latency_per_token, dict(d=40, p=0.5, d_bar=None)),
    Target("compute_per_time", ppdmodel.compute_per_time, dict(d=40, p=0.5, k=3, d_bar=None)),
    Target("compute_per_token", ppdmodel.compute_per_token, dict(d=40, p=0.5, k=3, d_bar=None)),
    Target("latency_distribution", ppdmodel.latency_distribution, THEOREM, {"p": st.just(P_T)}),
    Target(
        "LatencyDistribution",
        ppdmodel.LatencyDistribution,
        dict(support=LAW.support, pmf=LAW.pmf, top=None),
    ),
    Target("LatencyDistribution.quantile", LAW.quantile, dict(q=0.5)),
    Target("sample_latency", ppdmodel.sample_latency, {**THEOREM, "n": 8, "seed": 0}),
    Target("sample_runs", ppdmodel.sample_runs, dict(ell=16, p=0.5, n=8, seed=0)),
    Target(
        "expected_latency_seconds",
        ppdmodel.expected_latency_seconds,
        {
            **THEOREM,
            "seconds_per_layer": 1e-3,
            "per_token_overhead_s": 0.0,
            "per_handoff_overhead_s": 0.0,
        },
    ),  # fmt: skip
    Target(
        "free_expected_latency_seconds",
        ppdmodel.free_expected_latency_seconds,
        dict(d=30, exit_layer=10, ell=16, q=0.5, costs=COSTS),
        {"costs": cost_values, "q": st.just([0.5] * 16)},
    ),
    Target(
        "free_expected_compute_seconds",
        ppdmodel.free_expected_compute_seconds,
        dict(d=30, exit_layer=10, ell=16, q=0.5, costs=COSTS),
        {"costs": cost_values},
    ),
    Target(
        "free_trace_latency_seconds",
        ppdmodel.free_trace_latency_seconds,
        dict(d=30, exit_layer=10, exits=[1, 0, 1, 1, 0], costs=COSTS),
        {"costs": cost_values, "exits": st.lists(st.integers(-1, 2), max_size=6)},
    ),
    Target(
        "free_seconds_per_token",
        ppdmodel.free_seconds_per_token,
        dict(d=30, exit_layer=10, q=0.5, ell=16, costs=COSTS),
        {"costs": cost_values, "q": st.just([0.2, 0.9]), "exit_layer": st.just([5, 29])},
    ),
    Target(
        "free_compute_per_token",
        ppdmodel.free_compute_per_token,
        dict(d=30, exit_layer=10, q=0.5, ell=16, costs=COSTS),
        {"costs": cost_values},
    ),
    Target(
        "free_rows_layer_seconds",
        ppdmodel.free_rows_layer_seconds,
        dict(rows=[1, 2, 5], costs=COSTS),
        {"costs": cost_values},
    ),
    Target(
        "greedy_latency_seconds",
        ppdmodel.greedy_latency_seconds,
        dict(d=40, ell=16, seconds_per_layer=1e-3, per_token_overhead_s=0.0),
    ),
    Target(
        "DecodeCosts",
        ppdmodel.DecodeCosts,
        {**vars(COSTS)},
        {
            "candidate_layer_s_by_k": st.sampled_from(
                [((1, 1e-3), (3, 2e-3)), (), {"x": 1}, [(1, 2.0)], ((0, 1.0),)]
            )
        },
    ),
    Target(
        "expected_latency_seconds (costs)",
        ppdmodel.expected_latency_seconds,
        {**COSTS_ARGS, "ell": 16, "p": 0.5},
        {"costs": cost_values, "early_head": cost_values},
    ),
    Target("break_even_p", ppdmodel.break_even_p, COSTS_ARGS, {"early_head": cost_values}),
    Target(
        "latency_per_token_seconds",
        ppdmodel.latency_per_token_seconds,
        {**COSTS_ARGS, "p": 0.5},
        {"costs": cost_values},
    ),
    Target(
        "trace_latency_seconds",
        ppdmodel.trace_latency_seconds,
        {**COSTS_ARGS, "m": [1, 0, 1]},
        {"m": st.lists(st.integers(-1, 2), max_size=4)},
    ),
    Target(
        "latency_waterfall",
        ppdmodel.latency_waterfall,
        {**COSTS_ARGS, "p": 0.5},
        {"costs": cost_values},
    ),
    Target(
        "LatencyWaterfall",
        ppdmodel.LatencyWaterfall,
        {**vars(ppdmodel.latency_waterfall(**COSTS_ARGS, p=0.5))},
    ),
    Target(
        "expected_compute_seconds",
        ppdmodel.expected_compute_seconds,
        {**COSTS_ARGS, "ell": 16, "p": 0.5, "devices_main": 2, "devices_candidates": 1},
        {"costs": cost_values, "early_head": cost_values},
    ),
    Target(
        "trace_compute_seconds",
        ppdmodel.trace_compute_seconds,
        {**COSTS_ARGS, "m": [1, 0, 1]},
        {"m": st.lists(st.integers(-1, 2), max_size=4)},
    ),
    Target(
        "greedy_compute_seconds",
        ppdmodel.greedy_compute_seconds,
        dict(d=30, ell=16, costs=COSTS, devices=2),
        {"costs": cost_values},
    ),
    Target(
        "DecodeCostsGrid",
        ppdmodel.DecodeCostsGrid,
        dict(
            layer_s=[1e-3, 2e-3],
            candidate_layer_s=1.5e-3,
            early_head_s=5e-3,
            shared_device_slowdown=[1.0, 2.0],
        ),
    ),
    # the grid's methods live on its private base class, which the enumeration skips
    Target("DecodeCostsGrid.greedy_token_seconds", GRID.greedy_token_seconds, dict(d=40)),
    Target("DecodeCostsGrid.candidate_layer_seconds", GRID.candidate_layer_seconds, dict(k=3)),
    Target(
        "DecodeCostsGrid.dispatch_seconds", GRID.dispatch_seconds, dict(early_head="candidates")
    ),
    Target("speculative_tokens_per_step", ppdmodel.speculative_tokens_per_step, dict(a=0.6, g=4)),
    Target(
        "speculative_seconds_per_token",
        ppdmodel.speculative_seconds_per_token,
        dict(a=0.6, g=4, draft_s=1e-3, verify_s=1e-2),
    ),
    Target("speculative_speedup", ppdmodel.speculative_speedup, dict(a=0.6, g=4, c=0.05)),
    Target(
        "early_exit_seconds_per_token",
        ppdmodel.early_exit_seconds_per_token,
        dict(d=30, exit_layer=10, g=3, a=0.5, costs=COSTS, reuse_draft_layers=False),
        {"costs": cost_values},
    ),
    Target(
        "EarlyExitCosts",
        ppdmodel.EarlyExitCosts,
        dict(d=30, exit_layer=10, costs=COSTS, first_draft_rows=2, host_draft_s=1e-4),
        {"costs": cost_values},
    ),
    Target(
        "EarlyExitSteps",
        ppdmodel.EarlyExitSteps,
        dict(drafted=(2, 1), accepted=(1, 0), produced=(2, 1)),
    ),
    Target(
        "early_exit_steps",
        ppdmodel.early_exit_steps,
        dict(matches=[True, False, True, True], g=2, limit=6),
    ),
    Target(
        "early_exit_trace_seconds",
        ppdmodel.early_exit_trace_seconds,
        dict(
            matches=[True, False, True, True],
            g=2,
            costs=ppdmodel.EarlyExitCosts(d=30, exit_layer=10, costs=COSTS),
            limit=6,
            skip_steps=1,
        ),
        {"costs": cost_values},
    ),
    Target(
        "ring_allreduce_seconds",
        ppdmodel.ring_allreduce_seconds,
        dict(n=4, nbytes=1e4, latency_s=5e-6, bandwidth_bytes_per_s=4.5e11),
    ),
    Target(
        "link_seconds",
        ppdmodel.link_seconds,
        dict(latency_s=1e-6, nbytes=1e6, bandwidth_bytes_per_s=5e10),
    ),
    Target(
        "tradeoff_curves",
        ppdmodel.tradeoff_curves,
        dict(layer=20, d=40, table=paper.TABLE2),
        {"table": frame_mutations(paper.TABLE2)},
    ),
    Target(
        "plot_tradeoff",
        ppdmodel.plot_tradeoff,
        dict(curves=CURVES, figure=3),
        {"curves": frame_mutations(CURVES)},
        examples=40,
    ),
    # ppdmodel.paper and ppdmodel.symbolic helpers
    Target("paper.p_correct", paper.p_correct, dict(dataset="squad", k=3, trained=True, layer=20)),
    Target(
        "paper.per_position_p",
        paper.per_position_p,
        dict(dataset="wmt", k=1, trained=False, layer=10),
    ),
    Target("symbolic.at_half_depth", symbolic.at_half_depth, dict(expr=symbolic.EQ3), examples=40),
    Target(
        "symbolic.lambdified",
        symbolic.lambdified,
        dict(expr=symbolic.THEOREM_LATENCY, args=(symbolic.d, symbolic.d_bar)),
        examples=60,
    ),
    Target("poisson_binomial_pmf", poisson_binomial_pmf, dict(q=[0.2, 0.5])),
    # sim.__all__ (constructors) and the methods a user calls
    Target("Bernoulli", sim.Bernoulli, dict(p=0.5)),
    Target("Bernoulli.draw", sim.Bernoulli(0.5).draw, dict(ell=5, rng=RNG)),
    Target("PerPosition", sim.PerPosition, dict(p_t=[0.2, 0.5])),
    Target("PerPosition.draw", sim.PerPosition([0.5] * 8).draw, dict(ell=5, rng=RNG)),
    Target("Replay", sim.Replay, dict(m=[1, 0, 1])),
    Target("Replay.draw", sim.Replay([1, 0]).draw, dict(ell=3, rng=None)),
    Target("GPUSpec", sim.GPUSpec, dict(name="x", peak_flops_bf16=1e15, hbm_bytes_per_s=3e12)),
    Target("GPUSpec.from_name", sim.GPUSpec.from_name, dict(name="h200")),
    Target("Link", sim.Link, dict(name="x", latency_s=1e-6, bandwidth_bytes_per_s=5e10)),
    Target("Link.from_name", sim.Link.from_name, dict(name="nvlink4")),
    Target("Link.transfer_time", sim.Link.from_name("nvlink4").transfer_time, dict(nbytes=1e6)),
    Target("ModelShape", sim.ModelShape, {**vars(sim.ModelShape.from_name("llama2-7b"))}),
    Target("ModelShape.from_name", sim.ModelShape.from_name, dict(name="llama2-7b")),
    Target("ModelShape.handoff_bytes", SHAPE.handoff_bytes, dict(n_missing_tokens=1, n_layers=2)),
    Target("ModelShape.with_context", SHAPE.with_context, dict(context_len=128)),
    Target("UniformCost", sim.UniformCost, dict(seconds_per_layer=1e-3)),
    Target(
        "UniformCost.block_seconds",
        sim.UniformCost().block_seconds,
        dict(layer_start=1, layer_end=4, batch=1),
    ),
    Target(
        "RooflineCost",
        sim.RooflineCost,
        dict(shape=SHAPE, gpu=GPU, flops_efficiency=0.6, bandwidth_efficiency=0.8),
        {"shape": sim_values, "gpu": sim_values},
    ),
    Target(
        "RooflineCost.block_seconds",
        ROOFLINE.block_seconds,
        dict(layer_start=1, layer_end=4, batch=3),
    ),
    Target("RooflineCost.head_seconds", ROOFLINE.head_seconds, dict(batch=3)),
    Target(
        "MeasuredCost", sim.MeasuredCost, dict(df=LAYER_TIMES), {"df": frame_mutations(LAYER_TIMES)}
    ),
    Target(
        "MeasuredCost.block_seconds",
        MEASURED.block_seconds,
        dict(layer_start=1, layer_end=4, batch=2),
    ),
    Target("MeasuredCost.layer_seconds", MEASURED.layer_seconds, dict(layer=2, batch=2)),
    Target(
        "validate_layer_times",
        lambda df: validate_layer_times(df.copy() if hasattr(df, "copy") else df),
        dict(df=LAYER_TIMES),
        {"df": frame_mutations(LAYER_TIMES)},
    ),
    Target(
        "SimConfig",
        sim.SimConfig,
        {
            **SMALL,
            "matches": sim.Bernoulli(0.5),
            "cost": sim.UniformCost(),
            "n_gpus": None,
            "link": None,
            "shape": None,
            "per_token_overhead_s": 0.0,
            "per_handoff_overhead_s": 0.0,
            "schedule": "ppd",
            "allow_below_half": False,
            "per_layer_events": False,
        },
        {name: sim_values for name in ("matches", "cost", "link", "shape")},
    ),  # fmt: skip
    Target(
        "SimConfig.from_dict",
        sim.SimConfig.from_dict,
        dict(data=CONFIG_DICT),
        {"data": config_dict_mutations},
    ),
    Target(
        "simulate",
        sim.simulate,
        dict(config=sim.SimConfig(**SMALL), seed=0, m=None, record_events=True),
        {"config": sim_values, "m": st.lists(st.integers(-1, 2), max_size=3)},
    ),
    Target(
        "monte_carlo",
        sim.monte_carlo,
        dict(config=sim.SimConfig(**SMALL), n=3, seed=0, processes=1),
        {"config": sim_values},
    ),
    Target(
        "simulate_free",
        sim.simulate_free,
        dict(d=12, exit_layer=4, costs=COSTS, exits=[1, 0, 1], q=None, ell=None, seed=0),
        {"costs": cost_values, "exits": st.lists(st.integers(-1, 2), max_size=4)},
    ),
    Target(
        "monte_carlo_free",
        sim.monte_carlo_free,
        dict(d=12, exit_layer=4, costs=COSTS, ell=8, q=0.5, n_runs=3, seed=0),
        {"costs": cost_values},
    ),
    Target(
        "plot_gantt",
        sim.plot_gantt,
        dict(result=RESULT, ax=None),
        {"result": sim_values},
        examples=40,
    ),
    Target("SimResult", sim.SimResult, vars(RESULT).copy()),
    Target(
        "MonteCarloSummary",
        sim.MonteCarloSummary,
        vars(sim.monte_carlo(sim.SimConfig(**SMALL), n=3, seed=0)).copy(),
    ),  # fmt: skip
    Target("summarise", summarise, dict(samples=SAMPLES), {"samples": frame_mutations(SAMPLES)}),
    Target(
        "MatchTrace",
        MatchTrace,
        dict(sequence="s", d=4, d_bar=2, k=1, m=[1, 0], head="shared", source="match_rate"),
    ),
]


# -- every other public callable, built from its signature -----------------------------------

WORK_DIR = Path(tempfile.mkdtemp(prefix="ppd-fuzz-"))
"""Where the valid input files live (the automatic targets are built here; each target's calls
run in an empty folder of their own, ``in_work_dir``)."""
LAYER_TIMES_CSV = WORK_DIR / "layer_times.csv"
write_layer_times(LAYER_TIMES_CSV, LAYER_TIMES)
PROFILE_DATA = minimal_profile(d=32)
PROFILE_DATA["model"]["name"] = "llama2-7b"  # a shape preset: ``profile_model`` finds it
PROFILE_JSON = WORK_DIR / "profile.json"
PROFILE_JSON.write_text(json.dumps(PROFILE_DATA))
PTABLE_CSV = WORK_DIR / "ptable.csv"
paper.TABLE2.to_csv(PTABLE_CSV, index=False)
HF_CONFIG = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
             "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100}  # fmt: skip
FREE_TABLE = pd.DataFrame({
    "exit_layer": [20, 20, 30], "threshold": [0.5, 0.9, 1.01], "exit_rate": [0.8, 0.4, 0.0],
    "quality": [0.3, 0.6, 1.0], "quality_metric": "rouge_l_vs_greedy",
})  # fmt: skip
HW = RooflineHardware(sim.ModelShape.from_name("vicuna-13b"), sim.GPUSpec.from_name("h100-sxm"),
                      sim.Link.from_name("nvlink4"), max_tp=2, host_s=2e-5)  # fmt: skip
PTABLE = PTable.paper()
SPACE = PlanSpace(max_devices=2, d_bars=(20, 30), ks=(1, 3), workloads=("SQuAD",),
                  draft_lengths=(1, 3), exit_layers=(10, 30), draft_model=DraftModel(0.6, 0.05),
                  ell=8)  # fmt: skip
SCREENED = screen([HW], PTABLE, SPACE, 40)
PLAN = plan([HW], PTABLE, SPACE, d=40, confirm_n=0, keep_screened=True)
FRONT = PLAN.frontier
FREE_SPACE = PlanSpace(max_devices=1, d_bars=(20,), ks=(1,), workloads=("SQuAD",),
                       draft_lengths=(1,), exit_layers=(20,), free_table=FREE_TABLE)  # fmt: skip
FREE_ROW = next(screen([HW], PTABLE, FREE_SPACE, 40).query("method == 'free'").itertuples())
ENGINE_HW = EngineHardware(SHAPE, GPU, sim.Link.from_name("nvlink4"), Engine.from_name("hf-eager"))
PROFILE = parse_cost_profile(minimal_profile())
UNCERTAINTY = Uncertainty.of([HW], PTABLE, model="vicuna-13b")
PPD_ROW = SCREENED[SCREENED.method == "ppd"].iloc[0]
PROFILE_HW = load_profile(PROFILE_JSON, sim.ModelShape.from_name("llama2-7b"))[0]
PRESET_ERROR = preset_error("hf-eager", "a100-80gb")

VALID_BY_NAME = {
    "d": 40, "d_bar": 20, "ell": 16, "p": 0.5, "k": 3, "n": 8, "a": 0.6, "g": 4, "c": 0.05,
    "q": [0.2, 0.5], "seed": 0, "rng": RNG, "costs": COSTS, "early_head": "main",
    "head": "shared", "hw": HW, "hardware": [HW], "ptable": PTABLE, "space": SPACE,
    "shape": SHAPE, "gpu": GPU, "link": sim.Link.from_name("nvlink4"),
    "config": sim.SimConfig(**SMALL), "df": LAYER_TIMES, "samples": SAMPLES, "result": RESULT,
    "tp": 1, "batch": 1, "max_devices": 2, "shared": False, "gap": 10, "layer": 20,
    "exit_layer": 10, "layer_start": 1, "layer_end": 4, "nbytes": 1e6, "latency_s": 1e-6,
    "bandwidth_bytes_per_s": 5e10, "path": LAYER_TIMES_CSV, "screened": SCREENED,
    "front": FRONT, "plan": PLAN, "max_compute": None, "m": [1, 0, 1],
    "matches": [True, False, True], "d_model": 40, "rows": 1, "drafted": 2, "rate": 0.5,
    "n_steps": 4, "draft_s": 1e-3, "verify_s": 1e-2, "dataset": "squad", "trained": True,
    "prompt_set": "code", "t": 2, "i": 0, "n_cells": 3, "cells": [{"x": 1}], "chunk_size": 1,
    "requested": 2, "tasks": 2, "workers": 1, "hw_index": 0, "n_workloads": 1,
    "d_bars": np.array([20, 30]), "ks": np.array([1, 3]), "heads": ("shared", "trained"),
    "pgrid": PTABLE.grid(40, ("SQuAD",), ("shared", "trained")), "row": next(FRONT.itertuples()),
    "best": FRONT.iloc[0], "latency": np.array([1.0, 2.0]), "compute": np.array([2.0, 1.0]),
    "acceptance": 0.6, "cost_ratio": 0.05, "context_len": 128, "solo_seconds": 1e-3,
    "name": "x", "value": 3, "limit": 10, "types": int, "mapping": {"a": 1}, "keys": ["a"],
    "frame": LAYER_TIMES, "columns": ["layer"], "cost": sim.UniformCost(), "first_layer": 1,
    "source": "fuzz", "lines": ['{"a": 1}'], "trace": MatchTrace("s", 4, 2, 1, [1, 0]),
    "traces": [MatchTrace("s", 4, 2, 1, [1, 0])], "base": COSTS,
    "exits": [1, 0, 1], "level": 0.9, "values": [1.0, 2.0, 3.0], "min_quality": 1.0,
    "work_main": 1e-3, "work_cand": 2e-3, "delta": 1e-4, "slowdown": 1.2, "confirm_n": 0,
    "draws": 8, "profile": PROFILE, "flags": ["--d-bars", "20"], "engine": ENGINE_HW.engine,
    "env": simpy.Environment(), "overheads": PaidOverheads(0.1, 0.05, d=40, d_bar=30),
    "measured": pd.DataFrame({"label": ["a"], "p_correct": [0.5], "k": [3]}),
    "matches_by_position": [1, 0, 1], "parent_pid": os.getppid(), "b": "smollm2",
    "replicates": profile_replicates(PROFILE, [HW]), "compared": compare_published(),
    "directory": WORK_DIR, "other": ppdmodel.Interval(1.5, 3.0, 0.95), "factor": 2.0,
    "greedy_token_s": 0.03, "rivals": [FRONT.iloc[-1]], "covers": "nothing",
    "uncertainty": UNCERTAINTY, "ppd": PPD_ROW, "other_latency_s": 0.01, "sources_line": "",
    "device": 1.1, "host": 0.9, "comm": 1.2, "engines": None, "profile_drift": 0.1,
    "model": "vicuna-13b", "borrowed": False, "bounds": None, "max_k": 5, "workload": "SQuAD",
    "pairs": [(FRONT.iloc[0], FRONT.iloc[-1])], "sources": ("engine", "p"),
    "workloads": ("SQuAD",),
}  # fmt: skip
"""A valid value per parameter name, for the targets built from a signature."""

FUZZ_EXECUTOR = ThreadPoolExecutor(1)
"""Confirmation tasks of the fuzzed planner run in a thread (a process pool takes seconds)."""
VALID_OVERRIDES = {
    "ppdmodel.costs.DecodeCosts.from_dict": {"data": COSTS.to_dict()},
    "sim.formats.MatchTrace.from_dict": {"data": MatchTrace("s", 4, 2, 1, [1, 0]).to_dict()},
    "sim.matches.match_source_from_dict": {"data": {"type": "bernoulli", "p": 0.5}},
    "sim.matches.match_source_to_dict": {"source": sim.Bernoulli(0.5)},
    "sim.plan.confirm_cell": {"cell": {"row": 0, "method": "draft-model", "n": 4, "ell": 8,
                                       "tp_main": 1, "tp_candidates": 0, "a": 0.6, "g": 3,
                                       "step_s": 1e-2, "busy_s": 1e-2},
                              "seed": np.random.SeedSequence(0)},
    "sim.ptable.PTable.builtin": {"name": "paper"},
    "ppdmodel.options.like": {"settings": ModelParameters, "name": "d"},
    "sim.plan.plan": {"confirm_n": 0, "executor": FUZZ_EXECUTOR, "draws": 8},
    "sim.plan.confirm": {"n": 2, "executor": FUZZ_EXECUTOR},
    "sim.sweep.sweep_id": {"cells": [{"x": 1}], "seed": 0, "chunk_size": 1},
    "sim.hardware.Engine": vars(ENGINE_HW.engine),
    "ppdmodel.cost_profile.parse_cost_profile": {"data": minimal_profile()},
    "ppdmodel.cost_profile.read_cost_profile": {"path": PROFILE_JSON},
    "ppdmodel.cost_profile.read_profile_data": {"path": PROFILE_JSON},
    "sim.hardware_costs.load_profile": {"path": PROFILE_JSON},
    "sim.hardware_costs.profile_model": {"path": PROFILE_JSON},
    "ppdmodel.overheads.infer_overheads": {"rows": table3_rows(), "d_bar": 30, "ell": 128},
    "ppdmodel.overheads.predict_latency": {"rows": table3_rows(), "ell": 128},
    "sim.formats.validate_free_table": {"df": FREE_TABLE},
    "sim.ptable.PTable": {"df": PTABLE.df, "d": 40},
    "sim.ptable.PTable.from_frame": {"df": paper.TABLE2, "d": 40},
    "sim.ptable.PTable.read": {"path": PTABLE_CSV, "d": 40},
    "sim.shape.ModelShape.from_hf_config": {"source": HF_CONFIG},
    "sim.plan_intervals.draw_intervals": {"rows": FRONT},
    "sim.plan_intervals.against_greedy": {"rows": FRONT},
    "sim.plan_intervals.judge": {"result": PLAN, "label": plan_label},
    "sim.plan_free.free_cell": {"row": FREE_ROW},
    "sim.published.hardware_for": {"row": read_published().iloc[0]},
    "sim.ptable.same_model": {"a": "smollm2"},
    "ppdmodel.cost_profile.SharingFactors": {"main": 1.2, "candidate": 1.1, "source": "pair",
                                             "k": 3, "measured_k": 1, "d_bar": 15,
                                             "measured": (1.2, 1.1)},
    "sim.formats.write_free_table": {"df": FREE_TABLE, "path": WORK_DIR / "free.csv"},
    "sim.plan_free.free_rows": {"table": FREE_TABLE, "workloads": ("SQuAD",)},
    "sim.plan_limits.check_cell": {"cell": {"row": 0, "method": "draft-model", "n": 4, "ell": 8,
                                            "tp_main": 1, "tp_candidates": 0, "a": 0.6, "g": 3,
                                            "step_s": 1e-2, "busy_s": 1e-2}},
    "sim.plan_intervals.verdict": {"label": plan_label},
    "ppdmodel.cost_grid.ppd_grid_per_token": {"costs": GRID},
    "sim.plan.fastest": {"rows": FRONT},
    "sim.plan_grid.mesh_of": {"rows": SCREENED[SCREENED.method == "ppd"].head(3).assign(w=0),
                              "heads": ("shared", "trained")},
    "sim.plan_intervals.draw_matrix": {"rows": FRONT.head(4), "draws": 2},
    "sim.plan_intervals.dominant_sources": {"draws": 2},
    "sim.plan_summary.summary_lines": {"result": PLAN},
    "sim.plan_summary.decide": {"result": PLAN, "label": plan_label},
    "sim.plan_summary.Decision": vars(next(iter(PLAN.decisions.values()))),
    "sim.plan_uncertainty.scaled_profile": {"hw": PROFILE_HW},
    "sim.plan_uncertainty.Uncertainty.columns": {"frame": FRONT},
    "sim.plan_uncertainty.Uncertainty.hardware_draws": {"draws": 3},
    "sim.plan_uncertainty.Uncertainty.p_draws": {"heads": ("shared",), "draws": 3},
    "sim.plan_uncertainty.Uncertainty": {k: v for k, v in vars(UNCERTAINTY).items()
                                         if not k.startswith("_")},
    "sim.preset_error.PresetError": vars(PRESET_ERROR),
    "sim.preset_error.preset_error": {"engine": "hf-eager", "gpu": "a100-80gb"},
    "sim.preset_error.evidence_rows": {"engine": "hf-eager", "gpu": "a100-80gb"},
    "sim.preset_error.gpu_class": {"name": "a100-80gb"},
    "sim.ptable.workload_family": {"name": "SQuAD"},
    "sim.ptable.PTable.p_draws": {"draws": 3, "workloads": ("SQuAD",)},
    "sim.ptable.PTable.bounds": {"workloads": ("SQuAD",)},
    "sim.ptable.PTable.nominal_at": {"head": "shared"},
    "sim.engine.regime_advice": {"hw": ENGINE_HW, "by_devices": PLAN.by_devices, "tp": 1,
                                 "devices": 2},
    "sim.progress.progress_line": {"label": "fuzz", "done": 1, "total": 3, "elapsed_s": 2.0},
    "sim.progress.Progress": {"total": 3, "label": "fuzz", "enabled": False},
}  # fmt: skip
"""Valid values for parameters whose meaning differs from ``VALID_BY_NAME``'s."""

NOT_FUZZED = {
    "sim.pool.tied_pool": "starts processes (tests/sim/test_pool.py)",
    "sim.sweep.open_executor": "starts processes or clusters (tests/sim/test_sweep.py)",
    "sim.lifeline.tie_to_parent": "ends the calling process when the pid is not its parent "
    "(tests/measure/decode/test_lifeline.py)",
    "sim.lifeline.set_parent_death_signal": "arms a signal for the calling process "
    "(tests/measure/decode/test_lifeline.py)",
}
"""Public callables left out, and why."""


def _public_callables():
    """(qualified name, callable, owner class or None) of every public function, class and
    public method of a class defined in a module of ``PACKAGES``."""
    for package in PACKAGES:
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.rpartition(".")[2].startswith(SKIPPED_MODULES):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                    continue
                if inspect.isfunction(obj):
                    yield f"{info.name}.{name}", obj, None
                elif inspect.isclass(obj):
                    if getattr(obj, "_is_protocol", False):
                        continue  # an interface: its implementations are fuzzed
                    yield f"{info.name}.{name}", obj, None
                    for attr, value in vars(obj).items():
                        if attr.startswith("_"):
                            continue
                        method = classmethod | staticmethod
                        if inspect.isfunction(value) or isinstance(value, method):
                            yield f"{info.name}.{name}.{attr}", value, obj


def _same(func, value) -> bool:
    """True when the explicit target's ``func`` is ``value`` (bound, class or static method)."""
    inner = getattr(value, "__func__", value)
    return getattr(func, "__func__", func) is inner or func is value


def _instance(cls) -> tuple[object, tuple[str, ...]]:
    """A valid instance of ``cls`` among the known values, or one built from its signature;
    and the fields it was built without a valid value for (``("self",)`` when no instance)."""
    known = [SHAPE, GPU, ROOFLINE, MEASURED, RESULT, LAW, COSTS, HW, PTABLE, SPACE, PLAN,
             sim.UniformCost(), sim.Bernoulli(0.5), sim.PerPosition([0.5] * 8),
             sim.Replay([1, 0, 1]), sim.Link.from_name("nvlink4"), sim.SimConfig(**SMALL),
             sim.monte_carlo(sim.SimConfig(**SMALL), n=3, seed=0), *VALID_BY_NAME.values(),
             ppdmodel.EarlyExitCosts(d=30, exit_layer=10, costs=COSTS),
             ppdmodel.latency_waterfall(**COSTS_ARGS, p=0.5), ENGINE_HW, PROFILE,
             ppdmodel.Interval(1.0, 2.0, 0.95), SharedDevice(simpy.Environment(), 1.5),
             compute_terms(d=30, d_bar=15, k=3, costs=COSTS, early_head="main"),
             WidePrice("dist", "candidate_layer_s[3]", 0.273, 0.2), GRID,
             Progress(8, "fuzz", enabled=False)]  # fmt: skip
    for value in known:
        if type(value) is cls:
            return value, ()
    valid = _valid_kwargs(cls)
    try:
        return cls(**valid), _unset(cls, valid)
    except Exception:  # noqa: BLE001 - no instance: the methods are fuzzed without one
        return None, ("self",)


def _valid_kwargs(func) -> dict:
    """Valid keyword arguments from the signature: defaults, else ``VALID_BY_NAME``; a
    parameter with neither gets None (a malformed value: every call is then refused)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return {}
    out = {}
    for param in params:
        if param.name in ("self", "cls") or param.kind in (param.VAR_POSITIONAL,
                                                           param.VAR_KEYWORD):  # fmt: skip
            continue
        if param.kind is param.POSITIONAL_ONLY:
            continue
        if param.default is not param.empty:
            out[param.name] = param.default
        else:
            out[param.name] = VALID_BY_NAME.get(param.name)
    return out


def _unset(func, valid: dict) -> tuple[str, ...]:
    """The required parameters of ``func`` that ``valid`` gives no value (None stands in, or
    positional-only ones, not passed)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    out = []
    for p in params:
        if p.default is not p.empty:
            continue
        if p.kind is p.POSITIONAL_ONLY:  # never passed (targets are called with keywords)
            out.append(p.name)
        elif p.name in valid and p.name not in VALID_BY_NAME and valid[p.name] is None:
            out.append(p.name)
    return tuple(out)


def auto_target(qualname: str, value, owner) -> Target:
    """A target for ``value`` (a function, class or a method of ``owner``) from its signature."""
    func, unset = value, ()
    if owner is not None:
        if isinstance(value, classmethod | staticmethod):
            func = getattr(owner, qualname.rpartition(".")[2])
        else:
            instance, unset = _instance(owner)
            func = getattr(instance, qualname.rpartition(".")[2]) if instance is not None else (
                value.__get__(None, owner))  # fmt: skip
    valid = {**_valid_kwargs(func), **VALID_OVERRIDES.get(qualname, {})}
    examples = None if valid else 1  # 1: no arguments
    return Target(qualname, func, valid, examples=examples, unset=unset + _unset(func, valid))


def _auto_targets() -> list[Target]:
    out = []
    for qualname, value, owner in _public_callables():
        if qualname in NOT_FUZZED:
            continue
        if any(_same(t.func, value) for t in TARGETS):
            continue
        out.append(auto_target(qualname, value, owner))
    return out


_HOME = os.getcwd()
os.chdir(WORK_DIR)  # module import time: the targets below are built (and called) here
try:
    AUTO_TARGETS = _auto_targets()
finally:
    os.chdir(_HOME)
ALL_TARGETS = TARGETS + AUTO_TARGETS

NON_NEGATIVE_EXEMPT = ("ppdmodel.validation",)
"""Targets whose results may be negative or non-finite by contract (validators return their
input: ``d_bar_or_half_depth``, ``check_broadcast``)."""
NON_FINITE_OK = ("break_even_p", "PTable.grid", "p_draws", "break_even_against",
                 "PTable.nominal_at")  # fmt: skip
"""Targets that return inf or NaN by contract (no p at which PPD breaks even; the p grid's
unused k = 0 column, in its draws too)."""


def _bad_number(result) -> str | None:
    """'non-finite' or 'negative' when a numeric result (scalar or float array) is one."""
    if isinstance(result, bool | np.bool_) or not isinstance(result, Number | np.ndarray):
        return None
    arr = np.asarray(result)
    if arr.dtype.kind not in "iuf" or arr.size == 0:
        return None
    if not np.isfinite(arr).all():
        return "non-finite"
    if (arr < 0).any():
        return "negative"
    return None


NAMING = (
    r"\s*(?:=|:|\[|\(|<|>|[*/+]|\.(?=[A-Za-z_])|[),;]|$)|\s+[-0-9'\"(\[<{]"
    r"|\s+(?:must|is|are|has|have|should|cannot|needs?|holds?|was|were|does|do|and|or"
    r"|name|preset|file|path|folder|column|key|field|entry|type)(?![A-Za-z_])"
)
"""What may follow a parameter's name where a message names it: an operator ("n_runs * ell
must"), a bracket, a field, a verb ("d_bar must", "cell['n'] is"), a list ("d, exit_layer and
q must"), what it names ("gpu name", "profile path") or the value shown ("hw_index 3")."""


def names_a_parameter(message: str, names) -> bool:
    """True when ``message`` names one of ``names``: quoted ('x', "x", `x`), or as a whole word
    followed by ``NAMING`` (so "The truth value of an array" names no ``value``, and the
    article in "must be a number" no ``a``). Python's own call errors quote the name
    ("missing 1 required positional argument: 'x'") and so count."""
    for name in names:
        word = re.escape(name)
        if re.search(rf"(?<![A-Za-z0-9_]){word}(?={NAMING})|['\"`]{word}['\"`]", message):
            return True
    return False


def _inner_names(value) -> list[str]:
    """Names inside a valid value that a message may name instead of the parameter: a
    DataFrame's columns, a dict's keys, a dataclass's fields."""
    if isinstance(value, pd.DataFrame):
        return [str(c) for c in value.columns]
    if isinstance(value, dict):
        return [str(k) for k in value]
    if is_dataclass(value) and not isinstance(value, type):
        return [f.name for f in fields(value)]
    return []


def offending_names(target: Target, kwargs: dict) -> set[str]:
    """The parameters a call's error may name: those replaced with a malformed value or left
    unset, the columns, keys and fields of their valid values, and the name a checker was
    told to report under (a ``name`` argument)."""
    bad = {k for k, v in kwargs.items() if v is not target.valid.get(k)} | set(target.unset)
    out = bad | {n for k in bad for n in _inner_names(target.valid.get(k))}
    if isinstance(kwargs.get("name"), str) and kwargs["name"]:
        out.add(kwargs["name"])
    return out


def _call(func, kwargs: dict, name: str = "") -> tuple[str, float]:
    """Call ``func(**kwargs)``; return the outcome (``ok``, ``ValueError: <message>``, ...) and
    the seconds it took; a numeric result that is non-finite or negative counts as
    ``silent <which>`` unless exempt."""
    start = time.perf_counter()
    try:
        result = func(**kwargs)
        outcome = "ok"
        bad = _bad_number(result)
        exempt = name.startswith(NON_NEGATIVE_EXEMPT)
        if bad == "non-finite" and not (exempt or name.endswith(NON_FINITE_OK)):
            outcome = f"silent non-finite result {result!r:.100}"
        elif bad == "negative" and not exempt:
            outcome = f"silent negative result {result!r:.100}"
    except (ValueError, TypeError) as exc:
        outcome = "TypeError" if isinstance(exc, TypeError) else "ValueError"
        outcome += f": {exc}"
    except Exception as exc:  # noqa: BLE001 - anything else is what this test looks for
        outcome = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        plt.close("all")
    return outcome, time.perf_counter() - start


def _fuzz(target: Target, examples: int, derandomize: bool) -> None:
    """Run ``examples`` malformed calls of ``target``; fail on another exception or a hang."""

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(target.strategy())
    def check(kwargs):
        _check_call(target, kwargs)

    check()


def _check_call(target: Target, kwargs: dict) -> None:
    """Call ``target`` with ``kwargs``, count the outcome, and fail (AssertionError) on an
    error naming no offending parameter, another exception, a silent non-finite or negative
    result, or a call over ``CALL_TIME_BOUND_S``."""
    outcome, seconds = _call(target.func, kwargs, target.name)
    kind, _, message = outcome.partition(": ")
    shown = {k: v for k, v in kwargs.items() if v is not target.valid.get(k)}
    call = f"{target.name}({shown!r:.500})"
    if kind in ("ValueError", "TypeError"):
        named = names_a_parameter(message, offending_names(target, kwargs))
        if not named:
            UNNAMED.append(f"{call}: {outcome:.300}")
        kind = kind if named else "unnamed"
        outcome = kind
    COUNTS[kind if kind in (*ALLOWED, "unnamed") else "other"] += 1
    if seconds >= CALL_TIME_BOUND_S:
        COUNTS["over 5 s"] += 1
    assert kind != "unnamed", f"{call} raised {message!r:.300}, naming none of " + (
        f"{sorted(offending_names(target, kwargs))}")  # fmt: skip
    assert outcome in (*ALLOWED, "unnamed"), f"{call} raised {outcome}"
    assert seconds < CALL_TIME_BOUND_S, f"{call} took {seconds:.1f} s"


def _sweep(target: Target) -> None:
    """Each ``FIXED_BAD`` value in each parameter of ``target``, one parameter at a time (the
    random profiles draw from them; this takes every one): ``_check_call`` on each, every
    failure reported."""
    failures = []
    for name in sorted(target.valid):
        for value in FIXED_BAD:
            try:
                _check_call(target, {**target.valid, name: value})
            except AssertionError as err:
                failures.append(str(err).splitlines()[0])
    assert not failures, f"{len(failures)} failed calls:\n" + "\n".join(failures[:10])


REPORTED = ("ok", "ValueError", "TypeError", "unnamed", "other", "over 5 s")
"""The counts printed and written (``other``: crashes and silent non-finite/negative results)."""
UNNAMED_SHOWN = 50
"""Unnamed calls printed at most (the report file lists all)."""


@pytest.fixture(scope="module", autouse=True)
def fuzz_work_limits():
    """``FUZZ_WORK_LIMITS`` in place while this module's tests run."""
    with pytest.MonkeyPatch.context() as patch:
        for where, value in FUZZ_WORK_LIMITS.items():
            module, _, name = where.rpartition(".")
            patch.setattr(importlib.import_module(module), name, value)
        yield


def report_fuzz(request, line: str, shown: list[str], env: str, record: dict) -> None:
    """Print a module's fuzzing counts ``line`` and ``shown`` problems (even without -s), and
    write ``record`` as JSON to the file named by the environment variable ``env``, if set."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if capture is not None:
        with capture.global_and_fixture_disabled():
            print("\n" + "\n".join([line, *shown]))
    path = os.environ.get(env)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    """Print the outcome counts of this module's fuzzing (and write them if asked)."""
    COUNTS.clear()
    UNNAMED.clear()
    yield
    counts = {key: COUNTS[key] for key in REPORTED}
    calls = sum(v for k, v in COUNTS.items() if k != "over 5 s")
    if not calls:
        return
    line = f"fuzz_api: {calls} calls, " + ", ".join(f"{k} {v}" for k, v in counts.items())
    shown = UNNAMED[:UNNAMED_SHOWN] + [f"... and {len(UNNAMED) - UNNAMED_SHOWN} more"] * (
        len(UNNAMED) > UNNAMED_SHOWN)  # fmt: skip
    report_fuzz(request, line, [f"unnamed: {u}" for u in shown], "PPD_FUZZ_REPORT",
                {"calls": calls, **counts, "unnamed_calls": UNNAMED})  # fmt: skip


@pytest.mark.parametrize(
    ("message", "names", "named"),
    [
        ("d_bar must satisfy d/2 <= d_bar < d, got d_bar=50, d=40", {"d"}, True),
        ("cell['n'] must be a positive integer (>= 1), got 0", {"cell"}, True),
        ("gpu name must be one of ['h100', 'h200'], got 'x'", {"gpu"}, True),
        ("d, exit_layer and q must broadcast together", {"exit_layer"}, True),
        ("n_runs * ell must be <= 20000, got 65504 * 8", {"n_runs"}, True),
        ("f() missing 1 required positional argument: 'fn'", {"fn"}, True),
        ("DecodeCosts.layer_s must be a finite number of seconds > 0", {"layer_s"}, True),
        ("The truth value of an array with more than one element is ambiguous", {"value"}, False),
        ("a must be in (0, 1), got 2", {"a"}, True),
        ("p must be a number, got 'x'", {"a"}, False),  # the article is not the parameter a
        ("unhashable type: 'list'", {"hashable", "lis"}, False),
        ("could not convert string to float: 'abc'", {"string"}, False),
        ("d_bars must be a tuple", {"d_bar"}, False),  # another word
    ],
)  # fmt: skip
def test_the_naming_rule(message, names, named):
    assert names_a_parameter(message, names) is named


REACHED = {
    "sim.engine.regime_advice": lambda out: out.startswith("Regime on 1 device: launch-bound"),
    "sim.free_schedule.FreeSchedule": lambda out: out.exits.tolist() == [True, False, True],
    "sim.free_schedule.FreeSchedule.run": lambda out: out.latency_s > 0 and len(out.events),
    "DecodeCostsGrid.greedy_token_seconds": lambda out: out.tolist() == [0.04, 0.08],
}
"""Targets whose valid call used to stop short of their checks, or that had none (issue 47: an
engine-less ``hw``, a constructor that checked nothing, methods of a private base class): what
the valid call must now return."""


@pytest.mark.parametrize("name", sorted(REACHED))
def test_valid_calls_reach_the_body(name, fuzz_work_limits):
    """The valid call of each ``REACHED`` target runs its body (so malformed values replacing
    its arguments meet its checks), not an early return or a refusal."""
    (target,) = [t for t in ALL_TARGETS if t.name == name]
    assert not target.unset, f"{name} has no valid value for {target.unset}"
    assert REACHED[name](target.func(**target.valid))


def test_every_public_function_is_fuzzed():
    """Every public callable of ppdmodel and sim (their ``__all__`` and every module's public
    functions, classes and methods) has a target, explicit or built from its signature."""
    names = {t.name for t in ALL_TARGETS}
    exported = {n for package in PACKAGES for n in package.__all__
                if callable(getattr(package, n))}  # fmt: skip
    assert not sorted(exported - names), f"no fuzz target for {sorted(exported - names)}"
    found = [q for q, value, _ in _public_callables()
             if q not in NOT_FUZZED and q not in names
             and not any(_same(t.func, value) for t in TARGETS)]  # fmt: skip
    assert not found, f"no fuzz target for {found}"
    assert len(ALL_TARGETS) > 200


@pytest.fixture(autouse=True)
def in_work_dir(monkeypatch, tmp_path):
    """Each target's calls run in an empty folder of their own: a fuzzed path writes nothing
    elsewhere, and no file another target wrote there ("abc") is read back. The valid input
    files in ``WORK_DIR`` are written afresh (a fuzzed writer may have overwritten one)."""
    monkeypatch.chdir(tmp_path)
    write_layer_times(LAYER_TIMES_CSV, LAYER_TIMES)
    PROFILE_JSON.write_text(json.dumps(PROFILE_DATA))
    paper.TABLE2.to_csv(PTABLE_CSV, index=False)


def _examples(target: Target, ci: bool) -> int:
    if any(target is auto for auto in AUTO_TARGETS):
        return target.examples or (AUTO_CI_EXAMPLES if ci else AUTO_SLOW_EXAMPLES)
    if ci:
        return min(CI_EXAMPLES, target.examples or CI_EXAMPLES)
    return SLOW_EXAMPLES if target.examples is None else 5 * target.examples


@pytest.mark.parametrize("target", ALL_TARGETS, ids=[t.name for t in ALL_TARGETS])
def test_fuzz(target):
    """CI profile: a few hundred malformed calls per function at most, deterministic."""
    if os.environ.get("PPD_FUZZ") == "slow":
        pytest.skip("PPD_FUZZ=slow runs test_fuzz_slow instead")
    _fuzz(target, _examples(target, ci=True), derandomize=True)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PPD_FUZZ") != "slow", reason="set PPD_FUZZ=slow to run")
@pytest.mark.parametrize("target", ALL_TARGETS, ids=[t.name for t in ALL_TARGETS])
def test_fuzz_slow(target):
    """Slow profile: SLOW_EXAMPLES random malformed calls per function (>= 10^4 in all)."""
    _fuzz(target, _examples(target, ci=False), derandomize=False)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PPD_FUZZ") != "slow", reason="set PPD_FUZZ=slow to run")
@pytest.mark.parametrize("target", ALL_TARGETS, ids=[t.name for t in ALL_TARGETS])
def test_fuzz_sweep_slow(target):
    """Slow profile, systematic part: every ``FIXED_BAD`` value in every parameter (it found
    what 1000 random calls per function missed: a 0-d array, a huge int in one place)."""
    _sweep(target)
