"""Ranks tied to this process: spawn them, watch them, and leave nothing behind.

One launcher for every group of spawned ranks (the ``dist`` decoder, ``measure.decode.launch``;
the profiler's two gloo ranks, ``measure.profile.ranks``):

* ``run_ranks`` spawns the ranks, each running ``rank_main``, which ties the rank to this
  process (``sim.lifeline.tie_to_parent``: the kernel's parent-death signal and a watchdog)
  before it imports anything heavy (torch takes seconds to import), then runs the target and
  reports progress, its result or its error on a queue; the parent watches the queue and the
  exit codes and raises ``DistRunError``, one line naming the rank that failed first, when a
  rank raises, dies or makes no progress (spawn and wait happen in one thread: the kernel's
  "parent" of a rank is that thread);
* ``tied_temp_dir`` is a temporary folder that a janitor process removes when this process
  ends, however it ends (SIGKILL and the OOM killer run no cleanup).
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import queue as queue_mod
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

from sim.lifeline import tie_to_parent

WATCHDOG_GRACE_S = 5.0
"""Seconds the parent waits beyond ``timeout_s`` so a rank's own timeout error arrives first."""
REPORT_GRACE_S = 1.0
"""Seconds the parent collects the other ranks' errors and exit codes after the first failure."""
JOIN_S = 2.0
"""Seconds a finished rank gets to exit before it is killed."""
PEER_ERROR_MARKS = ("Connection closed", "Connection reset", "timed out", "Timed out", "peer")
"""Text of errors a rank raises because *another* rank failed (named after the culprit)."""


class DistRunError(RuntimeError):
    """A group of ranks failed; the message is one line naming the rank that failed first
    (its exception, exit code or signal). The ranks' tracebacks are in ``details`` and, as the
    exception's cause, in a traceback (``ppd --debug``)."""

    def __init__(self, message: str, details: str = ""):
        super().__init__(message)
        self.details = details


class RankTracebacks(Exception):
    """The failed ranks' own tracebacks: the cause of a DistRunError, shown with ``--debug``."""


def run_tied(parent_pid: int, target: str, *args, **kwargs):
    """Tie this process to ``parent_pid``, then import and call ``target``
    (``"package.module:function"``) with ``args``, which must unpickle without heavy imports."""
    tie_to_parent(parent_pid)
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)(*args, **kwargs)


def rank_main(parent_pid: int, target: str, rank: int, args: tuple, queue) -> None:
    """A spawned rank: ``target(rank, *args, progress=)`` tied to the parent; its result or its
    error (then exit 1) goes to ``queue``, as ``progress(i)`` calls do."""
    try:
        out = run_tied(
            parent_pid, target, rank, *args, progress=lambda i: queue.put(("progress", rank, i))
        )
        queue.put(("result", rank, out))
    except BaseException as exc:  # report every failure, then exit non-zero
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None


def run_ranks(
    target: str,
    args: tuple,
    *,
    world_size: int,
    timeout_s: float,
    startup_s: float = 0.0,
    what: str = "PPD dist run",
) -> list:
    """Run ``target(rank, *args, progress=)`` on ``world_size`` spawned ranks tied to this
    process; each rank's return value, by rank.

    Raises DistRunError (``what`` names the run) if a rank raises, dies (with its exit code or
    signal), or makes no progress for ``timeout_s`` (``startup_s`` more before its first
    ``progress`` call). Ranks end with this process, however it ends.
    """
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=rank_main, args=(os.getpid(), target, r, args, queue), daemon=True)
        for r in range(world_size)
    ]
    for proc in procs:
        proc.start()
    try:
        return _watch(procs, queue, timeout_s, startup_s, what)
    finally:
        for proc in procs:
            proc.join(timeout=JOIN_S)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)


def _watch(procs, queue, timeout_s: float, startup_s: float, what: str) -> list:
    deadline = time.monotonic() + startup_s + timeout_s
    results, errors = {}, {}
    while True:
        try:
            kind, rank, payload = queue.get(timeout=0.2)
        except queue_mod.Empty:
            kind = None
        now = time.monotonic()
        if kind == "progress":  # a rank's own peer timeout (naming the peer) should come first
            deadline = now + timeout_s + WATCHDOG_GRACE_S
        elif kind == "result":
            results[rank] = payload
        elif kind == "error":
            errors[rank] = payload
        if len(results) == len(procs):
            return [results[r] for r in range(len(procs))]
        if errors or any(p.exitcode not in (None, 0) for p in procs):
            error = _failure(procs, queue, errors, what)
            raise error from (RankTracebacks(error.details) if error.details else None)
        if now > deadline:
            raise DistRunError(
                f"{what} made no progress for {timeout_s:g} s; ranks still running: "
                f"{_alive(procs)}; killed them"
            )


def _failure(procs, queue, errors: dict, what: str) -> DistRunError:
    """The error of a failed run, once the other ranks had REPORT_GRACE_S to report or exit."""
    end = time.monotonic() + REPORT_GRACE_S
    while time.monotonic() < end and _alive(procs):
        try:
            kind, rank, payload = queue.get(timeout=0.1)
        except queue_mod.Empty:
            continue
        if kind == "error":
            errors.setdefault(rank, payload)
    exits = {r: p.exitcode for r, p in enumerate(procs)}
    return DistRunError(failure_message(errors, exits, what), details=_details(errors))


def failure_message(errors: dict[int, str], exits: dict[int, int | None], what="PPD dist run"):
    """One line naming the rank that failed first: a rank that died without a word (killed by
    a signal, or exited non-zero), else one that raised an error of its own, else one that lost
    its peer; then the other ranks that failed, and those still running (killed) that did not.

    errors: rank -> "Type: message\\ntraceback"; exits: rank -> exit code (None: running,
    negative: killed by that signal).
    """
    status = {}
    for rank, code in exits.items():
        if rank in errors:
            status[rank] = (2 if _is_peer_error(errors[rank]) else 1, errors[rank].splitlines()[0])
        elif code is not None and code != 0:
            status[rank] = (0, _exit_text(code))
    if not status:
        return f"{what} failed"
    order = sorted(status, key=lambda r: (status[r][0], r))
    parts = [f"rank {r}: {status[r][1]}" for r in order]
    alive = [r for r, code in exits.items() if code is None and r not in status]
    if alive:  # a rank that raised is reported as raised, even while it is still exiting
        parts.append(f"ranks still running (killed): {alive}")
    return f"{what} failed: " + "; ".join(parts)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory? the OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"killed by {name} (signal {-code}){hint}"
    return f"exited with code {code}"


def _is_peer_error(text: str) -> bool:
    return any(mark in text for mark in PEER_ERROR_MARKS)


def _details(errors: dict[int, str]) -> str:
    return "\n".join(f"--- rank {r} ---\n{errors[r]}" for r in sorted(errors))


def _alive(procs) -> list[int]:
    return [r for r, p in enumerate(procs) if p.is_alive()]


JANITOR = """
import shutil, signal, sys, tempfile
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)  # the parent's end (its pipe's EOF) ends the janitor
path = tempfile.mkdtemp(prefix=sys.argv[1])
print(path, flush=True)
sys.stdin.buffer.read()
shutil.rmtree(path, ignore_errors=True)
"""
"""The janitor of ``tied_temp_dir``: makes the folder, then removes it when its stdin closes."""


@contextmanager
def tied_temp_dir(prefix: str) -> Iterator[str]:
    """A temporary folder, removed when the block ends and also when this process dies without
    cleanup: a janitor process makes it, waits for the end of this process's pipe (closed by
    the kernel however this process ends) and removes it."""
    janitor = subprocess.Popen(
        [sys.executable, "-c", JANITOR, prefix],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    path = janitor.stdout.readline().strip()
    try:
        if not path:
            raise RuntimeError(f"could not make a temporary folder (janitor exit {janitor.wait()})")
        yield path
    finally:
        if path:
            shutil.rmtree(path, ignore_errors=True)
        janitor.stdin.close()
        janitor.stdout.close()
        janitor.wait()
