"""The paper's tables as data, and the paper's check numbers computed from Table 2.

Source: Yang et al., "Predictive Pipelined Decoding", TMLR 2024, section 4.3 (Figure 3 text):
normalized latency per token 0.629 (SQuAD+tr, k=5) to 0.892 (WMT, k=1), compute 1.561 to 4.973
times; Figure 3 caption: SQuAD trained k=3 reduces latency by 34% at ~3.2x compute.
"""

import numpy as np
import pandas as pd
import pytest

import ppdmodel
from ppdmodel import paper

KEYS = ["dataset", "k", "trained", "layer"]


def test_table2_shape_and_types():
    t2 = paper.TABLE2
    assert list(t2.columns) == [*KEYS, "p_correct"]
    assert len(t2) == 3 * 3 * 2 * 5
    assert set(t2["dataset"]) == set(paper.DATASETS)
    assert t2["trained"].dtype == bool
    assert not t2.duplicated(KEYS).any()
    assert t2["p_correct"].between(0, 1).all()


def test_table2_spot_values():
    assert paper.p_correct(dataset="SQuAD", k=5, trained=True, layer=20) == 0.7415
    assert paper.p_correct(dataset="wmt", k=1, trained=False, layer=20) == 0.2163
    assert paper.p_correct(dataset="squad", k=3, trained=True, layer=20) == 0.6837
    assert paper.p_correct(dataset="CNN/DM", k=5, trained=True, layer=37) == 0.9840
    assert paper.p_correct(dataset="cnndm", k=1, trained=False, layer=10) == 0.0723


def test_table2_rates_grow_with_k_and_layer():
    wide = paper.TABLE2.pivot_table(index=["dataset", "trained", "layer"], columns="k")
    assert (np.diff(wide.to_numpy(), axis=1) > 0).all()
    by_layer = paper.TABLE2.pivot_table(index=["dataset", "trained", "k"], columns="layer")
    assert (np.diff(by_layer.to_numpy(), axis=1) > 0).all()


def test_tables_6_8_totals_equal_table2_and_bin_means():
    merged = paper.TABLE2.merge(paper.TABLES_6_8_TOTAL, on=KEYS, suffixes=("", "_total"))
    assert len(merged) == len(paper.TABLE2)
    np.testing.assert_array_equal(merged["p_correct"], merged["p_correct_total"])
    # eight equal-width bins: their mean is the total up to the 2-decimal rounding in print
    means = paper.TABLES_6_8.groupby(KEYS)["p_correct"].mean().rename("bin_mean").reset_index()
    both = means.merge(paper.TABLE2, on=KEYS)
    assert (both["bin_mean"] - both["p_correct"]).abs().max() < 1e-4


def test_per_position_p_expands_bins():
    p_t = paper.per_position_p(dataset="SQuAD", k=5, trained=True, layer=20)
    assert p_t.shape == (15,)  # t = 2..16 <- positions 1..15 (ppdmodel.positions)
    assert p_t[0] == p_t[1] == 0.5737  # positions 1 and 2: bin 1-2
    assert p_t[2] == 0.7905 and p_t[-1] == 0.7453  # position 3: bin 3-4; 15: bin 15-16
    assert paper.per_position_p(dataset="WMT", k=1, trained=False, layer=10).shape == (127,)
    with pytest.raises(ValueError, match="layer must be one of"):
        paper.per_position_p(dataset="WMT", k=1, trained=False, layer=15)
    with pytest.raises(ValueError, match="dataset must be one of"):
        paper.p_correct(dataset="imdb", k=1, trained=False, layer=20)


def test_table3_throughput_is_128_tokens_over_latency():
    t3 = paper.TABLE3
    ratio = paper.TABLE3_TOKENS / t3["latency_s"]
    np.testing.assert_allclose(ratio, t3["throughput_tokens_per_s"], atol=6e-3)
    assert t3.loc[t3["k"] == 0, "p_correct"].isna().all()


def test_table5_values():
    t5 = paper.TABLE5.set_index(["method", "dataset"])["p_correct"]
    assert t5["greedy", "SQuAD"] == 0.5077 and t5["top-p sampling", "CNN/DM"] == 0.4016


def _norm_latency(p):
    return ppdmodel.latency_per_token(d=40, d_bar=20, p=p) / 40


def test_paper_check_numbers_from_table2():
    p_best = paper.p_correct(dataset="SQuAD", k=5, trained=True, layer=20)
    p_worst = paper.p_correct(dataset="WMT", k=1, trained=False, layer=20)
    assert round(_norm_latency(p_best), 3) == 0.629
    assert round(_norm_latency(p_worst), 3) == 0.892
    assert round(ppdmodel.compute_per_time(d=40, p=p_worst, k=1), 3) == 1.561
    assert round(ppdmodel.compute_per_time(d=40, p=p_best, k=5), 3) == 4.973
    p3 = paper.p_correct(dataset="SQuAD", k=3, trained=True, layer=20)
    assert round(1 - _norm_latency(p3), 2) == 0.34  # latency -34%
    assert round(ppdmodel.compute_per_time(d=40, p=p3, k=3), 2) == 3.28


def test_tradeoff_curves_endpoints():
    curves = ppdmodel.tradeoff_curves()
    assert len(curves) == 18
    assert round(curves["normalized_latency"].min(), 3) == 0.629
    assert round(curves["normalized_latency"].max(), 3) == 0.892
    assert round(curves["compute_per_time"].min(), 3) == 1.561
    assert round(curves["compute_per_time"].max(), 3) == 4.973
    row = curves.loc[curves["normalized_latency"].idxmin()]
    assert (row["dataset"], row["trained"], row["k"]) == ("SQuAD", True, 5)
    np.testing.assert_allclose(
        curves["normalized_compute_per_token"], (2 + curves["k"] - curves["p_correct"]) / 2
    )


def test_tradeoff_other_layer_and_bad_layer():
    curves = ppdmodel.tradeoff_curves(layer=30)
    p = curves["p_correct"]
    np.testing.assert_allclose(curves["normalized_latency"], 1 - p * 10 / 40)
    with pytest.raises(ValueError, match="outside Theorem 4.1's domain"):
        ppdmodel.tradeoff_curves(layer=10)
    with pytest.raises(ValueError, match=r"layer must be one of .*\[10, 20, 30, 35, 37\]"):
        ppdmodel.tradeoff_curves(layer=25)


def test_plot_tradeoff_returns_figure():
    for figure in (3, 4):
        fig = ppdmodel.plot_tradeoff(figure=figure)
        ax = fig.axes[0]
        curves = [line for line in ax.lines if line.get_linestyle() in ("-", "--")]
        assert len(curves) == 6  # one per (dataset, head)
        greedy = [line for line in ax.lines if line.get_marker() == "*"]
        assert [tuple(line.get_xydata()[0]) for line in greedy] == [(1.0, 1.0)]
        assert "trained for that layer" in ax.get_legend().get_title().get_text()
        assert "Normalized latency" in ax.get_ylabel()
    with pytest.raises(ValueError, match="figure must be 3 or 4"):
        ppdmodel.plot_tradeoff(figure=5)


def test_measured_points_use_their_own_depth():
    from ppdmodel.tradeoff import measured_points

    measured = pd.DataFrame(
        {"label": ["x"], "p_correct": [0.5], "k": [3], "layer": [15], "d": [30]}
    )
    point = measured_points(measured, layer=20, d=40).iloc[0]
    assert point["normalized_latency"] == pytest.approx(1 - 0.5 / 2)  # Eq. 3 at d_bar = d/2
    assert point["compute_per_time"] == pytest.approx((3 + 2 - 0.5) / (2 - 0.5))  # Eq. 5
    fig = ppdmodel.plot_tradeoff(figure=3, measured=measured)
    assert any("measured: x" in t.get_text() for t in fig.axes[0].get_legend().get_texts())
    with pytest.raises(ValueError, match="missing"):
        measured_points(measured.drop(columns="k"), layer=20, d=40)
