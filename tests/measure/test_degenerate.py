"""Degenerate generations: EOS at once and repetition loops are found, counted and warned of."""

from __future__ import annotations

import pytest

from measure.degenerate import (
    DegenerateGenerationWarning,
    ends_at_once,
    is_repetitive,
    summarize,
    tail_copies,
    warn_degenerate,
)

EOS = 2


def test_ends_at_once():
    assert ends_at_once([EOS], [EOS]) and ends_at_once([EOS, 5], [EOS])
    assert not ends_at_once([5, EOS], [EOS]) and not ends_at_once([], [EOS])


def test_tail_copies():
    assert tail_copies([1, 2, 1, 2, 1, 2], 2) == 3
    assert tail_copies([9, 1, 2, 1, 2], 2) == 2
    assert tail_copies([1, 2, 3], 1) == 1
    with pytest.raises(ValueError, match="n must be in"):
        tail_copies([1, 2], 3)


@pytest.mark.parametrize(
    ("tokens", "loops"),
    [
        ([7] * 12, True),  # 12 equal tokens
        ([7] * 11, False),  # span 11 < 12
        ([3, 4] * 6, True),  # 2-gram x 6
        ([3, 4] * 5, False),
        ([5, 6, 7, 8] * 3, True),  # 4-gram x 3
        ([5, 6, 7, 8] * 2, False),  # only 2 copies
        ([1, 2, 3, 4, 5, 6] * 3 + [EOS], True),  # trailing EOS ignored
        (list(range(40)), False),
        ([1, 2, 3] * 4 + [9], False),  # the loop does not reach the end
    ],
)
def test_is_repetitive(tokens, loops):
    assert is_repetitive(tokens, [EOS]) is loops


def test_summary_and_warning():
    gens = {"a": [EOS], "b": [1, 2, 3] * 6, "c": [4, 5, 6, 7, EOS], "d": [EOS] * 20}
    summary = summarize(gens, [EOS])
    assert summary.ended_at_once == ("a", "d") and summary.repetition == ("b",)
    assert summary.n_prompts == 4 and summary.n_degenerate == 3
    assert summary.to_dict()["rule"] == {"max_period": 16, "min_repeats": 3, "min_span": 12}
    with pytest.warns(DegenerateGenerationWarning, match="2 of 4 prompts ended at once"):
        warn_degenerate(summary)
    assert summarize({"c": [4, 5, EOS]}, [EOS]).message() is None
