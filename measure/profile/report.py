"""A cost profile as text and as a per-layer bar chart with spread."""

from __future__ import annotations

import re

import numpy as np

from measure.profile.cpu_share import CpuShares
from measure.profile.drift import MachineDrift
from measure.profile.stats import Spread
from ppdmodel.cost_profile import CostProfile
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS

TERMS = (
    ("layer_s", "layer, batch 1 (per layer)"),
    ("embedding_s", "embedding"),
    ("early_head_s", "early head (LM head + top-k)"),
    ("final_head_s", "final head (LM head + argmax)"),
    ("host_s", "host per token"),
    ("handoff_copy_s", "hand-off copy (per layer)"),
)
"""Figures printed for every backend, in this order, with their labels."""


def _figures(profile: CostProfile, backend: str) -> dict[str, Spread]:
    raw = profile.data.get("figures", {}).get(backend, {})
    return {name: Spread.from_dict(value) for name, value in raw.items()}


def format_profile(profile: CostProfile) -> str:
    """The profile's cost terms per backend (median, IQR), link, slowdown, load, warnings."""
    model = profile.data.get("model", {})
    prov = profile.provenance
    lines = [
        f"cost profile of {profile.model_name}: d = {profile.d}, context "
        f"{model.get('context_tokens')} tokens, {prov.get('dtype')} on {prov.get('device')} "
        f"({prov.get('cpu')}, {prov.get('cpus')} CPUs)",
    ]
    for backend, entry in profile.backends.items():
        threads = profile.data["backends"][backend].get("threads")
        figures = _figures(profile, backend)
        lines.append(f"[{backend}] {threads} thread(s) per process")
        for name, label in TERMS:
            if name in figures:
                lines.append(f"  {label:34s} {figures[name].describe()}")
        for k, _ in entry.base.candidate_layer_s_by_k:
            spread = figures.get(f"candidate_layer_s[{k}]")
            if spread is not None:
                lines.append(f"  {f'candidate batch k={k} (per layer)':34s} {spread.describe()}")
        costs = entry.base
        startup = entry.batch_startup("candidates")
        if startup > 0:
            where = "both placements" if entry.serial else "early head on the candidates"
            label = "batch start-up after early head"
            lines.append(f"  {label:34s} {1e3 * startup:.4g} ms ({where})")
        if entry.rank_startup_s_by_k:
            label = "start-up on the candidate rank"
            per_k = ", ".join(f"k={k} {1e3 * s:.4g} ms" for k, s in entry.rank_startup_s_by_k)
            lines.append(f"  {label:34s} {per_k} (early head on the candidates: priced)")
        lines.append(f"  {'shared-device slowdown':34s} {costs.shared_device_slowdown:.3f}")
        if backend == "dist":
            link = profile.data.get("link") or {}
            bandwidth = link.get("bandwidth_bytes_per_s")
            bw = "inf" if bandwidth is None else f"{bandwidth / 1e6:.4g} MB/s"
            lines.append(
                f"  {'link (two gloo ranks)':34s} latency {1e3 * link.get('latency_s', 0):.4g} "
                f"ms, bandwidth {bw}"
            )
            for name in ("stream_alone_s", "stream_both_s"):
                if name in figures:
                    lines.append(f"  {name:34s} {figures[name].describe()}")
            if "dist_host_s" in figures:  # the host_s this backend uses (``dist_host_figures``)
                label = "host per pass, real dist runs"
                lines.append(f"  {label:34s} {figures['dist_host_s'].describe()}")
            for placement, seconds in entry.host_s_by_placement.items():
                label = f"  early head on {placement}"
                lines.append(f"  {label:34s} mean {1e3 * seconds:.4g} ms (priced for PPD)")
            for placement in EARLY_HEAD_PLACEMENTS:  # timed in the same runs, not priced
                if (name := f"dist_dispatch_s[{placement}]") in figures:
                    label = f"candidate start ({placement})"
                    lines.append(f"  {label:34s} {figures[name].describe()} (after main's split)")
            pair = profile.data["backends"][backend].get("pair_slowdowns") or {}
            measured = pair.get("measured", {})
            for field, label, batch in (("by_k", "where a run overlaps", "candidate batch"),
                                        ("by_k_candidates", "overlap, early head on cands",
                                         "early head + batch")):  # fmt: skip
                for k, sides in pair.get(field, {}).items():
                    raw = measured.get(field, {}).get(k)
                    own = ("" if raw is None else f"; measured here x{raw['main']:.3f}, "
                           f"x{raw['candidate']:.3f}")  # fmt: skip
                    lines.append(f"  {label + f', k={k}':34s} main x{sides['main']:.3f}, {batch} "
                                 f"x{sides['candidate']:.3f} (applied{own})")  # fmt: skip
    load = prov.get("load_average", {})
    if load:
        others, own = load.get("others_measured"), load.get("own_measured")
        measured = ("" if others is None or own is None
                    else f", {CpuShares(others, own).describe()}")  # fmt: skip
        lines.append(
            f"load average {load.get('before', 0):.2f} -> {load.get('after', 0):.2f} on "
            f"{load.get('cpus')} CPUs{measured}{' (LOADED)' if load.get('loaded') else ''}"
        )
    drift = MachineDrift.from_dict(profile.data.get("machine"))
    if drift is not None:
        lines.append(drift.describe())
    lines += [f"warning: {w}" for w in profile.warnings]
    lines += [f"too wide to predict from: {w.describe()}" for w in profile.wide_prices]
    return "\n".join(lines)


def _layer_spreads(profile: CostProfile, backend: str) -> list[tuple[int, Spread]]:
    figures = _figures(profile, backend)
    return sorted(
        (int(m.group(1)), s)
        for name, s in figures.items()
        if (m := re.fullmatch(r"layer_s\[(\d+)\]", name))
    )


def plot_layer_times(profile: CostProfile, path) -> None:
    """Per-layer time at batch 1 of every profiled backend: bars at the median, error bars
    from q1 to q3, hatched where IQR/median > 10 % (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone
    from matplotlib.ticker import MaxNLocator

    backends = [b for b in profile.backends if _layer_spreads(profile, b)]
    if not backends:
        raise ValueError("profile has no per-layer figures")
    fig = Figure(figsize=(min(16.0, max(6.0, 0.25 * profile.d * len(backends) + 2)), 3.8))
    ax = fig.subplots()
    width = 0.8 / len(backends)
    for j, backend in enumerate(backends):
        layers = _layer_spreads(profile, backend)
        x = np.array([i + 1 for i, _ in layers]) + (j - (len(backends) - 1) / 2) * width
        med = np.array([s.median for _, s in layers]) * 1e3
        err = np.stack(
            [med - np.array([s.q1 for _, s in layers]) * 1e3,
             np.array([s.q3 for _, s in layers]) * 1e3 - med]
        )  # fmt: skip
        threads = profile.data["backends"][backend].get("threads")
        bars = ax.bar(x, med, width=width, yerr=err, capsize=2,
                      label=f"{backend} ({threads} thread(s) per process)")  # fmt: skip
        for bar, (_, spread) in zip(bars, layers, strict=True):
            if spread.noisy:
                bar.set_hatch("//")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(0.5, profile.d + 0.5)
    ax.set_xlabel("decoder layer (1-based)")
    ax.set_ylabel("time per layer, ms")
    ax.set_title(
        f"{profile.model_name}: per-layer time at batch 1, median and IQR "
        "(hatched: IQR/median > 10 %)",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars
    fig.tight_layout()
    fig.savefig(path, dpi=120)
