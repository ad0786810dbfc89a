"""A rank entry for ``RankGroup`` that logs each rank's start and model load to a file, so a
test can count spawns and loads across the process boundary (a monkeypatch does not survive
spawn; the environment does)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

LOG_ENV = "PPD_TEST_RANK_LOG"
"""Environment variable naming the log file (inherited by the spawned ranks)."""
ENTRY = "tests.measure.decode.counting_ranks:counting_entry"
"""The entry to put in ``measure.decode.rank_group.GROUP_ENTRY``."""


def counting_entry(rank: int, job: dict, progress):
    """``measure.decode.launch._group_entry``, logging "spawn" now and "load" per model load."""
    from measure.decode import launch

    real = launch.load_rank_model

    def counted(model_dir, job, device):
        _log("load", rank)
        return real(model_dir, job, device)

    launch.load_rank_model = counted
    _log("spawn", rank)
    return launch._group_entry(rank, job, progress)


def _log(what: str, rank: int) -> None:
    with open(os.environ[LOG_ENV], "a", encoding="utf-8") as f:
        f.write(f"{what} {rank}\n")


def counted(path: Path) -> Counter:
    """(event, rank) -> count, from the log (empty if nothing was logged)."""
    if not path.exists():
        return Counter()
    lines = path.read_text(encoding="utf-8").split()
    return Counter((what, int(rank)) for what, rank in zip(lines[::2], lines[1::2], strict=True))


def count_ranks(monkeypatch, tmp_path: Path) -> Path:
    """Route every ``RankGroup`` of the test through ``counting_entry``; the log's path."""
    from measure.decode import rank_group

    log = tmp_path / "ranks.log"
    monkeypatch.setenv(LOG_ENV, str(log))
    monkeypatch.setattr(rank_group, "GROUP_ENTRY", ENTRY)
    return log
