"""Table 2 / Tables 6-8 shapes with n per cell; undefined rates print as n/a, never 0."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from measure.match.tables import by_position, format_cells, format_table2, table2


def records(matches_by_prompt: dict[str, list[bool]], layer=2, k=1, head="shared"):
    rows = [
        dict(prompt=p, position=j + 1, layer=layer, k=k, head=head, decoding="greedy", match=m)
        for p, ms in matches_by_prompt.items()
        for j, m in enumerate(ms)
    ]
    return pd.DataFrame(rows).assign(token=0)


def test_table2_p_and_n():
    df = pd.concat(
        [records({"a": [True, False, True], "b": [False]}), records({"a": [True]}, layer=3)]
    )
    assert table2(df).loc[("shared", 1), 2] == pytest.approx(0.5)
    assert table2(df, "n").loc[("shared", 1), 2] == 4
    assert table2(df, "n").loc[("shared", 1), 3] == 1
    with pytest.raises(ValueError, match="stat must be one of"):
        table2(df, "mean")


def test_format_shows_n_and_na():
    p = pd.DataFrame({1: [0.25, np.nan]})
    n = pd.DataFrame({1: [4, 0]})
    assert format_cells(p, n).iloc[:, 0].tolist() == ["0.2500 (n=4)", "n/a (n=0)"]
    text = format_table2(records({"a": [False], "b": [False]}))
    assert "0.0000 (n=2)" in text  # a measured zero shows its n
    assert format_table2(records({}).reindex(columns=["prompt", "match"])) == (
        "no records (no generated tokens)"
    )
    with pytest.raises(ValueError, match="same shape"):
        format_cells(p, n.iloc[:1])


def test_by_position_counts():
    df = records({"a": [True, True, False], "b": [False, True]})
    counts = by_position(df, bin_width=2, stat="n")
    assert counts.iloc[0].tolist() == [4, 1, 5]  # bins 1-2, 3-4, Total
    rates = by_position(df, bin_width=2)
    assert rates.iloc[0].tolist() == pytest.approx([0.75, 0.0, 0.6])
