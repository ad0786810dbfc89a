"""A group of dist ranks spawned once runs many tasks: each equals greedy (or seeded sampling),
the ranks start and load the model once, and a failure or a close ends the group for good.

Issue 24: ``ppd validate`` spawned the ranks and loaded the model for every configuration
and round (49 loads in one run of 17 configurations).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from measure.decode.backends import ppd_many  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from measure.decode.rank_group import RankGroup  # noqa: E402
from measure.decode.sampling import Decoding  # noqa: E402
from measure.decode.settings import RunSettings  # noqa: E402
from measure.lifeline import DistRunError  # noqa: E402
from tests.measure.decode.counting_ranks import count_ranks, counted  # noqa: E402
from tests.measure.decode.test_early_head import perturbed_head  # noqa: E402
from tests.measure.decode.test_local import NEW_TOKENS, prompts  # noqa: E402
from tests.measure.tiny_models import save_tiny_model_dir, tiny_model  # noqa: E402
from tests.procs import cmdline, descendants, kill_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("one_thread")

TASKS = [(2, 1, "main", False), (3, 3, "candidates", False), (2, 2, "main", True),
         (2, 3, "candidates", True), (3, 1, "candidates", False)]  # fmt: skip
"""(d_bar, k, early_head, trained head) of the greedy tasks run by one group of 3 ranks."""
SAMPLED = Decoding(do_sample=True, top_k=8)


def test_one_group_runs_every_kind_of_task_equal_to_greedy(monkeypatch, tmp_path):
    """Both placements, the lens and a trained head, k = 1..3 on 2 or 3 of the 3 ranks, and a
    seeded sampled task: one spawn and one model load per rank for all of them."""
    log = count_ranks(monkeypatch, tmp_path)
    model = tiny_model("llama", seed=2)
    head = perturbed_head(model, 2, seed=3)
    prompt_ids = prompts(4, seed=21)
    ref = [greedy_generate(model, p, max_new_tokens=NEW_TOKENS).tokens for p in prompt_ids]
    seeds = [5, 6, 7, 8]
    with RankGroup(model, world_size=3, timeout_s=60) as group:
        for d_bar, k, place, trained in TASKS:
            kw = dict(d_bar=d_bar, k=k, early_head=place, head=head if trained else None)
            runs = group.run(prompt_ids, max_new_tokens=NEW_TOKENS, warmup=True, **kw)
            name = f"d_bar={d_bar} k={k} {place} trained={trained}"
            assert [r.tokens for r in runs] == ref, name
            single = [ppd_single(model, p, max_new_tokens=NEW_TOKENS, **kw) for p in prompt_ids]
            assert [r.m for r in runs] == [s.m for s in single], name  # the same candidates
            processes = {ev["process"] for r in runs for ev in r.trace.events}
            assert processes == set(range(min(3, k + 1))), name  # the first k + 1 ranks
        sampled = dict(d_bar=2, k=2, max_new_tokens=NEW_TOKENS, seeds=seeds)
        runs = group.run(prompt_ids, decoding=SAMPLED, warmup=True, **sampled)
        single = ppd_many(model, prompt_ids, settings=RunSettings(decoding=SAMPLED), **sampled)
        assert [r.tokens for r in runs] == [s.tokens for s in single]
        assert runs[0].decoding == "sample top_k=8"
        with pytest.raises(ValueError, match="d_bar"):  # refused here; the group goes on
            group.run(prompt_ids, d_bar=1, k=1, max_new_tokens=NEW_TOKENS)
        assert [r.tokens for r in group.run(prompt_ids, d_bar=2, k=1, max_new_tokens=4)] == [
            t[:4] for t in ref
        ]
        procs, tmp = group.ranks.procs, Path(group.tmp)
        assert (tmp / "model").is_dir()
    assert counted(log) == {(what, r): 1 for what in ("spawn", "load") for r in range(3)}
    assert [p.exitcode for p in procs] == [0, 0, 0]  # closed cleanly, not killed
    assert not tmp.exists()
    with pytest.raises(RuntimeError, match="refused, its ranks were closed"):
        group.run(prompt_ids, d_bar=2, k=1, max_new_tokens=4)


@pytest.mark.parametrize("fail", ["crash", "hang"])
def test_a_failing_task_names_the_rank_and_the_group_refuses_further_tasks(fail):
    """Rank 2 fails at its first candidates, in the second task (the first runs on ranks 0
    and 1 only): every rank is killed and the group refuses what comes next."""
    model = tiny_model("gpt2", seed=4)
    with RankGroup(
        model, world_size=3, timeout_s=5, startup_s=120, fail=fail, fail_rank=2, link_probe=False
    ) as group:
        assert len(group.run(prompts(2), d_bar=2, k=1, max_new_tokens=6)) == 2
        start = time.monotonic()
        with pytest.raises(DistRunError) as info:
            group.run(prompts(2), d_bar=2, k=2, max_new_tokens=6)
        assert time.monotonic() - start < 40
        message = str(info.value)
        assert message.startswith("PPD dist run failed:") and "\n" not in message
        if fail == "crash":
            assert "rank 2: RuntimeError: injected failure on rank 2" in message
        else:  # rank 0 times out waiting for rank 2, which is killed
            assert "rank 0" in message and "from rank 2" in message and "Timed out" in message
        assert not any(p.is_alive() for p in group.ranks.procs)
        with pytest.raises(DistRunError, match="refused, its ranks failed earlier and were killed"):
            group.run(prompts(2), d_bar=2, k=1, max_new_tokens=6)


def test_a_rank_killed_between_tasks_is_named_at_the_next_task():
    """The OOM killer may strike while the group waits for its next task."""
    with RankGroup(tiny_model("gpt2", seed=4), timeout_s=30, link_probe=False) as group:
        group.run([[1, 2, 3]], d_bar=2, k=1, max_new_tokens=4)
        victim = group.ranks.procs[1]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        with pytest.raises(DistRunError) as info:
            group.run([[1, 2, 3]], d_bar=2, k=1, max_new_tokens=4)
    assert str(info.value).startswith("PPD dist run failed: rank 1: killed by SIGKILL (signal 9)")


def test_a_group_refuses_bad_arguments_before_spawning(monkeypatch):
    from measure import lifeline

    monkeypatch.setattr(lifeline.multiprocessing, "get_context", lambda *a: pytest.fail("spawn"))
    for world_size in (1, 2.0, True):
        with pytest.raises(ValueError, match="world_size must be an integer >= 2"):
            RankGroup(tiny_model("gpt2"), world_size=world_size)


def test_ppd_run_names_a_killed_rank_in_one_line(tmp_path):
    """Issue 47: a ``ppd run --backend dist`` whose rank the OOM killer ends prints one line
    naming the rank and the signal, exit 1 (not a second "unexpected failure" line)."""
    model = save_tiny_model_dir(tmp_path / "model")
    argv = [sys.executable, "-m", "ppdmodel", "run", "--model", str(model), "--prompt", "a b c",
            "--backend", "dist", "--k", "1", "--max-new-tokens", "32", "--repeats", "1000",
            "--no-assistant", "--no-progress", "--out", str(tmp_path / "out")]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=tmp_path) as run:  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while not (ranks := [p for p in descendants(run.pid) if "spawn_main" in cmdline(p)]):
                assert run.poll() is None and time.monotonic() < deadline, "no rank started"
                time.sleep(0.1)
            os.kill(ranks[0], signal.SIGKILL)
            _, err = run.communicate(timeout=120)
        finally:
            kill_all([run.pid, *descendants(run.pid)])
    assert run.returncode == 1, err
    (line,) = err.splitlines()
    assert re.match(r"ppd run: error: PPD dist run failed: rank \d: killed by SIGKILL \(signal 9\)",
                    line), line  # fmt: skip
