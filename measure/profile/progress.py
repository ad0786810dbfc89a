"""Progress of long measurements on stderr: a tqdm bar on a terminal, else plain lines with ETA."""

from __future__ import annotations

import sys
import time


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
            elapsed = self.clock() - self.start
            left = elapsed / self.done * (self.total - self.done)
            print(f"{self.prefix}: {self.done}/{self.total} done ({label}), {elapsed:.1f} s "
                  f"elapsed, about {left:.0f} s left", file=self.stream or sys.stderr,
                  flush=True)  # fmt: skip

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
