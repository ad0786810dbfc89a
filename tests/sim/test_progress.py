"""Progress lines of long runs (sim/progress.py): throttled, with the time left, on a clock the
test drives."""

from __future__ import annotations

import io

import pytest

from sim.progress import Progress, progress_line


class Clock:
    """A clock the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(steps: list[tuple[float, int]], total: int, **kwargs) -> list[str]:
    """Lines of a Progress over ``steps`` (seconds after the start, steps ended then)."""
    clock, stream = Clock(), io.StringIO()
    progress = Progress(total, "ppd plan: confirming", stream=stream, clock=clock, **kwargs)
    for at, n in steps:
        clock.now = 100.0 + at
        progress.advance(n)
    progress.close()
    return stream.getvalue().splitlines()


def test_the_line_says_done_elapsed_and_left():
    assert progress_line("ppd", 1, 3, 2.0, "round 1/3: greedy") == (
        "ppd: 1/3 done (round 1/3: greedy), 2.0 s elapsed, about 4 s left"
    )
    assert progress_line("x", 0, 4, 12.0) == "x: 0/4 done, 12.0 s elapsed, time left not known yet"


def test_an_hour_of_slow_steps_prints_a_line_a_minute():
    """An hour of 100 equal steps (36 s each): a line at the first step end a minute after the
    last line (every other step), each with the mean step times the steps left; the last."""
    lines = run([(36.0 * (i + 1), 1) for i in range(100)], 100)
    assert len(lines) == 50
    assert lines[0] == "ppd plan: confirming: 2/100 done, 72.0 s elapsed, about 3528 s left"
    assert lines[-1] == "ppd plan: confirming: 100/100 done, 3600.0 s elapsed, about 0 s left"


def test_many_quick_steps_print_a_line_a_tenth_throttled_to_min_interval():
    """10,000 steps in 100 s: a line a tenth (10 s), never one a step."""
    lines = run([(0.01 * (i + 1), 1) for i in range(10_000)], 10_000)
    assert 9 <= len(lines) <= 11
    assert lines[0].startswith("ppd plan: confirming: 1000/10000 done, 10.0 s elapsed")


def test_each_step_of_a_run_of_few_long_steps_prints():
    """Four steps of 15 minutes each: a line as each ends (lines come as steps end)."""
    lines = run([(900.0 * (i + 1), 1) for i in range(4)], 4)
    assert [line.split(",")[0] for line in lines] == [
        f"ppd plan: confirming: {i}/4 done" for i in (1, 2, 3, 4)
    ]


def test_max_interval_prints_without_a_tenth_more():
    """1000 steps, one every 7 s: a tenth is 700 s, so lines come every max_interval_s (60 s,
    the first step at or after it)."""
    lines = run([(7.0 * (i + 1), 1) for i in range(30)], 1000)
    assert [line.split(",")[1].strip() for line in lines[:3]] == [
        "63.0 s elapsed", "126.0 s elapsed", "189.0 s elapsed"
    ]  # fmt: skip
    assert lines[-1].startswith("ppd plan: confirming: 30/1000 done, 210.0 s elapsed")  # closed


def test_a_short_run_prints_nothing():
    assert run([(0.5, 1), (1.0, 1), (2.0, 1)], 3) == []


def test_disabled_prints_nothing_and_close_is_idempotent():
    assert run([(36.0 * (i + 1), 1) for i in range(100)], 100, enabled=False) == []
    clock, stream = Clock(), io.StringIO()
    with Progress(2, "x", stream=stream, clock=clock) as progress:
        clock.now += 30
        progress.advance(2)
        progress.close()
    assert stream.getvalue() == "x: 2/2 done, 30.0 s elapsed, about 0 s left\n"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(total=-1), r"^total must be an integer >= 0"),
        (dict(label=3), r"^label must be a str"),
        (dict(min_interval_s=float("nan")), r"^min_interval_s must be"),
        (dict(min_interval_s=10.0, max_interval_s=5.0), r"^max_interval_s must be >= min_inter"),
        (dict(enabled="yes"), r"^enabled must be a bool"),
        (dict(clock=None), r"^clock must be a function returning seconds"),
        (dict(clock=lambda: float("nan")), r"^clock must return finite seconds"),
        (dict(stream=3), r"^stream must be a text stream or None"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Progress(**{"total": 3, "label": "x", **kwargs})
    with pytest.raises(ValueError, match=r"^n must be an integer >= 0"):
        Progress(3, "x").advance(-1)
    with pytest.raises(ValueError, match=r"^done must be <= total = 3, got 4"):
        progress_line("x", 4, 3, 1.0)
    with pytest.raises(ValueError, match=r"^elapsed_s must be"):
        progress_line("x", 1, 3, -1.0)
