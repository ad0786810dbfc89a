"""Overhead calibration: planted overheads are recovered; the simulator reproduces the runs."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sim  # noqa: E402
from measure.eval.calibrate import (  # noqa: E402
    Calibration,
    fit_link,
    fit_overheads,
    ppd_pass_compute,
)
from measure.eval.fitted import compare, simulate_ppd, split_halves  # noqa: E402
from sim.formats import MatchTrace  # noqa: E402

torch.set_num_threads(1)
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [40, 41]]


def _fake_run(m, d, d_bar, cost, per_token, handoff, nbytes, samples, sequence="s"):
    compute = ppd_pass_compute(cost, d=d, d_bar=d_bar, m=m)
    durations = compute + per_token + handoff * np.concatenate([[0], m])
    times = np.cumsum(durations).tolist()
    trace = MatchTrace(sequence=sequence, d=d, d_bar=d_bar, k=1, m=m, source="ppd_run")
    return SimpleNamespace(
        trace=trace,
        m=list(m),
        token_times_s=times,
        wall_s=times[-1],
        handoff_bytes=nbytes,
        link_samples=samples,
        n_runs=trace.n_runs,
        tokens=[0] * (len(m) + 1),
    )


def test_calibration_recovers_planted_overheads_and_sim_reproduces_runs():
    d, d_bar, unit = 8, 5, 0.01
    cost = sim.UniformCost(seconds_per_layer=unit)
    shape = sim.ModelShape(
        hidden_size=64,
        num_layers=d,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=100,
        dtype_bytes=4,
    )
    nbytes = shape.handoff_bytes(1, d - d_bar)
    latency, bandwidth = 2e-4, 1e7
    samples = [(b, latency + b / bandwidth) for b in (256, 4096, 65536) for _ in range(3)]
    assert fit_link(samples) == pytest.approx((latency, bandwidth), rel=1e-6)
    rng = np.random.default_rng(0)
    runs = [
        _fake_run(
            rng.integers(0, 2, 15).tolist(), d, d_bar, cost, 0.003, 0.004, nbytes, samples, f"s{i}"
        )
        for i in range(4)
    ]
    calib = fit_overheads(runs, cost)
    assert calib.per_token_overhead_s == pytest.approx(0.003, abs=1e-9)
    link_s = latency + nbytes / bandwidth
    assert calib.per_handoff_overhead_s == pytest.approx(0.004 - link_s, abs=1e-9)
    assert calib.rms_residual_s < 1e-9
    for run in runs:  # the simulator's accounting is the one fitted: exact replay
        assert simulate_ppd(run, cost, calib, shape, n_gpus=2) == pytest.approx(run.wall_s)
    greedy = [
        SimpleNamespace(
            tokens=[0] * 16,
            wall_s=16 * (d * unit + 0.001),
            token_times_s=list(np.arange(1, 17) * (d * unit + 0.001)),
        )
    ]
    calib = fit_overheads(runs, cost, greedy_results=greedy)
    assert calib.greedy_per_token_overhead_s == pytest.approx(0.001)
    table = compare(runs[:1], [("s0", greedy[0])], cost, calib, shape, n_gpus=2)
    assert table["simulated_rel_err"].abs().max() < 1e-9
    assert split_halves(5)[:2] == ([0, 2, 4], [1, 3]) and split_halves(1)[2] is False


def test_calibration_without_link_round_trips_through_strict_json():
    calib = Calibration(0.001, 0.0, 0.0, math.inf)
    data = json.loads(json.dumps(calib.to_dict(), allow_nan=False))
    assert data["link_bandwidth_bytes_per_s"] is None
    assert Calibration.from_dict(data) == calib
