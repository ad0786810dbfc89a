"""Which kind of pass is off: a run's passes, timed, beside the closed form's time of their kind.

The term check (``measure.eval.terms``) prices blocks one by one; a pass is what its blocks add
up to, with the waits and the gaps between them. A pass is timed as the host time is
(``measure.profile.host``): from the previous token known to this one. The closed form
(``ppdmodel.passes``) has two kinds:

========  =======================================  ==========================================
kind      which passes                             the closed form's time
========  =======================================  ==========================================
fresh     the first pass, and every pass after a   P_f + E_m + tau (main's prefix from layer
          miss (m_t = 0)                           1, its rest, the host; on a serial backend
                                                   the batch is in E_m)
resumed   every pass after a match (m_t = 1)       w + eta + P_r + E_m + tau (the wait for the
                                                   accepted batch, its hand-off, then layers
                                                   [e, d))
========  =======================================  ==========================================

Per kind: ``count``, the measured mean and median, the closed form's ``predicted_s``, their
``ratio`` (mean / predicted) and ``gap_s_per_token`` = (mean - predicted) x count / tokens, so
the kinds' gaps add up to how far the run's time per token is from the closed form's. Each
run's last pass is left out: it makes no early prediction, and the prediction prices that
apart (``measure.eval.predict.last_pass_excess_s``). The runs' timings explain a disagreement
here; they never enter a prediction.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from measure.eval.ppd_config import PPDConfig
from ppdmodel.cost_profile import CostProfile
from ppdmodel.passes import pass_times

PASS_COLUMNS = ("pass", "count", "measured_mean_s", "measured_median_s", "predicted_s", "ratio",
                "gap_s_per_token")  # fmt: skip
KINDS = ("fresh", "resumed")


def pass_seconds(run) -> dict[str, list[float]]:
    """Seconds of each pass of ``run`` (a PPDResult) by kind, its last pass left out: pass t
    runs from token t - 1 known to token t known (``token_times_s``); it is resumed when m_t
    = 1 (``run.m`` holds m_t for t = 2..ell), else fresh."""
    times = np.concatenate([[0.0], np.asarray(run.token_times_s, dtype=float)])
    ell = len(run.token_times_s)
    if len(run.m) != max(ell - 1, 0):
        raise ValueError(f"run.m must hold {max(ell - 1, 0)} outcomes (ell - 1), got {len(run.m)}")
    out = {kind: [] for kind in KINDS}
    for t in range(1, ell):  # pass ell, the last, is left out
        resumed = t >= 2 and run.m[t - 2] == 1
        out[KINDS[resumed]].append(float(times[t] - times[t - 1]))
    return out


def predicted_pass_s(profile: CostProfile, config: PPDConfig) -> dict[str, float]:
    """The closed form's seconds of a fresh and of a resumed pass of ``config``."""
    costs = profile.costs(
        config.backend, d_bar=config.d_bar, k=config.k, early_head=config.early_head
    )
    times = pass_times(d=profile.d, d_bar=config.d_bar, k=config.k, costs=costs,
                       early_head=config.early_head)  # fmt: skip
    fresh = float(times.miss_only_s)  # B = P_f + E_m + tau
    return {"fresh": fresh, "resumed": fresh - float(times.saving_s)}  # B - S


def pass_check(profile: CostProfile, config: PPDConfig, runs) -> pd.DataFrame:
    """One row per kind of pass that ``runs`` hold (``PASS_COLUMNS``): measured in the runs vs
    the closed form's time under ``profile``."""
    predicted = predicted_pass_s(profile, config)
    tokens = max(sum(len(r.tokens) for r in runs), 1)
    measured = {kind: [] for kind in KINDS}
    for run in runs:
        for kind, seconds in pass_seconds(run).items():
            measured[kind] += seconds
    rows = []
    for kind in KINDS:
        seconds = measured[kind]
        if not seconds:
            continue
        mean, price = float(np.mean(seconds)), predicted[kind]
        rows.append({
            "pass": kind, "count": len(seconds), "measured_mean_s": mean,
            "measured_median_s": float(np.median(seconds)), "predicted_s": price,
            "ratio": mean / price if price > 0 else float("nan"),
            "gap_s_per_token": (mean - price) * len(seconds) / tokens,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=list(PASS_COLUMNS))


def describe_passes(table: pd.DataFrame) -> str:
    """'fresh x1.02 (+0.3 ms/token, 180 passes), resumed x1.19 (+4.1 ms/token, 124 passes)'."""
    return ", ".join(
        f"{row['pass']} x{row['ratio']:.2f} ({1e3 * row['gap_s_per_token']:+.3g} ms/token, "
        f"{int(row['count'])} passes)"
        for _, row in table.iterrows()
    )
