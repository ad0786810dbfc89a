"""Progress of long measurements on stderr: a tqdm bar on a terminal, else plain lines with ETA.

The line is ``sim.progress.progress_line``, the one format of every long run's progress
(``ppd plan``'s throttled ``sim.progress.Progress`` prints it too); a measurement prints one per
finished step, each step being seconds to minutes.
"""

from __future__ import annotations

import sys
import time

from sim.progress import progress_line


def progress_bar(total: int, *, enabled: bool = True, desc: str | None = None):
    """A tqdm bar when ``enabled`` and stdout is a terminal, else None (logs stay clean)."""
    if not (enabled and sys.stdout.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, leave=False)


class Progress:
    """Steps of a long run: a bar on a terminal; elsewhere one line per finished step on
    stderr (``ppd: 3/12 done (round 1/3: greedy, prompt 3/3), 4.1 s elapsed, about 12 s
    left``), so a log or a pipe still shows how far a run is and when it should end; nothing
    when disabled.
    The time left is the mean step so far times the steps left."""

    def __init__(self, total: int, *, enabled: bool = True, prefix: str = "ppd", stream=None,
                 clock=time.monotonic):  # fmt: skip
        self.total, self.done, self.prefix = total, 0, prefix
        self.enabled = enabled
        self.stream, self.clock = stream, clock
        self.bar = progress_bar(total, enabled=enabled)
        self.start = clock()

    def begin(self, label: str) -> None:
        """A step starts (shown on the bar)."""
        if self.bar is not None:
            self.bar.set_description(label)

    def finish(self, label: str, steps: int = 1) -> None:
        """``steps`` steps ended (a whole run counts as its prompts): the bar moves on, or a
        line says so with the time left."""
        self.done += steps
        if self.bar is not None:
            self.bar.update(steps)
        elif self.enabled:
            line = progress_line(self.prefix, self.done, self.total, self.clock() - self.start,
                                 label)  # fmt: skip
            print(line, file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
