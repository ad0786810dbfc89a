"""Safe use of a run directory by several processes: locks, and files replaced atomically.

``fcntl.flock`` on a lock file inside the directory: the kernel drops the lock when its holder
exits, however it exits, so a crashed run never leaves a stale lock behind. An unsharded run
holds the directory lock exclusively; the ranks of a sharded run each hold it shared (they work
on disjoint prompts) plus an exclusive lock on their own shard. Where ``fcntl`` is missing
(Windows) nothing is locked. Files are written under unique temporary names and renamed into
place (``replacing``), so readers see an old or a new file, never a part of one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover (Windows)
    fcntl = None

RUN_LOCK = ".run.lock"
"""Lock file of a run (exclusive for one process, shared by the ranks of a sharded run)."""
MERGE_LOCK = ".merge.lock"
"""Lock file of the merge that writes records and traces (always exclusive, always waited for)."""


class DirectoryLockedError(BlockingIOError):
    """Another process holds the lock of a run directory."""


@contextmanager
def dir_lock(
    directory: str | Path,
    name: str = RUN_LOCK,
    *,
    shared: bool = False,
    wait: bool = False,
) -> Iterator[Path]:
    """Hold the lock file ``directory/name`` for the ``with`` block; yields its path.

    A lock another process holds raises DirectoryLockedError at once (naming the holder's pid
    when it wrote one), or is waited for with ``wait``. The directory is created if needed.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if fcntl is not None:
            _acquire(fd, path, shared=shared, wait=wait)
            os.ftruncate(fd, 0)  # the exclusive holder's pid, for another process's message
            if not shared:
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def run_lock(directory: str | Path, shard: str | None = None, *, wait: bool = False):
    """The locks a run holds for its whole length: ``RUN_LOCK``, exclusive for an unsharded run;
    for a shard of a sharded run, ``RUN_LOCK`` shared with the other ranks plus the exclusive
    ``parts/.<shard>.lock``, so no two processes ever measure the same prompts."""
    with dir_lock(directory, RUN_LOCK, shared=shard is not None, wait=wait):
        if shard is None:
            yield
            return
        with dir_lock(Path(directory) / "parts", f".{shard}.lock", wait=wait):
            yield


def _acquire(fd: int, path: Path, *, shared: bool, wait: bool) -> None:
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if wait:
        fcntl.flock(fd, mode)
        return
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(path)
        raise DirectoryLockedError(
            f"{path.parent} is in use by another process{holder} (it holds {path.name}); wait "
            "for it to finish, or pass --wait-lock (wait_lock=True) to wait for it"
        ) from None


def _holder(path: Path) -> str:
    try:
        pid = path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """``with replacing(path) as tmp``: write ``tmp``, a new file with a unique name beside
    ``path``; on success it is renamed over ``path`` (atomic on POSIX), on failure removed."""
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
