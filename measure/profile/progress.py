"""The progress bar of long measurements: tqdm on stderr, only when stdout is a terminal."""

from __future__ import annotations

import sys


def progress_bar(total: int, *, enabled: bool = True, desc: str | None = None):
    """A tqdm bar when ``enabled`` and stdout is a terminal, else None (logs stay clean)."""
    if not (enabled and sys.stdout.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False)
