"""The overheads a real PPD implementation paid, inferred from its published timings.

A published row gives greedy's time for ell tokens, PPD's time for the same ell tokens, k and
the measured match rate p. Under the seconds model (``ppdmodel.seconds``), with everything of
greedy's step inside its layers (L = G / d per layer, G greedy's time per token) and the
early head on the candidate side (Table 3 shows no PPD slowdown at p = 0), PPD's time is

    E[T] = ell G - (ell - 1) p S,      S = D L - w - eta,      D = d - d_bar,
    eta = a G          (one hand-off per accepted prediction, in greedy-token times),
    w   = D (k - 1) b L (the k-row candidate batch, b layer-times per layer and extra row,
                         which main waits for on a match),

so S / G = D/d (1 - (k - 1) b) - a is linear in the two terms (a, b): ``infer_overheads``
solves for them by least squares on the rows it is given (relative error), and
``predict_latency`` prices any other row through ``expected_latency_seconds`` with
``overheads.costs(G)``. Theorem 4.1 is a = b = 0. ``table3_rows`` puts the paper's Table 3
(LLaMA-2-13B, d = 40, ell = 128; d_bar is not printed: 20, the paper's Figure 3 layer, is
assumed) in this form.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppdmodel.costs import DecodeCosts
from ppdmodel.paper import TABLE3
from ppdmodel.seconds import expected_latency_seconds
from ppdmodel.validation import as_int, as_real, check_d_bar, check_positive_int

ROW_COLUMNS = ("greedy_latency_s", "latency_s", "p", "k")
"""Columns of a published PPD row: greedy's and PPD's seconds for ell tokens, p and k."""
TABLE3_D_BAR = 20
"""Early-prediction layer assumed for Table 3 (not printed; Figure 3 uses layer 20 of 40)."""


@dataclass(frozen=True)
class PaidOverheads:
    """The overhead terms a PPD implementation paid (module docstring)."""

    handoff_tokens: float
    """a: seconds of one hand-off per accepted prediction, in greedy-token times."""
    extra_row_layers: float
    """b: per-layer time each candidate beyond the first adds, in greedy layer times."""
    d: int
    """Layers of the model."""
    d_bar: int
    """Early-prediction layer."""

    def costs(self, greedy_token_s: float) -> DecodeCosts:
        """DecodeCosts of a model whose greedy token takes ``greedy_token_s`` seconds."""
        greedy_token_s = as_real("greedy_token_s", greedy_token_s)
        layer = float(greedy_token_s) / float(self.d)
        if not layer > 0:
            raise ValueError(f"greedy_token_s must be > 0 (a layer takes greedy_token_s / d), "
                             f"got {greedy_token_s!r}")  # fmt: skip
        return DecodeCosts(layer_s=layer, candidate_extra_row_layer_s=self.extra_row_layers * layer,
                           handoff_s=self.handoff_tokens * greedy_token_s)  # fmt: skip


def _rows(rows) -> dict[str, np.ndarray]:
    """The ``ROW_COLUMNS`` of ``rows`` (a DataFrame or a mapping) as float arrays, checked."""
    try:
        data = {c: np.asarray(rows[c], dtype=float).ravel() for c in ROW_COLUMNS}
    except (KeyError, TypeError, ValueError, IndexError):
        raise ValueError(f"rows must have numeric columns {ROW_COLUMNS}") from None
    n = {v.size for v in data.values()}
    if len(n) != 1 or not n.pop():
        raise ValueError(f"rows must hold at least one row with all of {ROW_COLUMNS}")
    if not all(np.isfinite(v).all() for v in data.values()):
        raise ValueError(f"rows {ROW_COLUMNS} must be finite")
    if (data["greedy_latency_s"] <= 0).any() or (data["latency_s"] <= 0).any():
        raise ValueError("rows: greedy_latency_s and latency_s must be > 0 seconds")
    if ((data["p"] < 0) | (data["p"] > 1)).any():
        raise ValueError("rows: p must lie in [0, 1]")
    check_positive_int("k", data["k"])
    return data


def infer_overheads(rows, *, d: int, d_bar: int, ell: int) -> PaidOverheads:
    """The terms (a, b) that best explain ``rows`` (least squares on the relative error of
    PPD's time; module docstring). Two rows with different k determine them exactly."""
    d, d_bar, ell = as_int("d", d), as_int("d_bar", d_bar), as_int("ell", ell)
    check_d_bar(d, d_bar)
    r = _rows(rows)
    if np.unique(r["k"]).size < 2:
        raise ValueError("rows must include two values of k to separate the two terms")
    gap = (d - d_bar) / d
    # with W = (ell - 1) p G_token: T = ell G_token - W (gap - gap (k - 1) b - a), linear in a, b
    weight = (ell - 1) * r["p"] * r["greedy_latency_s"] / ell
    design = np.stack([weight, weight * gap * (r["k"] - 1)], axis=1)
    target = r["latency_s"] - r["greedy_latency_s"] + weight * gap
    scale = r["latency_s"]
    (a, b), *_ = np.linalg.lstsq(design / scale[:, None], target / scale, rcond=None)
    return PaidOverheads(float(a), float(b), d, int(d_bar))


def predict_latency(rows, overheads: PaidOverheads, *, ell: int) -> np.ndarray:
    """PPD's expected seconds for ell tokens of each row under ``overheads``."""
    if not isinstance(overheads, PaidOverheads):
        raise ValueError("overheads must be a PaidOverheads (from infer_overheads)")
    ell = as_int("ell", ell)
    r = _rows(rows)
    out = [
        expected_latency_seconds(d=overheads.d, d_bar=overheads.d_bar, ell=ell, p=p, k=int(k),
                                 costs=overheads.costs(g / ell), early_head="candidates")
        for g, p, k in zip(r["greedy_latency_s"], r["p"], r["k"], strict=True)
    ]  # fmt: skip
    return np.asarray(out, dtype=float)


def table3_rows():
    """The paper's Table 3 as PPD rows (``ROW_COLUMNS`` plus ``dataset``), greedy's time beside
    each PPD row."""
    greedy = TABLE3[TABLE3.k == 0].set_index("dataset").latency_s
    rows = TABLE3[TABLE3.k > 0].reset_index(drop=True)
    return rows.assign(greedy_latency_s=rows.dataset.map(greedy).to_numpy(),
                       p=rows.p_correct)[["dataset", *ROW_COLUMNS]]  # fmt: skip
