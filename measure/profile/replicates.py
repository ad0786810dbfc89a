"""Bootstrap replicates of a backend's costs: the profile's timed samples resampled.

A profile's price is the median of repeated samples, so it carries the sampling error of a
median. ``cost_replicates`` redraws every figure that kept its samples (as many as were timed),
takes the medians, and rebuilds the backend's costs from them with the same rule as the profile
itself (``build``); a prediction evaluated on each replicate gives the interval of
``ppdmodel.intervals``.

The samples are redrawn as a circular block bootstrap (blocks of ``block_length(n)``
consecutive rounds), not one sample at a time: on a shared machine a slow spell spans several
rounds, and drawing samples independently would take their correlation for independent evidence
and give too narrow an interval. One replicate draws the same round indices for every figure
with the same number of samples: the figures of one ``run_interleaved`` call were timed in the
same rounds, so a slow round raises the layers and the heads of that replicate together, as it
did on the machine (figures of other calls that happen to have as many samples are drawn alike
too, which is harmless: each is still redrawn uniformly). ``scale``
(``measure.profile.drift.drift_factors``) multiplies every figure of replicate i by its own
factor: the machine's drift between the profile's windows. The fitted link of the ``dist``
backend (latency and bandwidth) is not redrawn: its messages are a small part of a pass. The
pair probe's samples (``pair_*``) are, so each replicate has its own pair factors
(``pair_slowdowns``, from the drawn samples' means).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from measure.profile.stats import Spread

PROFILE_REPLICATES = 100
"""Bootstrap replicates a profile stores per backend."""
REPLICATE_KEYS = ("costs", "per_candidate_layer_s", "greedy_host_s", "pair_slowdowns",
                  "host_s_by_placement", "batch_startup_s", "rank_startup_s_by_k")  # fmt: skip
"""The parts of a backend entry a replicate holds (``ppdmodel.cost_profile``): the pair
factors and the per-placement host time of a ``dist`` entry too, so a prediction's interval
carries their spread."""


def cost_replicates(
    figures: Mapping[str, Spread],
    build: Callable[[dict[str, Spread]], dict],
    *,
    replicates: int = PROFILE_REPLICATES,
    seed: int = 0,
    scale=None,
) -> list[dict]:
    """``replicates`` backend entries, each ``build`` of the figures with every kept sample
    set redrawn in blocks of rounds (its median taken, and the drawn samples kept for
    ``Spread.mean``, times ``scale[i]`` where given);
    figures without samples stay as they are (scaled). Seeded: the same samples give the same
    replicates."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise ValueError(f"replicates must be an integer >= 1, got {replicates!r}")
    factors = np.ones(replicates) if scale is None else np.asarray(scale, dtype=float)
    if factors.shape != (replicates,) or not np.all(np.isfinite(factors) & (factors > 0)):
        raise ValueError(f"scale must hold {replicates} finite factors > 0, got {scale!r}")
    rng = np.random.default_rng(seed)
    out = []
    for factor in factors:
        rounds: dict[int, np.ndarray] = {}  # sample count -> the rounds this replicate draws
        drawn = {}
        for name, spread in figures.items():
            n = len(spread.samples)
            if n:
                if n not in rounds:
                    rounds[n] = block_draw(n, rng)
                values = np.asarray(spread.samples)[rounds[n]] * factor
                median = float(np.median(values))
                drawn[name] = Spread(median, median, median, spread.n, tuple(values.tolist()))
            else:
                drawn[name] = spread.scaled(float(factor)) if factor != 1 else spread
        entry = build(drawn)
        out.append({key: entry[key] for key in REPLICATE_KEYS if key in entry})
    return out


def block_length(n: int) -> int:
    """Rounds per block for ``n`` samples: ceil(n ** (1/3)) (the usual order for a variance;
    3 for 20 rounds, 5 for 100), at most n // 2 so that a draw can differ from the samples."""
    return max(1, min(math.ceil(n ** (1 / 3) - 1e-9), n // 2))


def block_draw(n: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of one circular block bootstrap draw of ``n`` samples in time order: blocks of
    ``block_length(n)`` consecutive indices (wrapping at the end) from random starts, cut to
    ``n``."""
    length = block_length(n)
    starts = rng.integers(0, n, size=math.ceil(n / length))
    return ((starts[:, None] + np.arange(length)[None, :]) % n).ravel()[:n]
