"""Measure every term of ``ppdmodel.DecodeCosts`` on this machine for one model: a cost profile.

``measure_profile`` times the pieces of a decode step (``measure.profile.probes``) in
interleaved rounds, warm-up excluded, and, for the ``dist`` backend, the link and the
slowdown of two concurrent decode streams on two gloo ranks (``measure.profile.ranks``).
Each figure is a median with its interquartile range (``measure.profile.stats.Spread``) and
keeps its timed samples; each backend keeps bootstrap replicates of its costs built from them
(``measure.profile.replicates``), the spread behind every prediction's interval, each scaled
by a draw of the machine's drift between the profile's sentinel windows
(``measure.profile.drift``, recorded as ``machine``);
noisy figures and a loaded machine are recorded as warnings. The result is a
``ppdmodel.cost_profile.CostProfile`` (the one reader of the file, shared with ``ppd latency
--costs``); ``write_profile`` / ``load_profile`` store and read it as JSON; ``reprice``
rebuilds one from re-measured figures (``ppd validate --interleave-probes``).

How each backend's DecodeCosts come from the figures (medians; the ``dist`` pair factors:
means, ``pair_slowdowns``):

- ``single`` (``threads`` torch threads): layer_s = layers / d of a greedy step; the k-row
  batch per layer as ``LocalCandidates`` runs it; embedding, heads and host time of the step;
  hand-off = the in-process KV copy, per candidate layer; no messages. On a CPU the backend
  runs the candidate batch on main's threads between main's two halves: one stream at a time,
  so the entry is ``serial`` (``DecodeCosts.serial_device``: exact whether or not the batch
  outlasts main's suffix); ``shared_device_slowdown = 2`` is kept for older readers.
- ``dist`` (one thread per rank): the same compute figures at one thread; the slowdown is the
  median step time of two ranks decoding at once over one rank alone (applied to both sides
  where no pair factors are); on a CPU ``pair_slowdowns`` records, per k at d_bar =
  ``default_d_bar(d)``, each side's own slowdown where a run overlaps (main's suffix + final
  head beside the k-row batch; ``ranks`` pair probe): a prediction for k applies main's to
  main and the batch's to the batch (``ppdmodel.cost_profile``; ``experiments/dist_prices.md``),
  and the cost replicates redraw them from their samples; ``by_k_candidates`` holds the same
  factors with the early head on the candidate side (the batch's rank runs the early head,
  then the batch), which price the ``candidates`` placement; each side's ratios are pooled over
  k and placements where they agree within their sampling error (``pair_slowdowns``: on a
  2-vCPU VM one ratio's noise outweighed the k and placement effects); messages are
  latency + bytes / bandwidth of the fitted link: the candidate dispatch (header, plus main's
  KV entries of layers [0, e) after a miss), the hidden-state dispatch (``candidates``
  placement) and the hand-off (verdict header, then hidden state and KV entries, packed and
  appended); host_s is main's host time per pass measured on short real ``dist`` runs
  (``dist_host_figures``): posting messages, waiting for ids and preemption by the
  communication threads cost milliseconds there, against tens of microseconds in greedy.
"""

from __future__ import annotations

import copy
import json
import math
from functools import partial
from pathlib import Path

import numpy as np
import torch
from scipy.stats import f as f_dist

from measure.checks import check_model
from measure.decode.backends import ppd_many
from measure.hf.loading import resolve_model_dir
from measure.profile.dispatch import dispatch_delays
from measure.profile.drift import DriftWatch, MachineDrift, drift_factors
from measure.profile.host import host_seconds
from measure.profile.link import fit_link
from measure.profile.probes import DecodeProbe, context_ids
from measure.profile.progress import progress_bar
from measure.profile.provenance import provenance
from measure.profile.ranks import RankProbe, probe_ranks
from measure.profile.replicates import PROFILE_REPLICATES, cost_replicates
from measure.profile.stats import (
    RANK_REPEATS,
    REMEASURE_ROUNDS,
    WIDE_REL_IQR,
    LoadMonitor,
    Spread,
    noisy_warnings,
    run_interleaved,
    spreads,
)
from ppdmodel.cost_profile import (
    PROFILE_FORMAT,
    PROFILE_VERSION,
    CostProfile,
    parse_cost_profile,
    read_cost_profile,
)
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS, link_seconds
from ppdmodel.defaults import default_d_bar
from ppdmodel.validation import (
    as_int,
    as_path,
    check_flag,
    check_instance,
    items_of,
    refused_as,
)

BACKENDS = ("single", "dist")
"""Backends a profile can describe (``measure.decode.backends.BACKENDS``)."""
SINGLE_SLOWDOWN = 2.0
"""The single backend runs main and the candidate batch one after the other: on a CPU on the
same threads, on a GPU from one Python thread that launches both CUDA streams' kernels (eager
decoding is launch-bound there, so the launches serialize; docs/record/gpu_validation.md)."""
DIST_THREADS = 1
"""torch threads per rank of the ``dist`` backend (``DistJob.num_threads``)."""
HEADER_INTS = 6
"""int64 slots of a ``dist`` protocol header before the k candidate ids."""
HOST_PROBE_TOKENS = 24
"""New tokens per run of the ``dist`` host-time probe (``dist_host_figures``)."""
HOST_PROBE_PROMPTS = 2
"""Synthetic prompts per early-head placement in that probe."""
HOST_PROBE_SKIP = 2
"""Leading passes of each probe run left out (warm-up)."""
PRICE_FIGURES = ("layer_s", "early_head_s", "final_head_s", "candidate_layer_s[",
                 "stream_alone_s", "stream_both_s")  # fmt: skip
"""Figures (names, or name prefixes ending in "[") that price a pass's large terms and are
held to the spread threshold; the small ones (host, embedding, copies, link) only warn. The
two-stream figures only where no pair probe ran (``held_prices``)."""


def measure_profile(
    model,
    *,
    name: str | None = None,
    model_dir=None,
    backends=("single",),
    ks=(1, 3),
    threads: int | None = None,
    context_tokens: int = 128,
    repeats: int = 20,
    warmup: int = 2,
    calls: int = 3,
    rank_repeats: int = RANK_REPEATS,
    progress: bool = False,
    max_spread: float = WIDE_REL_IQR,
    remeasure_rounds: int = REMEASURE_ROUNDS,
    drift_floor: float = 0.0,
) -> CostProfile:
    """Measure a cost profile of ``model`` (a loaded Hugging Face causal LM) on this machine.

    backends: ``single`` is always measured (greedy decoding is predicted from it); ``dist``
    needs ``model_dir`` (the ranks load the model from it). ks: candidate batch sizes.
    threads: torch threads for ``single`` (default: the current setting). context_tokens:
    cached positions while timing (use the prompts' mean length plus half the new tokens).
    repeats / warmup: timed and untimed interleaved rounds; calls: back-to-back calls a
    sample averages (``run_interleaved``); rank_repeats: rounds of the two-rank probe.
    progress: a progress bar (only when stdout is a terminal). max_spread: the IQR / median
    above which a price (``PRICE_FIGURES``) is re-measured, up to ``remeasure_rounds`` more
    times, and, if still wider, marked in the profile's ``wide_prices`` (readers then refuse
    it unless told to accept it: ``ppdmodel.cost_profile.check_wide_prices``). drift_floor:
    the machine's drift over minutes as a log-sd in [0, 1) (``measure.profile.drift``); the
    intervals carry at least it.
    """
    check_model(model)
    wanted = _check_backends(backends, model_dir)
    with refused_as("drift_floor"):  # (checked before minutes of timing)
        MachineDrift((), 1).with_floor(drift_floor)
    if not (isinstance(max_spread, int | float) and not isinstance(max_spread, bool)
            and max_spread > 0 and math.isfinite(max_spread)):  # fmt: skip
        raise ValueError(f"max_spread must be a finite fraction > 0, got {max_spread!r}")
    if isinstance(remeasure_rounds, bool) or not isinstance(remeasure_rounds, int) or not (
            0 <= remeasure_rounds <= MAX_ROUNDS):  # fmt: skip
        raise ValueError(f"remeasure_rounds must be an integer in [0, {MAX_ROUNDS}], got "
                         f"{remeasure_rounds!r}")  # fmt: skip
    ks = _check_ks(ks)
    vocab = model.config.get_text_config().vocab_size
    if ks[-1] > vocab:
        raise ValueError(f"ks must be <= the vocabulary size {vocab}, got {ks[-1]}")
    threads = torch.get_num_threads() if threads is None else _positive("threads", threads)
    _positive("repeats", repeats)
    _positive("calls", calls)
    _positive("rank_repeats", rank_repeats)
    as_int("warmup", warmup, minimum=0, limit=MAX_ROUNDS)
    context_tokens = as_int("context_tokens", context_tokens, minimum=2)
    check_flag("progress", progress)
    if name is not None:
        check_instance("name", name, str)
    if model_dir is not None:  # a folder, .gguf file or known name, as ``--model`` takes
        with refused_as("model_dir"):
            model_dir = str(resolve_model_dir(model_dir))
    device = next(model.parameters()).device
    d = model.config.get_text_config().num_hidden_layers
    counts = {"single": threads, "dist": DIST_THREADS}
    monitor = LoadMonitor(own_threads=max(counts[b] for b in wanted) * (1 + ("dist" in wanted)))
    previous = torch.get_num_threads()
    figures, warnings, entries = {}, [], {}
    watch = DriftWatch(model, context_tokens=context_tokens, threads=threads)
    watch.window()
    try:
        for backend in wanted:
            torch.set_num_threads(counts[backend])
            probe = DecodeProbe(model, context_tokens=context_tokens)
            measure = partial(compute_figures, probe, ks, repeats=repeats, warmup=warmup,
                              calls=calls, progress=progress, label=backend,
                              startup=True, on_round=watch.midway)  # fmt: skip
            figures[backend] = remeasure_wide(measure(), measure, max_spread, remeasure_rounds)
            watch.window()
    finally:
        torch.set_num_threads(previous)
    shapes = probe.shapes()
    link = None
    if "dist" in wanted:
        ranks = partial(_dist_figures, model_dir, model, shapes, d, ks, context_tokens,
                        rank_repeats)  # fmt: skip
        link = ranks()
        figures["dist"].update(link.pop("figures"))
        figures["dist"] = remeasure_wide(
            figures["dist"], lambda: ranks()["figures"], max_spread, remeasure_rounds
        )
        watch.window()
        figures["dist"].update(dist_host_figures(model_dir, model, ks, context_tokens))
        watch.window()
    drift = watch.drift().with_floor(drift_floor)
    scale = drift_factors(drift, PROFILE_REPLICATES)
    if drift.warning():
        warnings.append(drift.warning())
    for backend in wanted:
        entries[backend] = _priced(backend, figures[backend], d, ks, shapes, device, link,
                                   scale)  # fmt: skip
        entries[backend]["threads"] = counts[backend]
        warnings += _figure_warnings(backend, figures[backend])
        warnings += entries[backend].pop("warnings")
    wide = [
        {"backend": b, "figure": n, "rel_spread": s.rel_iqr, "threshold": max_spread}
        for b in wanted
        for n in held_prices(figures[b])
        if (s := figures[b][n]).rel_iqr > max_spread
    ]
    load = monitor.reading()
    if load.loaded:
        warnings.append(f"the machine was loaded while profiling: {load.describe()}")
    data = {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "model": _model_entry(model, name, model_dir, d, context_tokens, shapes),
        "backends": entries,
        "figures": {b: {k: s.to_dict() for k, s in f.items()} for b, f in figures.items()},
        "link": _link_entry(link),
        "provenance": provenance(device=device, dtype=model.dtype, threads=threads, load=load),
        "warnings": warnings,
        "spread_threshold": max_spread,
        "wide_prices": wide,
        "machine": drift.to_dict(),
    }
    return parse_cost_profile(data, d=d)


def is_price(name: str) -> bool:
    """True for a figure named in ``PRICE_FIGURES``."""
    return any(_matches(name, p) for p in PRICE_FIGURES)


def held_prices(figures) -> list[str]:
    """The names in ``figures`` held to the spread threshold: the prices (``is_price``), less
    the two-stream figures where the pair probe ran. Its factors then price every overlap of
    a configuration with k candidates (``pair_slowdowns``), and re-measuring a wide stream
    figure would re-run the whole rank probe for a figure no PPD prediction reads."""
    paired = any(n.startswith("pair_") for n in figures)
    return [n for n in figures if is_price(n) and not (paired and n.startswith("stream_"))]


PAIRED_GROUPS = (
    ("batch_startup_s[", "batch_after_head_s[", "embedding_s", "candidate_layer_s["),
    ("stream_both_s", "stream_alone_s"),
)
"""Figures combined round by round, each group led by the figure that combines them: the
start-up is the batch after the head less its embedding and layers of the same round
(``probe_samples``), the two-stream slowdown both over alone of the same rounds. Where its
leader is present, a group is only ever replaced as a whole (``remeasure_wide``)."""


def _matches(name: str, pattern: str) -> bool:
    return name == pattern or (pattern.endswith("[") and name.startswith(pattern))


def _groups(figures) -> list[list[str]]:
    """The ``PAIRED_GROUPS`` present in ``figures`` (their leader there), as lists of names."""
    return [[n for n in figures if any(_matches(n, p) for p in group)]
            for group in PAIRED_GROUPS
            if any(_matches(n, group[0]) for n in figures)]  # fmt: skip


def remeasure_wide(figures: dict, measure, max_spread: float, rounds: int) -> dict:
    """``figures`` with every price whose IQR / median exceeds ``max_spread`` measured again
    (``measure()`` gives fresh figures), up to ``rounds`` times; a price keeps the narrower of
    its measurements (a quiet spell is what was missing, not more samples of a busy one).
    Figures combined round by round (``PAIRED_GROUPS``) move as one group, taken fresh when
    the group's widest price is narrower there, so their rounds stay paired. Stops early when
    ``measure()`` supplies none of the wide prices (e.g. the ranks, for a compute figure)."""
    figures = dict(figures)
    for _ in range(rounds):
        held = held_prices(figures)
        wide = [n for n in held if figures[n].rel_iqr > max_spread]
        if not wide:
            break
        fresh = measure()
        if not any(n in fresh for n in wide):
            break
        groups = _groups(figures)
        grouped = {n for group in groups for n in group}
        for name in wide:
            if (
                name not in grouped
                and name in fresh
                and fresh[name].rel_iqr < figures[name].rel_iqr
            ):
                figures[name] = fresh[name]
        for group in groups:
            prices = [n for n in group if n in held]
            if not set(prices) & set(wide) or not all(n in fresh for n in group):
                continue
            if max(fresh[n].rel_iqr for n in prices) < max(figures[n].rel_iqr for n in prices):
                figures.update({n: fresh[n] for n in group})
    return figures


def compute_figures(
    probe: DecodeProbe, ks, *, repeats, warmup=1, calls=1, progress=False, label="",
    startup: bool = False, on_round=None,
) -> dict:  # fmt: skip
    """Interleaved rounds of the probe's pieces: a Spread per figure (per-layer seconds for
    ``layer_s`` and ``candidate_layer_s[k]``; the whole step's layers in ``layers_s``); with
    ``startup``, the batch after an early head too (``probe_samples``); ``on_round(done,
    total)`` after every round (the drift sentinel's midway window)."""
    bar = progress_bar(warmup + repeats, enabled=progress, desc=f"profile {label}".strip())

    def after_round(done: int, total: int) -> None:
        if bar:
            bar.update(1)
        if on_round is not None:
            on_round(done, total)

    try:
        samples = probe_samples(
            probe, ks, repeats=repeats, warmup=warmup, calls=calls, progress=after_round,
            startup=startup,
        )  # fmt: skip
    finally:
        if bar:
            bar.close()
    return spreads(samples)


def probe_samples(probe: DecodeProbe, ks, *, repeats, warmup=1, calls=1, progress=None,
                  startup: bool = False) -> dict:  # fmt: skip
    """The timed samples behind ``compute_figures`` (lists of seconds per figure name); with
    ``startup``, ``batch_after_head_s[k]``: the k-row batch at ``default_d_bar(d)`` timed right
    after an early head (``DecodeProbe.batch_after_head``), as the single backend runs it and
    as a ``dist`` candidate rank does with the early head on its side."""
    d_bar = default_d_bar(probe.d)
    tasks = {
        "step": probe.step,
        "early_head": lambda: {"early_head_s": probe.early_head(max(ks))},
        **{f"candidates[{k}]": _bind(probe.candidates, k) for k in ks},
        "handoff": probe.handoff,
    }
    if startup:
        tasks.update({f"batch_after_head[{k}]": _bind_startup(probe, k, d_bar) for k in ks})
    samples = run_interleaved(tasks, repeats=repeats, warmup=warmup, calls=calls, progress=progress)
    samples["layer_s"] = [s / probe.d for s in samples["layers_s"]]
    if startup:  # paired in each round: a slow spell moves the batch and its parts alike
        gap = probe.d - d_bar
        for k in ks:
            samples[f"batch_startup_s[{k}]"] = [
                cold - embedding - gap * layer
                for cold, embedding, layer in zip(samples[f"batch_after_head_s[{k}]"],
                                                  samples["embedding_s"],
                                                  samples[f"candidate_layer_s[{k}]"], strict=True)
            ]  # fmt: skip
    return samples


def reprice(profile: CostProfile, figures: dict, *, shapes: dict, device, note: str,
            drift: MachineDrift | None = None) -> CostProfile:  # fmt: skip
    """``profile`` with the figures of each backend in ``figures`` (backend -> name -> Spread)
    replaced and that backend's costs and replicates rebuilt by the profile's own rule; the
    figures not given (e.g. the ``dist`` link, two-stream slowdown and host time) are kept.
    ``shapes``: ``DecodeProbe.shapes()``; ``note`` is recorded in the provenance; ``drift``:
    the machine's drift while the new figures were timed (default: the profile's own; given,
    every backend's replicates are rebuilt with its factors)."""
    data = copy.deepcopy(profile.data)
    if drift is not None:
        data["machine"] = drift.to_dict()
    scale = drift_factors(MachineDrift.from_dict(data.get("machine")), PROFILE_REPLICATES)
    link = data.get("link")
    if link is not None:
        bandwidth = link["bandwidth_bytes_per_s"]
        link = {"latency_s": link["latency_s"],
                "bandwidth_bytes_per_s": math.inf if bandwidth is None else bandwidth}  # fmt: skip
    for backend in figures:
        if backend not in profile.backends:
            raise ValueError(f"figures: the profile has no backend {backend!r}")
    # a new drift rescales every backend's replicates alike (their ratios cancel it): the
    # backends not re-timed are rebuilt from their own figures with the new factors
    timed = data.get("figures", {})
    rebuilt = {**({b: {} for b in profile.backends if timed.get(b)} if drift else {}),
               **figures}  # fmt: skip
    warnings = []
    for backend, new in rebuilt.items():
        old = {name: Spread.from_dict(v) for name, v in data["figures"][backend].items()}
        merged = {**old, **new}
        ks = profile.backends[backend].measured_ks
        entry = _priced(backend, merged, profile.d, ks, shapes, device, link, scale, set(new))
        warnings += _figure_warnings(backend, new) + entry.pop("warnings")
        entry["threads"] = data["backends"][backend].get("threads")
        data["backends"][backend] = entry
        data["figures"][backend] = {name: s.to_dict() for name, s in merged.items()}
    data["warnings"] = warnings
    data["provenance"] = {**data.get("provenance", {}), "repriced": note}
    return parse_cost_profile(data, d=profile.d)


def _priced(backend, figures, d, ks, shapes, device, link, scale=None, fresh=None) -> dict:
    """A backend entry with its bootstrap replicates (``measure.profile.replicates``; replicate
    i scaled by ``scale[i]``, the machine's drift: ``measure.profile.drift``). ``fresh``: the
    figure names just re-timed (``reprice``), the only ones whose pair ratios pool together;
    the replicates pool the groups the entry pooled, without re-testing them."""
    entry = _backend_entry(backend, figures, d, ks, shapes, device, link, fresh=fresh)
    groups = entry.get("pair_slowdowns", {}).get("pooled")
    entry["cost_replicates"] = cost_replicates(
        figures,
        lambda fig: _backend_entry(backend, fig, d, ks, shapes, device, link, groups=groups),
        scale=scale,
    )
    for replicate in entry["cost_replicates"]:  # the factors alone: reports read the entry's
        for key in ("measured", "pooled"):
            replicate.get("pair_slowdowns", {}).pop(key, None)
    return entry


def _bind(fn, k):
    return lambda: fn(k)


def _bind_startup(probe: DecodeProbe, k: int, d_bar: int):
    return lambda: {f"batch_after_head_s[{k}]": probe.batch_after_head(k, d_bar)}


def _dist_figures(model_dir, model, shapes, d, ks, context_tokens, repeats) -> dict:
    """Link fit and two-stream slowdown from two gloo ranks."""
    elem = shapes["element_bytes"]
    kv_layer = 2 * shapes["kv_heads"] * shapes["head_dim"] * elem
    sizes = sorted(
        {
            _round4(8 * (HEADER_INTS + max(ks))),
            _round4(shapes["hidden_size"] * elem),
            _round4(shapes["hidden_size"] * elem + kv_layer * d),
            4096,
            65536,
        }
    )
    samples = probe_ranks(
        RankProbe(
            sizes=tuple(sizes),
            repeats=repeats,
            model_dir=str(model_dir),
            dtype=str(model.dtype).removeprefix("torch."),
            context_tokens=context_tokens,
            pair_ks=tuple(ks),
            d_bar=default_d_bar(d),
        )
    )
    link_samples = [
        (n, s) for n in sizes for s in samples[f"link_s[{n}]"]
    ]  # (bytes, one-way seconds)
    latency, bandwidth = fit_link(link_samples)
    figures = spreads(samples)
    return {
        "latency_s": latency,
        "bandwidth_bytes_per_s": bandwidth,
        "sizes": sizes,
        "figures": figures,
    }


def dist_host_figures(model_dir, model, ks, context_tokens: int) -> dict[str, Spread]:
    """``dist_host_s``: main's host time per pass (``measure.profile.host``) on short real
    ``dist`` runs, both early-head placements, at d_bar = ceil(d / 2) and the largest k, on
    ``HOST_PROBE_PROMPTS`` synthetic prompts of about ``context_tokens`` positions; the first
    ``HOST_PROBE_SKIP`` passes of each run (warm-up) are left out. Also each placement's own,
    ``dist_host_s[main]`` and ``dist_host_s[candidates]``: with the early head on the candidate
    side main waits for the rank's ids when its early head outlasts main's suffix and final
    head, a right-skewed wait that the pooled median leaves out (``host_by_placement``)."""
    config = model.config.get_text_config()
    d = config.num_hidden_layers
    length = max(2, context_tokens - HOST_PROBE_TOKENS // 2)
    prompts = [
        torch.roll(context_ids(length, config.vocab_size), shifts=i, dims=1)
        for i in range(HOST_PROBE_PROMPTS)
    ]
    samples, figures = [], {}
    d_bar = default_d_bar(d)
    for placement in EARLY_HEAD_PLACEMENTS:
        runs = ppd_many(
            str(model_dir), prompts, d_bar=d_bar, k=max(ks),
            max_new_tokens=HOST_PROBE_TOKENS, backend="dist", early_head=placement, warmup=False,
        )  # fmt: skip
        own = [s for run in runs for s in host_seconds(run, "dist")[HOST_PROBE_SKIP:]]
        figures[f"dist_host_s[{placement}]"] = Spread.of(own)
        samples += own
        delays = [delay for run in runs for t, delay in dispatch_delays(
            run.trace.events, d=d, d_bar=d_bar, early_head=placement).items()
            if t > HOST_PROBE_SKIP]  # fmt: skip
        if delays:
            figures[f"dist_dispatch_s[{placement}]"] = Spread.of(delays)
    return {"dist_host_s": Spread.of(samples), **figures}


DISPATCH_WARN_RATIO = 2.0
"""``dispatch_warnings`` names a placement whose candidates started, on average, more than
this many times their priced dispatch after main's split (and at least 0.5 ms later)."""


def dispatch_warnings(fig: dict[str, Spread], costs: dict, per_layer: dict, startup: float,
                      e: int) -> list[str]:  # fmt: skip
    """The short real ``dist`` runs' mean delay from main's split to the candidate side's
    first block (``dist_dispatch_s[placement]``, ``measure.profile.dispatch``)
    against the dispatch the link probe prices at their e = d - d_bar candidate layers (less
    the batch's start-up, timed after the delay). Not priced from: one delay per pass cannot
    hold both the short wait after a match and the longer one after a miss (the rank has been
    idle, and unpacks main's KV), and the runs' mix of the two is not a judged run's. Named
    instead, so a prediction whose candidate batch outlasts main's suffix is known to be
    optimistic by up to the difference per accepted pass."""
    out = []
    for placement, name in (("main", "candidate_dispatch_s"), ("candidates", "hidden_dispatch_s")):
        spread = fig.get(f"dist_dispatch_s[{placement}]")
        if spread is None or not spread.n:
            continue
        price = costs[name] + e * per_layer.get(name, 0.0)
        price -= startup if placement == "candidates" else 0.0
        if spread.mean > DISPATCH_WARN_RATIO * price and spread.mean - price > 5e-4:
            out.append(
                f"dist, early head on {placement}: the candidates started {1e3 * spread.mean:.3g}"
                f" ms (mean; median {1e3 * spread.median:.3g} ms) after main's split in the short"
                f" real runs, the dispatch is priced {1e3 * price:.3g} ms: a pass that waits for"
                " the candidate batch is predicted too fast by up to the difference (ppd "
                "validate's term check: 'candidate start')"
            )
    return out


def host_by_placement(fig: dict[str, Spread]) -> dict[str, float]:
    """PPD's host time per pass on ``dist`` for each early-head placement the profile ran:
    the mean of that placement's samples (``dist_host_figures``). A mean, not a median: a
    run's time is the sum of its passes, and with the early head on the candidate side main
    sometimes waits for the rank's ids (on small-wide-vocab, 64 Ki vocabulary: median 0.86 ms,
    mean 1.58 ms per pass; with the early head on main, median and mean 0.89 ms). Empty for a
    profile that kept only the pooled figure."""
    return {
        placement: fig[name].mean
        for placement in EARLY_HEAD_PLACEMENTS
        if (name := f"dist_host_s[{placement}]") in fig and fig[name].n
    }


def _round4(n: int) -> int:
    return int(4 * math.ceil(n / 4))


def _backend_entry(backend, fig, d, ks, shapes, device, link, *, fresh=None, groups=None) -> dict:
    """The profile's ``backends.<backend>`` entry: DecodeCosts at e = 0 and per-layer growth.
    ``fresh`` and ``groups``: how the ``dist`` pair factors pool (``pair_slowdowns``)."""
    med = {name: s.median for name, s in fig.items()}
    by_k = {k: med[f"candidate_layer_s[{k}]"] for k in ks}
    warnings, notes = [], []
    slope = 0.0
    if len(ks) > 1:
        slope = max(0.0, float(np.polyfit(list(by_k), list(by_k.values()), 1)[0]))
    costs = dict(
        layer_s=med["layer_s"],
        candidate_extra_row_layer_s=slope,
        candidate_layer_s_by_k={str(k): s for k, s in by_k.items()},
        embedding_s=med["embedding_s"],
        early_head_s=med["early_head_s"],
        final_head_s=med["final_head_s"],
        candidate_dispatch_s=0.0,
        hidden_dispatch_s=0.0,
        handoff_s=0.0,
        host_s=med["host_s"],
        shared_device_slowdown=1.0,
    )
    per_layer = {"handoff_s": med["handoff_copy_s"]}
    if backend == "single":
        costs["shared_device_slowdown"] = SINGLE_SLOWDOWN
        startup = batch_startup(med, ks)
        if startup is not None:
            costs["candidate_dispatch_s"] = costs["hidden_dispatch_s"] = startup
            notes.append(
                "candidate_dispatch_s = hidden_dispatch_s: the candidate batch's start-up right "
                "after the early head, as a run starts it (batch_after_head_s, beyond embedding "
                "+ layers at its k)"
            )
        if device.type == "cpu":
            notes.append(
                "shared_device_slowdown = 2: on a CPU the single backend runs the candidate "
                "batch on main's threads between main's two halves (one stream at a time)"
            )
        else:
            notes.append(
                "shared_device_slowdown = 2: one Python thread launches both CUDA streams and "
                "eager decoding is launch-bound, so the two sides serialize (an H100 measured "
                "PPD 1.4-2.3x greedy on one process; docs/record/gpu_validation.md)"
            )
            warnings.append(
                "single backend on CUDA: the two-stream slowdown is taken as 2 (launches "
                "serialize), not measured; a bandwidth-bound run overlaps more than priced"
            )
    greedy_host, dist_startup = None, None
    if backend != "single":
        costs, per_layer, more, greedy_host = _dist_costs(costs, med, shapes, ks, link, device)
        warnings += more
        dist_startup = batch_startup(med, ks)
        if dist_startup is not None:
            costs["hidden_dispatch_s"] += dist_startup
            notes.append(
                "hidden_dispatch_s: the hidden state's message, then the candidate batch's "
                "start-up right after the early head on the candidate rank (batch_startup_s; "
                "with the early head on main the rank's batch follows a message, not a head)"
            )
    serial = backend == "single"
    entry = {"costs": costs, "per_candidate_layer_s": per_layer, "serial": serial,
             "notes": notes, "warnings": warnings}  # fmt: skip
    if greedy_host is not None:
        entry["greedy_host_s"] = greedy_host  # greedy priced on this backend's figures
    if dist_startup is not None:
        # within hidden_dispatch_s already; kept apart too, for the term check's batch price
        entry["batch_startup_s"] = dist_startup
    if backend == "dist":
        e = d - default_d_bar(d)
        warnings += dispatch_warnings(fig, costs, per_layer, dist_startup or 0.0, e)
        if rank := rank_startup(med, costs, ks, e):
            entry["rank_startup_s_by_k"] = rank
            notes.append(
                "rank_startup_s_by_k: the candidate rank's early head, top-k and batch timed as "
                "one call on the rank (pair probe, alone) beyond the one-process prices of those "
                "parts, per k; it replaces batch_startup_s with the early head on the candidates"
            )
    if backend == "dist" and (by_placement := host_by_placement(fig)):
        entry["host_s_by_placement"] = by_placement  # PPD's host per pass, per placement
    if backend == "dist" and f"pair_main_both_s[{ks[0]}]" in med:
        if device.type == "cpu":  # elsewhere the ranks run on two devices: nothing is shared
            pairs = {name: s for name, s in fig.items() if name.startswith("pair_")}
            pair = pair_slowdowns(pairs, ks, default_d_bar(d), fresh=fresh, groups=groups)
            entry["pair_slowdowns"] = pair
            rounds = fig[f"pair_main_both_s[{ks[0]}]"].n
            pooled = "; ".join(f"{side}'s pooled over {', '.join(map(' + '.join, g))}"
                               for side, g in pair["pooled"].items())  # fmt: skip
            entry["notes"].append(
                f"pair factors: mean both / mean alone over {rounds} rounds"
                + (f" ({pooled}; as measured: pair_slowdowns.measured)" if pooled else "")
            )
            entry["warnings"] += _pair_warnings(entry["pair_slowdowns"])
        else:
            entry["notes"].append("no pair slowdowns: the dist ranks run on two devices")
    return entry


def batch_startup(med: dict, ks) -> float | None:
    """What the k-row batch costs right after an early head beyond the price of its parts:
    the medians of ``batch_startup_s[k]`` (per round, ``batch_after_head_s[k]`` at d_bar =
    ``default_d_bar(d)`` minus the embedding and d - d_bar candidate layers at k timed in the
    same round: ``probe_samples``), averaged over the measured k and floored at 0; None where
    the profile did not time it (older profiles)."""
    extra = [med[f"batch_startup_s[{k}]"] for k in ks if f"batch_startup_s[{k}]" in med]
    return max(0.0, float(np.mean(extra))) if extra else None


def rank_startup(med: dict, costs: dict, ks, e: int) -> dict[str, float]:
    """Per k, what the candidate rank's own call with the early head on its side costs beyond
    the one-process prices of its parts: the median of ``pair_cand_alone_s[k,candidates]``
    (the pair probe's early head, top-k and k-row batch at ``default_d_bar(d)``, e = d -
    d_bar layers, alone on the rank) less early head + embedding + e layers at k, floored at
    0. A run's candidate rank makes that call; on the 2-vCPU VM it took 0.7-6.9 ms (k = 3)
    beyond its parts where the one-process start-up (``batch_startup``) read 0.2-1.5 ms.
    Empty where the pair probe did not time that placement."""
    if isinstance(e, bool) or not isinstance(e, int) or e < 0:
        raise ValueError(f"e must be an integer >= 0 (candidate layers), got {e!r}")
    out = {}
    for k in ks:
        name = f"pair_cand_alone_s[{k},candidates]"
        if name in med:
            parts = (costs["early_head_s"] + costs["embedding_s"]
                     + e * costs["candidate_layer_s_by_k"][str(k)])  # fmt: skip
            out[str(k)] = max(0.0, float(med[name]) - parts)
    return out


def _pair_warnings(pairs: dict) -> list[str]:
    """A pair factor measured below 1 (noise), with the factor a prediction applies there (a
    pooled one, or the ratio itself; either taken as 1 if below)."""
    measured = pairs.get("measured", pairs)
    return [
        f"dist: the {side} side measured x{factor:.3f} beside the other at k={k}{where} (< 1, "
        f"noise); applied x{pairs[field][k][side]:.3f} (pooled where it agrees with the "
        "others; below 1 taken as 1)"
        for field, where in (("by_k", ""), ("by_k_candidates", ", early head on the candidates"))
        for k, sides in measured.get(field, {}).items()
        for side, factor in sides.items()
        if factor < 1
    ]


BOTH_ALONE = ("both", "alone")
"""The pair probe's two timings of each side: beside the other, and alone."""
POOL_ALPHA = 0.05
"""A side's pair factors are pooled unless the test of their agreement rejects it at this
level (``pooled_pair_factors``)."""


def pair_slowdowns(figures, ks, d_bar: int, *, fresh=None, groups=None) -> dict:
    """Each side's own slowdown where a ``dist`` run overlaps (``measure.profile.ranks`` pair
    probe at ``d_bar``): main's suffix + final head beside the k-row batch and the batch beside
    them, mean both / mean alone over the rounds, per k. Means, not medians: a run's overlaps
    add up, so a spell of sharing costs it as long as the spell lasts; over 8-32 rounds of
    ``experiments/sharing_drift.py`` the ratio of means also moved least between stretches. A
    prediction for k applies them in place of ``shared_device_slowdown`` (the two-greedy-
    streams figure, one factor for both sides). Where the probe also timed the ``candidates``
    placement for every k (the candidate side's early head, then the batch, beside main:
    ``pair_..._s[k,candidates]``), its factors are ``by_k_candidates``, same shape, which price
    that placement. ``figures``: figure name -> ``Spread`` (its samples give each ratio's
    sampling error).

    Each side's ratios are then pooled where they agree within their sampling error
    (``pooled_pair_factors``): all of them at once, else each placement's k; ``fresh`` (figure
    names, e.g. those ``reprice`` re-timed): only ratios timed together pool, the fresh ones
    apart from the rest; ``groups`` (a ``pooled`` table of an earlier call): pool those groups
    without testing them (the bootstrap replicates follow the entry's choice). The ratios as
    measured are kept in ``measured``, each side's pooled groups in ``pooled`` (lists of
    ``"by_k[k]"`` labels). Why: over 78 profiles of the 2-vCPU VM one ratio's own standard
    error was 3-8 %, the sd between profiles of one ratio over another 4-6 %, while the k and
    placement effects were 1-3 % (the means of those logs; ``docs/record/cpu_validation.md``, "Pair
    factors pooled")."""
    names = {}
    for field, suffix in (("by_k", ""), ("by_k_candidates", ",candidates")):
        keys = {(field, str(k), side): tuple(f"pair_{key}_{kind}_s[{k}{suffix}]"
                                             for kind in BOTH_ALONE)
                for k in ks for side, key in (("main", "main"), ("candidate", "cand"))}  # fmt: skip
        if field == "by_k" or all(n in figures for pair in keys.values() for n in pair):
            names.update(keys)
    measured = {}
    for (field, k, side), (both, alone) in names.items():
        measured.setdefault(field, {}).setdefault(k, {})[side] = (
            figures[both].mean / figures[alone].mean
        )
    out, pooled = {"d_bar": d_bar, **copy.deepcopy(measured)}, {}
    for side in ("main", "candidate"):
        ratios = {(field, k): tuple(figures[n] for n in pair)
                  for (field, k, s), pair in names.items() if s == side}  # fmt: skip
        if groups is None:
            timed = {key: fresh is None or all(n in fresh for n in names[(*key, side)])
                     for key in ratios}  # fmt: skip
            chosen = [entry for together in (True, False)
                      for entry in _pool_groups([key for key in ratios if timed[key] == together],
                                                ratios)]  # fmt: skip
        else:  # the entry's groups, untested
            chosen = []
            for labels in groups.get(side, []):
                keys = [_label_key(label) for label in labels]
                factor = pooled_pair_factors([ratios[key] for key in keys], test=False)
                chosen.append((keys, factor))
        for group, factor in chosen:
            for field, k in group:
                out[field][k][side] = factor
            pooled.setdefault(side, []).append([f"{field}[{k}]" for field, k in group])
    out["measured"], out["pooled"] = measured, pooled
    return out


def _pool_groups(keys: list, ratios: dict) -> list[tuple[list, float]]:
    """(group, pooled factor) of the groups of ``keys`` (ratios timed together) that pool: all
    of them, else each placement's k; groups of one ratio are left out (nothing to pool)."""
    if len(keys) < 2:
        return []
    if (factor := pooled_pair_factors([ratios[key] for key in keys])) is not None:
        return [(keys, factor)]
    out = []
    for field in dict.fromkeys(field for field, _ in keys):
        group = [key for key in keys if key[0] == field]
        if len(group) < 2:
            continue
        if (factor := pooled_pair_factors([ratios[key] for key in group])) is not None:
            out.append((group, factor))
    return out


def _geometric_mean(ratios) -> float:
    """The unweighted geometric mean of (both, alone) ratios of means (``Spread.mean``)."""
    return math.exp(float(np.mean([math.log(b.mean / a.mean) for b, a in ratios])))


def _label_key(label: str) -> tuple[str, str]:
    """("by_k", "3") of the label "by_k[3]" (``pair_slowdowns``' ``pooled`` tables)."""
    field, k = label.rstrip("]").split("[")
    return field, k


def pooled_pair_factors(ratios, *, test: bool = True) -> float | None:
    """One factor for ``ratios`` (each a (both, alone) pair of ``Spread`` with samples): the
    inverse-variance weighted geometric mean of their ratios of means, where the test of their
    agreement does not reject it at ``POOL_ALPHA`` (``test``); None where it does, or where the
    sampling error cannot be estimated (a figure with fewer than 2 samples kept, or none
    spread), where without ``test`` the plain geometric mean stands in.

    The variance of a log ratio of means is the delta method's, with one relative variance s^2
    for all the ratios (they time the same kind of call, so the spread pooled over them is a
    steady estimate from few rounds): where every both and alone hold as many samples, they
    are the same rounds (the pair probe times both phases in each round, and a slow round
    slows both), so s^2 is that of the rounds' differences b_r / mean(b) - a_r / mean(a) and a
    ratio's variance s^2 / n; else the two means are taken as independent, s^2 (1/n_b +
    1/n_a). The test is Cochran's Q with that variance: Q / (m - 1) is F-distributed with
    (m - 1, the degrees of freedom of s^2)."""
    samples = [tuple(np.asarray(s.samples, dtype=float) for s in pair) for pair in ratios]
    if not samples:
        raise ValueError("ratios must hold at least one (both, alone) pair")
    if any(x.size < 2 for pair in samples for x in pair):
        return None if test else _geometric_mean(ratios)
    paired = all(b.size == a.size for b, a in samples)
    squares, dof, inverse_n = 0.0, 0, []
    for b, a in samples:
        if paired:
            squares += float(np.sum((b / b.mean() - a / a.mean()) ** 2))
            dof += b.size - 1
            inverse_n.append(1 / b.size)
        else:
            squares += sum(float(np.sum((x / x.mean() - 1) ** 2)) for x in (b, a))
            dof += b.size + a.size - 2
            inverse_n.append(1 / b.size + 1 / a.size)
    if not squares > 0:
        return None if test else _geometric_mean(ratios)
    logs = np.array([math.log(b.mean() / a.mean()) for b, a in samples])
    weights = 1 / (squares / dof * np.asarray(inverse_n))
    center = float(np.sum(weights * logs) / np.sum(weights))
    m = len(logs)
    if test and m > 1:
        q = float(np.sum(weights * (logs - center) ** 2))
        if f_dist.sf(q / (m - 1), m - 1, dof) < POOL_ALPHA:
            return None
    return math.exp(center)


def _dist_costs(costs, med, shapes, ks, link, device):
    """Messages and the two-stream slowdown of the ``dist`` backend."""
    latency, bandwidth = link["latency_s"], link["bandwidth_bytes_per_s"]
    elem = shapes["element_bytes"]
    kv_layer = 2 * shapes["kv_heads"] * shapes["head_dim"] * elem
    link = {"latency_s": latency, "bandwidth_bytes_per_s": bandwidth}

    def message(nbytes):  # a fit whose time did not grow with size: the latency alone
        return latency if math.isinf(bandwidth) else link_seconds(nbytes=nbytes, **link)

    header = message(8 * (HEADER_INTS + max(ks)))
    hidden = message(shapes["hidden_size"] * elem)
    per_kv_layer = 0.0 if math.isinf(bandwidth) else kv_layer / bandwidth
    warnings = []
    slowdown = 1.0
    if device.type == "cpu":
        alone, both = med["stream_alone_s"], med["stream_both_s"]
        slowdown = both / alone
        if slowdown < 1:
            warnings.append(
                f"dist: two decode streams measured {slowdown:.3f}x the time of one (< 1, "
                "noise); shared_device_slowdown set to 1"
            )
            slowdown = 1.0
    greedy_host = costs["host_s"]  # greedy's own, at the ranks' thread count
    costs = dict(
        costs,
        host_s=med.get("dist_host_s", costs["host_s"]),
        candidate_dispatch_s=header + latency,
        hidden_dispatch_s=header + hidden,
        handoff_s=header + hidden,
        shared_device_slowdown=slowdown,
    )
    sync = per_kv_layer + med["unpack_append_s"]
    per_layer = {
        "candidate_dispatch_s": sync,
        "hidden_dispatch_s": sync,
        "handoff_s": per_kv_layer + med["pack_s"] + med["unpack_append_s"],
    }
    return costs, per_layer, warnings, greedy_host


def _figure_warnings(backend: str, figures: dict[str, Spread]) -> list[str]:
    """Noisy cost-term figures one by one; noisy per-layer figures as one count."""
    per_layer = {k: s for k, s in figures.items() if k.startswith("layer_s[")}
    # the start-up is a difference of figures checked here already (its IQR / its small median)
    # the dispatch delays are no price: ``dispatch_warnings`` names them against theirs
    terms = {k: s for k, s in figures.items() if k not in per_layer
             and not k.startswith(("batch_startup_s[", "dist_dispatch_s["))}  # fmt: skip
    out = noisy_warnings(terms, backend)
    noisy = sum(s.noisy for s in per_layer.values())
    if noisy:
        out.append(f"{backend}: {noisy} of {len(per_layer)} per-layer times are noisy")
    return out


def _model_entry(model, name, model_dir, d, context_tokens, shapes) -> dict:
    config = model.config.get_text_config()
    if name is None:
        name = Path(model_dir).name if model_dir else getattr(config, "model_type", "model")
    return {
        "name": str(name),
        "path": None if model_dir is None else str(model_dir),
        "d": d,
        "architecture": getattr(config, "model_type", None),
        "vocab_size": int(config.vocab_size),
        "context_tokens": context_tokens,
        **shapes,
    }


def _link_entry(link) -> dict | None:
    if link is None:
        return None
    bandwidth = link["bandwidth_bytes_per_s"]
    return {
        "latency_s": link["latency_s"],
        "bandwidth_bytes_per_s": None if math.isinf(bandwidth) else bandwidth,
        "sizes_bytes": link["sizes"],
    }


def _check_backends(backends, model_dir) -> list[str]:
    items = items_of(backends)
    if items is None or not all(isinstance(b, str) for b in items):
        raise ValueError(f"backends must be taken from {BACKENDS}, got {backends!r:.80}")
    chosen = list(dict.fromkeys(items))
    bad = [b for b in chosen if b not in BACKENDS]
    if bad or not chosen:
        raise ValueError(f"backends must be taken from {BACKENDS}, got {backends!r}")
    if "dist" in chosen and model_dir is None:
        raise ValueError("backends with 'dist' need model_dir (the ranks load the model)")
    return ["single"] + [b for b in chosen if b != "single"]


def _check_ks(ks) -> tuple[int, ...]:
    values = items_of(ks)
    if not values or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in values):
        raise ValueError(f"ks must be one or more integers >= 1, got {ks!r:.80}")
    return tuple(sorted(set(values)))


MAX_ROUNDS = 10_000
"""Most rounds (repeats, calls, warm-ups, re-measurements) a profile takes: ten thousand rounds
of a real model's decode steps run for hours, so more is a mistake."""


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROUNDS:
        raise ValueError(f"{name} must be an integer >= 1 (at most {MAX_ROUNDS}), got "
                         f"{value!r:.80}")  # fmt: skip
    return value


def check_profile_path(path) -> Path:
    """``path`` as a Path if a profile can be written there (not a folder, nor under a file)."""
    path = as_path("path", path)
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"path {str(path)!r}: its folder {path.parent} is a file, not a folder")
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a folder; give a file name (.json)")
    return path


def write_profile(path, profile: CostProfile) -> Path:
    """Write ``profile`` as strict JSON (no NaN or Infinity) to ``path``; return the path."""
    path = check_profile_path(path)
    check_instance("profile", profile, CostProfile)
    try:
        text = json.dumps(profile.data, indent=2, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:  # NaN, infinities, objects JSON has no type for
        raise ValueError(f"profile: its data are not strict JSON ({exc})") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load_profile(path, *, model=None, d: int | None = None) -> CostProfile:
    """Read a profile file; ValueError naming the field when it is malformed or, given
    ``model`` (or its depth ``d``), when it was measured on a model of another depth."""
    if model is not None:
        check_model(model)
        d = model.config.get_text_config().num_hidden_layers
    with refused_as("path"):  # (a malformed file is named by the reader, not by argument)
        return read_cost_profile(path, d=d)


def figure(profile: CostProfile, backend: str, name: str) -> Spread:
    """One measured figure of ``profile`` (e.g. ``figure(p, "single", "layer_s[3]")``)."""
    try:
        return Spread.from_dict(profile.data["figures"][backend][name])
    except KeyError:
        raise ValueError(f"profile has no figure {name!r} for backend {backend!r}") from None
