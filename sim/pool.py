"""Worker pools tied to their parent: no worker outlives the process that started it.

``tied_pool(workers)`` is a ``ProcessPoolExecutor`` (spawn) whose workers

* end when the parent dies, however it dies (``sim.lifeline.tie_to_parent``: Linux's parent
  death signal and a watchdog thread; ``measure``'s ranks are tied the same way);
* ignore SIGINT: Ctrl-C to the process group reaches the parent, which cancels what is queued
  and terminates the workers at once (a plain pool's ``shutdown(wait=True)`` would first run
  every queued task, and every worker would print a KeyboardInterrupt traceback).

The same happens when the parent raises anything inside the ``with`` block (a work limit, a
SIGTERM turned into ``SystemExit`` by the CLI). ``sim.sweep`` (and so the planner's
confirmation) and ``sim.run.monte_carlo`` use it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

from ppdmodel.validation import as_int, check_instance
from sim.lifeline import tie_to_parent

MAX_WORKERS = 256
"""Largest pool (each worker is a Python interpreter of a few hundred MB)."""
STOP_JOIN_S = 5.0
"""Seconds to wait for terminated workers to exit before killing them."""


def useful_workers(requested: int | None, tasks: int) -> int:
    """Workers worth starting: at most ``requested`` (None: the CPU count), the CPU count and
    the number of tasks, and at least 1."""
    cpus = os.cpu_count() or 1
    requested = cpus if requested is None else as_int("requested", requested, limit=MAX_WORKERS)
    return max(1, min(requested, cpus, as_int("tasks", tasks, minimum=0)))


def _tie_worker(parent_pid: int) -> None:
    """Worker initializer: ignore SIGINT and end within about a second of the parent's death
    (at once if it is already gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tie_to_parent(parent_pid)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and end the workers now (SIGTERM, then SIGKILL), then wait."""
    check_instance("pool", pool, ProcessPoolExecutor)
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + STOP_JOIN_S
    for proc in processes:
        proc.join(timeout=max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=1.0)


@contextmanager
def tied_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A spawn process pool of ``workers`` tied to this process (module docstring).

    Leaving the block normally waits for the submitted tasks; leaving it by an exception
    (KeyboardInterrupt included) cancels them and ends the workers at once.
    """
    workers = as_int("workers", workers, limit=MAX_WORKERS)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(
        "spawn"), initializer=_tie_worker, initargs=(os.getpid(),))  # fmt: skip
    try:
        yield pool
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
