"""Each judged run paired with the sentinel windows around it (``measure.eval.paired``)."""

from __future__ import annotations

import math

import pytest

from measure.eval.paired import SentinelTimeline, paired_rel_err


def _timeline(*events) -> SentinelTimeline:
    t = SentinelTimeline()
    for e in events:
        t.window(e) if isinstance(e, float) else t.run(e)
    return t


def test_a_run_takes_the_geometric_mean_of_its_neighbouring_windows():
    t = _timeline(1.0, "a", 4.0, None, 2.0, "a", 0.5, "b")
    assert t.speeds_s("a") == [pytest.approx(2.0), pytest.approx(1.0)]
    assert t.speeds_s(None) == [pytest.approx(math.sqrt(8.0))]  # greedy's key
    assert t.speeds_s("b") == [pytest.approx(0.5)]  # the last run: only the window before it
    assert t.speeds_s("c") == []
    assert _timeline("a", 3.0).speeds_s("a") == [pytest.approx(3.0)]  # only the window after it
    assert _timeline("a").speeds_s("a") == [None]
    assert t.windows_s == [1.0, 4.0, 2.0, 0.5]


def test_unreadable_windows_are_skipped():
    t = _timeline(0.0, float("nan"), float("inf"), -1.0, "a", 2.0)
    assert t.windows_s == [2.0] and t.speeds_s("a") == [pytest.approx(2.0)]


def test_paired_error_moves_each_run_to_the_machine_it_met():
    # predicted 10 s on a machine whose sentinel read 1.0; the runs met a machine 1.5x and 2x
    # slower and took 15 s and 20 s: paired, the prediction is exact (unpaired: -33 / -50 %)
    assert paired_rel_err(10.0, [15.0, 20.0], [1.5, 2.0], 1.0) == pytest.approx(0.0)
    # the median over runs of predicted x speed / seconds, minus 1
    assert paired_rel_err(10.0, [10.0, 10.0, 12.0], [1.0, 1.1, 1.0], 1.0) == pytest.approx(0.0)
    assert paired_rel_err(10.0, [8.0, 8.0, 8.0], [1.0, 1.0, 1.0], 1.0) == pytest.approx(0.25)


@pytest.mark.parametrize(
    "args",
    [
        (10.0, [1.0], [1.0], None),  # no reference
        (10.0, [1.0], [1.0], 0.0),
        (10.0, [1.0], [1.0], float("nan")),
        (10.0, [1.0], [None], 1.0),  # a run without a window
        (10.0, [1.0, 2.0], [1.0], 1.0),  # counts differ
        (10.0, [], [], 1.0),
        (10.0, [0.0], [1.0], 1.0),  # a run that took no time
        (float("nan"), [1.0], [1.0], 1.0),
    ],
)
def test_paired_error_is_none_where_it_cannot_pair(args):
    assert paired_rel_err(*args) is None
