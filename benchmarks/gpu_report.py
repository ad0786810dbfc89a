"""Markdown report of a ``benchmarks/gpu_validate.sh`` output folder: the GPU, the versions, and
per model every configuration's predicted against measured seconds, error and speed-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

COLUMNS = {
    "method": "method",
    "backend": "backend",
    "d_bar": "d_bar",
    "k": "k",
    "early_head": "early head",
    "p_hat": "p",
    "predicted_s": "predicted s",
    "measured_s": "measured s",
    "measured_q1_s": "q1",
    "measured_q3_s": "q3",
    "rel_err": "error",
    "speedup_measured": "speed-up measured",
    "speedup_predicted": "speed-up predicted",
    "exact": "exact",
}


def model_table(csv: Path) -> str:
    """One Markdown table of a validation.csv (floats rounded, errors in %)."""
    table = pd.read_csv(csv)[list(COLUMNS)].rename(columns=COLUMNS)
    table["error"] = (100 * table["error"]).map(lambda e: f"{e:+.1f} %")
    for column in ("predicted s", "measured s", "q1", "q3"):
        table[column] = table[column].map(lambda s: f"{s:.3f}")
    for column in ("p", "speed-up measured", "speed-up predicted"):
        table[column] = table[column].map(lambda x: "" if pd.isna(x) else f"{x:.3f}")
    table = table.astype(object).where(table.notna(), "").astype(str)
    lines = ["| " + " | ".join(table.columns) + " |", "|" + " --- |" * len(table.columns)]
    lines += ["| " + " | ".join(row) + " |" for row in table.itertuples(index=False)]
    errors = pd.read_csv(csv)["rel_err"].abs() * 100
    lines.append(
        f"\nmedian |error| {errors.median():.1f} %, worst {errors.max():.1f} % "
        f"over {len(errors)} rows"
    )
    return "\n".join(lines)


def report(out: Path) -> str:
    """The whole report of one gpu_validate.sh folder."""
    parts = ["# GPU validation (benchmarks/gpu_validate.sh)\n"]
    if (out / "gpu.csv").exists():
        parts += ["## Device\n", "```", (out / "gpu.csv").read_text().strip(), "```\n"]
    if (out / "doctor.txt").exists():
        parts += ["## ppd doctor\n", "```", (out / "doctor.txt").read_text().strip(), "```\n"]
    for csv in sorted(out.glob("*/validation.csv")):
        log = out / f"{csv.parent.name}.log"
        parts += [f"## {csv.parent.name}\n", model_table(csv), ""]
        if log.exists():
            tail = [line for line in log.read_text().splitlines() if line.strip()][-3:]
            parts += ["```", *tail, "```\n"]
    return "\n".join(parts)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
