"""Aggregations of match-rate records: the paper's Table 2 and Tables 6-8 shapes, and traces.

Pure pandas on the tidy records of ``measure.match.rate`` (columns ``RECORD_COLUMNS``; positions
1..ell, see that module's docstring), so results can be re-aggregated without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ppdmodel.positions import m_from_positions
from sim.formats import MatchTrace


def table2(df: pd.DataFrame) -> pd.DataFrame:
    """Paper Table 2 shape: rows (dataset, decoding, head, k), columns layer, values mean match.

    ``dataset`` is used when the column exists; ``decoding`` when it holds several values.
    """
    index = _group_keys(df) + ["head", "k"]
    return df.pivot_table(index=index, columns="layer", values="match", aggfunc="mean")


def by_position(df: pd.DataFrame, bin_width: int | None = None) -> pd.DataFrame:
    """Paper Tables 6-8 shape: rows (dataset, decoding, layer, k, head), columns position bins.

    Positions 1..ell are grouped in bins of ``bin_width`` tokens labelled like the paper ("1-2",
    "3-4", ...; default: eight bins over the longest sequence), plus a ``Total`` column.
    """
    if bin_width is None:
        bin_width = max(1, math.ceil(int(df["position"].max()) / 8)) if len(df) else 1
    if isinstance(bin_width, bool) or int(bin_width) != bin_width or bin_width < 1:
        raise ValueError(f"bin_width must be an integer >= 1, got {bin_width!r}")
    index = _group_keys(df) + ["layer", "k", "head"]
    lo = (df["position"] - 1) // bin_width * bin_width + 1
    labels = lo.astype(str) + "-" + (lo + bin_width - 1).astype(str)
    table = df.assign(bin=labels, lo=lo).pivot_table(
        index=index, columns=["lo", "bin"], values="match", aggfunc="mean"
    )
    table.columns = table.columns.get_level_values("bin")
    table["Total"] = df.groupby(index)["match"].mean()
    return table


def _group_keys(df: pd.DataFrame) -> list[str]:
    keys = ["dataset"] if "dataset" in df.columns else []
    if "decoding" in df.columns and df["decoding"].nunique() > 1:
        keys.append("decoding")
    return keys


def to_traces(
    df: pd.DataFrame,
    d: int,
    d_bar: int,
    k: int,
    head: str = "shared",
    tokens: Mapping[str, Sequence[int]] | None = None,
) -> list[MatchTrace]:
    """Per-sequence m_t (t = 2..ell) at layer d_bar with k candidates, for sim/ replay.

    m_t is the match at position t - 1 (``ppdmodel.positions``), so each trace equals
    ``PPDResult.m`` of a real PPD run on the same prompt with the same d_bar, k and head. One
    MatchTrace per prompt with records for (d_bar, k, head), in first-appearance order; ``tokens``
    optionally maps prompt id -> all ell generated tokens.
    """
    rows = df[(df["layer"] == d_bar) & (df["k"] == k) & (df["head"] == head)]
    if "decoding" in rows.columns and rows["decoding"].nunique() > 1:
        raise ValueError("df mixes several decodings; select one before to_traces")
    traces = []
    for prompt, group in rows.groupby("prompt", sort=False):
        group = group.sort_values("position")
        positions = group["position"].to_numpy()
        if not np.array_equal(positions, np.arange(1, len(positions) + 1)):
            raise ValueError(f"prompt {prompt!r}: positions must be 1..ell without gaps")
        seq_tokens = list(tokens[prompt]) if tokens and prompt in tokens else None
        m = m_from_positions(group["match"].astype(int).tolist())
        traces.append(MatchTrace(str(prompt), d, d_bar, k, m, head, "match_rate", seq_tokens))
    return traces
