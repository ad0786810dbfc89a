"""p-tables for the planner: Table 2, a measured atlas, interpolation by relative depth."""

import numpy as np
import pandas as pd
import pytest

from ppdmodel import paper
from sim.ptable import PTable


def test_paper_table_at_measured_points():
    table = PTable.paper()
    assert table.d == 40 and table.heads == ("shared", "trained") and table.max_k == 5
    grid = table.grid(40)
    for row in paper.TABLE2.itertuples():
        w, h = table.workloads.index(row.dataset), int(row.trained)
        assert grid[w, h, row.layer, row.k] == pytest.approx(row.p_correct)


def test_interpolation_in_depth_and_k_with_anchors():
    df = pd.DataFrame(
        {
            "workload": "x",
            "head": "shared",
            "layer": [4, 4, 8, 8],
            "k": [1, 3, 1, 3],
            "p_correct": [0.2, 0.4, 0.6, 0.8],
        }
    )
    grid = PTable(df, d=10).grid(10)[0, 0]
    assert grid[6, 1] == pytest.approx(0.4)  # halfway between layers 4 and 8
    assert grid[2, 1] == pytest.approx(0.1)  # towards p = 0 at depth 0
    assert grid[9, 3] == pytest.approx(0.9)  # towards p = 1 at the last layer
    assert grid[4, 2] == pytest.approx(0.3)  # halfway between k = 1 and 3
    assert np.isnan(grid[:, 0]).all()
    # another depth: layer 3 of a 5-layer model is relative depth 0.6 -> layer 6 of 10
    assert PTable(df, d=10).grid(5)[0, 0, 3, 1] == pytest.approx(0.4)


def test_from_frame_accepts_category_and_trained_and_read(tmp_path):
    df = pd.DataFrame(
        {
            "category": ["qa", "qa"],
            "trained": [False, True],
            "layer": [15, 15],
            "k": [1, 1],
            "p_correct": [0.1, np.nan],
            "d": 30,
        }
    )
    table = PTable.from_frame(df, d=30)
    assert table.workloads == ("qa",) and table.heads == ("shared",)  # undefined rate dropped
    df.to_csv(tmp_path / "atlas.csv", index=False)
    assert PTable.read(tmp_path / "atlas.csv").d == 30


@pytest.mark.parametrize(
    "change,match",
    [
        ({"p_correct": 1.5}, "p_correct"),
        ({"layer": 0}, "layers"),
        ({"k": 0}, "k >= 1"),
    ],
)
def test_bad_tables(change, match):
    df = pd.DataFrame(
        {"workload": ["x"], "head": ["shared"], "layer": [2], "k": [1], "p_correct": [0.5]}
    )
    df = df.assign(**change)
    with pytest.raises(ValueError, match=match):
        PTable(df, d=4)


def test_missing_columns_unknown_workload_and_d(tmp_path):
    with pytest.raises(ValueError, match="missing columns"):
        PTable(pd.DataFrame({"layer": [1]}), d=4)
    with pytest.raises(ValueError, match="unknown workload"):
        PTable.paper().grid(40, workloads=["XSum"])
    pd.DataFrame(
        {"workload": ["x"], "head": ["s"], "layer": [1], "k": [1], "p_correct": [0.5]}
    ).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(ValueError, match="give d"):
        PTable.read(tmp_path / "t.csv")
    with pytest.raises(ValueError, match="no such file"):
        PTable.read(tmp_path / "nope.csv", d=4)


def test_builtin_tables():
    assert PTable.builtin("paper").d == 40
    try:
        from ppdmodel import ptables  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="ships Table 2"):
            PTable.builtin("smollm2")
    else:
        atlas = PTable.builtin("smollm2")
        assert atlas.d == 30 and "shared" in atlas.heads
