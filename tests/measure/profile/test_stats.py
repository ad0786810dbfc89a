"""Robust timing helpers: spreads, noise flags, load readings, interleaved rounds."""

from __future__ import annotations

import pytest

from measure.profile import stats
from measure.profile.stats import LoadReading, Spread, noisy_warnings, run_interleaved, spreads


def test_spread_quartiles_and_noise_flag():
    s = Spread.of([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.median, s.q1, s.q3, s.n) == (3.0, 2.0, 4.0, 5)
    assert s.iqr == 2.0 and s.rel_iqr == pytest.approx(2 / 3) and s.noisy
    quiet = Spread.of([1.0, 1.01, 1.02, 0.99])
    assert not quiet.noisy and "NOISY" not in quiet.describe()
    assert "NOISY" in s.describe() and s.describe("s", 1).startswith("3 s (IQR 2 s")
    assert Spread.from_dict(s.to_dict()) == s
    assert s.scaled(0.5) == Spread(1.5, 1.0, 2.0, 5)
    assert Spread.of([0.0, 0.0]).rel_iqr == 0.0


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_spread_refuses_empty_or_non_finite_samples(bad):
    with pytest.raises(ValueError, match="samples must be one or more finite numbers"):
        Spread.of(bad)


def test_load_reading_discounts_the_measurements_own_threads():
    assert not LoadReading(0.2, 1.1, cpus=2, own_threads=1).loaded  # others ~0.2
    assert LoadReading(1.5, 1.6, cpus=2, own_threads=1).loaded  # others 1.5 > 0.5 * 2
    assert LoadReading(0.0, 4.0, cpus=2, own_threads=2).loaded  # load rose by 2 beyond ours
    reading = LoadReading(3.0, 3.0, cpus=2)
    assert "LOADED" in reading.describe() and reading.to_dict()["loaded"] is True


def test_load_monitor_reads_the_load_average(monkeypatch):
    values = iter([0.1, 2.5])
    monkeypatch.setattr(stats, "load_average", lambda: next(values))
    monkeypatch.setattr(stats, "cpu_count", lambda: 2)
    monkeypatch.setattr(stats.cpu_share, "snapshot", lambda: None)  # no /proc: the estimate
    reading = stats.LoadMonitor(own_threads=1).reading()
    assert (reading.before, reading.after, reading.cpus) == (0.1, 2.5, 2) and reading.loaded
    assert reading.shares is None


def test_run_interleaved_rotates_the_order_and_drops_warmup():
    calls = []

    def task(name, value):
        def run():
            calls.append(name)
            return value

        return run

    tasks = {"a": task("a", 1.0), "b": task("b", {"b1": 2.0, "b2": 3.0}), "c": task("c", 4.0)}
    samples = run_interleaved(tasks, repeats=3, warmup=1)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert samples == {"a": [1.0] * 3, "b1": [2.0] * 3, "b2": [3.0] * 3, "c": [4.0] * 3}
    counter = iter(range(100))
    means = run_interleaved({"x": lambda: float(next(counter))}, repeats=2, warmup=0, calls=2)
    assert means == {"x": [0.5, 2.5]}  # each sample: the mean of two back-to-back calls
    assert spreads(means)["x"].median == 1.5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"repeats": 0}, "repeats must be an integer >= 1"),
        ({"repeats": 2, "warmup": -1}, "warmup must be an integer >= 0"),
        ({"repeats": 2, "calls": 0}, "calls must be an integer >= 1"),
    ],
)
def test_run_interleaved_refuses_bad_counts(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_interleaved({"a": lambda: 1.0}, **kwargs)
    with pytest.raises(ValueError, match="at least one timed task"):
        run_interleaved({}, repeats=1)


def test_noisy_warnings_name_the_figure():
    figures = {"layer_s": Spread(1.0, 0.8, 1.3, 9), "head_s": Spread(1.0, 0.99, 1.01, 9)}
    (warning,) = noisy_warnings(figures, "single")
    assert warning == "single: layer_s is noisy: IQR/median = 50 % > 10 %"
