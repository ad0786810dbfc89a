"""CPUs kept busy by other work, from CPU times (``measure.profile.cpu_share``)."""

import subprocess
import sys

import pytest

from measure.profile import cpu_share, stats
from measure.profile.cpu_share import CpuShares, CpuSnapshot, busy_ticks, shares_between, tree_ticks
from measure.profile.stats import LoadReading

STAT = """cpu  900 10 300 5000 40 7 8 9 0 0
cpu0 100 1 50 2500 20 2 3 4 0 0
cpu1 200 2 60 2500 20 5 6 7 0 0
intr 12345
"""


def _proc(pid: int, ppid: int, ticks: tuple[int, int, int, int], comm: str = "python") -> str:
    """A /proc/PID/stat line with the fields tree_ticks reads (others zero)."""
    utime, stime, cutime, cstime = ticks
    rest = [0] * 9 + [utime, stime, cutime, cstime] + [0] * 30  # pgrp .. cmajflt first
    return f"{pid} ({comm}) S {ppid} " + " ".join(map(str, rest))


def test_busy_ticks_count_busy_columns_of_the_allowed_cpus():
    # user + nice + system + irq + softirq + steal; idle and iowait are not busy
    assert busy_ticks(STAT, [0]) == 100 + 1 + 50 + 2 + 3 + 4
    assert busy_ticks(STAT, [0, 1]) == 160 + 200 + 2 + 60 + 5 + 6 + 7
    assert busy_ticks(STAT, [5]) == 0


def test_tree_ticks_sum_the_process_and_its_descendants_only():
    table = {
        10: _proc(10, 1, (5, 1, 2, 0)),
        11: _proc(11, 10, (30, 3, 0, 0), comm="odd ) name"),  # a ')' inside the name
        12: _proc(12, 11, (7, 0, 0, 1)),
        20: _proc(20, 1, (999, 999, 0, 0)),  # not ours
    }
    assert tree_ticks(10, table) == 8 + 33 + 8
    assert tree_ticks(11, table) == 33 + 8
    assert tree_ticks(99, table) == 0


def test_text_that_is_not_proc_is_refused_by_name():
    with pytest.raises(ValueError, match="process_stats: not a /proc/PID/stat line"):
        tree_ticks(1, {1: "1 (python) S"})  # too few fields
    with pytest.raises(ValueError, match="process_stats"):
        tree_ticks(1, {1: "no parenthesis here"})
    with pytest.raises(ValueError, match="stat_text: not a /proc/stat cpu line"):
        busy_ticks("cpu0 1 x 3 4 5 6 7 8", [0])
    assert busy_ticks("\n" + STAT, [0]) == 160  # blank lines are skipped


def test_shares_are_busy_time_less_our_own_over_the_span():
    start = CpuSnapshot(wall_s=0.0, busy_s=10.0, own_s=4.0)
    end = CpuSnapshot(wall_s=10.0, busy_s=25.0, own_s=14.0)  # ours 10 s, others 5 s
    shares = shares_between(start, end)
    assert shares.others == pytest.approx(0.5) and shares.own == pytest.approx(1.0)
    assert shares_between(start, CpuSnapshot(10.0, 12.0, 14.0)).others == 0.0  # clipped
    assert shares_between(None, end) is None and shares_between(start, None) is None
    assert shares_between(start, CpuSnapshot(0.5, 11.0, 4.5)) is None  # under MIN_SPAN_S


def test_a_measured_share_overrides_the_load_average_estimate():
    # right after the toolkit's own profile the load average still reads its ranks
    quiet = LoadReading(1.75, 1.42, cpus=2, own_threads=1, shares=CpuShares(0.04, 1.8))
    assert not quiet.loaded and quiet.others == 0.04
    text = quiet.describe()
    assert "other work 0.04 CPUs beside ours 1.80" in text and "LOADED" not in text
    assert quiet.to_dict()["others_measured"] == 0.04 and quiet.to_dict()["own_measured"] == 1.8
    assert LoadReading(0.1, 0.2, cpus=2, shares=CpuShares(1.6, 0.3)).loaded


def test_other_work_on_full_cpus_is_loaded_though_it_gets_half():
    """Two threads of ours beside two spinners on 2 CPUs: each side gets about one CPU, which
    is not more than half, yet every step waits for the spinners."""
    assert LoadReading(0.0, 4.0, cpus=2, own_threads=2, shares=CpuShares(1.0, 1.0)).loaded
    assert LoadReading(0.0, 2.0, cpus=2, shares=CpuShares(0.6, 1.3)).loaded
    assert not LoadReading(0.0, 2.0, cpus=2, shares=CpuShares(0.4, 1.5)).loaded  # a little
    assert not LoadReading(0.0, 1.0, cpus=2, shares=CpuShares(0.9, 0.5)).loaded  # CPUs free


def test_load_monitor_uses_the_cpu_times_when_there(monkeypatch):
    snaps = iter([CpuSnapshot(0.0, 0.0, 0.0), CpuSnapshot(10.0, 19.0, 8.0)])
    monkeypatch.setattr(cpu_share, "snapshot", lambda: next(snaps))
    monkeypatch.setattr(stats, "load_average", lambda: 0.0)
    monkeypatch.setattr(stats, "cpu_count", lambda: 2)
    reading = stats.LoadMonitor(own_threads=1).reading()
    assert reading.others == pytest.approx(1.1) and reading.loaded


SPIN = """
import sys, time
while time.process_time() < 0.3:
    pass
print("spun", flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_our_children_count_as_our_own_time_live_or_reaped():
    start = cpu_share.snapshot()
    if start is None:
        pytest.skip("this /proc gives no CPU times")
    child = subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "spun"
        live = cpu_share.snapshot()  # the child is running: counted as a descendant
    finally:
        child.communicate("")
    reaped = cpu_share.snapshot()  # the child was reaped: counted in our children's time
    assert live.own_s - start.own_s >= 0.25
    assert reaped.own_s - start.own_s >= 0.25
    assert reaped.busy_s >= start.busy_s
