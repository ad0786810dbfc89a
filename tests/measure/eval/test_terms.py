"""Which term is off: blocks timed inside runs against the profile's prices."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from measure.eval.repeat import PPDConfig
from measure.eval.terms import largest_gap, term_check
from ppdmodel.cost_profile import parse_cost_profile
from tests.ppdmodel.profiles import minimal_profile

D, D_BAR = 4, 3
PROFILE = parse_cost_profile(
    minimal_profile(d=D, layer_s=0.01, embedding_s=0.0, early_head_s=0.02, final_head_s=0.02,
                    host_s=0.001, candidate_layer_s_by_k={"1": 0.0121, "3": 0.02})
)  # fmt: skip


def _ev(process, token, a, b, kind, start, end):
    return dict(process=process, token=token, layer_start=a, layer_end=b, kind=kind,
                start_s=start, end_s=end)  # fmt: skip


def _run():
    """Two passes of the single backend, k = 1: main's suffix ran 1.5x its price."""
    events = [
        _ev(0, 1, 0, 3, "layers", 0.000, 0.030),  # fresh prefix: 3 layers
        _ev(0, 1, 3, 3, "head", 0.030, 0.050),  # early head on main
        _ev(1, 2, 0, 1, "layers", 0.050, 0.0621),  # candidate batch: 1 layer at k = 1 (+ e)
        _ev(0, 1, 3, 4, "layers", 0.0621, 0.0771),  # suffix: 15 ms for a 10 ms layer
        _ev(0, 1, 4, 4, "head", 0.0771, 0.0971),  # final head
        _ev(0, 2, 1, 1, "handoff", 0.0971, 0.0981),
        _ev(0, 2, 1, 3, "layers", 0.0991, 0.1191),  # resumed prefix: layers [1, 3)
        _ev(0, 2, 3, 4, "layers", 0.1191, 0.1341),
        _ev(0, 2, 4, 4, "head", 0.1341, 0.1541),
    ]
    trace = SimpleNamespace(events=events)
    return SimpleNamespace(trace=trace, tokens=[5, 6], token_times_s=[0.0981, 0.1551], m=[1])


def test_blocks_are_priced_and_the_suffix_gap_is_found():
    table = term_check(PROFILE, PPDConfig(D_BAR, 1), [_run()]).set_index("block")
    assert table.loc["main prefix, fresh", "price_s"] == pytest.approx(0.03)
    assert table.loc["main prefix, resumed", "price_s"] == pytest.approx(0.02)
    assert table.loc["main suffix", "ratio"] == pytest.approx(1.5)
    assert table.loc["main suffix", "gap_s_per_token"] == pytest.approx(0.005)  # 2 x 5 ms / 2
    assert table.loc["candidate batch", "count"] == 1
    # host: each pass's time minus main's blocks and (single backend) the batch it ran
    host = table.loc["host per token"]
    assert host["count"] == 2 and host["measured_median_s"] == pytest.approx(0.001, abs=1e-9)
    assert largest_gap(table.reset_index()).startswith("main suffix: +5 ms/token (measured x1.50")
