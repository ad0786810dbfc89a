"""``ppd measure match-rate | timing`` end to end on a tiny model saved to a directory."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from measure.datasets import load_prompts, sample_path
from measure.match.rate import match_rates
from measure.match.records import read_records
from ppdmodel.cli import build_parser, main
from sim.formats import read_layer_times, read_traces
from tests.measure.tiny_models import NUM_LAYERS, char_tokenizer, tiny_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


def match_rate_args(model_dir, out, *extra):
    return [
        "measure",
        "match-rate",
        "--model",
        str(model_dir),
        "--prompts",
        str(sample_path("jsonl")),
        "--limit",
        "3",
        "--layers",
        "1",
        "2",
        str(NUM_LAYERS),
        "--ks",
        "1",
        "3",
        "--max-new-tokens",
        "5",
        "--out",
        str(out),
        "--no-progress",
        *extra,
    ]


def test_match_rate_end_to_end(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(match_rate_args(model_dir, out)) == 0
    printed = capsys.readouterr().out
    assert "records:" in printed and "shared" in printed
    df = read_records(out / "records.csv")
    prompts = load_prompts(sample_path("jsonl"), limit=3)
    expected = match_rates(
        tiny_model("llama"),
        prompts,
        tokenizer=char_tokenizer(),
        layers=[1, 2, NUM_LAYERS],
        ks=(1, 3),
        max_new_tokens=5,
    )
    pd.testing.assert_frame_equal(df, expected)
    assert df.query(f"layer == {NUM_LAYERS}")["match"].all()
    assert sorted(df["position"].unique()) == [1, 2, 3, 4, 5]  # every generated token
    meta = json.loads((out / "run.json").read_text())
    assert meta["model_type"] == "llama" and meta["prompts_sha256"]
    traces = read_traces(out / "traces.jsonl")
    assert {t.d_bar for t in traces} == {1, 2} and all(len(t.m) == 4 for t in traces)
    first = next(t for t in traces if (t.sequence, t.d_bar, t.k) == (str(prompts[0].id), 2, 3))
    rows = df.query("layer == 2 and k == 3 and head == 'shared'")
    assert first.m == rows[rows["prompt"] == first.sequence]["match"].astype(int).tolist()[:4]
    with pytest.raises(SystemExit) as info:  # a second run needs --resume
        main(match_rate_args(model_dir, out))
    assert info.value.code == 2
    assert main(match_rate_args(model_dir, out, "--resume")) == 0
    pd.testing.assert_frame_equal(read_records(out / "records.csv"), df)


def test_match_rate_sampling_and_parquet(model_dir, tmp_path):
    out = tmp_path / "sampled"
    args = match_rate_args(model_dir, out, "--sampling", "top_k=1", "--records-format", "parquet")
    assert main(args) == 0
    df = read_records(out / "records.parquet")
    assert set(df["decoding"]) == {"top_k=1"}
    assert df.query(f"layer == {NUM_LAYERS} and k == 1")["match"].all()  # top-1 sampling = argmax
    with pytest.raises(SystemExit):
        main(match_rate_args(model_dir, tmp_path / "bad", "--sampling", "top_q=3"))


def test_match_rate_with_trained_head_dir(model_dir, tmp_path):
    from measure.train.heads import TrainedHead

    TrainedHead.from_model(tiny_model("llama"), 2).save(tmp_path / "heads" / "layer-2")
    out = tmp_path / "trained"
    assert main(match_rate_args(model_dir, out, "--head-dir", str(tmp_path / "heads"))) == 0
    df = read_records(out / "records.csv")
    trained = df[df["head"] == "trained"].reset_index(drop=True)
    shared = df.query("head == 'shared' and layer == 2").reset_index(drop=True)
    assert len(trained) and trained["match"].tolist() == shared["match"].tolist()
    assert json.loads((out / "run.json").read_text())["heads"] == {"2": "trained"}


def test_timing_writes_layer_times(model_dir, tmp_path):
    out = tmp_path / "times.csv"
    args = [
        "measure",
        "timing",
        "--model",
        str(model_dir),
        "--prompt-text",
        "def f(x):",
        "--n-tokens",
        "3",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    times = read_layer_times(out)
    assert sorted(times.query("component == 'layer'")["layer"]) == list(range(NUM_LAYERS))
    assert (times["component"] == "token").sum() >= 1


def test_measure_help_and_subcommands(capsys):
    assert main(["measure"]) == 2
    parser = build_parser()
    measure = parser._subparsers._group_actions[0].choices["measure"]
    names = set(measure._subparsers._group_actions[0].choices)
    assert {"match-rate", "timing"} <= names
