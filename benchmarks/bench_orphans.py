"""Benchmark: seconds until a distributed run's processes are gone after its parent is SIGKILLed.

Three cases, interleaved, ``--repeats`` times each: ``idle`` (``ppd_dist_many`` with rank 1
hanging, rank 0 blocked on it: the ranks idle as in issue 10), ``start-up`` (``ppd run
--backend dist`` killed as soon as both ranks exist, while they import torch) and ``decoding``
(the same, killed once each rank has used 5 s of CPU: decoding). The clock starts at the
SIGKILL of the parent and stops when every process below it (2 ranks and the multiprocessing
resource tracker) has ended. Needs Linux and psutil.

    python benchmarks/bench_orphans.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages and its tests' tiny-model factory
IDLE = """
from measure.decode.launch import ppd_dist_many
from tests.measure.tiny_models import tiny_model
ppd_dist_many(tiny_model("gpt2", seed=4), [[1, 2, 3]], d_bar=2, k=1, max_new_tokens=8,
              timeout_s=600, startup_s=600, fail="hang", fail_rank=1, link_probe=False)
"""


def busy_command(tmp: Path) -> list[str]:
    """``ppd run --backend dist`` on a tiny Llama, long enough to be killed mid-decoding."""
    from tests.measure.tiny_models import save_tiny_model_dir

    model = save_tiny_model_dir(tmp / "model")
    prompts = tmp / "prompts.jsonl"
    lines = [json.dumps({"id": f"p{i}", "prompt": f"def f{i}(x):"}) for i in range(40)]
    prompts.write_text("\n".join(lines) + "\n")
    return [sys.executable, "-m", "ppdmodel", "run", "--model", str(model), "--prompts"]  + [
        str(prompts), "--backend", "dist", "--k", "1", "--max-new-tokens", "400",
        "--no-assistant", "--threads", "1", "--out", str(tmp / "out"),
    ]  # fmt: skip


def ranks_running(parent: subprocess.Popen, case: str) -> list[psutil.Process]:
    """Descendants of ``parent`` once both ranks are in the state ``case`` names."""
    last: dict[int, float] = {}
    while parent.poll() is None:
        kids = running(psutil.Process(parent.pid).children(recursive=True))
        ranks = [k for k in kids if "spawn_main" in _cmdline(k)]
        cpu = {k.pid: _cpu(k) for k in ranks}
        least = min(cpu.values(), default=0.0)
        if len(ranks) == 2 and case == "start-up":
            return kids
        if len(ranks) == 2 and case == "decoding" and least > 5.0:
            return kids
        settled = last.keys() == cpu.keys() and all(cpu[p] - last[p] < 0.02 for p in cpu)
        if len(ranks) == 2 and case == "idle" and least > 1.5 and settled:
            return kids
        last = cpu
        time.sleep(0.5)
    raise RuntimeError(f"the run ended (exit {parent.returncode}) before it could be killed")


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # ended meanwhile
        return ""


def _cpu(proc: psutil.Process) -> float:
    try:
        return sum(proc.cpu_times()[:2])
    except psutil.Error:
        return 0.0


def cleanup_seconds(command: list[str], case: str) -> tuple[float, int]:
    """(seconds from the parent's SIGKILL until its descendants are gone, their number)."""
    parent = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    kids = ranks_running(parent, case)
    parent.send_signal(signal.SIGKILL)
    start = time.monotonic()
    parent.wait()
    while running(kids) and time.monotonic() - start < 60:
        time.sleep(0.01)
    seconds = time.monotonic() - start
    for proc in running(kids):
        proc.kill()  # only what this benchmark started
        seconds = float("inf")
    return seconds, len(kids)


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that still run (a zombie has ended; its new parent may not reap it)."""
    alive = []
    for proc in procs:
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-orphans-") as tmp:
        run = busy_command(Path(tmp))
        commands = {"idle": [sys.executable, "-c", IDLE], "start-up": run, "decoding": run}
        times: dict[str, list[float]] = {case: [] for case in commands}
        for i in range(args.repeats):
            for case, command in commands.items():
                seconds, n = cleanup_seconds(command, case)
                times[case].append(seconds)
                print(f"{case} #{i + 1}: {n} processes gone {seconds:.3f} s after the SIGKILL")
    for case, values in times.items():
        print(
            f"{case}: median {statistics.median(values):.3f} s, "
            f"min {min(values):.3f}, max {max(values):.3f} (n = {len(values)})"
        )


if __name__ == "__main__":
    main()
