"""Tie a spawned rank's life to its parent's, so no rank outlives a killed parent.

A parent killed by SIGKILL or the OOM killer runs no cleanup, and ranks blocked on a peer
would otherwise idle until their process-group timeout. Two mechanisms, both armed by
``tie_to_parent``; a rank starts in ``run_tied``, which ties it before importing anything heavy
(torch takes seconds to import: a parent dying meanwhile must not leave the rank behind):

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills the rank when its parent
  dies, even while the rank is blocked inside C code;
  (the kernel's "parent" is the spawning thread: ``run_job`` spawns and waits in one thread);
* everywhere: a daemon watchdog thread that waits on the parent's sentinel pipe (closed by the
  kernel when the parent exits; multiprocessing children have one) or else polls the parent
  pid, and ends the process when the parent is gone.
"""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import wait

PR_SET_PDEATHSIG = 1
"""prctl option: the signal this process gets when its parent dies (linux/prctl.h)."""
POLL_S = 0.5
"""Seconds between parent checks of the watchdog where no sentinel pipe exists."""
ORPHAN_EXIT = 1
"""Exit status of a rank that ends because its parent died."""


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent dies; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def parent_alive(parent_pid: int) -> bool:
    """True while ``parent_pid`` is still this process's parent (an orphan is re-parented)."""
    return os.getppid() == parent_pid


def tie_to_parent(parent_pid: int) -> None:
    """Make this process end within about a second of ``parent_pid``'s death, however it dies.

    Exits at once if the parent is already gone (it may die before this call runs).
    """
    set_parent_death_signal()
    if not parent_alive(parent_pid):
        os._exit(ORPHAN_EXIT)
    threading.Thread(
        target=_watchdog, args=(parent_pid,), name="ppd-parent-watchdog", daemon=True
    ).start()


def run_tied(parent_pid: int, target: str, *args) -> None:
    """Process target of a spawned rank: tie to ``parent_pid``, then import and call ``target``
    (``"package.module:function"``) with ``args``, which must unpickle without heavy imports."""
    tie_to_parent(parent_pid)
    module, _, name = target.partition(":")
    getattr(importlib.import_module(module), name)(*args)


def _watchdog(parent_pid: int) -> None:
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid == parent_pid and parent.sentinel is not None:
        wait([parent.sentinel])  # readable (EOF) once the parent has exited
    else:
        while parent_alive(parent_pid):
            time.sleep(POLL_S)
    os._exit(ORPHAN_EXIT)
