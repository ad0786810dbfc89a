"""Worker pools end with their parent (issue 25): ``ppd plan`` killed mid-confirmation by
SIGTERM, SIGKILL or Ctrl-C to its process group leaves no worker behind 10 s later."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sim.pool import tied_pool, useful_workers
from sim.sweep import run_sweep
from tests.procs import cmdline, cpu_seconds, descendants, kill_all, needs_proc, running, wait_gone

ROOT = Path(__file__).resolve().parents[2]
LONG_PLAN = [
    sys.executable, "-m", "ppdmodel", "plan", "--devices", "2", "--d-bar", "30", "--k", "1",
    "--workload", "SQuAD", "--no-alternatives", "--confirm-n", "20000", "--workers", "2",
]  # fmt: skip
"""A plan whose confirmation takes minutes on 2 workers (4 frontier points)."""


def _busy_workers(parent: int, timeout_s: float) -> list[int]:
    """The parent's descendants once two pool workers exist and compute."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kids = descendants(parent)
        workers = [k for k in kids if "spawn_main" in cmdline(k)]
        if len(workers) == 2 and all(cpu_seconds(w) > 1.5 for w in workers):
            return kids
        time.sleep(0.5)
    raise AssertionError("the plan's workers never started computing")


@needs_proc
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "SIGINT to the group"])
def test_killing_ppd_plan_mid_confirmation_leaves_no_worker(tmp_path, how):
    parent = subprocess.Popen(
        [*LONG_PLAN, "--out", str(tmp_path / "plan")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,  # an orphan holding a pipe would block this test
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own process group, for the Ctrl-C case
    )
    kids = []
    try:
        kids = _busy_workers(parent.pid, timeout_s=120)
        if how == "SIGINT to the group":  # what Ctrl-C in a terminal does
            os.killpg(parent.pid, signal.SIGINT)
        else:
            parent.send_signal(getattr(signal, how))
        code = parent.wait(timeout=15)
        seconds = wait_gone(kids, 10.0)
        left = [cmdline(p)[-60:] for p in running(kids)]
        assert not left, f"still running {seconds:.1f} s after {how}: {left}"
        if how == "SIGINT to the group":
            assert code == 130
            assert parent.stderr.read().decode().strip() == "ppd plan: interrupted"
    finally:
        kill_all(kids)
        if parent.poll() is None:
            parent.kill()
        parent.stderr.close()


def test_run_sweep_cancels_queued_cells_on_a_failure():
    started = []

    def fn(cell, seed):
        started.append(cell["i"])
        if cell["i"] == 0:
            raise KeyboardInterrupt
        time.sleep(0.05)
        return {"i": cell["i"]}

    with ThreadPoolExecutor(1) as pool, pytest.raises(KeyboardInterrupt):
        run_sweep(fn, [{"i": i} for i in range(50)], executor=pool)
    assert len(started) < 5


def test_pool_size_is_bounded_by_cpus_and_tasks():
    cpus = os.cpu_count() or 1
    assert useful_workers(255, 4) == min(4, cpus)
    assert useful_workers(None, 10**6) == cpus
    assert useful_workers(3, 0) == 1
    with pytest.raises(ValueError, match="requested must be <= "):
        useful_workers(10**6, 4)


def test_a_tied_pool_ends_its_workers_when_the_block_raises():
    with pytest.raises(RuntimeError), tied_pool(1) as pool:
        pool.submit(time.sleep, 60)
        workers = list(pool._processes)
        raise RuntimeError
    assert wait_gone(workers, 10) < 10
