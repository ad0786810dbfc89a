"""Tie a child process's life to its parent's, so no child outlives a killed parent.

A parent killed by SIGKILL or the OOM killer runs no cleanup; its children would idle (or
compute) on. ``tie_to_parent`` arms two mechanisms in the child:

* Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills the child when its parent
  dies, even while it is blocked or computing inside C code (the kernel's "parent" is the
  thread that spawned it: spawn and wait in one thread);
* everywhere: a daemon watchdog thread that waits on the parent's sentinel pipe (closed by the
  kernel when the parent exits; multiprocessing children have one) or else polls the parent
  pid, and ends the process when the parent is gone.

Used by ``sim.pool``'s workers and ``measure``'s ranks (``measure.lifeline``). Standard library
only: a child ties itself before it imports anything heavy.
"""

from __future__ import annotations

import ctypes
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
"""Exit status of a child that ends because its parent died."""


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


def _watchdog(parent_pid: int) -> None:
    parent = multiprocessing.parent_process()
    if parent is not None and parent.pid == parent_pid and parent.sentinel is not None:
        wait([parent.sentinel])  # readable (EOF) once the parent has exited
    else:
        while parent_alive(parent_pid):
            time.sleep(POLL_S)
    os._exit(ORPHAN_EXIT)
