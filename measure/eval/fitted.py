"""Fitted validation (`ppd validate --fit`): overheads fitted on half of the runs, compared on
the other half. The fitted constants absorb whatever the model leaves out, so agreement here
says little; ``measure.eval.validate`` predicts from a profile instead (nothing fitted).

Closed form (measured p-hat), simulator replay, and measured latency.

For the same prompts: greedy and PPD runs are measured; the overhead terms are fitted on one
half of the prompts (``measure.eval.calibrate``) and all three latencies are compared on the
other half (with a single prompt, in-sample). The closed form is
``ppdmodel.expected_latency_seconds`` with the pooled p-hat, the mean measured layer time
and the calibrated overheads; the simulator replays each run's own m_t with the measured
per-layer times (``sim.MeasuredCost``) and the calibrated overheads and link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

import sim
from measure.eval.calibrate import (
    Calibration,
    fit_overheads,
    greedy_step_compute,
    transfer_seconds,
)
from ppdmodel import expected_latency_seconds, greedy_latency_seconds
from sim import ModelShape

TABLE_COLUMNS = (
    "method",
    "sequence",
    "ell",
    "n_runs",
    "p_hat",
    "measured_s",
    "closed_form_s",
    "simulated_s",
    "closed_form_rel_err",
    "simulated_rel_err",
)


@dataclass
class ValidationReport:
    """Per-run and per-method comparisons plus the calibration they used."""

    table: pd.DataFrame
    """One row per evaluated run and method (``TABLE_COLUMNS``)."""
    summary: pd.DataFrame
    """One row per method: summed seconds and relative errors of the sums."""
    calibration: Calibration
    """Fitted overhead terms."""
    held_out: bool
    """True if calibration and evaluation used disjoint prompts."""


def model_shape(config, context_len: int = 1024):
    """A ``sim.ModelShape`` from a Hugging Face config (for hand-off bytes)."""
    c = config.get_text_config()
    hidden = c.hidden_size
    inter = (
        getattr(c, "intermediate_size", None)
        or getattr(c, "ffn_dim", None)
        or getattr(c, "n_inner", None)
        or 4 * hidden
    )
    dtype_bytes = 2 if str(getattr(c, "dtype", "float32")).endswith(("16",)) else 4
    return ModelShape(
        hidden_size=hidden,
        num_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
        intermediate_size=inter,
        vocab_size=c.vocab_size,
        dtype_bytes=dtype_bytes,
        context_len=context_len,
    )


def simulate_ppd(result, cost, calib: Calibration, shape, n_gpus: int) -> float:
    """Simulated seconds of one measured PPD run, replaying its m_t."""
    trace = result.trace
    config = sim.SimConfig(
        d=trace.d,
        d_bar=trace.d_bar,
        k=trace.k,
        ell=trace.ell,
        matches=sim.Replay.from_trace(trace),
        cost=cost,
        n_gpus=n_gpus,
        link=calib.link(),
        shape=shape,
        per_token_overhead_s=calib.per_token_overhead_s,
        per_handoff_overhead_s=calib.per_handoff_overhead_s,
    )
    return float(sim.simulate(config).latency_s)


def simulate_greedy(ell: int, d: int, cost, calib: Calibration) -> float:
    """Simulated seconds of greedy decoding of ell tokens."""
    config = sim.SimConfig(
        d=d,
        d_bar=d - 1,
        k=1,
        ell=ell,
        cost=cost,
        schedule="greedy",
        per_token_overhead_s=calib.greedy_per_token_overhead_s,
    )
    return float(sim.simulate(config).latency_s)


def closed_form_ppd(*, d, d_bar, ell, p, cost, calib: Calibration, handoff_bytes) -> float:
    """Theorem 4.1 in seconds: mean layer time, per-token parts folded into the overhead."""
    heads = cost.embed_seconds(1) + 2 * cost.head_seconds(1)
    handoff = calib.per_handoff_overhead_s + transfer_seconds(
        calib.link_latency_s, calib.link_bandwidth_bytes_per_s, handoff_bytes
    ) * (calib.link() is not None)
    return float(
        expected_latency_seconds(
            d=d,
            d_bar=d_bar,
            ell=ell,
            p=p,
            seconds_per_layer=cost.unit_seconds(),
            per_token_overhead_s=calib.per_token_overhead_s + heads,
            per_handoff_overhead_s=handoff,
        )
    )


def closed_form_greedy(*, d, ell, cost, calib: Calibration) -> float:
    """Greedy latency in seconds from the mean layer time and the per-token parts."""
    extra = greedy_step_compute(cost, d) - d * cost.unit_seconds()
    return float(
        greedy_latency_seconds(
            d=d,
            ell=ell,
            seconds_per_layer=cost.unit_seconds(),
            per_token_overhead_s=max(0.0, calib.greedy_per_token_overhead_s + extra),
        )
    )


def _row(method, sequence, ell, n_runs, p_hat, measured, closed, simulated) -> dict:
    return dict(
        method=method,
        sequence=sequence,
        ell=ell,
        n_runs=n_runs,
        p_hat=p_hat,
        measured_s=measured,
        closed_form_s=closed,
        simulated_s=simulated,
        closed_form_rel_err=closed / measured - 1,
        simulated_rel_err=simulated / measured - 1,
    )


def compare(ppd_results, greedy_results, cost, calib, shape, n_gpus) -> pd.DataFrame:
    """Per-run table of measured, closed-form and simulated seconds (``TABLE_COLUMNS``)."""
    ms = [x for r in ppd_results for x in r.m]
    p_hat = float(np.mean(ms)) if ms else 0.0
    rows = []
    for r in ppd_results:
        t = r.trace
        closed = closed_form_ppd(
            d=t.d,
            d_bar=t.d_bar,
            ell=t.ell,
            p=p_hat,
            cost=cost,
            calib=calib,
            handoff_bytes=r.handoff_bytes,
        )
        simulated = simulate_ppd(r, cost, calib, shape, n_gpus)
        rows.append(
            _row(f"ppd k={t.k}", t.sequence, t.ell, r.n_runs, p_hat, r.wall_s, closed, simulated)
        )
    d = ppd_results[0].trace.d
    for seq, g in greedy_results:
        ell = len(g.tokens)
        rows.append(
            _row(
                "greedy",
                seq,
                ell,
                ell,
                float("nan"),
                g.wall_s,
                closed_form_greedy(d=d, ell=ell, cost=cost, calib=calib),
                simulate_greedy(ell, d, cost, calib),
            )
        )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per method: summed seconds, relative errors of the sums, mean |per-run error|."""
    sums = table.groupby("method")[["measured_s", "closed_form_s", "simulated_s"]].sum()
    sums["closed_form_rel_err"] = sums["closed_form_s"] / sums["measured_s"] - 1
    sums["simulated_rel_err"] = sums["simulated_s"] / sums["measured_s"] - 1
    sums["simulated_mean_abs_run_err"] = table.groupby("method")["simulated_rel_err"].apply(
        lambda s: float(np.mean(np.abs(s)))
    )
    sums["p_hat"] = table.groupby("method")["p_hat"].first()
    sums["runs"] = table.groupby("method").size()
    return sums.reset_index()


def split_halves(n: int) -> tuple[list[int], list[int], bool]:
    """Indices to calibrate on and to evaluate on (even / odd; all / all when n == 1)."""
    if n < 2:
        return [0], [0], False
    return list(range(0, n, 2)), list(range(1, n, 2)), True


def validate_results(ppd_results, greedy_results, layer_times: pd.DataFrame, shape, n_gpus):
    """Calibrate on one half of the runs and compare on the other: a ValidationReport.

    ppd_results and greedy_results are aligned lists (same prompts, same order).
    """
    if len(ppd_results) != len(greedy_results):
        raise ValueError("ppd_results and greedy_results must cover the same prompts")
    cost = sim.MeasuredCost(layer_times)
    fit_idx, eval_idx, held_out = split_halves(len(ppd_results))
    calib = fit_overheads(
        [ppd_results[i] for i in fit_idx], cost, greedy_results=[greedy_results[i] for i in fit_idx]
    )
    table = compare(
        [ppd_results[i] for i in eval_idx],
        [(ppd_results[i].trace.sequence, greedy_results[i]) for i in eval_idx],
        cost,
        calib,
        shape,
        n_gpus,
    )
    return ValidationReport(table, summarize(table), calib, held_out)


def plot_validation(summary: pd.DataFrame, path) -> None:
    """Bar chart of measured vs closed-form vs simulated seconds per method (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone

    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    x = np.arange(len(summary))
    for i, (column, label) in enumerate(
        [
            ("measured_s", "measured"),
            ("closed_form_s", "closed form (p-hat, fitted overheads)"),
            ("simulated_s", "simulator (replay, fitted overheads)"),
        ]
    ):
        ax.bar(x + (i - 1) * 0.27, summary[column], width=0.27, label=label)
    ax.set_xticks(x, summary["method"])
    ax.set_ylabel("decode latency, s (sum over runs)")
    ax.set_title("FITTED: overheads fitted on half of the runs", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
