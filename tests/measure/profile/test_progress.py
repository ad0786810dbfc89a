"""Progress off a terminal: one line per finished step with the time elapsed and left."""

from __future__ import annotations

import io

from measure.profile.progress import Progress


def test_lines_with_elapsed_and_time_left_when_not_a_terminal():
    stream, now = io.StringIO(), iter([0.0, 2.0, 5.0, 6.0])
    progress = Progress(3, stream=stream, clock=lambda: next(now))
    for label in ("round 1/3: greedy", "round 1/3: ppd", "round 2/3: greedy"):
        progress.begin(label)
        progress.finish(label)
    progress.close()
    assert stream.getvalue().splitlines() == [
        "ppd: 1/3 done (round 1/3: greedy), 2.0 s elapsed, about 4 s left",
        "ppd: 2/3 done (round 1/3: ppd), 5.0 s elapsed, about 2 s left",
        "ppd: 3/3 done (round 2/3: greedy), 6.0 s elapsed, about 0 s left",
    ]


def test_disabled_progress_says_nothing():
    stream = io.StringIO()
    progress = Progress(2, enabled=False, stream=stream)
    progress.finish("x")
    progress.close()
    assert stream.getvalue() == ""
