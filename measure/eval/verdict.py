"""One line per configuration: faster or slower than greedy, why, and whether it was predicted."""

from __future__ import annotations

import math

from measure.profile.stats import LoadReading, Spread

AGREEMENT_BANDS = ((0.05, "within 5 %"), (0.15, "5-15 %"))
"""|predicted / measured - 1| up to each bound gets its label; beyond the last: ``poor``."""

TERM_LABELS = {
    "ideal_s": "layers (Theorem 4.1)",
    "embedding_s": "embedding",
    "final_head_s": "final head",
    "early_head_s": "early head",
    "batching_s": "k-row batch",
    "dispatch_s": "dispatch message",
    "sharing_s": "sharing one device",
    "handoff_s": "hand-off",
    "host_s": "host time",
    "last_pass_s": "last pass (no prediction)",
    "draft_s": "draft forwards",
    "verify_s": "verify forwards (all d layers)",
    "hf_host_s": "HF bookkeeping (host)",
    "shallow_s": "shallow layers (1..L_s)",
    "deep_s": "deep passes (L_s+1..d, n + 1 rows)",
}
"""Readable names of ``ppdmodel.LatencyWaterfall`` terms."""


def agreement(rel_err: float) -> str:
    """'within 5 %', '5-15 %' or 'poor' for a relative error (nan: 'poor')."""
    size = abs(rel_err)
    for bound, label in AGREEMENT_BANDS:
        if size <= bound:
            return label
    return "poor"


def largest_term(terms) -> tuple[str, float]:
    """(name, seconds per token) of the largest term beyond Theorem 4.1's ideal, from a
    mapping of terms or a ``ppdmodel.LatencyWaterfall``."""
    terms = terms.terms() if hasattr(terms, "terms") else terms
    terms = {k: float(v) for k, v in terms.items() if k != "ideal_s"}
    name = max(terms, key=terms.get)
    return name, terms[name]


def verdict_line(
    label: str,
    greedy: Spread,
    ppd: Spread,
    *,
    tokens: int,
    terms=None,
    rel_err: float | None = None,
    load: LoadReading | None = None,
    method_name: str = "PPD",
) -> str:
    """'<label>: 1.25x slower than greedy (...); largest cost term: ...; prediction ...'."""
    ratio = greedy.median / ppd.median
    if ratio >= 1:
        how = f"{ratio:.3g}x faster than greedy"
    else:
        how = f"{1 / ratio:.3g}x slower than greedy"
    parts = [
        f"{label}: {how} (median {ppd.median:.4g} s vs {greedy.median:.4g} s over {ppd.n} round(s))"
    ]
    if terms is None:
        parts.append("largest cost term: unknown (no profile; see ppd measure profile)")
    else:
        name, seconds = largest_term(terms)
        share = seconds / sum(terms.values())
        parts.append(
            f"largest cost term: {TERM_LABELS[name]}, {1e3 * seconds:.3g} ms/token "
            f"({100 * share:.0f} % of {method_name}'s time)"
        )
    if rel_err is None or math.isnan(rel_err):
        parts.append("prediction: none")
    else:
        parts.append(f"prediction agreed {agreement(rel_err)} ({100 * rel_err:+.1f} %)")
    noisy = [f"{name} IQR/median {100 * s.rel_iqr:.0f} %"
             for name, s in ((method_name, ppd), ("greedy", greedy)) if s.noisy]  # fmt: skip
    if noisy:
        parts.append("NOISY: " + ", ".join(noisy))
    if load is not None and load.loaded:
        parts.append("machine LOADED")
    return "; ".join(parts)
