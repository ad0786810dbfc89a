"""Published batch-1 decode measurements against the toolkit's predictions (issue 21).

Run: ``python experiments/published_decode.py [--refit]``. Prints:

* every row of ``ppdmodel/data/published_decode.csv`` (source, model, GPU, engine, devices,
  context) with the measured and predicted ms per token, the relative error, the regime and the
  row's role (``calibrate``: an engine preset was fitted on it; ``judge``: held out; ``context``:
  shown, not judged, for the reason in the CSV's ``note``), and the same rows under the ideal
  engine ``ppd plan`` uses without ``--engine`` (roofline at 80 % of bandwidth, no host time);
* the median and worst |error| of the calibration rows and of the held-out rows;
* the paper's Table 3 explained: the two overhead terms inferred from two rows, the other two
  rows predicted, and what those runs would have gained on each engine preset;
* with ``--refit``: the torch-compiled preset fitted again by least squares on its calibration
  rows (bandwidth efficiency, step cost, all-reduce cost), beside the preset's numbers.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ppdmodel.overheads import infer_overheads, predict_latency, table3_rows
from ppdmodel.paper import TABLE3_TOKENS
from sim.hardware import Engine
from sim.hardware_costs import RooflineHardware, greedy_costs
from sim.published import compare_published, error_summary, hardware_for, table3_on_engines

COLUMNS = ["source", "model", "gpu_preset", "engine_preset", "tp", "context_tokens", "trust",
           "role", "measured_ms", "predicted_ms", "error", "ideal_error", "regime"]  # fmt: skip


def ideal_ms(row) -> float:
    """The row under ``ppd plan`` without --engine: roofline at 0.8 / 0.6 efficiency, no host."""
    hw = hardware_for(row)
    ideal = RooflineHardware(hw.shape, hw.gpu, hw.link, max_tp=int(row["tp"]))
    return greedy_costs(ideal, tp=int(row["tp"])).greedy_token_seconds(hw.shape.num_layers) * 1e3


def refit_compiled(compared: pd.DataFrame) -> dict:
    """Least squares (log error) of the torch-compiled preset on its calibration rows."""
    rows = compared[(compared.role == "calibrate") & (compared.engine_preset == "torch-compiled")]
    base = Engine.from_name("torch-compiled")

    def engine(x):
        return replace(base, bandwidth_efficiency=x[0], host_per_step_s=x[1] * 1e-3,
                       allreduce_s=x[2] * 1e-6, allreduce_per_device_s=x[3] * 1e-6)  # fmt: skip

    def residuals(x):
        out = compare_published(rows, engines={"torch-compiled": engine(x)})
        return np.log(out.predicted_ms / out.measured_ms)

    fit = least_squares(residuals, [0.8, 1.0, 10.0, 1.0], bounds=([0.1, 0, 0, 0], [1, 10, 200, 50]))
    names = ("bandwidth_efficiency", "host_per_step_ms", "allreduce_us", "allreduce_per_device_us")
    preset = (base.bandwidth_efficiency, base.host_per_step_s * 1e3, base.allreduce_s * 1e6,
              base.allreduce_per_device_s * 1e6)  # fmt: skip
    return {n: (round(float(v), 4), p) for n, v, p in zip(names, fit.x, preset, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refit", action="store_true", help="refit the torch-compiled preset")
    args = parser.parse_args()
    compared = compare_published()
    ideal = [ideal_ms(row) for _, row in compared.iterrows()]
    compared["ideal_error"] = np.asarray(ideal) / compared.measured_ms - 1
    compared["source"] = compared.source.str.slice(0, 30)
    with pd.option_context("display.width", 250, "display.max_colwidth", 34,
                           "display.float_format", "{:.3g}".format):  # fmt: skip
        print(compared[COLUMNS].to_string(index=False))
    for role in ("calibrate", "judge"):
        s = error_summary(compared, role)
        print(
            f"{role}: {s['n']} rows, median |error| {s['median_abs_error']:.1%}, "
            f"worst {s['worst_abs_error']:.1%}"
        )
    judged = compared[compared.role == "judge"]
    print(
        f"ideal engine on the judged rows: median |error| "
        f"{judged.ideal_error.abs().median():.1%}, worst {judged.ideal_error.abs().max():.1%}"
    )

    rows = table3_rows()
    print(
        "\nTable 3 (LLaMA-2-13B, d = 40, d_bar = 20 assumed, ell = 128): fit on two rows, "
        "predict the other two"
    )
    for fit in ((0, 1), (2, 3), (0, 3), (1, 2)):
        paid = infer_overheads(rows.iloc[list(fit)], d=40, d_bar=20, ell=TABLE3_TOKENS)
        error = predict_latency(rows, paid, ell=TABLE3_TOKENS) / rows.latency_s - 1
        held = ", ".join(f"{rows.dataset[i]} k={rows.k[i]} {error[i]:+.2%}"
                         for i in range(len(rows)) if i not in fit)  # fmt: skip
        eta_ms = paid.handoff_tokens * rows.greedy_latency_s / TABLE3_TOKENS * 1e3
        print(f"  fit rows {fit}: hand-off a = {paid.handoff_tokens:.3f} greedy tokens "
              f"({eta_ms.min():.0f}-{eta_ms.max():.0f} ms), batch b = "
              f"{paid.extra_row_layers:.3f} layer times per extra row; "
              f"held out: {held}")  # fmt: skip
    with pd.option_context("display.width", 250, "display.float_format", "{:.3g}".format):
        print("\nTable 3's runs on the engine presets (A100-80GB, candidates on a second GPU):")
        print(table3_on_engines().to_string(index=False))
    if args.refit:
        print("\ntorch-compiled refit (fitted, preset):", refit_compiled(compared))


if __name__ == "__main__":
    main()
