"""The p_correct atlas: Wilson and prompt-bootstrap intervals, prompt sets, bins, the figure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from measure.match.atlas import (
    ATLAS_COLUMNS,
    atlas,
    atlas_positions,
    bootstrap_interval,
    bootstrap_weights,
    format_atlas,
    wilson_interval,
)
from measure.match.atlas_plot import plot_atlas


def records(matches_by_prompt, layer=2, k=1, head="shared"):
    rows = [
        dict(prompt=p, position=j + 1, layer=layer, k=k, head=head, match=bool(m))
        for p, ms in matches_by_prompt.items()
        for j, m in enumerate(ms)
    ]
    return pd.DataFrame(rows)


def test_wilson_matches_the_textbook_values():
    low, high = wilson_interval([8, 0, 0], [10, 10, 0])
    # Wilson (1927) 95 % for 8/10: 0.4902 .. 0.9433; 0/10: 0 .. 0.2775; n = 0: undefined
    assert low[:2] == pytest.approx([0.4902, 0.0], abs=1e-4)
    assert high[:2] == pytest.approx([0.9433, 0.2775], abs=1e-4)
    assert np.isnan(low[2]) and np.isnan(high[2])
    with pytest.raises(ValueError, match="0 <= matches <= n"):
        wilson_interval([3], [2])


def test_bootstrap_weights_keep_each_stratum_size():
    strata = np.array(["a", "a", "a", "b", "b"])
    w = bootstrap_weights(strata, 50, seed=1)
    assert w.shape == (50, 5)
    assert (w[:, :3].sum(1) == 3).all() and (w[:, 3:].sum(1) == 2).all()
    assert (bootstrap_weights(strata, 50, seed=1) == w).all()  # seeded
    with pytest.raises(ValueError, match="n_boot must be an integer >= 1"):
        bootstrap_weights(strata, 0)


def test_prompt_bootstrap_is_wider_than_wilson_when_prompts_differ():
    # two prompts: one always matched, one never (perfectly correlated within a sequence)
    df = records({"a": [1] * 50, "b": [0] * 50})
    row = atlas(df, 4, n_boot=400, seed=0).iloc[0]
    assert row["p_correct"] == 0.5 and row["n_tokens"] == 100 and row["n_prompts"] == 2
    assert row["boot_high"] - row["boot_low"] == pytest.approx(1.0)  # {0, 0.5, 1} resamples
    assert row["wilson_high"] - row["wilson_low"] < 0.2
    # the same rate from independent tokens: the bootstrap agrees with Wilson roughly
    rng = np.random.default_rng(0)
    df = records({f"p{i}": rng.random(50) < 0.5 for i in range(20)})
    row = atlas(df, 4, n_boot=1000, seed=0).iloc[0]
    boot, wilson = row["boot_high"] - row["boot_low"], row["wilson_high"] - row["wilson_low"]
    assert boot == pytest.approx(wilson, rel=0.3)


def test_bootstrap_interval_of_an_empty_cell_is_undefined():
    low, high = bootstrap_interval(np.array([[0, 0]]), np.array([[0, 0]]), np.ones((3, 2)))
    assert np.isnan(low[0]) and np.isnan(high[0])


def test_atlas_prompt_sets_columns_and_depth():
    df = pd.concat(
        [
            records({"a": [1, 1, 0, 0], "b": [1, 0]}, layer=2),
            records({"a": [1, 1, 1, 0], "b": [1, 1]}, layer=3, head="translator"),
        ]
    )
    table = atlas(df, 4, categories={"a": "qa", "b": "translation"}, n_boot=100)
    assert tuple(table.columns) == ATLAS_COLUMNS
    assert set(table["prompt_set"]) == {"qa", "translation", "all"}
    pooled = table[(table["prompt_set"] == "all") & (table["layer"] == 3)].iloc[0]
    assert pooled["head"] == "translator" and pooled["relative_depth"] == 0.75
    assert pooled["p_correct"] == pytest.approx(5 / 6) and pooled["matches"] == 5
    qa = table[(table["prompt_set"] == "qa") & (table["layer"] == 2)].iloc[0]
    assert qa["p_correct"] == 0.5 and qa["n_prompts"] == 1
    assert qa["boot_low"] == qa["boot_high"] == 0.5  # one prompt: every resample is the same
    text = format_atlas(table, layers=[2, 3])
    assert "0.833 [" in text and "n=6" in text
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        atlas(df, 0)


def test_atlas_positions_bins():
    df = records({"a": [1, 0, 1, 1, 0], "b": [0, 0, 1]})
    bins = atlas_positions(df, 4, bin_width=2, n_boot=50)
    assert list(bins["bin"]) == ["1-2", "3-4", "5-6"]
    assert list(bins["n_tokens"]) == [4, 3, 1]
    assert bins["p_correct"].tolist() == pytest.approx([0.25, 1.0, 0.0])
    with pytest.raises(ValueError, match="bin_width must be an integer >= 1"):
        atlas_positions(df, 4, bin_width=0)


def test_plot_atlas_has_one_panel_per_k():
    df = pd.concat([records({"a": [1, 0]}, layer=layer, k=k) for layer in (1, 2) for k in (1, 3)])
    fig = plot_atlas(atlas(df, 4, n_boot=20))
    assert [ax.get_title() for ax in fig.axes] == ["k = 1", "k = 3"]
    labels = [t.get_text() for t in fig.axes[-1].get_legend().get_texts()]
    assert "logit lens" in labels and "paper SQuAD (trained)" in labels
    with pytest.raises(ValueError, match="prompt_set must be one of"):
        plot_atlas(atlas(df, 4, n_boot=20), prompt_set="nope")
