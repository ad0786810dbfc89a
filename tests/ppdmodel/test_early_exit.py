"""Self-speculative early exit on a realized trace: exact step counts and their seconds."""

import math

import numpy as np
import pytest

from ppdmodel import DecodeCosts
from ppdmodel.alternatives import early_exit_seconds_per_token, early_exit_step_seconds
from ppdmodel.early_exit import EarlyExitCosts, early_exit_steps, early_exit_trace_seconds


def _decode_token_by_token(matches, g, limit):
    """A literal decoder: draft one token at a time against the trace, verify, append."""
    out, drafted, produced = [], [], []
    while len(out) < len(matches):
        room = limit - len(out) - 1
        draft = []
        while len(draft) < min(g, room):
            pos = len(out) + len(draft)
            draft.append(pos < len(matches) and bool(matches[pos]))  # True: the draft is right
        kept = 0
        for right in draft:
            if not right:
                break
            kept += 1
        new = min(kept + 1, len(matches) - len(out))
        out.extend([None] * new)
        drafted.append(len(draft))
        produced.append(new)
    return tuple(drafted), tuple(produced)


def test_hand_made_trace():
    m = [1, 1, 0, 1, 1, 1, 0, 0]
    s = early_exit_steps(m, g=2, limit=8)
    # n=0: draft 2 (1,1) -> 3 tokens; n=3: draft 2 (1,1) -> 3; n=6: draft min(2, 8-6-1)=1 (0)
    # -> 1; n=7: draft 0 -> 1
    assert s.drafted == (2, 2, 1, 0)
    assert s.accepted == (2, 2, 0, 0)
    assert s.produced == (3, 3, 1, 1)
    assert s.tokens == 8 and s.steps == 4 and s.draft_forwards == 5


def test_no_match_and_all_match():
    assert early_exit_steps([0] * 5, g=3).produced == (1,) * 5
    s = early_exit_steps([1] * 9, g=3, limit=9)  # 4 + 4, then one step with no room to draft
    assert s.produced == (4, 4, 1) and s.drafted == (3, 3, 0)


def test_trace_ended_by_eos_before_the_limit():
    s = early_exit_steps([1, 1, 1], g=4, limit=10)  # drafts 4, all 3 match: cut at ell = 3
    assert s.drafted == (4,) and s.accepted == (3,) and s.produced == (3,)


@pytest.mark.parametrize("g", [1, 2, 5])
def test_steps_equal_a_token_by_token_decoder(g):
    rng = np.random.default_rng(g)
    for _ in range(50):
        ell = int(rng.integers(1, 40))
        m = rng.random(ell) < 0.6
        limit = ell + int(rng.integers(0, 3))
        s = early_exit_steps(m, g=g, limit=limit)
        assert (s.drafted, s.produced) == _decode_token_by_token(m, g, limit)
        assert s.tokens == ell


def _costs():
    return DecodeCosts(
        layer_s=1.0,
        candidate_extra_row_layer_s=0.5,
        embedding_s=0.25,
        early_head_s=3.0,
        final_head_s=4.0,
        host_s=0.125,
    )


def test_step_costs_by_hand():
    c = EarlyExitCosts(d=10, exit_layer=4, costs=_costs())
    assert c.draft_s(1) == 0.25 + 4 * 1.0 + 3.0 + 0.125
    assert c.draft_s(2) == 0.25 + 4 * 1.5 + 3.0 + 0.125
    assert c.verify_s(3) == 0.25 + 10 * 2.0 + 4.0 + 0.125
    draft, verify = c.step_s(3)  # one 2-row draft forward, two 1-row, verify 4 rows
    assert draft == c.draft_s(2) + 2 * c.draft_s(1) and verify == c.verify_s(4)
    assert c.step_s(0) == (0.0, c.verify_s(1))


def test_measured_host_time_replaces_tau():
    c = EarlyExitCosts(d=10, exit_layer=4, costs=_costs(), host_draft_s=0.5, host_step_s=2.0)
    plain = EarlyExitCosts(d=10, exit_layer=4, costs=_costs())
    assert c.draft_s(1) == plain.draft_s(1) - 0.125 + 0.5
    assert c.verify_s(2) == plain.verify_s(2) - 0.125 + 2.0
    assert (c.draft_host_s, c.step_host_s) == (0.5, 2.0)
    assert (plain.draft_host_s, plain.step_host_s) == (0.125, 0.125)


def test_trace_seconds_by_hand_and_skipping_the_first_step():
    c = EarlyExitCosts(d=10, exit_layer=4, costs=_costs())
    m = [1, 1, 0, 1, 1, 1, 0, 0]  # drafted (2, 2, 1, 0) at g = 2, limit 8
    draft, verify, steps = early_exit_trace_seconds(m, g=2, costs=c, limit=8)
    assert draft == pytest.approx(2 * (c.draft_s(2) + c.draft_s(1)) + c.draft_s(2))
    assert verify == pytest.approx(2 * c.verify_s(3) + c.verify_s(2) + c.verify_s(1))
    d1, v1, _ = early_exit_trace_seconds(m, g=2, costs=c, limit=8, skip_steps=1)
    assert d1 == pytest.approx(draft - c.step_s(2)[0])
    assert v1 == pytest.approx(verify - c.verify_s(3))
    assert steps.drafted == (2, 2, 1, 0)


def test_long_iid_trace_agrees_with_the_closed_form():
    """With the closed form's step costs (1-row draft forwards, its g + 1 row verify), the
    per-trace accounting on a long i.i.d. trace converges to early_exit_seconds_per_token."""
    costs = DecodeCosts(layer_s=1.0, embedding_s=0.25, early_head_s=3.0, final_head_s=4.0)
    a, g, ell = 0.7, 3, 200_000
    m = np.random.default_rng(3).random(ell) < a
    c = EarlyExitCosts(d=10, exit_layer=4, costs=costs, first_draft_rows=1)
    draft, verify, steps = early_exit_trace_seconds(m, g=g, costs=c)
    closed = early_exit_seconds_per_token(d=10, exit_layer=4, g=g, a=a, costs=costs)
    assert (draft + verify) / steps.tokens == pytest.approx(float(closed), rel=0.01)
    d_step, v_step = early_exit_step_seconds(d=10, exit_layer=4, g=g, costs=costs)
    assert c.step_s(g) == pytest.approx((g * d_step, v_step))  # same step costs
    expected_steps = ell / ((1 - a ** (g + 1)) / (1 - a))
    assert abs(steps.steps - expected_steps) < 5 * math.sqrt(expected_steps)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: early_exit_steps([], g=1), "matches"),
        (lambda: early_exit_steps([1, 2], g=1), "matches"),
        (lambda: early_exit_steps([1], g=0), "g"),
        (lambda: early_exit_steps([1, 1], g=1, limit=1), "limit"),
        (lambda: EarlyExitCosts(d=4, exit_layer=4, costs=_costs()), "exit_layer"),
        (
            lambda: EarlyExitCosts(d=4, exit_layer=2, costs=_costs(), first_draft_rows=0),
            "first_draft_rows",
        ),  # fmt: skip
        (
            lambda: early_exit_trace_seconds(
                [1], g=1, costs=EarlyExitCosts(d=4, exit_layer=2, costs=_costs()), skip_steps=-1
            ),
            "skip_steps",
        ),  # fmt: skip
    ],
)
def test_bad_inputs_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()
