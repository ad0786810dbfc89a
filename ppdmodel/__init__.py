"""Closed-form model of Predictive Pipelined Decoding (PPD; Yang et al., TMLR 2024).

Pure numpy/scipy/sympy math: Theorem 4.1, the exact law of the latency, the ell -> infinity
approximations (Eq. 3, 5, 6), the paper's reported tables (``ppdmodel.paper``), built-in
p_correct tables (``ppdmodel.ptables``: the paper's Table 2 and a measured SmolLM2 atlas) and,
as this project's extension, latency in seconds with every cost term (``DecodeCosts``,
``expected_latency_seconds``, ``break_even_p``, ``latency_waterfall``, compute in busy
device-seconds ``expected_compute_seconds``, and the alternatives PPD is planned against:
speculative decoding, self-speculative early exit, tensor parallelism's all-reduce; and FREE's
shallow-deep early exit, ``ppdmodel.free``), and the overheads a real implementation paid,
inferred from its published timings (``ppdmodel.overheads``).
``import ppdmodel`` loads numpy only; pandas, scipy.stats, matplotlib and sympy are imported
when the parts that need them are first used (``ppdmodel.symbolic`` imports sympy).
"""

from __future__ import annotations

import importlib

from ppdmodel.alternatives import (
    early_exit_seconds_per_token,
    ring_allreduce_seconds,
    speculative_seconds_per_token,
    speculative_speedup,
    speculative_tokens_per_step,
)
from ppdmodel.asymptotic import compute_per_time, compute_per_token, latency_per_token
from ppdmodel.compute_seconds import (
    expected_compute_seconds,
    greedy_compute_seconds,
    trace_compute_seconds,
)
from ppdmodel.cost_grid import DecodeCostsGrid
from ppdmodel.costs import DecodeCosts, link_seconds
from ppdmodel.distribution import LatencyDistribution, latency_distribution
from ppdmodel.early_exit import (
    EarlyExitCosts,
    EarlyExitSteps,
    early_exit_steps,
    early_exit_trace_seconds,
)
from ppdmodel.free import (
    free_expected_compute_seconds,
    free_expected_latency_seconds,
    free_rows_layer_seconds,
    free_trace_latency_seconds,
)
from ppdmodel.intervals import Interval, p_draws, prediction_interval
from ppdmodel.montecarlo import sample_latency, sample_runs
from ppdmodel.seconds import (
    break_even_p,
    expected_latency_seconds,
    greedy_latency_seconds,
    latency_per_token_seconds,
    trace_latency_seconds,
)
from ppdmodel.theorem import expected_compute, expected_latency, latency_variance
from ppdmodel.waterfall import LatencyWaterfall, latency_waterfall

_LAZY = {
    "overheads": ("ppdmodel.overheads", None),
    "paper": ("ppdmodel.paper", None),
    "ptables": ("ppdmodel.ptables", None),
    "symbolic": ("ppdmodel.symbolic", None),
    "tradeoff_curves": ("ppdmodel.tradeoff", "tradeoff_curves"),
    "plot_tradeoff": ("ppdmodel.tradeoff", "plot_tradeoff"),
}

__all__ = [
    "DecodeCosts",
    "DecodeCostsGrid",
    "Interval",
    "LatencyDistribution",
    "LatencyWaterfall",
    "break_even_p",
    "compute_per_time",
    "compute_per_token",
    "EarlyExitCosts",
    "EarlyExitSteps",
    "early_exit_seconds_per_token",
    "early_exit_steps",
    "early_exit_trace_seconds",
    "expected_compute",
    "expected_compute_seconds",
    "expected_latency",
    "expected_latency_seconds",
    "free_expected_compute_seconds",
    "free_expected_latency_seconds",
    "free_rows_layer_seconds",
    "free_trace_latency_seconds",
    "greedy_compute_seconds",
    "greedy_latency_seconds",
    "latency_distribution",
    "latency_per_token",
    "latency_per_token_seconds",
    "latency_variance",
    "latency_waterfall",
    "link_seconds",
    "overheads",
    "p_draws",
    "paper",
    "plot_tradeoff",
    "prediction_interval",
    "ptables",
    "ring_allreduce_seconds",
    "sample_latency",
    "sample_runs",
    "speculative_seconds_per_token",
    "speculative_speedup",
    "speculative_tokens_per_step",
    "symbolic",
    "trace_compute_seconds",
    "trace_latency_seconds",
    "tradeoff_curves",
]


def __getattr__(name: str):
    """Load ``paper``, ``ptables`` (pandas), ``symbolic`` (sympy) and the trade-off helpers on
    first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'ppdmodel' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attr is None else getattr(module, attr)


def __dir__():
    """List the lazily loaded names too."""
    return sorted(set(globals()) | set(_LAZY))
