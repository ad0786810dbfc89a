"""``ppd measure train-head --kind translator full`` then ``ppd measure atlas`` on a tiny model."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from measure.datasets import sample_path
from measure.match.atlas import ATLAS_COLUMNS
from measure.train.head_io import head_kind
from ppdmodel.cli import main
from tests.measure.tiny_models import char_tokenizer, tiny_model

torch.set_num_threads(1)
SPEC = str(sample_path("spec-bench"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-chat-llama")
    tiny_model("llama", eos_token_id=None).save_pretrained(path)
    tokenizer = char_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}U:{{ m['content'] }}\n{% endfor %}A:"
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def heads(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("heads")
    argv = ["measure", "train-head", "--model", str(model_dir), "--layer", "2", "3"]
    argv += ["--kind", "translator", "full", "--prompts", SPEC, "--split", "train"]
    argv += ["--new-tokens", "6", "--epochs", "2", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    return out


def test_train_head_writes_both_kinds(heads, capsys):
    names = sorted(p.name for p in heads.iterdir())
    assert names == ["full_layer_2", "full_layer_3", "translator_layer_2", "translator_layer_3"]
    assert head_kind(heads / "translator_layer_2") == "translator"
    record = json.loads((heads / "full_layer_3" / "head_config.json").read_text())
    assert record["kind"] == "full" and record["config"]["loss"] == "kl"
    assert record["train"]["data"]["new_tokens"] == 6
    assert record["train"]["data"]["command"].startswith("ppd measure train-head --model")
    assert record["train"]["sequences"] == 8  # the train split of the 9 sample questions


def test_atlas_end_to_end_and_from_records(model_dir, heads, tmp_path, capsys):
    out = tmp_path / "atlas"
    argv = ["measure", "atlas", "--model", str(model_dir), "--prompts", SPEC]
    argv += ["--head-dir", str(heads), "--layers", "1", "2", "3", "--ks", "1", "3"]
    argv += ["--max-new-tokens", "5", "--n-boot", "50", "--show-layers", "2", "3"]
    argv += ["--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "prompt set translation:" in printed and "n=" in printed
    table = pd.read_csv(out / "atlas.csv")
    assert tuple(table.columns) == ATLAS_COLUMNS
    assert set(table["head"]) == {"shared", "translator", "trained"}
    assert set(table["prompt_set"]) == {
        "translation",
        "summarization",
        "qa",
        "math_reasoning",
        "all",
    }
    pooled = table[(table["prompt_set"] == "all") & (table["k"] == 1)]
    assert (pooled["n_tokens"] == 45).all()  # 9 prompts x 5 tokens, no EOS
    assert (
        (pooled["boot_low"] <= pooled["p_correct"]) & (pooled["p_correct"] <= pooled["boot_high"])
    ).all()
    assert set(pd.read_csv(out / "atlas_positions.csv")["bin"]) == {"1-8"}
    record = json.loads((out / "atlas.json").read_text())
    assert record["command"].startswith("ppd measure atlas --model")
    assert len(record["model"]["safetensors_sha256"]) == 64
    assert record["prompts"]["chat_template"] is True
    assert {h["kind"] for h in record["heads"]} == {"full", "translator"}
    assert (out / "atlas.png").stat().st_size > 10_000
    again = tmp_path / "again"
    argv = ["measure", "atlas", "--records", str(out / "match"), "--n-boot", "50"]
    assert main([*argv, "--out", str(again)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(again / "atlas.csv"), table)


def test_cli_errors(model_dir, tmp_path, capsys):
    base = ["measure", "train-head", "--model", str(model_dir), "--layer", "2"]
    with pytest.raises(SystemExit) as info:
        main([*base, "--kind", "translator", "--data", "text", "--prompts", SPEC, "--out", "x"])
    assert info.value.code == 2
    assert "--kind translator needs --data greedy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["measure", "atlas", "--model", str(model_dir), "--out", str(tmp_path)])
    assert "--prompts is required with --model" in capsys.readouterr().err
