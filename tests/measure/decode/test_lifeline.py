"""Distributed runs never outlive their parent; a dead rank is named with its signal.

Issue 10: after ``kill -9`` of a ``ppd run --backend dist`` parent both ranks and the
multiprocessing resource tracker idled for minutes; a killed rank was reported as the surviving
rank's "Connection reset by peer" inside a traceback.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim.lifeline import parent_alive, set_parent_death_signal
from tests.procs import (
    cmdline,
    cpu_seconds,
    descendants,
    kill_all,
    needs_proc,
    running,
    wait_gone,
)

ROOT = Path(__file__).resolve().parents[3]


HANGING_DIST_RUN = """
from measure.decode.launch import ppd_dist_many
from tests.measure.tiny_models import tiny_model
# rank 1 hangs at its first candidates; rank 0 waits for it (timeouts far away)
ppd_dist_many(tiny_model("gpt2", seed=4), [[1, 2, 3]], d_bar=2, k=1, max_new_tokens=8,
              timeout_s=600, startup_s=600, fail="hang", fail_rank=1, link_probe=False)
"""

IDLE_GROUP = """
import time
from measure.decode.rank_group import RankGroup
from tests.measure.tiny_models import tiny_model
# a group between tasks (ppd validate's ranks while it times greedy): loaded, waiting
with RankGroup(tiny_model("gpt2", seed=4), timeout_s=600, startup_s=600, link_probe=False) as g:
    g.run([[1, 2, 3]], d_bar=2, k=1, max_new_tokens=4)
    time.sleep(600)
"""

TIED_CHILD = """
import os, sys, time
from sim import lifeline
if sys.argv[2] == "watchdog-only":  # the portable path alone, without PR_SET_PDEATHSIG
    lifeline.set_parent_death_signal = lambda *args: False
lifeline.tie_to_parent(int(sys.argv[1]))
print("tied", flush=True)
time.sleep(120)
"""

MIDDLE = """
import subprocess, sys, os, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_parent_death_signal_is_available_on_linux():
    assert set_parent_death_signal() is sys.platform.startswith("linux")
    assert parent_alive(os.getppid()) and not parent_alive(os.getppid() + 10**6)


@needs_proc
def test_a_child_tied_to_a_dead_parent_exits_at_once():
    result = subprocess.run(
        [sys.executable, "-c", TIED_CHILD, "1", "both"],  # pid 1 is not its parent: "dead"
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1 and "tied" not in result.stdout


@needs_proc
@pytest.mark.parametrize("mechanism", ["both", "watchdog-only"])
def test_tied_child_dies_with_its_killed_parent(mechanism):
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, TIED_CHILD, mechanism],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(middle.stdout.readline())
    try:
        time.sleep(1.5)  # let it arm the death signal and its watchdog
        middle.kill()
        middle.wait()
        assert wait_gone([child], 10) < 10
    finally:
        kill_all([child])


PROBE_RUN = """
from measure.profile.ranks import RankProbe, probe_ranks
# the profiler's two gloo ranks ping-pong (far more rounds than the test waits for)
probe_ranks(RankProbe(sizes=(4, 4096), repeats=10**9, timeout_s=600))
"""


def _ranks_in(parent: int, state: str, timeout_s: float) -> list[int]:
    """The parent's descendants once its two ranks exist (``start-up``: they are importing
    torch), have gone idle (``idle``: hanging, as in issue 10) or have computed for a while
    (``busy``: 2 s of CPU each)."""
    deadline, last = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        kids = descendants(parent)
        ranks = [k for k in kids if "spawn_main" in cmdline(k)]
        if len(ranks) == 2 and state == "start-up":
            return kids
        if len(ranks) == 2:
            cpu = {k: cpu_seconds(k) for k in ranks}
            if state == "busy" and all(c > 2.0 for c in cpu.values()):
                return kids
            if (
                state == "idle"
                and last.keys() == cpu.keys()
                and all(cpu[p] > 1.0 and cpu[p] - last[p] < 0.02 for p in cpu)
            ):
                return kids
            last = cpu
        time.sleep(1.0)
    raise AssertionError(f"the ranks never reached {state}")


def _kill_parent_and_find_leftovers(script: str, state: str, tmp_path, sig=signal.SIGKILL):
    """Send ``sig`` to the parent running ``script`` once its ranks are in ``state``: every
    process below it (ranks, resource tracker, janitor) ends in < 10 s, and no temporary folder
    is left in its TMPDIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.DEVNULL,  # an orphan holding a pipe would block this test
        stderr=subprocess.DEVNULL,
    )
    kids = []
    try:
        kids = _ranks_in(parent.pid, state, timeout_s=240)
        assert len(kids) >= 3  # 2 ranks + the resource tracker (+ a janitor)
        parent.send_signal(sig)
        parent.wait()
        seconds = wait_gone(kids, 10.0)
        left = [cmdline(p)[-60:] for p in running(kids)]
        assert not left, f"still running {seconds:.1f} s after the parent died: {left}"
        left = sorted(p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_"))
        assert not left, f"left in TMPDIR: {left}"  # (torch's own cache folder aside)
    finally:
        kill_all(kids)
        if parent.poll() is None:
            parent.kill()


@needs_proc
@pytest.mark.parametrize("state", ["start-up", "idle"])
def test_killing_the_parent_of_a_dist_run_leaves_nothing_behind(state, tmp_path):
    """SIGKILL the parent of a 2-rank run: ranks and resource tracker end in < 10 s, and the
    temporary folder holding the saved model is removed (issue 25)."""
    _kill_parent_and_find_leftovers(HANGING_DIST_RUN, state, tmp_path)


@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killing_the_parent_of_a_rank_group_between_tasks_leaves_nothing_behind(sig, tmp_path):
    """A group's ranks wait for the parent's next task on a queue, with no dist timeout
    running: they too end with the parent, and the saved model goes (issue 24)."""
    _kill_parent_and_find_leftovers(IDLE_GROUP, "idle", tmp_path, sig)


@needs_proc
@pytest.mark.parametrize("state", ["start-up", "busy"])
def test_killing_the_parent_of_the_profilers_rank_probe_leaves_no_process_behind(state, tmp_path):
    """The profiler's two gloo ranks are tied to their parent as the decoder's are (issue 20)."""
    _kill_parent_and_find_leftovers(PROBE_RUN, state, tmp_path)


def test_a_tied_temp_dir_goes_with_its_block_and_with_a_killed_process(tmp_path):
    from measure.lifeline import tied_temp_dir

    with tied_temp_dir("ppd-x-") as path:
        assert Path(path).is_dir() and Path(path).name.startswith("ppd-x-")
        (Path(path) / "f").write_text("x")
    assert not Path(path).exists()
    code = (
        "import sys, time\n"
        "from measure.lifeline import tied_temp_dir\n"
        "with tied_temp_dir('ppd-x-') as path:\n"
        "    print(path, flush=True)\n"
        "    time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        text=True,
    )
    path = Path(proc.stdout.readline().strip())
    assert path.is_dir() and path.parent == tmp_path
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not path.exists()


def test_ranks_are_tied_before_anything_heavy_is_imported():
    """A spawned rank unpickles plain data and lifeline (no torch) before it is tied."""
    import pickle

    from measure.decode.dist import DistJob, DistTask

    job = DistJob([DistTask("model-dir", [[1, 2]], d_bar=2, k=1, max_new_tokens=3)])
    assert b"measure" not in pickle.dumps(job.to_dict())
    assert DistJob.from_dict(job.to_dict()) == job
    code = (
        "import os, sys\n"
        "from measure.lifeline import run_tied\n"
        "run_tied(os.getppid(), 'builtins:print', 'torch' in sys.modules, 'tied')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout == "False tied\n"


def test_a_killed_rank_is_named_with_its_signal_in_one_line():
    torch = pytest.importorskip("torch")
    from measure.decode.launch import ppd_dist_many
    from measure.lifeline import DistRunError
    from tests.measure.tiny_models import tiny_model

    torch.set_num_threads(1)
    with pytest.raises(DistRunError) as info:
        ppd_dist_many(
            tiny_model("gpt2", seed=4), [[1, 2, 3]], d_bar=2, k=1, max_new_tokens=6,
            timeout_s=30, startup_s=120, fail="kill", fail_rank=1, link_probe=False,
        )  # fmt: skip
    message = str(info.value)
    assert message.startswith("PPD dist run failed: rank 1: killed by SIGKILL (signal 9)")
    assert "\n" not in message
    assert "out of memory?" in message  # the OOM killer sends SIGKILL


def test_failure_message_puts_the_culprit_first():
    from measure.lifeline import failure_message

    peer = "RuntimeError: [gloo] Connection reset by peer\nTraceback ..."
    own = "ValueError: injected\nTraceback ..."
    assert failure_message({0: peer}, {0: 1, 1: -9}) == (
        "PPD dist run failed: rank 1: killed by SIGKILL (signal 9) (out of memory? the OOM "
        "killer sends SIGKILL); rank 0: RuntimeError: [gloo] Connection reset by peer"
    )
    assert failure_message({0: peer, 1: own}, {0: 1, 1: 1}).startswith(
        "PPD dist run failed: rank 1: ValueError: injected; rank 0"
    )
    assert failure_message({}, {0: None, 1: 3}) == (
        "PPD dist run failed: rank 1: exited with code 3; ranks still running (killed): [0]"
    )
    assert "killed by SIGTERM (signal 15)" in failure_message({}, {0: -15, 1: None})


def test_a_rank_that_raised_is_not_also_reported_as_killed():
    """Issue 25: a rank that raised, still exiting when the report is made, was also listed
    among the ranks "still running (killed)"."""
    from measure.lifeline import failure_message

    own = "ValueError: injected\nTraceback ..."
    assert failure_message({0: own}, {0: None, 1: None}) == (
        "PPD dist run failed: rank 0: ValueError: injected; ranks still running (killed): [1]"
    )
    assert failure_message({0: own, 1: own}, {0: None, 1: 1}, "rank probe") == (
        "rank probe failed: rank 0: ValueError: injected; rank 1: ValueError: injected"
    )
