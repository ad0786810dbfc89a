"""Bootstrap replicates of a profile's costs from its timed samples."""

from __future__ import annotations

import pytest

from measure.profile.replicates import cost_replicates
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
