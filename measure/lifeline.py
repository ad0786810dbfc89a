"""Ranks tied to this process: spawn them, watch them, and leave nothing behind.

One launcher for every group of spawned ranks (the ``dist`` decoder's ``measure.decode.rank_group``;
the profiler's two gloo ranks, ``measure.profile.ranks``):

* ``TiedRanks`` spawns the ranks, each running ``rank_main``, which ties the rank to this
  process (``sim.lifeline.tie_to_parent``: the kernel's parent-death signal and a watchdog)
  before it imports anything heavy (torch takes seconds to import), then runs the target and
  reports progress, its result or its error on a queue; the parent watches the queue and the
  exit codes and raises ``DistRunError``, one line naming the rank that failed first, when a
  rank raises, dies or makes no progress (spawn and wait happen in one thread: the kernel's
  "parent" of a rank is that thread). A served group's ranks stay up after their start and
  answer ``request``s (each watched the same way) until ``close``; ``run_ranks`` is the
  one-shot form: spawn, wait for each rank's result, close;
* ``tied_temp_dir`` is a temporary folder that a janitor process removes when this process
  ends, however it ends (SIGKILL and the OOM killer run no cleanup).
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.util
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
from typing import Protocol

from ppdmodel.cli import ReportedFailure
from sim.lifeline import tie_to_parent

WATCHDOG_GRACE_S = 5.0
"""Seconds the parent waits beyond ``timeout_s`` so a rank's own timeout error arrives first."""
REPORT_GRACE_S = 1.0
"""Seconds the parent collects the other ranks' errors and exit codes after the first failure."""
JOIN_S = 2.0
"""Seconds a finished rank gets to exit before it is killed."""
CLOSE_S = 20.0
"""Seconds the ranks of a served group get to leave their loop and exit before they are killed."""
PEER_ERROR_MARKS = ("Connection closed", "Connection reset", "timed out", "Timed out", "peer")
"""Text of errors a rank raises because *another* rank failed (named after the culprit)."""


class DistRunError(ReportedFailure):
    """A group of ranks failed; the message is one line naming the rank that failed first
    (its exception, exit code or signal), which ``ppd`` prints alone (exit status 1). The ranks'
    tracebacks are in ``details`` and, as the exception's cause, in a traceback (``ppd
    --debug``)."""

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


class RankServer(Protocol):
    """What the target of a served rank returns: it answers the parent's requests until closed."""

    def handle(self, request):
        """Answer one request (plain data in, plain data out)."""

    def close(self) -> None:
        """Release what the rank holds (the parent closes the group)."""


def rank_main(parent_pid: int, target: str, rank: int, args: tuple, queue, inbox=None) -> None:
    """A spawned rank: ``target(rank, *args, progress=)`` tied to the parent; its result or its
    error (then exit 1) goes to ``queue``, as ``progress(i)`` calls do. With an ``inbox`` (a
    served group) the target's ``RankServer`` then answers each request from it, each answer
    going to ``queue``, until a None request closes it."""
    try:
        out = run_tied(
            parent_pid, target, rank, *args, progress=lambda i: queue.put(("progress", rank, i))
        )
        if inbox is None:
            queue.put(("result", rank, out))
            return
        queue.put(("result", rank, None))  # started
        while (request := inbox.get()) is not None:
            queue.put(("result", rank, out.handle(request)))
        out.close()
    except BaseException as exc:  # report every failure, then exit non-zero
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None
    _exit_now(queue)  # a served rank, closed


def _exit_now(queue) -> None:
    """End a closed served rank as multiprocessing ends a forked child: its exit handlers run
    (the queue is flushed, semaphores released), then ``os._exit``, skipping the interpreter's
    teardown (seconds once torch is imported, and nothing left to tear down)."""
    queue.close()
    queue.join_thread()
    multiprocessing.util._exit_function()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class TiedRanks:
    """``world_size`` spawned ranks tied to this process, each running ``target(rank, *args,
    progress=)`` (``"package.module:function"``; ``args`` must unpickle without heavy imports).

    ``wait`` returns each rank's next result; with ``serve=True`` the targets return a
    ``RankServer`` and ``request`` sends every rank one request and returns their answers, as
    often as needed, until ``close``. Each wait is watched (``DistRunError``, ``what`` naming
    the run, if a rank raises, dies or makes no progress for ``timeout_s``); after a failure
    every rank is killed and the group refuses further requests. Create, use and close it in
    one thread (the thread that spawns a rank is its parent for the kernel). Ranks end with
    this process, however it ends.
    """

    def __init__(self, target: str, args: tuple, *, world_size: int, what="PPD dist run",
                 serve=False):  # fmt: skip
        ctx = multiprocessing.get_context("spawn")
        self.what, self.queue = what, ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(world_size)] if serve else None
        self.failed: str | None = None
        self.closed = False
        self.procs = [
            ctx.Process(
                target=rank_main,
                args=(os.getpid(), target, r, args, self.queue, self.inboxes and self.inboxes[r]),
                daemon=True,
            )
            for r in range(world_size)
        ]
        try:
            for proc in self.procs:
                proc.start()
        except BaseException:
            self._kill()
            raise

    def wait(self, *, timeout_s: float, startup_s: float = 0.0) -> list:
        """Each rank's next result, by rank; ``startup_s`` more before the first progress."""
        self._check_usable()
        try:
            return _watch(self.procs, self.queue, timeout_s, startup_s, self.what)
        except BaseException as exc:  # a failed rank, no progress, or this process interrupted
            self.failed = (str(exc).splitlines() or [type(exc).__name__])[0]
            self._kill()
            raise

    def request(self, request, *, timeout_s: float) -> list:
        """Send every rank of a served group ``request``; their answers, by rank."""
        self._check_usable()
        if self.inboxes is None:
            raise RuntimeError(f"{self.what}: its ranks serve no requests (serve=False)")
        for inbox in self.inboxes:
            inbox.put(request)
        return self.wait(timeout_s=timeout_s)

    def close(self) -> None:
        """Stop the ranks (a served group's leave their loop and exit); any rank still running
        after ``CLOSE_S`` (``JOIN_S`` for a one-shot group) is killed. Closing twice is a no-op."""
        if self.closed:
            return
        self.closed = True
        if self.inboxes is not None and self.failed is None:
            for inbox in self.inboxes:
                inbox.put(None)
        deadline = time.monotonic() + (CLOSE_S if self.inboxes is not None else JOIN_S)
        for proc in self.procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        self._kill()

    def _check_usable(self) -> None:
        if self.failed is not None:
            raise DistRunError(
                f"{self.what}: refused, its ranks failed earlier and were killed "
                f"({self.failed}); start new ones"
            )
        if self.closed:
            raise RuntimeError(f"{self.what}: refused, its ranks were closed")

    def _kill(self) -> None:
        """Kill every rank still running; nothing left to send them."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        for inbox in self.inboxes or ():
            inbox.cancel_join_thread()  # a dead rank reads nothing: never block this exit
            inbox.close()


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
    ranks = TiedRanks(target, args, world_size=world_size, what=what)
    try:
        return ranks.wait(timeout_s=timeout_s, startup_s=startup_s)
    finally:
        ranks.close()


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
