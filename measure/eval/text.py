"""``ppd validate``'s printed report: the configuration table and one waterfall line each."""

from __future__ import annotations

from measure.eval.pass_check import describe_passes
from measure.eval.terms import largest_gap
from measure.eval.verdict import TERM_LABELS

SHOWN_SHARE = 0.005
"""Waterfall terms below this share of the prediction are folded into 'other' when printed."""


def format_table(validation) -> str:
    """Predicted (closed form, simulator), measured median [q1, q3], error and agreement; with
    interleaved probes, the prediction from them, its error and interval beside, and both
    predictions' errors paired with the sentinel around each run (``measure.eval.paired``)."""
    probed = validation.interleaved_profile is not None
    lines = [
        f"{'method':34s} {'predicted':>10s} {'simulated':>10s} {'measured [q1, q3]':>26s} "
        f"{'error':>8s}  {'agreement':10s} {'speed-up meas/pred':>18s} "
        f"{'95 % interval (in/OUT)':>26s}"
        + (f" | {'interleaved':>11s} {'error':>8s} {'95 % interval (in/OUT)':>26s}"
           f" | {'paired error: profile / interleaved':>35s}" if probed else "")
    ]  # fmt: skip
    for _, row in validation.table.iterrows():
        quartiles = f"[{row['measured_q1_s']:.4g}, {row['measured_q3_s']:.4g}]"
        measured = f"{row['measured_s']:.4g} {quartiles}"
        flags = (" NOISY" if row["noisy"] else "") + ("" if row["exact"] else " INEXACT")
        method = row["method"]
        if method == "greedy":
            method = f"greedy (priced on {row['backend']})"
        lines.append(
            f"{method:34s} {row['predicted_s']:10.4g} {_num(row['simulated_s']):>10s} "
            f"{measured:>26s} {100 * row['rel_err']:+7.1f}%  {row['agreement']:10s} "
            f"{row['speedup_measured']:8.3f} / {row['speedup_predicted']:.3f} "
            f"{_interval(row):>26s}"
            + (_interleaved(row) if probed else "")
            + flags
        )  # fmt: skip
    return "\n".join(lines)


def _interleaved(row) -> str:
    """' | prediction error [low, high] in | paired errors' from the interleaved probes (the
    profile's and theirs, paired with the sentinel around each run)."""
    paired = " / ".join(
        "-" if _num(row.get(c)) == "-" else f"{100 * row[c]:+.1f} %"
        for c in ("paired_rel_err", "interleaved_paired_rel_err")
    )
    predicted, err = row.get("interleaved_predicted_s"), row.get("interleaved_rel_err")
    error = "-" if _num(err) == "-" else f"{100 * err:+.1f}%"  # a method the probes don't price
    return (
        f" | {_num(predicted):>11s} {error:>8s} "
        f"{_interval(row, 'interleaved_'):>26s} | {paired:>35s}"
    )


def _interval(row, prefix: str = "") -> str:
    """'[low, high] in' or '... OUT' against the measured median; '-' without samples
    (``prefix`` "interleaved_": the interleaved probes' interval)."""
    name = prefix or "predicted_"
    low, high = row.get(f"{name}low_s"), row.get(f"{name}high_s")
    if low is None or low != low:
        return "-"
    return f"[{low:.4g}, {high:.4g}] {'in' if row[f'{prefix}inside'] else 'OUT'}"


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
    )


def format_gaps(validation) -> list[str]:
    """Per configuration, the block whose measured time in the runs departs most from the
    profile's price (``measure.eval.terms``), and the sharing factors its prediction applied
    where the two sides overlap on one device (not on a serial backend)."""
    return [f"{r.config.label}: {largest_gap(r.terms)}" + _sharing(r.predicted)
            for r in validation.results if r.terms is not None and len(r.terms)]  # fmt: skip


def format_passes(validation) -> list[str]:
    """Per configuration, its fresh and resumed passes against the closed form's time of their
    kind (``measure.eval.pass_check``), priced by the profile and, where they ran, by the
    interleaved probes."""
    lines = []
    for r in validation.results:
        if r.passes is None or r.passes.empty:
            continue
        by = [f"{name}: {describe_passes(table)}"
              for name, table in r.passes.groupby("priced_by", sort=False)]  # fmt: skip
        lines.append(f"{r.config.label}: " + "; ".join(by))
    return lines


def _sharing(prediction) -> str:
    """'; sharing x1.101 main, x1.041 candidate batch (pair probe ...)' or ''."""
    sharing = getattr(prediction, "sharing", None)
    if sharing is None or sharing.source == "serial":
        return ""
    return f"; {sharing.describe()}"


def format_early_exit(validation) -> list[str]:
    """What the early-exit methods were measured and predicted with (none without
    ``--early-exit``); each method's own lines follow (``JudgedResult.report_lines``)."""
    if not validation.early_exit:
        return []
    return [
        "early exit (HF generate, constant draft length, no confidence stop; seconds and tokens "
        "after each run's first step, greedy over the same tokens; predicted by exact step "
        "accounting on the layer-L match sequences, i.i.d. closed form beside it; approximated: "
        "the LM head on q + 1 rows priced as on one row, q + 1 positions with the profile's "
        "k-row slope):",
        "  " + validation.bookkeeping.describe(),
    ]
