"""Process inspection for the tests that kill a parent and look for what it left (Linux /proc)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

PROC = Path("/proc")
needs_proc = pytest.mark.skipif(not (PROC / "self" / "stat").exists(), reason="needs /proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state is [0], ppid [1]), or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...)."""
    parents = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def running(pids) -> list[int]:
    """The processes of ``pids`` that still run (zombies have ended)."""
    return [p for p in pids if (fields := _stat(p)) and fields[0] != "Z"]


def cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS if fields else 0.0


def wait_gone(pids, timeout_s: float) -> float:
    """Seconds until every process of ``pids`` has ended (at most ``timeout_s``)."""
    start = time.monotonic()
    while running(pids) and time.monotonic() - start < timeout_s:
        time.sleep(0.02)
    return time.monotonic() - start


def kill_all(pids) -> None:
    """End what this test started and left running (by pid, nothing else)."""
    for pid in running(pids):
        os.kill(pid, signal.SIGKILL)
