"""Which term is off: blocks timed inside runs against the profile's prices."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from measure.eval.repeat import PPDConfig
from measure.eval.terms import block_prices, largest_gap, term_check
from measure.profile.dispatch import dispatch_delays
from ppdmodel.cost_profile import parse_cost_profile
from ppdmodel.passes import pass_times
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


def test_dispatch_delays_pair_each_split_with_the_next_candidates():
    """delta per pass: main's split (its prefix under "candidates", its early head under
    "main") to the last rank's first block for the next token; a pass whose candidates never
    started is left out, and one sequence's tokens are never paired with another's."""
    on_candidates = [
        _ev(0, 1, 0, 3, "layers", 0.000, 0.010),  # fresh prefix: the split at 10 ms
        _ev(1, 2, 3, 3, "head", 0.012, 0.020),  # rank 1's early head for token 2
        _ev(2, 2, 3, 3, "head", 0.013, 0.021),  # rank 2 starts last: 3 ms after the split
        _ev(0, 2, 1, 3, "layers", 0.040, 0.050),  # resumed prefix [e, d_bar)
        _ev(1, 3, 3, 3, "head", 0.0505, 0.058),
        _ev(0, 3, 0, 3, "layers", 0.070, 0.080),  # no candidates for token 4: left out
        _ev(0, 3, 3, 3, "head", 0.080, 0.090),  # main's own head is not a split here
    ]
    got = dispatch_delays(on_candidates, d=D, d_bar=D_BAR, early_head="candidates")
    assert got.keys() == {1, 2}
    assert got[1] == pytest.approx(0.003) and got[2] == pytest.approx(0.0005)
    on_main = [
        _ev(0, 1, 0, 3, "layers", 0.000, 0.010),
        _ev(0, 1, 3, 3, "head", 0.010, 0.020),  # the split: main's early head ends
        _ev(1, 2, 0, 1, "abandoned", 0.021, 0.030),  # a rejected batch starts all the same
        _ev(0, 2, 3, 3, "head", 0.050, 0.060),
        _ev(1, 3, 0, 1, "layers", 0.0604, 0.070),
        _ev(1, 3, 3, 3, "head", 0.0601, 0.0602),  # not the batch
    ]
    got = dispatch_delays(on_main, d=D, d_bar=D_BAR, early_head="main")
    assert got == pytest.approx({1: 0.001, 2: 0.0004})
    with pytest.raises(ValueError, match="early_head"):
        dispatch_delays(on_main, d=D, d_bar=D_BAR, early_head="side")


def _dist_profile():
    data = minimal_profile(d=D, layer_s=0.01, early_head_s=0.02, final_head_s=0.02)
    dist = {**data["backends"]["single"]["costs"], "candidate_dispatch_s": 0.0004,
            "hidden_dispatch_s": 0.0015, "shared_device_slowdown": 1.1}  # fmt: skip
    data["backends"]["dist"] = {"costs": dist, "batch_startup_s": 0.001,
                                "per_candidate_layer_s": {"hidden_dispatch_s": 0.0001}}  # fmt: skip
    return parse_cost_profile(data)


@pytest.mark.parametrize("early_head", ["main", "candidates"])
def test_term_check_prices_the_candidate_start_where_a_message_starts_the_batch(early_head):
    """dist: the dispatch less the start-up the batch block holds (candidates: 1.5 ms + one
    candidate layer's 0.1 ms - 1 ms; main: 0.4 ms, no start-up); a serial backend has none."""
    profile = _dist_profile()
    split = (0, 1, 0, 3, "layers") if early_head == "candidates" else (0, 1, 3, 3, "head")
    first = (1, 2, 3, 3, "head") if early_head == "candidates" else (1, 2, 0, 1, "layers")
    runs = [SimpleNamespace(trace=SimpleNamespace(events=[_ev(*split, 0.0, 0.01),
                                                          _ev(*first, 0.012 + i, 0.02 + i)]),
                            tokens=[5, 6], token_times_s=[0.03, 0.06], m=[0])
            for i in (0.0, 0.002)]  # fmt: skip
    config = PPDConfig(D_BAR, 3, backend="dist", early_head=early_head)
    row = term_check(profile, config, runs).set_index("block").loc["candidate start"]
    assert row["count"] == 2 and row["measured_median_s"] == pytest.approx(0.003)
    price = 0.0006 if early_head == "candidates" else 0.0004
    assert row["price_s"] == pytest.approx(price)
    assert block_prices(profile, config)["candidate start"] == pytest.approx(price)
    serial = PPDConfig(D_BAR, 3, early_head=early_head)
    assert "candidate start" not in block_prices(parse_cost_profile(
        minimal_profile(d=D, serial=True)), serial)  # fmt: skip


def test_largest_gap_leaves_out_the_candidate_start():
    """A delay, not work: it reaches the measurement through the hand-off's wait."""
    table = pd.DataFrame([
        dict(block="candidate start", gap_s_per_token=0.004, ratio=5.0),
        dict(block="hand-off (with wait)", gap_s_per_token=0.002, ratio=3.0),
    ])  # fmt: skip
    assert largest_gap(table).startswith("hand-off (with wait): +2 ms/token (measured x3.00")


@pytest.mark.parametrize("early_head_s", [0.02, 0.05])
def test_the_hand_off_is_priced_with_the_wait_the_prediction_prices(early_head_s):
    """The hand-off row's event holds main's wait for the batch: priced as eta + w, with w the
    closed form's (> 0 once the rank's early head and batch outlast main's suffix and head)."""
    data = _dist_profile().data
    data["backends"]["dist"]["costs"]["early_head_s"] = early_head_s
    profile = parse_cost_profile(data)
    config = PPDConfig(D_BAR, 3, backend="dist", early_head="candidates")
    costs = profile.costs("dist", d_bar=D_BAR, k=3, early_head="candidates")
    wait = pass_times(d=D, d_bar=D_BAR, k=3, costs=costs, early_head="candidates").wait_s
    assert (wait > 0) == (early_head_s > 0.03)
    price = block_prices(profile, config)["hand-off (with wait)"]
    assert price == pytest.approx(costs.handoff_s + wait)
    serial = parse_cost_profile(minimal_profile(d=D, serial=True, early_head_s=early_head_s))
    on_single = serial.costs("single", d_bar=D_BAR, k=3, early_head="candidates")
    assert block_prices(serial, PPDConfig(D_BAR, 3, early_head="candidates"))[
        "hand-off (with wait)"] == pytest.approx(on_single.handoff_s)  # fmt: skip
