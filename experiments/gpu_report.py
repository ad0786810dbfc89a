"""Markdown report of a ``experiments/gpu_validate.sh`` output folder: the GPU, the versions,
and per run and model every configuration's predicted seconds with its 95 % interval against
the measured median, the error, whether the median fell inside, and the speed-ups; with two
runs or more, how far the errors moved between them (``experiments/validate_summary.py``'s
tables)."""

from __future__ import annotations

import sys
from pathlib import Path

from validate_summary import read_runs, run_table, run_to_run  # experiments/ is sys.path[0]


def report(out: Path) -> str:
    """The whole report of one gpu_validate.sh folder."""
    parts = ["# GPU validation (experiments/gpu_validate.sh)\n"]
    if (out / "gpu.csv").exists():
        parts += ["## Device\n", "```", (out / "gpu.csv").read_text().strip(), "```\n"]
    if (out / "doctor.txt").exists():
        parts += ["## ppd doctor\n", "```", (out / "doctor.txt").read_text().strip(), "```\n"]
    table = read_runs(out)
    for (run, model), rows in table.groupby(["run", "model"], sort=True):
        parts += [f"## {run}: {model}\n", "```", rows["load"].iloc[0], "```\n", run_table(rows), ""]
        log = out / run / f"{model}.log"
        if log.exists():
            tail = [line for line in log.read_text().splitlines() if line.strip()][-3:]
            parts += ["```", *tail, "```\n"]
    summary = run_to_run(table)
    if summary:
        parts += ["## Run to run\n", summary]
    return "\n".join(parts)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python experiments/gpu_report.py OUT")
    print(report(Path(sys.argv[1])))
