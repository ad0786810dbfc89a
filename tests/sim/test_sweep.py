"""Sweeps through any Executor: seeded per cell, same numbers everywhere, resumable parts."""

import sys
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from functools import partial

import numpy as np
import pandas as pd
import pytest

import sim
import sim.sweep
from sim.progress import Progress
from sim.sweep import RayExecutor, open_executor, run_sweep

CELLS = [{"p": p, "n": 30} for p in (0.1, 0.4, 0.7, 0.9, 0.5)]
CALLS: list[int] = []


def monte_carlo_cell(cell, seed):
    """A small simulator Monte Carlo: mean latency of n sequences at match rate p."""
    CALLS.append(1)
    config = sim.SimConfig(d=8, d_bar=4, k=2, ell=12, matches=sim.Bernoulli(cell["p"]))
    rng_seeds = seed.spawn(cell["n"])
    lat = [sim.simulate(config, seed=s, record_events=False).latency_units for s in rng_seeds]
    return {"p": cell["p"], "mean": float(np.mean(lat)), "draw": float(seed.generate_state(1)[0])}


def test_same_numbers_with_any_executor_and_chunking():
    serial = run_sweep(monte_carlo_cell, CELLS, seed=3, executor=ThreadPoolExecutor(1))
    with ProcessPoolExecutor(2) as pool:
        parallel = run_sweep(monte_carlo_cell, CELLS, seed=3, executor=pool, chunk_size=2)
    pd.testing.assert_frame_equal(serial, parallel)
    assert list(serial["cell"]) == list(range(len(CELLS)))
    other = run_sweep(monte_carlo_cell, CELLS, seed=4, executor=ThreadPoolExecutor(2))
    assert not other["mean"].equals(serial["mean"])


def test_progress_lines_count_the_cells_this_call_runs(tmp_path, monkeypatch, capsys):
    """``progress``: lines on stderr as chunks end (here unthrottled), over the cells run now,
    not those a resumed sweep read back; none without a label."""
    monkeypatch.setattr(sim.sweep, "Progress", partial(Progress, min_interval_s=0.0,
                                                        max_interval_s=0.0))  # fmt: skip
    args = dict(seed=1, executor=ThreadPoolExecutor(1), out_dir=tmp_path, chunk_size=2)
    run_sweep(monte_carlo_cell, CELLS, **args)
    assert capsys.readouterr().err == ""
    sorted(tmp_path.glob("part-*.jsonl"))[0].unlink()  # 2 cells left to run
    run_sweep(monte_carlo_cell, CELLS, **args, progress="confirming")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("confirming: 2/2 done, ") and line.endswith("about 0 s left")
    with pytest.raises(ValueError, match=r"^progress must be a str"):
        run_sweep(monte_carlo_cell, CELLS, **args, progress=True)


def test_monte_carlo_cells_agree_with_theorem_41():
    import ppdmodel

    cells = [{"p": 0.6, "n": 400}]
    out = run_sweep(monte_carlo_cell, cells, seed=0, executor=ThreadPoolExecutor(1))
    expected = ppdmodel.expected_latency(d=8, d_bar=4, ell=12, p=0.6)
    sd = 4 * np.sqrt(ppdmodel.latency_variance(d=8, d_bar=4, ell=12, p=0.6) / 400)
    assert abs(out["mean"][0] - expected) <= 4 * sd


def test_resume_recomputes_only_missing_parts(tmp_path):
    first = run_sweep(
        monte_carlo_cell,
        CELLS,
        seed=1,
        executor=ThreadPoolExecutor(1),
        out_dir=tmp_path,
        chunk_size=2,
    )
    parts = sorted(tmp_path.glob("part-*.jsonl"))
    assert len(parts) == 3
    parts[1].unlink()  # an interrupted sweep: one chunk (2 cells) missing
    CALLS.clear()
    again = run_sweep(
        monte_carlo_cell,
        CELLS,
        seed=1,
        executor=ThreadPoolExecutor(1),
        out_dir=tmp_path,
        chunk_size=2,
    )
    assert len(CALLS) == 2
    pd.testing.assert_frame_equal(first, again, check_exact=True)  # parts read back bit for bit
    CALLS.clear()
    run_sweep(
        monte_carlo_cell,
        CELLS,
        seed=1,
        executor=ThreadPoolExecutor(1),
        out_dir=tmp_path,
        chunk_size=2,
    )
    assert CALLS == []
    with pytest.raises(ValueError, match="another sweep"):
        run_sweep(monte_carlo_cell, CELLS, seed=2, out_dir=tmp_path, chunk_size=2)


def test_local_dask_cluster_gives_the_process_pool_numbers():
    distributed = pytest.importorskip("distributed")
    with ProcessPoolExecutor(2) as pool:
        expected = run_sweep(monte_carlo_cell, CELLS, seed=9, executor=pool)
    cluster = distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        got = run_sweep(monte_carlo_cell, CELLS, seed=9, executor=client.get_executor())
    pd.testing.assert_frame_equal(expected, got)


class _FakeRay:
    """Stands in for the ``ray`` module: remote(fn).remote(...).future()."""

    @staticmethod
    def remote(fn):
        class Remote:
            @staticmethod
            def remote(*args, **kwargs):
                class Ref:
                    @staticmethod
                    def future():
                        future = Future()
                        future.set_result(fn(*args, **kwargs))
                        return future

                return Ref

        return Remote


def test_ray_adapter_submits_tasks_as_futures():
    expected = run_sweep(monte_carlo_cell, CELLS[:2], seed=5, executor=ThreadPoolExecutor(1))
    got = run_sweep(monte_carlo_cell, CELLS[:2], seed=5, executor=RayExecutor(_FakeRay))
    pd.testing.assert_frame_equal(expected, got)


def test_local_ray_runtime_gives_the_process_pool_numbers():
    """A real local Ray runtime (the ray extra; skipped without it) through open_executor."""
    pytest.importorskip("ray")
    with ProcessPoolExecutor(2) as pool:
        expected = run_sweep(monte_carlo_cell, CELLS, seed=9, executor=pool)
    with open_executor("ray") as pool:
        got = run_sweep(monte_carlo_cell, CELLS, seed=9, executor=pool)
    pd.testing.assert_frame_equal(expected, got)


def test_open_executor_specs():
    with open_executor("local", workers=1) as pool:
        assert pool.submit(abs, -2).result() == 2
    with pytest.raises(ValueError, match="executor must be"):
        with open_executor("slurm"):
            pass
    with pytest.raises(ValueError, match="workers"):
        with open_executor("local", workers=0):
            pass
    if "ray" not in sys.modules:
        try:
            import ray  # noqa: F401
        except ModuleNotFoundError:
            with pytest.raises(ValueError, match="ray extra"):
                with open_executor("ray"):
                    pass


def test_bad_chunk_size():
    with pytest.raises(ValueError, match="chunk_size"):
        run_sweep(monte_carlo_cell, CELLS, chunk_size=0, executor=ThreadPoolExecutor(1))
