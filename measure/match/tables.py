"""Aggregations of match-rate records: the paper's Table 2 and Tables 6-8 shapes, and traces.

Pure pandas on the tidy records of ``measure.match.rate`` (columns ``RECORD_COLUMNS``; positions
1..ell, see that module's docstring), so results can be re-aggregated without torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from measure.match.config import check_records
from ppdmodel.positions import m_from_positions
from ppdmodel.validation import as_int, check_choice, check_instance
from sim.formats import MatchTrace

STATS = ("p", "n")
"""What a table cell holds: the mean match ``p`` (p_correct) or ``n``, the records behind it."""


def table2(df: pd.DataFrame, stat: str = "p") -> pd.DataFrame:
    """Paper Table 2 shape: rows (dataset, decoding, head, k), columns layer.

    stat "p": the mean match (p_correct); "n": the number of records (generated tokens) behind
    each cell. ``dataset`` is used when the column exists; ``decoding`` when it holds several
    values.
    """
    df = check_records(df)
    index = _group_keys(df) + ["head", "k"]
    return df.pivot_table(
        index=index, columns="layer", values="match", aggfunc=_aggfunc(stat), fill_value=None
    )


def _aggfunc(stat: str) -> str:
    check_choice("stat", stat, STATS)
    return "mean" if stat == "p" else "count"


def format_cells(p: pd.DataFrame, n: pd.DataFrame, digits: int = 4) -> pd.DataFrame:
    """Cells "0.1234 (n=512)"; a rate with no records (n = 0) shows as "n/a (n=0)", never 0."""
    if p.shape != n.shape:
        raise ValueError(f"p and n must have the same shape, got {p.shape} and {n.shape}")
    counts = n.fillna(0).astype(int)

    def cell(rate, count) -> str:
        shown = "n/a" if count == 0 or rate != rate else f"{rate:.{digits}f}"
        return f"{shown} (n={count})"

    values = [
        [cell(r, c) for r, c in zip(prow, crow, strict=True)]
        for prow, crow in zip(p.to_numpy(), counts.to_numpy(), strict=True)
    ]
    return pd.DataFrame(values, index=p.index, columns=p.columns)


def format_table2(df: pd.DataFrame, digits: int = 4) -> str:
    """Table 2 shape as text, each cell with its n (tokens); undefined rates print "n/a"."""
    if not len(df):
        return "no records (no generated tokens)"
    return format_cells(table2(df, "p"), table2(df, "n"), digits).to_string()


def by_position(df: pd.DataFrame, bin_width: int | None = None, stat: str = "p") -> pd.DataFrame:
    """Paper Tables 6-8 shape: rows (dataset, decoding, layer, k, head), columns position bins.

    Positions 1..ell are grouped in bins of ``bin_width`` tokens labelled like the paper ("1-2",
    "3-4", ...; default: eight bins over the longest sequence), plus a ``Total`` column. stat
    "p": mean match; "n": records (tokens) per bin.
    """
    df = check_records(df)
    _aggfunc(stat)
    if bin_width is None:
        bin_width = max(1, math.ceil(int(df["position"].max()) / 8)) if len(df) else 1
    bin_width = as_int("bin_width", bin_width, minimum=1)
    index = _group_keys(df) + ["layer", "k", "head"]
    lo = (df["position"] - 1) // bin_width * bin_width + 1
    labels = lo.astype(str) + "-" + (lo + bin_width - 1).astype(str)
    agg = _aggfunc(stat)
    table = df.assign(bin=labels, lo=lo).pivot_table(
        index=index, columns=["lo", "bin"], values="match", aggfunc=agg
    )
    table.columns = table.columns.get_level_values("bin")
    table["Total"] = df.groupby(index)["match"].agg(agg)
    if stat == "n":
        table = table.fillna(0).astype(int)
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
    MatchTrace per prompt with records for (d_bar, k, head), in first-appearance order;
    ``tokens`` optionally maps prompt id -> all ell generated tokens.
    """
    df = check_records(df)
    d = as_int("d", d, minimum=1)
    d_bar = as_int("d_bar", d_bar, minimum=1)
    if d_bar > d:
        raise ValueError(f"d_bar must be <= d = {d}, got {d_bar}")
    k = as_int("k", k, minimum=1)
    check_instance("head", head, str)
    if tokens is not None and not isinstance(tokens, Mapping):
        raise ValueError(f"tokens must be None or a mapping prompt id -> token ids, got "
                         f"{type(tokens).__name__}")  # fmt: skip
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
