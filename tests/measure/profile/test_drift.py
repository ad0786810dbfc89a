"""The machine's drift between a profile's sentinel windows, and what it does to intervals."""

from __future__ import annotations

import numpy as np
import pytest

from measure.profile.drift import DRIFT_WARN, DriftWatch, MachineDrift, drift_factors


def test_drift_figures_from_the_windows():
    drift = MachineDrift((0.054, 0.072, 0.055), threads=1)
    assert drift.rel_range == pytest.approx(0.072 / 0.054 - 1)
    assert drift.log_sd == pytest.approx(np.std(np.log([0.054, 0.072, 0.055]), ddof=1))
    assert "54-72 ms over 3 windows at 1 thread(s) (33.3 %" in drift.describe()
    assert "moved 33 % while profiling" in drift.warning()
    assert MachineDrift((0.05,), threads=1).log_sd == 0 == MachineDrift((), threads=1).rel_range
    calm = MachineDrift((0.050, 0.050 * (1 + DRIFT_WARN) - 1e-9), threads=2)
    assert calm.warning() is None
    assert MachineDrift.from_dict(drift.to_dict()) == drift


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"windows_s": [0.1]},
        {"threads": 1},
        {"windows_s": [0.1, -1.0], "threads": 1},
        {"windows_s": ["x"], "threads": 1},
        {"windows_s": [0.1, float("nan")], "threads": 1},
    ],
)
def test_a_missing_or_malformed_drift_is_none(data):
    assert MachineDrift.from_dict(data) is None


def test_drift_factors_are_lognormal_with_the_windows_spread():
    drift = MachineDrift((0.054, 0.072, 0.055, 0.060), threads=1)
    f = drift_factors(drift, 20000, seed=3)
    assert np.std(np.log(f)) == pytest.approx(drift.log_sd, rel=0.03)
    assert np.median(f) == pytest.approx(1.0, abs=0.01)
    assert np.array_equal(f, drift_factors(drift, 20000, seed=3))  # every backend: the same
    assert np.array_equal(drift_factors(None, 5), np.ones(5))
    assert np.array_equal(drift_factors(MachineDrift((0.05,), 1), 3), np.ones(3))
    with pytest.raises(ValueError, match="replicates"):
        drift_factors(drift, 0)


def test_a_floor_widens_a_quiet_profile_and_leaves_a_moving_one():
    quiet = MachineDrift((0.0530, 0.0535, 0.0532), threads=1)  # log-sd about 0.5 %
    floored = quiet.with_floor(0.10)
    assert floored.applied_log_sd == 0.10 and quiet.applied_log_sd == quiet.log_sd
    f = drift_factors(floored, 20000, seed=3)
    assert np.std(np.log(f)) == pytest.approx(0.10, rel=0.03)
    assert "the intervals carry the machine's floor, 10.0 %" in floored.describe()
    assert MachineDrift.from_dict(floored.to_dict()) == floored  # recorded in the profile
    assert floored.to_dict()["applied_log_sd"] == 0.10
    moving = MachineDrift((0.054, 0.072, 0.055), threads=1).with_floor(0.10)
    assert moving.applied_log_sd == moving.log_sd > 0.10 and "floor" not in moving.describe()
    assert np.array_equal(drift_factors(moving, 50), drift_factors(moving.with_floor(0), 50))
    for bad in (-0.1, 1.0, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match=r"the drift floor must be a log-sd in \[0, 1\)"):
            quiet.with_floor(bad)
    malformed = {**quiet.to_dict(), "floor_log_sd": "x"}  # an edited profile: its windows only
    assert MachineDrift.from_dict(malformed).floor_log_sd == 0.0


def test_drift_watch_times_windows_at_its_threads():
    torch = pytest.importorskip("torch")
    from tests.measure.tiny_models import tiny_model

    before = torch.get_num_threads()
    watch = DriftWatch(tiny_model("llama", seed=1), context_tokens=8, threads=1, steps=2)
    assert watch.window() > 0 and watch.window() > 0
    assert watch.drift().windows_s == tuple(watch.windows) and watch.drift().threads == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="steps"):
        DriftWatch(None, context_tokens=8, threads=1, steps=0)
