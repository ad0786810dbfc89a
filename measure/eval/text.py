"""``ppd validate``'s printed report: the configuration table and one waterfall line each."""

from __future__ import annotations

from measure.eval.terms import largest_gap
from measure.eval.verdict import TERM_LABELS

SHOWN_SHARE = 0.005
"""Waterfall terms below this share of the prediction are folded into 'other' when printed."""


def format_table(validation) -> str:
    """Predicted (closed form, simulator), measured median [q1, q3], error and agreement."""
    lines = [
        f"{'method':34s} {'predicted':>10s} {'simulated':>10s} {'measured [q1, q3]':>26s} "
        f"{'error':>8s}  {'agreement':10s} {'speed-up meas/pred':>18s}"
    ]
    for _, row in validation.table.iterrows():
        quartiles = f"[{row['measured_q1_s']:.4g}, {row['measured_q3_s']:.4g}]"
        measured = f"{row['measured_s']:.4g} {quartiles}"
        flags = (" NOISY" if row["noisy"] else "") + ("" if row["exact"] else " INEXACT")
        lines.append(
            f"{row['method']:34s} {row['predicted_s']:10.4g} {_num(row['simulated_s']):>10s} "
            f"{measured:>26s} {100 * row['rel_err']:+7.1f}%  {row['agreement']:10s} "
            f"{row['speedup_measured']:8.3f} / {row['speedup_predicted']:.3f}{flags}"
        )
    return "\n".join(lines)


def _num(x) -> str:
    """4 significant digits, '-' for a missing value."""
    return "-" if x is None or x != x else f"{x:.4g}"


def format_waterfall(result) -> str:
    """'label: ideal 96.2 + early head 18.1 + ... = predicted 190 ms/token | measured ...'
    (terms below SHOWN_SHARE of the total are summed as 'other')."""
    terms = result.predicted.terms()
    total = sum(terms.values())
    parts, other = [], 0.0
    for name, value in terms.items():
        if name == "ideal_s" or abs(value) >= SHOWN_SHARE * total:
            parts.append(f"{TERM_LABELS[name]} {1e3 * value:.3g}")
        else:
            other += value
    if other > 0:
        parts.append(f"other {1e3 * other:.2g}")
    tokens = result.predicted.tokens
    meas = result.measured
    return (
        f"{result.config.label}: {' + '.join(parts)} = predicted {1e3 * total:.4g} ms/token"
        f" | measured {1e3 * meas.median / tokens:.4g} [{1e3 * meas.q1 / tokens:.4g}, "
        f"{1e3 * meas.q3 / tokens:.4g}] ms/token"
        + ("" if result.model_exact else " (single-CPU model not exact here: W_c > W_m)")
    )


def format_gaps(validation) -> list[str]:
    """Per configuration, the block whose measured time in the runs departs most from the
    profile's price (``measure.eval.terms``)."""
    return [f"{r.config.label}: {largest_gap(r.terms)}" for r in validation.results
            if r.terms is not None and len(r.terms)]  # fmt: skip
