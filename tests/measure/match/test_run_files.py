"""A run directory is used by one run at a time; merges never collide; readers see whole files.

Issue 10: two ``--resume`` processes on one directory both exited 0 having done the work twice
(54 part lines for 30 prompts), concurrent merges collided on fixed temporary names
(FileNotFoundError), and readers could see a half-written traces.jsonl.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from measure.match.run_files import DirectoryLockedError, dir_lock, replacing, run_lock

ROOT = Path(__file__).resolve().parents[3]


def test_second_exclusive_lock_fails_at_once_naming_the_holder(tmp_path):
    with dir_lock(tmp_path / "run"):
        start = time.monotonic()
        with pytest.raises(DirectoryLockedError) as info:
            with dir_lock(tmp_path / "run"):
                pass
        assert time.monotonic() - start < 5  # at once, with room for a loaded machine
    message = str(info.value)
    assert "in use by another process" in message and "--wait-lock" in message
    assert "(pid " in message
    with dir_lock(tmp_path / "run"):  # released when the holder leaves
        pass


def test_shards_share_the_run_lock_but_not_a_shard(tmp_path):
    with run_lock(tmp_path, shard="part-00000-of-00002"):
        with run_lock(tmp_path, shard="part-00001-of-00002"):
            with pytest.raises(DirectoryLockedError):
                with run_lock(tmp_path, shard="part-00001-of-00002"):
                    pass
            with pytest.raises(DirectoryLockedError):  # an unsharded run
                with run_lock(tmp_path):
                    pass


def test_wait_lock_waits_for_the_holder(tmp_path):
    held, order = threading.Event(), []

    def holder():
        with dir_lock(tmp_path):
            held.set()
            time.sleep(0.3)
            order.append("holder done")

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait()
    with dir_lock(tmp_path, wait=True):
        order.append("waiter in")
    thread.join()
    assert order == ["holder done", "waiter in"]


def test_replacing_is_atomic_and_unique(tmp_path):
    target = tmp_path / "traces.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with replacing(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer died")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces.jsonl"]  # no debris
    with replacing(target) as a, replacing(target) as b:
        assert a != b and a.parent == b.parent == tmp_path
        a.write_text("a\n")
        b.write_text("b\n")
    assert target.read_text() == "a\n"  # the outer one renamed last


# ---- run_match_rate: merges and concurrent runs --------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 6-prompt run of a tiny Llama (one_thread: tiny models)."""
    torch = pytest.importorskip("torch")
    from measure.match.records import run_match_rate
    from tests.measure.tiny_models import char_tokenizer, tiny_model

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("merge")
    prompts = write_prompts(root / "prompts.jsonl", 6)
    out = root / "run"
    run_match_rate(
        tiny_model("llama"), prompts, out, tokenizer=char_tokenizer(), layers=[1, 2], ks=(1, 3),
        max_new_tokens=4, progress=False,
    )  # fmt: skip
    return out


def write_prompts(path: Path, n: int) -> Path:
    lines = [json.dumps({"id": f"q{i}", "prompt": f"prompt {i} " + "y" * i}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_concurrent_merges_never_collide_and_readers_see_whole_files(finished_run):
    from measure.match.config import make_config
    from measure.match.records import merge_parts
    from tests.measure.tiny_models import NUM_LAYERS

    config = make_config(NUM_LAYERS, layers=[1, 2], ks=(1, 3), max_new_tokens=4)
    ids = [f"q{i}" for i in range(6)]
    traces = finished_run / "traces.jsonl"
    expected = traces.read_text()
    errors, stop = [], threading.Event()

    def merge():
        try:
            for _ in range(8):
                merge_parts(finished_run, ids, config)
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    def read():
        while not stop.is_set():
            text = traces.read_text()
            if text != expected:
                errors.append(AssertionError(f"a reader saw {len(text)} of {len(expected)} chars"))

    threads = [threading.Thread(target=merge) for _ in range(3)]
    reader = threading.Thread(target=read)
    reader.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    reader.join()
    assert errors == []
    assert traces.read_text() == expected
    leftovers = [p.name for p in finished_run.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


N_PROMPTS = 12
GATED_RUN = """
import sys, time
from pathlib import Path
import torch
from measure.match.records import run_match_rate
torch.set_num_threads(1)
model, prompts, out, gate = sys.argv[1:5]

def pause_after_first(pid):
    while not Path(gate).exists():  # hold the run open, mid-way, until the test says go
        time.sleep(0.05)

run_match_rate(model, prompts, out, layers=[1], ks=[1], max_new_tokens=3, resume=True,
               verify=False, progress=False, on_prompt_done=pause_after_first)
"""


def _blocked_on_a_lock(pid: int) -> bool:
    """True once ``pid`` waits for a flock (Linux ``/proc/locks`` lists waiters with ``->``)."""
    locks = Path("/proc/locks")
    if not locks.exists():  # pragma: no cover (not Linux)
        return True
    return any(
        line.split()[1] == "->" and str(pid) in line.split()
        for line in locks.read_text().splitlines()
    )


def test_concurrent_resume_in_two_processes_does_no_work_twice(tmp_path, capsys):
    """A run is held open mid-way in another process; ``ppd measure match-rate --resume`` fails
    at once with a clear error; with ``wait_lock`` a resume waits, then finds every prompt done:
    each prompt is measured once."""
    pytest.importorskip("torch")
    from measure.match.records import part_files, read_records, run_match_rate
    from ppdmodel.cli import main
    from tests.measure.tiny_models import save_tiny_model_dir

    model = save_tiny_model_dir(tmp_path / "model")
    prompts = write_prompts(tmp_path / "prompts.jsonl", N_PROMPTS)
    out, gate = tmp_path / "run", tmp_path / "go"
    first = subprocess.Popen(
        [sys.executable, "-c", GATED_RUN, str(model), str(prompts), str(out), str(gate)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiter, results = None, []
    try:
        deadline = time.monotonic() + 120
        while not (part_files(out) and part_files(out)[0].read_text().count("\n") >= 1):
            assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
            time.sleep(0.1)
        resume = ["measure", "match-rate", "--model", str(model), "--prompts", str(prompts)]
        resume += ["--layers", "1", "--ks", "1", "--max-new-tokens", "3", "--no-verify"]
        with pytest.raises(SystemExit) as info:
            main([*resume, "--out", str(out), "--resume", "--no-progress"])
        err = capsys.readouterr().err
        assert info.value.code == 2 and "Traceback" not in err
        assert "is in use by another process" in err and "--wait-lock" in err

        def resume_and_wait():
            options = dict(layers=[1], ks=[1], max_new_tokens=3, verify=False, progress=False)
            results.append(run_match_rate(model, prompts, out, resume=True, wait_lock=True,
                                          on_prompt_done=results.append, **options))  # fmt: skip

        waiter = threading.Thread(target=resume_and_wait)
        waiter.start()
        while not _blocked_on_a_lock(os.getpid()):
            assert waiter.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        gate.touch()
        assert first.wait(timeout=120) == 0, first.stderr.read()
        waiter.join(timeout=120)
    finally:
        gate.touch()
        if first.poll() is None:
            first.kill()
    (result,) = results  # the waiting resume measured nothing: on_prompt_done never ran
    assert result.n_done == N_PROMPTS and result.records is not None
    lines = [line for path in part_files(out) for line in path.read_text().splitlines()]
    assert len(lines) == N_PROMPTS  # each prompt measured once
    measured = sorted(json.loads(line)["prompt"] for line in lines)
    assert measured == sorted(f"q{i}" for i in range(N_PROMPTS))
    assert read_records(out / "records.csv")["prompt"].nunique() == N_PROMPTS
