"""A p_correct atlas: rate, n and 95 % intervals per (prompt set, head, layer, k), by position.

Pure numpy/pandas on the tidy match records (``measure.match.rate``). Two intervals per cell:

* **Wilson** score interval of a binomial proportion (Wilson 1927), treating the n tokens as
  independent: too narrow when matches are correlated within a sequence (they are: a prompt
  that loops is matched everywhere);
* **bootstrap over prompts** (a cluster bootstrap): prompts are resampled with replacement,
  whole sequences at a time, and the rate is the pooled ratio sum(matches) / sum(tokens) of
  each resample; the percentile interval of ``n_boot`` resamples. For a pooled prompt set
  the resampling is stratified by category, so every resample keeps the categories' sizes.
  This is the interval to quote; it respects the correlation within a sequence.

A cell with no tokens (n = 0) has rate and intervals NaN ("undefined"), never 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np
import pandas as pd
from scipy.stats import norm

from measure.match.config import check_records
from ppdmodel.ptables import COLUMNS
from ppdmodel.validation import as_int, as_real, check_instance, check_seed

Z_95 = 1.959963984540054
"""Two-sided 95 % standard normal quantile."""
MAX_BOOT = 100_000
"""Most bootstrap resamples (``n_boot``): the percentile interval is settled long before."""
POOLED = "all"
"""Name of the prompt set that pools every category."""
ATLAS_COLUMNS = COLUMNS  # one schema: the shipped atlases are read back with ppdmodel.ptables
"""Columns of `atlas` (`atlas_positions` adds ``bin``, ``position_first``, ``position_last``)."""


def wilson_interval(matches, n, z: float = Z_95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (low, high) of matches / n; NaN where n == 0."""
    matches, n = np.asarray(matches, dtype=float), np.asarray(n, dtype=float)
    if np.any(n < 0) or np.any(matches < 0) or np.any(matches > n):
        raise ValueError("matches and n must satisfy 0 <= matches <= n")
    with np.errstate(invalid="ignore", divide="ignore"):
        p = matches / n
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    low, high = centre - half, centre + half
    empty = n == 0
    return np.where(empty, np.nan, np.clip(low, 0, 1)), np.where(empty, np.nan, np.clip(high, 0, 1))


def bootstrap_weights(strata: np.ndarray, n_boot: int, seed: int = 0) -> np.ndarray:
    """[n_boot, P] counts: how often each of P prompts is drawn in each resample.

    Prompts are resampled with replacement within each stratum (``strata``: a label per
    prompt), as many as the stratum holds, so the composition of every resample is fixed.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or not 1 <= n_boot <= MAX_BOOT:
        raise ValueError(f"n_boot must be an integer >= 1 (at most {MAX_BOOT}), got {n_boot!r:.60}")
    strata = np.asarray(strata)
    rng = np.random.default_rng(seed)
    weights = np.zeros((n_boot, len(strata)))
    for label in pd.unique(strata):
        members = np.flatnonzero(strata == label)
        weights[:, members] = rng.multinomial(
            len(members), np.full(len(members), 1 / len(members)), size=n_boot
        )
    return weights


def bootstrap_interval(
    matches: np.ndarray, n: np.ndarray, weights: np.ndarray, level: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval of the pooled rate over prompt resamples.

    matches, n: [C, P] per cell and prompt; weights: [B, P] from `bootstrap_weights`.
    Returns (low, high), each [C]; NaN for a cell with no tokens.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    num = weights @ np.asarray(matches, dtype=float).T  # [B, C]
    den = weights @ np.asarray(n, dtype=float).T
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = num / den  # NaN where a resample holds no tokens of the cell
    alpha = (1 - level) / 2
    empty = np.asarray(n).sum(axis=1) == 0
    if rates.size == 0:
        return np.full(len(empty), np.nan), np.full(len(empty), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns of empty cells
        low = np.nanquantile(rates, alpha, axis=0)
        high = np.nanquantile(rates, 1 - alpha, axis=0)
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def prompt_sets(
    prompts: list[str], categories: Mapping[str, str] | None, name: str = POOLED
) -> dict[str, list[str]]:
    """{set name: prompt ids}: each category, plus ``name`` pooling all prompts."""
    sets = {}
    if categories:
        for prompt in prompts:
            sets.setdefault(categories.get(prompt, "uncategorised"), []).append(prompt)
    sets[name] = list(prompts)
    return sets


def atlas(
    df: pd.DataFrame,
    d: int,
    *,
    categories: Mapping[str, str] | None = None,
    pooled_name: str = POOLED,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """The atlas table (``ATLAS_COLUMNS``), one row per (prompt set, head, layer, k).

    df: match records (columns prompt, position, layer, k, head, match); d: the model's
    number of layers (relative depth = layer / d); categories: prompt id -> category, giving
    one prompt set per category besides the pooled one.
    """
    return _cells(df, d, categories, pooled_name, n_boot, seed, level, bin_width=None)


def atlas_positions(
    df: pd.DataFrame,
    d: int,
    *,
    bin_width: int = 8,
    categories: Mapping[str, str] | None = None,
    pooled_name: str = POOLED,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """The atlas by token-position bin: `atlas`'s columns plus bin, position_first/last.

    Positions 1..ell are grouped in bins of ``bin_width`` tokens ("1-8", "9-16", ...), as the
    paper's Tables 6-8 group them; every bin has both intervals.
    """
    if isinstance(bin_width, bool) or not isinstance(bin_width, int) or bin_width < 1:
        raise ValueError(f"bin_width must be an integer >= 1, got {bin_width!r}")
    return _cells(df, d, categories, pooled_name, n_boot, seed, level, bin_width=bin_width)


def _cells(df, d, categories, pooled_name, n_boot, seed, level, bin_width) -> pd.DataFrame:
    df = check_records(df)
    if isinstance(d, bool) or not isinstance(d, int | np.integer) or not 1 <= d <= 2**31:
        raise ValueError(f"d must be an integer >= 1, got {d!r:.60}")
    if categories is not None and not isinstance(categories, Mapping):
        raise ValueError(f"categories must be None or a mapping prompt id -> category, got "
                         f"{type(categories).__name__}")  # fmt: skip
    check_instance("pooled_name", pooled_name, str)
    check_seed("seed", seed, generator_ok=False)
    level = as_real("level", level, minimum=0.0, strict=True, maximum=1.0)
    if bin_width is not None:
        bin_width = as_int("bin_width", bin_width, minimum=1)
    keys = ["head", "layer", "k"]
    df = df.assign(prompt=df["prompt"].astype(str))
    if bin_width is not None:
        first = (df["position"] - 1) // bin_width * bin_width + 1
        df = df.assign(position_first=first, position_last=first + bin_width - 1)
        keys += ["position_first", "position_last"]
    prompts = list(dict.fromkeys(df["prompt"]))
    frames = []
    for set_name, members in prompt_sets(prompts, categories, pooled_name).items():
        rows = df[df["prompt"].isin(members)]
        if rows.empty:
            continue
        matches = rows.pivot_table(
            index=keys, columns="prompt", values="match", aggfunc="sum", fill_value=0
        ).reindex(columns=members, fill_value=0)
        counts = rows.pivot_table(
            index=keys, columns="prompt", values="match", aggfunc="count", fill_value=0
        ).reindex(index=matches.index, columns=members, fill_value=0)
        strata = [categories.get(p, "") if categories else "" for p in members]
        weights = bootstrap_weights(np.asarray(strata), n_boot, seed)
        m, n = matches.to_numpy(dtype=float), counts.to_numpy(dtype=float)
        boot_low, boot_high = bootstrap_interval(m, n, weights, level)
        z = _z(level)
        wilson_low, wilson_high = wilson_interval(m.sum(1), n.sum(1), z)
        out = matches.index.to_frame(index=False)
        out.insert(0, "prompt_set", set_name)
        out["d"] = d
        out["relative_depth"] = out["layer"] / d
        out["n_tokens"] = n.sum(1).astype(int)
        out["n_prompts"] = (n > 0).sum(1)
        out["matches"] = m.sum(1).astype(int)
        with np.errstate(invalid="ignore", divide="ignore"):
            out["p_correct"] = np.where(n.sum(1) > 0, m.sum(1) / n.sum(1), np.nan)
        out["wilson_low"], out["wilson_high"] = wilson_low, wilson_high
        out["boot_low"], out["boot_high"] = boot_low, boot_high
        frames.append(out)
    columns = list(ATLAS_COLUMNS)
    if bin_width is not None:
        columns[6:6] = ["bin", "position_first", "position_last"]
    if not frames:
        return pd.DataFrame(columns=columns)
    table = pd.concat(frames, ignore_index=True)
    if bin_width is not None:
        table["bin"] = (
            table["position_first"].astype(str) + "-" + table["position_last"].astype(str)
        )
    return table[columns]


def _z(level: float) -> float:
    return float(norm.ppf(0.5 + level / 2))


def format_atlas(
    table: pd.DataFrame, *, prompt_set: str = POOLED, layers=None, ks=None, digits: int = 3
) -> str:
    """One prompt set as text: rows (head, k), columns layer, cells "p [boot lo, hi] n=".

    Undefined rates (n = 0) print as "undefined".
    """
    rows = table[table["prompt_set"] == prompt_set]
    if layers is not None:
        rows = rows[rows["layer"].isin(list(layers))]
    if ks is not None:
        rows = rows[rows["k"].isin(list(ks))]
    if rows.empty:
        return f"no atlas rows for prompt set {prompt_set!r}"

    def cell(r) -> str:
        if not r.n_tokens or r.p_correct != r.p_correct:
            return f"undefined (n={r.n_tokens})"
        f = f"{{:.{digits}f}}"
        lo, hi = f.format(r.boot_low), f.format(r.boot_high)
        return f"{f.format(r.p_correct)} [{lo}, {hi}] n={r.n_tokens}"

    shown = rows.assign(cell=[cell(r) for r in rows.itertuples(index=False)])
    return shown.pivot(index=["head", "k"], columns="layer", values="cell").to_string()
