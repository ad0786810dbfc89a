"""Each judged run paired with the sentinel windows around it (``measure.eval.paired``)."""

from __future__ import annotations

import math

import pytest

from measure.eval.paired import MIN_WINDOWS, SentinelTimeline, paired_rel_err


def _timeline(*events) -> SentinelTimeline:
    t = SentinelTimeline(threads=1)
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


def test_level_and_weight_come_from_the_windows():
    slow_spells = [1.0] * 4 + [1.5] * 4 + [1.0] * 4  # the machine's spells: persist
    t = _timeline(*slow_spells)
    assert t.level_s == pytest.approx(1.0)
    assert 0.4 < t.weight <= 1.0
    alternating = _timeline(*[1.0, 1.5] * 6)  # each window off on its own: no persistence
    assert alternating.weight == 0.0
    assert _timeline(*[1.0] * 8).weight == 0.0  # windows that do not vary
    few = _timeline(*slow_spells[: MIN_WINDOWS - 1])
    assert few.weight == 0.0 and few.level_s == pytest.approx(1.0)
    assert _timeline("a").level_s is None


def _err(predicted, runs, reference, level=1.0, weight=1.0):
    return paired_rel_err(predicted, runs, reference, level_s=level, weight=weight)


def _runs(totals, speeds):
    """One piece per run."""
    return [[(t, s)] for t, s in zip(totals, speeds, strict=True)]


def test_paired_error_moves_each_piece_to_the_machine_it_met():
    # predicted 10 s on a machine whose sentinel read 1.0; the runs met a machine 1.5x and 2x
    # slower and took 15 s and 20 s: paired in full, the prediction is exact (unpaired: -43 %)
    assert _err(10.0, _runs([15.0, 20.0], [1.5, 2.0]), 1.0) == pytest.approx(0.0)
    got = _err(10.0, _runs([10.0, 11.0, 12.0], [1.0, 1.1, 1.0]), 1.0)
    assert got == pytest.approx(0.0)
    assert _err(10.0, _runs([8.0] * 3, [2.0] * 3), 2.0, level=2.0) == pytest.approx(0.25)
    # a run's pieces are moved one by one: 4 s at speed 2 and 6 s at speed 1 -> 2 + 6 = 8 s
    assert _err(8.0, [[(4.0, 2.0), (6.0, 1.0)]], 1.0) == pytest.approx(0.0)


def test_the_level_moves_in_full_and_a_pieces_own_deviation_by_the_weight():
    # the runs' level is 2x the profile's reference: moved in full; a piece read 4x (2x the
    # level) is moved by 2^weight on top
    runs = [[(40.0, 4.0)]]
    for weight in (0.0, 0.5, 1.0):
        moved = 40.0 * (1.0 / 2.0) * (2.0 / 4.0) ** weight
        assert _err(10.0, runs, 1.0, level=2.0, weight=weight) == pytest.approx(10.0 / moved - 1)


@pytest.mark.parametrize("totals", [[8.0], [8.0, 12.0], [7.0, 9.0, 14.0, 8.5]])
def test_with_every_speed_at_the_reference_it_is_the_plain_error(totals):
    median = sorted(totals)[len(totals) // 2] if len(totals) % 2 else (
        sum(sorted(totals)[len(totals) // 2 - 1 : len(totals) // 2 + 1]) / 2)  # fmt: skip
    runs = [[(t / 2, 0.05), (t / 2, 0.05)] for t in totals]  # two prompts each
    assert _err(10.0, runs, 0.05, level=0.05) == pytest.approx(10.0 / median - 1)


@pytest.mark.parametrize(
    "args", [(10.0, [[(1.0, 1.0)]], None), (10.0, [[(1.0, 1.0), (2.0, None)]], 1.0)]
)
def test_paired_error_is_none_without_a_reference_or_a_window(args):
    assert _err(*args) is None


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((10.0, [], 1.0), {}, "runs must hold at least one run, each of at least one piece"),
        ((10.0, [[]], 1.0), {}, "runs must hold at least one run, each of at least one piece"),
        ((0.0, [[(1.0, 1.0)]], 1.0), {}, "predicted_s must be finite and > 0"),
        ((float("nan"), [[(1.0, 1.0)]], 1.0), {}, "predicted_s must be finite and > 0"),
        ((10.0, [[(0.0, 1.0)]], 1.0), {}, "every piece's seconds must be finite and > 0"),
        ((10.0, [[(1.0, -1.0)]], 1.0), {}, "every speed must be finite and > 0"),
        ((10.0, [[(1.0, 1.0)]], 0.0), {}, "reference_s must be finite and > 0"),
        ((10.0, [[(1.0, 1.0)]], float("inf")), {}, "reference_s must be finite and > 0"),
        ((10.0, [[(1.0, 1.0)]], 1.0), {"level": 0.0}, "level_s must be finite and > 0"),
        ((10.0, [[(1.0, 1.0)]], 1.0), {"weight": 1.5}, r"weight must be in \[0, 1\]"),
        ((10.0, [[(1.0, 1.0)]], 1.0), {"weight": float("nan")}, r"weight must be in \[0, 1\]"),
    ],
)
def test_paired_error_refuses_bad_input(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        _err(*args, **kwargs)
