"""Bootstrap replicates of a profile's costs from its timed samples."""

from __future__ import annotations

import numpy as np
import pytest

from measure.profile.replicates import block_draw, block_length, cost_replicates
from measure.profile.stats import Spread


def _build(fig):
    return {"costs": {"layer_s": fig["layer_s"].median, "host_s": fig["host_s"].median},
            "notes": ["dropped"]}  # fmt: skip


def test_replicates_redraw_the_kept_samples_only():
    layer = Spread.of([1.0, 2.0, 3.0, 4.0, 5.0])
    host = Spread(0.5, 0.4, 0.6, 9)  # an older figure: quartiles only, kept as it is
    reps = cost_replicates({"layer_s": layer, "host_s": host}, _build, replicates=50, seed=2)
    assert len(reps) == 50 and all(set(r) == {"costs"} for r in reps)
    layers = [r["costs"]["layer_s"] for r in reps]
    assert set(layers) <= {1.0, 2.0, 3.0, 4.0, 5.0}  # a median of 5 redrawn samples
    assert min(layers) < 3.0 < max(layers)
    assert {r["costs"]["host_s"] for r in reps} == {0.5}
    assert reps == cost_replicates({"layer_s": layer, "host_s": host}, _build, replicates=50,
                                   seed=2)  # fmt: skip
    with pytest.raises(ValueError, match="replicates"):
        cost_replicates({"layer_s": layer}, _build, replicates=0)


def test_spread_keeps_its_samples_through_json():
    spread = Spread.of([3.0, 1.0, 2.0])
    assert spread.samples == (3.0, 1.0, 2.0)
    again = Spread.from_dict(spread.to_dict())
    assert again == spread and again.samples == spread.samples
    assert spread.scaled(2.0).samples == (6.0, 2.0, 4.0)
    assert "samples" not in Spread(1.0, 1.0, 1.0, 1).to_dict()


def test_block_draw_takes_runs_of_consecutive_rounds():
    rng = np.random.default_rng(0)
    assert block_length(1) == block_length(2) == block_length(3) == 1  # a draw can differ
    assert block_length(20) == 3 and block_length(27) == 3
    assert block_length(28) == 4 and block_length(100) == 5
    assert block_draw(1, rng).tolist() == [0]
    assert {tuple(block_draw(2, rng)) for _ in range(50)} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for n in (2, 7, 20, 64):
        idx = block_draw(n, rng)
        assert len(idx) == n and idx.min() >= 0 and idx.max() < n
        length = block_length(n)
        for start in range(0, n, length):  # each block steps by one round, wrapping at n
            block = idx[start : start + length]
            assert np.all(np.diff(block) % n == 1)


def test_figures_of_the_same_rounds_are_redrawn_together():
    rounds = np.arange(1.0, 21.0)
    figures = {"layer_s": Spread.of(rounds), "host_s": Spread.of(10 * rounds)}
    for rep in cost_replicates(figures, _build, replicates=40, seed=1):
        assert rep["costs"]["host_s"] == pytest.approx(10 * rep["costs"]["layer_s"])


def test_block_bootstrap_is_wider_than_iid_on_a_machine_with_slow_spells():
    """The machine's speed set per spell of 10 rounds (as on the VM): drawing rounds one at a
    time takes a spell's rounds for independent evidence; blocks keep part of their
    correlation (the rest is the drift factor's: ``measure.profile.drift``)."""
    rng = np.random.default_rng(0)
    samples = np.repeat(rng.normal(60.0, 5.0, size=8), 10) + rng.normal(0, 1.0, size=80)
    reps = cost_replicates({"layer_s": Spread.of(samples), "host_s": Spread(0.1, 0.1, 0.1, 1)},
                           _build, replicates=400, seed=4)  # fmt: skip
    block_sd = np.std([r["costs"]["layer_s"] for r in reps])
    iid_sd = np.std([np.median(rng.choice(samples, size=80)) for _ in range(400)])
    assert block_sd > 1.5 * iid_sd


def test_scale_multiplies_each_replicate():
    figures = {"layer_s": Spread.of([2.0, 2.0, 2.0]), "host_s": Spread(0.5, 0.4, 0.6, 9)}
    reps = cost_replicates(figures, _build, replicates=3, scale=[1.0, 1.5, 0.5])
    assert [r["costs"]["layer_s"] for r in reps] == [2.0, 3.0, 1.0]
    assert [r["costs"]["host_s"] for r in reps] == [0.5, 0.75, 0.25]
    for bad in ([1.0, 1.0], [1.0, 0.0, 1.0], [1.0, float("nan"), 1.0]):
        with pytest.raises(ValueError, match="scale"):
            cost_replicates(figures, _build, replicates=3, scale=bad)


def test_a_replicate_keeps_its_drawn_samples_for_means():
    """A pair factor is a ratio of means (``pair_slowdowns``): each replicate's figure carries
    the rounds it drew (scaled), so its mean is that draw's, not the profile's."""
    both, alone = Spread.of([1.0, 1.0, 1.0, 4.0, 1.0]), Spread.of([1.0, 2.0, 3.0, 4.0, 5.0])

    def build(fig):
        assert all(len(s.samples) == 5 for s in fig.values())
        return {"costs": {"layer_s": fig["both"].mean / fig["alone"].mean,
                          "host_s": fig["both"].mean}}  # fmt: skip

    reps = cost_replicates({"both": both, "alone": alone}, build, replicates=60, seed=3,
                           scale=np.full(60, 2.0))  # fmt: skip
    means = {r["costs"]["host_s"] for r in reps}
    assert means <= {2.0 * m for m in (1.0, 1.6, 2.2, 2.8, 3.4, 4.0)}  # 0-5 draws of the 4.0
    assert len(means) > 2
    ratios = [r["costs"]["layer_s"] for r in reps]
    assert min(ratios) < both.mean / alone.mean < max(ratios)
    assert Spread(0.5, 0.4, 0.6, 9).mean == 0.5 and Spread.of([1.0, 2.0, 6.0]).mean == 3.0
