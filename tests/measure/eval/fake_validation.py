"""A ``ProfileValidation`` of n configurations without any model: for the figures' tests.

Every configuration is predicted for real (``predict_ppd`` on made-up match sequences, from a
hand-made profile with ``single`` and ``dist`` backends and cost replicates); the measured
medians and the runs' block times (``terms``) are the predictions and prices scaled by seeded
factors, so points cluster as they do in a real validation (most within a few per cent).
"""

from __future__ import annotations

import copy
import itertools
from types import SimpleNamespace

import numpy as np
import pandas as pd

from measure.eval.judged import JudgedResult
from measure.eval.predict import predict_greedy, predict_ppd
from measure.eval.repeat import PPDConfig
from measure.eval.terms import TERM_COLUMNS, block_prices
from measure.eval.validate import ProfileValidation
from measure.profile.stats import Spread
from ppdmodel.cost_profile import parse_cost_profile
from tests.ppdmodel.profiles import minimal_profile

D = 24
TOKENS = 16


def fake_profile(d: int = D, *, replicates: int = 20):
    """A ``single`` (serial) and a ``dist`` backend, each with ``replicates`` cost replicates
    (every cost scaled by a seeded factor within about +-5 %)."""
    data = minimal_profile(d=d, serial=True)
    rng = np.random.default_rng(1)
    single = data["backends"]["single"]
    dist = copy.deepcopy(single) | {"serial": False}
    for entry in (single, dist):
        factors = rng.normal(1.0, 0.025, size=replicates)
        entry["cost_replicates"] = [_scaled(entry, f) for f in factors]
    data["backends"]["dist"] = dist
    return parse_cost_profile(data)


def _scaled(entry: dict, factor: float) -> dict:
    costs = {
        key: ({k: v * factor for k, v in value.items()} if isinstance(value, dict)
              else value if key == "shared_device_slowdown" else value * factor)
        for key, value in entry["costs"].items()
    }  # fmt: skip
    return {"costs": costs, "per_candidate_layer_s": entry["per_candidate_layer_s"]}


def fake_configs(n: int, d: int = D) -> list[PPDConfig]:
    """n distinct configurations: backend, placement, k and d_bar varied in that order."""
    d_bars = range(d // 2, d)
    grid = itertools.product(d_bars, (1, 3), ("main", "candidates"), ("single", "dist"))
    configs = [PPDConfig(d_bar=b, k=k, early_head=h, backend=be) for b, k, h, be in grid]
    if n > len(configs):
        raise ValueError(f"n must be <= {len(configs)}, got {n}")
    return configs[:n]


def _runs(rng, p: float, prompts: int = 2):
    return [SimpleNamespace(m=list(rng.random(TOKENS - 1) < p), tokens=list(range(TOKENS)))
            for _ in range(prompts)]  # fmt: skip


def _spread(seconds: float, rng) -> Spread:
    samples = seconds * rng.normal(1.0, 0.01, size=3)
    return Spread.of(samples)


def fake_terms(profile, config: PPDConfig, rng) -> pd.DataFrame:
    """The term check's table with every block timed at its price times a seeded factor."""
    rows = []
    unused = "early head, candidates" if config.early_head == "main" else "early head on main"
    for name, price in block_prices(profile, config).items():
        if name == unused:
            continue
        measured = price * rng.uniform(0.85, 1.2)
        rows.append(dict(block=name, count=2 * TOKENS, measured_median_s=measured, price_s=price,
                         ratio=measured / price if price > 0 else float("nan"),
                         gap_s_per_token=(measured - price) * 2))  # fmt: skip
    return pd.DataFrame(rows, columns=list(TERM_COLUMNS))


def fake_validation(n: int, *, seed: int = 0) -> ProfileValidation:
    """A ProfileValidation of ``n`` configurations (``fake_configs``), no timing attached."""
    rng = np.random.default_rng(seed)
    profile = fake_profile()
    greedy_runs = _runs(rng, 0.0)
    greedy_measured = None
    results = []
    for config in fake_configs(n):
        greedy_pred = predict_greedy(profile, greedy_runs, backend=config.backend)
        if greedy_measured is None:
            greedy_measured = _spread(greedy_pred.closed_form_s * 1.01, rng)
        predicted = predict_ppd(profile, _runs(rng, 0.4), config, max_new_tokens=TOKENS)
        measured = _spread(predicted.closed_form_s * rng.normal(1.0, 0.03), rng)
        results.append(
            JudgedResult(config, measured, predicted, greedy_measured, greedy_pred, exact=True,
                         terms=fake_terms(profile, config, rng))
        )  # fmt: skip
    return ProfileValidation(results, timing=None, profile=profile)
