"""Bootstrap replicates of a backend's costs: the profile's timed samples resampled.

A profile's price is the median of repeated samples, so it carries the sampling error of a
median. ``cost_replicates`` redraws every figure that kept its samples (with replacement, as
many as were timed), takes the medians, and rebuilds the backend's costs from them with the
same rule as the profile itself (``build``); a prediction evaluated on each replicate gives
the interval of ``ppdmodel.intervals``. The fitted link of the ``dist`` backend (latency and
bandwidth) is not redrawn: its messages are a small part of a pass. The pair probe's samples
(``pair_*``) are, so each replicate has its own pair factors (``pair_slowdowns``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from measure.profile.stats import Spread

PROFILE_REPLICATES = 100
"""Bootstrap replicates a profile stores per backend."""
REPLICATE_KEYS = ("costs", "per_candidate_layer_s", "greedy_host_s", "pair_slowdowns")
"""The parts of a backend entry a replicate holds (``ppdmodel.cost_profile``): the pair
factors of a ``dist`` entry too, so a prediction's interval carries their spread."""


def cost_replicates(
    figures: Mapping[str, Spread],
    build: Callable[[dict[str, Spread]], dict],
    *,
    replicates: int = PROFILE_REPLICATES,
    seed: int = 0,
) -> list[dict]:
    """``replicates`` backend entries, each ``build`` of the figures with every kept sample
    set redrawn with replacement (its median taken); figures without samples stay as they are.
    Seeded: the same samples give the same replicates."""
    if isinstance(replicates, bool) or not isinstance(replicates, int) or replicates < 1:
        raise ValueError(f"replicates must be an integer >= 1, got {replicates!r}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(replicates):
        drawn = {}
        for name, spread in figures.items():
            if spread.samples:
                values = rng.choice(np.asarray(spread.samples), size=len(spread.samples))
                median = float(np.median(values))
                drawn[name] = Spread(median, median, median, spread.n)
            else:
                drawn[name] = spread
        entry = build(drawn)
        out.append({key: entry[key] for key in REPLICATE_KEYS if key in entry})
    return out
