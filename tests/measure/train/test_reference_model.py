"""Offline reference model: deterministic training, an ordinary HF directory, loss goes down."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from measure.train.reference_model import (
    METADATA_NAME,
    ReferenceModelConfig,
    default_corpus_dir,
    read_corpus,
    train_reference_model,
)

torch.set_num_threads(1)


def _write_corpus(root):
    """A few KB of made-up Python in three files (plus one file the glob must skip)."""
    root.mkdir()
    ops = ["+", "-", "*"]
    for n, op in enumerate(ops):
        body = "".join(f"def f_{n}_{i}(a, b):\n    return a {op} b * {i}\n\n\n" for i in range(40))
        (root / f"mod_{n}.py").write_text(body)
    (root / "notes.txt").write_text("not python")
    return root


def _tiny_config(corpus_dir, **overrides) -> ReferenceModelConfig:
    fields = dict(
        corpus_dir=str(corpus_dir),
        vocab_size=320,
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        seq_len=32,
        batch_size=8,
        steps=40,
        warmup_steps=4,
        lr=1e-2,
        max_minutes=None,
    )
    return ReferenceModelConfig(**{**fields, **overrides})


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    config = _tiny_config(_write_corpus(base / "corpus"))
    return config, [train_reference_model(base / name, config) for name in ("a", "b")]


def test_training_is_deterministic(two_runs):
    _, (a, b) = two_runs
    weights_a, weights_b = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)
    assert (a / "tokenizer.json").read_bytes() == (b / "tokenizer.json").read_bytes()
    meta_a, meta_b = (json.loads((d / METADATA_NAME).read_text()) for d in (a, b))
    assert meta_a["losses"] == meta_b["losses"]


def test_directory_loads_offline_and_learned(two_runs):
    config, (directory, _) = two_runs
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    assert model.config.model_type == "llama"
    assert model.config.num_hidden_layers == 2
    text = "def f_1_7(a, b):\n    return a - b * 7\n"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # byte-level BPE round-trips exactly
    assert len(ids) < len(text.encode())  # and has learned merges
    meta = json.loads((directory / METADATA_NAME).read_text())
    assert ReferenceModelConfig.from_dict(meta["config"]) == config
    assert meta["steps"] == 40 and meta["stopped_by"] == "steps"
    assert meta["corpus"]["files"] == 3
    assert meta["corpus"]["sha256"] == read_corpus(config).sha256
    assert meta["final_loss"] < meta["initial_loss"] - 2.0
    with torch.no_grad():
        loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([ids])).loss
    assert loss.item() < meta["initial_loss"] - 2.0


def test_default_corpus_is_the_stdlib_source():
    corpus = read_corpus(ReferenceModelConfig(corpus_max_bytes=5000))
    assert corpus.root == default_corpus_dir()
    assert corpus.n_bytes == 5000
    assert corpus.sha256 == read_corpus(ReferenceModelConfig(corpus_max_bytes=5000)).sha256


def test_corpus_sample_spans_the_tree(tmp_path):
    for i in range(10):
        (tmp_path / f"f{i}.py").write_text(f"x = {i}\n" * 10)  # 60 bytes each
    (tmp_path / "encodings").mkdir()
    (tmp_path / "encodings" / "cp1.py").write_text("table = 1\n")
    corpus = read_corpus(ReferenceModelConfig(corpus_dir=str(tmp_path), corpus_max_bytes=200))
    assert corpus.stride == 3
    assert [doc[4] for doc in corpus.documents] == ["0", "3", "6", "9"][: len(corpus.documents)]
    assert corpus.n_bytes == 200 and len(corpus.documents) == 4  # the last file is cut


def test_config_checks(tmp_path):
    config = ReferenceModelConfig()
    assert ReferenceModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="hidden_size .* multiple of num_heads"):
        ReferenceModelConfig(hidden_size=30, num_heads=4)
    with pytest.raises(ValueError, match="steps must be > 0"):
        ReferenceModelConfig(steps=0)
    with pytest.raises(ValueError, match="unknown ReferenceModelConfig fields"):
        ReferenceModelConfig.from_dict({"depth": 3})
    with pytest.raises(FileNotFoundError, match="corpus directory not found"):
        read_corpus(ReferenceModelConfig(corpus_dir=str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="has no non-empty"):
        read_corpus(ReferenceModelConfig(corpus_dir=str(tmp_path)))


def test_cli_reference_model_then_train_head(tmp_path, capsys):
    from measure.datasets import sample_path
    from measure.train.heads import TrainedHead
    from ppdmodel.cli import main

    corpus = _write_corpus(tmp_path / "corpus")
    model_dir, head_dir = tmp_path / "model", tmp_path / "heads"
    sizes = "--vocab-size 300 --hidden-size 32 --layers 3 --heads 2 --intermediate-size 64"
    run = "--seq-len 32 --batch-size 4 --steps 5 --no-progress"
    argv = ["measure", "reference-model", "--out", str(model_dir), "--corpus", str(corpus)]
    assert main(argv + sizes.split() + run.split()) == 0
    assert "5 steps (steps)" in capsys.readouterr().out
    meta = json.loads((model_dir / METADATA_NAME).read_text())
    assert meta["config"]["num_layers"] == 3 and meta["config"]["warmup_steps"] == 1

    argv = ["measure", "train-head", "--model", str(model_dir), "--prompts"]
    argv += [str(sample_path("jsonl")), "--layer", "1", "2", "--epochs", "2", "--lr", "1e-3"]
    argv += ["--loss", "kl", "--max-seq-len", "16", "--out", str(head_dir), "--no-progress"]
    assert main(argv) == 0
    for layer in (1, 2):
        head = TrainedHead.load(head_dir / f"layer_{layer}")
        assert (head.config.layer, head.config.loss, head.config.lr) == (layer, "kl", 1e-3)
        assert head.config.epochs == 2 and head.config.warmup_ratio == 0.04
        assert len(head.train_losses) == 2

    with pytest.raises(SystemExit) as exc:  # layer d is the model's own head
        main(argv[:-3] + ["--layer", "3", "--out", str(tmp_path / "bad"), "--no-progress"])
    assert exc.value.code == 2
    assert "layer must be in [0, 3)" in capsys.readouterr().err
