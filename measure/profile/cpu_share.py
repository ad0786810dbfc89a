"""How busy other work and this process tree kept the CPUs over a span, measured on Linux
(``LoadMonitor``'s reading).

Over a span, the busy time of the CPUs this process may run on (``/proc/stat``: user, nice,
system, irq, softirq and steal, per CPU) less the CPU time of this process and all its
descendants (``/proc/PID/stat``: their own time, all threads, and that of the children they
reaped), over the wall time, is the number of those CPUs other work kept busy. Hypervisor
steal counts as other work: another guest held the vCPU. Kernel work our run causes (interrupts,
the loopback traffic of ``dist`` ranks) lands in other work too, a small upward bias. A
descendant re-parented to init during the span (its parent died without waiting for it)
leaves the tree and counts as other work.

Why not the load average alone: the 1-minute load average lags by about a minute and counts
this toolkit's own processes as other work. On the 2-vCPU machine a ``dist`` validation read
1.3-1.7 right after its own profile (its two ranks) and was flagged LOADED on a quiet machine
(2026-11-27). The load average remains the estimate where ``/proc`` is not there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)
"""Columns of a ``/proc/stat`` cpu line counted busy: user, nice, system, irq, softirq, steal
(guest time is already inside user and nice; idle and iowait are not busy)."""


@dataclass(frozen=True)
class CpuSnapshot:
    """Cumulative CPU seconds at one moment."""

    wall_s: float
    busy_s: float
    """Busy seconds of the CPUs this process may run on, all processes."""
    own_s: float
    """CPU seconds of this process and its descendants."""


def busy_ticks(stat_text: str, cpus: Iterable[int]) -> int:
    """Busy clock ticks of ``cpus`` from the text of ``/proc/stat``."""
    wanted = {f"cpu{i}" for i in cpus}
    total = 0
    for line in stat_text.splitlines():
        name, *values = line.split() or [""]
        if name in wanted:
            try:
                total += sum(int(values[c]) for c in BUSY_COLUMNS if c < len(values))
            except ValueError:
                raise ValueError(f"stat_text: not a /proc/stat cpu line: {line[:80]!r}") from None
    return total


def _parse_process(stat_text: str) -> tuple[int, int]:
    """(parent pid, ticks of the process and its reaped children) from ``/proc/PID/stat``."""
    try:
        fields = stat_text[stat_text.rindex(")") + 2 :].split()  # after "pid (comm) "
        ppid = int(fields[1])
        utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    except (ValueError, IndexError):
        raise ValueError(f"process_stats: not a /proc/PID/stat line: {stat_text[:80]!r}") from None
    return ppid, utime + stime + cutime + cstime


def tree_ticks(root: int, process_stats: Mapping[int, str]) -> int:
    """Clock ticks of ``root`` and every descendant among ``process_stats`` (pid -> the text
    of its ``/proc/PID/stat``)."""
    return _tree(root, process_stats)[0]


def _tree(root: int, process_stats: Mapping[int, str]) -> tuple[int, list[int]]:
    """(ticks, pids) of ``root`` and its descendants."""
    parsed = {pid: _parse_process(text) for pid, text in process_stats.items()}
    tree = _descendants(root, {pid: ppid for pid, (ppid, _) in parsed.items()})
    return sum(parsed[pid][1] for pid in tree), tree


def _process_stats() -> tuple[dict[int, str], bool]:
    """Every process's ``/proc/PID/stat`` text, and whether the listing held still (no listed
    process ended before it was read)."""
    stats, still = {}, True
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text()
            except OSError:  # the process ended while listed
                still = False
    return stats, still


def _own_ticks(root: int, attempts: int = 3) -> int:
    """Ticks of ``root``'s tree, read again when a process ended during the reading: a child
    reaped between the reads of its stat and its parent's would be counted twice or not at
    all."""
    for _ in range(attempts):
        stats, still = _process_stats()
        ticks, tree = _tree(root, stats)
        if still and all((PROC / str(pid)).exists() for pid in tree):
            break
    return ticks


def _descendants(root: int, parents: Mapping[int, int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in parents:
            found.append(pid)
            todo.extend(children.get(pid, ()))
    return found


def snapshot() -> CpuSnapshot | None:
    """The machine's and this process tree's CPU seconds now; None without Linux's ``/proc``."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        cpus = os.sched_getaffinity(0)
        busy = busy_ticks((PROC / "stat").read_text(), cpus)
        own = _own_ticks(os.getpid())
    except (AttributeError, OSError, ValueError, IndexError):
        return None
    return CpuSnapshot(time.monotonic(), busy / tick, own / tick)


MIN_SPAN_S = 1.0
"""Shortest span measured: the counts are in ticks of 10 ms, about 0.05 s of error on 2 CPUs."""


@dataclass(frozen=True)
class CpuShares:
    """CPUs kept busy on average over a span."""

    others: float
    """By other work (>= 0)."""
    own: float
    """By this process and its descendants."""

    def describe(self) -> str:
        """'other work 0.05 CPUs beside ours 1.40'."""
        return f"other work {self.others:.2f} CPUs beside ours {self.own:.2f}"


def shares_between(start: CpuSnapshot | None, end: CpuSnapshot | None) -> CpuShares | None:
    """CPUs other work and this process tree kept busy from ``start`` to ``end``, or None when
    either is missing or the span is shorter than ``MIN_SPAN_S``."""
    if start is None or end is None or end.wall_s - start.wall_s < MIN_SPAN_S:
        return None
    span = end.wall_s - start.wall_s
    own = (end.own_s - start.own_s) / span
    other = (end.busy_s - start.busy_s) / span - own
    return CpuShares(others=max(other, 0.0), own=own)
