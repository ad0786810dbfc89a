"""Built-in p_correct tables: the paper's Table 2 and the shipped SmolLM2 atlas, one schema."""

from __future__ import annotations

import numpy as np
import pytest

from ppdmodel import paper, ptables
from ppdmodel.cli import build_parser, main
from ppdmodel.tradeoff import tradeoff_curves


def test_paper_table_in_the_common_schema():
    table = ptables.load("paper")
    assert tuple(table.columns) == ptables.COLUMNS
    assert len(table) == len(paper.TABLE2)
    assert (table["p_correct"].to_numpy() == paper.TABLE2["p_correct"].to_numpy()).all()
    assert (table["relative_depth"] == table["layer"] / 40).all()
    view = ptables.table2_view("paper")
    assert view.drop(columns="d").equals(paper.TABLE2)


def test_smollm2_atlas_ships_with_n_and_intervals():
    table = ptables.load("smollm2")
    assert tuple(table.columns) == ptables.COLUMNS
    assert set(table["d"]) == {30}
    assert set(table["head"]) == set(ptables.HEADS)
    assert {"translation", "summarization", "qa", "all"} <= set(table["prompt_set"])
    for head in ptables.HEADS:
        layers = set(table.loc[table["head"] == head, "layer"])
        assert {8, 15, 22, 26, 28} <= layers, head
    assert set(table["k"]) == {1, 3, 5}
    assert (table["n_tokens"] > 0).all()
    defined = table.dropna(subset=["p_correct"])
    assert (defined["boot_low"] <= defined["p_correct"] + 1e-12).all()
    assert (defined["p_correct"] <= defined["boot_high"] + 1e-12).all()
    assert (defined["wilson_low"] <= defined["p_correct"] + 1e-12).all()
    # rates grow with k for every (prompt set, head, layer)
    wide = table.pivot_table(index=["prompt_set", "head", "layer"], columns="k", values="p_correct")
    assert (np.diff(wide.to_numpy(), axis=1) >= -1e-12).all()
    record = ptables.provenance("smollm2")
    assert record["command"].startswith("ppd measure atlas")
    assert len(record["model"]["safetensors_sha256"]) == 64
    assert len(record["prompts"]["sha256"]) == 64
    assert {"torch", "transformers"} <= set(record["versions"])
    assert record["created_utc"]


def test_lookup_views_and_tradeoff():
    p = ptables.p_correct("smollm2", prompt_set="all", head="translator", layer=15, k=1)
    lens = ptables.p_correct("smollm2", prompt_set="all", head="shared", layer=15, k=1)
    assert 0 <= lens < p <= 1
    view = ptables.table2_view("smollm2")
    assert list(view.columns) == [*paper.TABLE2.columns, "d"]
    trained = view[view["trained"] & (view["dataset"] == "all") & (view["layer"] == 15)]
    assert trained.sort_values("k")["p_correct"].iloc[0] == p
    full = ptables.table2_view("smollm2", trained_head="trained", prompt_sets=["qa"])
    assert set(full["dataset"]) == {"qa"}
    curves = tradeoff_curves(layer=15, d=30, table=view)
    assert len(curves) == 2 * 3 * view["dataset"].nunique()
    assert ptables.model_layers("smollm2") == 30


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="name must be one of"):
        ptables.load("vicuna")
    with pytest.raises(ValueError, match="layer must be one of"):
        ptables.p_correct("smollm2", prompt_set="all", head="shared", layer=99, k=1)
    with pytest.raises(ValueError, match="k must be one of"):
        ptables.p_correct("smollm2", prompt_set="all", head="shared", layer=15, k=4)
    with pytest.raises(ValueError, match="trained_head must be one of"):
        ptables.table2_view("smollm2", trained_head="shared")
    with pytest.raises(ValueError, match="prompt_sets must be among"):
        ptables.table2_view("smollm2", prompt_sets=["poetry"])


def test_tradeoff_cli_with_the_smollm2_table(tmp_path, capsys):
    assert main(["tradeoff", "--table", "smollm2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "from the built-in smollm2 atlas: layer 15 of d=30" in out
    assert (tmp_path / "fig3_latency_vs_compute_per_time.png").is_file()
    tradeoff = build_parser()._subparsers._group_actions[0].choices["tradeoff"]
    (table_option,) = [a for a in tradeoff._actions if a.dest == "table"]
    assert tuple(table_option.choices) == ptables.NAMES
