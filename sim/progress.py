"""Progress of long runs on stderr: steps done, time elapsed and time left, a line at a time.

One line format for every long run of the toolkit (``progress_line``: ``ppd plan: confirming:
3/12 done, 41.0 s elapsed, about 123 s left``; ``measure.profile.progress`` prints it per
finished step where no terminal shows a bar). The time left is the mean step so far times the
steps left.

``Progress`` throttles the lines for runs of many short steps (a ``ppd plan`` confirmation
runs up to an hour): a line when a tenth more of the steps is done, or ``max_interval_s``
passed, but never within ``min_interval_s`` of the last one; a run that ends within
``min_interval_s`` prints nothing. Lines go to a stream, not a terminal bar, so a log or a
pipe shows them too. The clock is injectable (tests drive it by hand).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from numbers import Real
from typing import TextIO

from ppdmodel.validation import as_int, as_real, check_instance

STEP_FRACTION = 0.1
"""A line once this fraction more of the steps is done (then at most every min_interval_s)."""


def progress_line(label: str, done: int, total: int, elapsed_s: float, note: str = "") -> str:
    """``'<label>: 3/12 done (<note>), 4.1 s elapsed, about 12 s left'`` (no note: no
    brackets); the time left is ``elapsed_s / done * (total - done)`` (none done: not known).
    ValueError naming an argument out of range (0 <= done <= total, elapsed_s >= 0)."""
    check_instance("label", label, str)
    check_instance("note", note, str)
    total = as_int("total", total, minimum=0)
    done = as_int("done", done, minimum=0)
    if done > total:
        raise ValueError(f"done must be <= total = {total}, got {done}")
    elapsed_s = as_real("elapsed_s", elapsed_s)
    what = f" ({note})" if note else ""
    left = "time left not known yet"
    if done:
        left = f"about {elapsed_s / done * (total - done):.0f} s left"
    return f"{label}: {done}/{total} done{what}, {elapsed_s:.1f} s elapsed, {left}"


class Progress:
    """``total`` steps labelled ``label`` (``"ppd plan: confirming"``): ``advance(n)`` as
    steps end, ``close()`` at the end (module docstring for when a line is printed). A
    context manager: leaving the block closes it.

    stream: where lines go (None: ``sys.stderr`` when a line is printed); clock: seconds,
    monotonic (``time.monotonic``); enabled: False prints nothing.
    """

    def __init__(
        self, total: int, label: str, *, stream: TextIO | None = None,
        min_interval_s: float = 10.0, max_interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic, enabled: bool = True,
    ) -> None:  # fmt: skip
        self.total = as_int("total", total, minimum=0)
        check_instance("label", label, str)
        if not callable(clock):
            raise ValueError(f"clock must be a function returning seconds, got {clock!r:.40}")
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise ValueError(f"stream must be a text stream or None, got {stream!r:.40}")
        self.label, self.stream, self.clock = label, stream, clock
        self.min_interval_s = as_real("min_interval_s", min_interval_s)
        self.max_interval_s = as_real("max_interval_s", max_interval_s)
        if self.max_interval_s < self.min_interval_s:
            raise ValueError(f"max_interval_s must be >= min_interval_s = {self.min_interval_s:g},"
                             f" got {self.max_interval_s:g}")  # fmt: skip
        check_instance("enabled", enabled, bool)
        self.enabled = enabled
        self.done = 0
        self.lines = 0
        """Lines printed so far."""
        self.start = self._last_s = self._now()
        self._last_done = 0

    def advance(self, n: int = 1, note: str = "") -> None:
        """``n`` more steps ended (``note``: what they were, shown in brackets)."""
        self.done = min(self.total, self.done + as_int("n", n, minimum=0))
        now = self._now()
        if self.done >= self.total:
            self.close()
            return
        since = now - self._last_s
        if since < self.min_interval_s:
            return
        stepped = self.done - self._last_done >= STEP_FRACTION * self.total
        if stepped or since >= self.max_interval_s:
            self._print(now, note)

    def close(self) -> None:
        """The last line (all done, or how far the run got) when any line was printed before
        or the run outlasted ``min_interval_s``; then nothing more."""
        if not self.enabled:
            return
        now = self._now()
        if self.lines or now - self.start >= self.min_interval_s:
            self._print(now)
        self.enabled = False

    def _now(self) -> float:
        """The clock's reading, checked: a finite number of seconds."""
        now = self.clock()
        if isinstance(now, bool) or not isinstance(now, Real) or not math.isfinite(now):
            raise ValueError(f"clock must return finite seconds, got {now!r:.40}")
        return float(now)

    def _print(self, now: float, note: str = "") -> None:
        if not self.enabled:
            return
        line = progress_line(self.label, self.done, self.total, now - self.start, note)
        print(line, file=self.stream or sys.stderr, flush=True)
        self.lines += 1
        self._last_s, self._last_done = now, self.done

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
