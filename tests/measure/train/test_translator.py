"""The translator head: the logit lens when untrained, saved apart from the model, by kind."""

from __future__ import annotations

import json

import pytest
import torch

from measure.hf.layer_split import LayerSplitModel
from measure.train.head_io import group_heads, head_kind, head_name, load_head
from measure.train.heads import TrainedHead
from measure.train.translator import TranslatorConfig, TranslatorHead, stacked_logits
from tests.measure.tiny_models import ARCHS, tiny_model

torch.set_num_threads(1)


@pytest.mark.parametrize("arch", ARCHS)
def test_untrained_translator_is_the_logit_lens(arch):
    overrides = {"word_embed_proj_dim": 16} if arch == "opt" else {}
    model = tiny_model(arch, **overrides)
    head = TranslatorHead(TranslatorConfig.for_model(model, 2), model)
    h = torch.randn(2, 3, model.config.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(head(h), LayerSplitModel(model).logits(h))
    assert set(head.state_dict()) == {"translator.weight", "translator.bias"}  # A, b only
    assert head_name(head) == "translator" and head_name(None) == "shared"


def test_translator_moves_the_prediction_and_keeps_the_model():
    model = tiny_model("llama")
    head = TranslatorHead(TranslatorConfig.for_model(model, 1), model)
    before = [p.clone() for p in model.parameters()]
    with torch.no_grad():
        head.translator.bias.fill_(1.0)
        h = torch.randn(1, 1, 32)
        expected = LayerSplitModel(model).logits(h + 1.0)
        torch.testing.assert_close(head(h), expected)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_save_load_and_kind_dispatch(tmp_path):
    model = tiny_model("qwen2")
    head = TranslatorHead(TranslatorConfig.for_model(model, 3), model)
    with torch.no_grad():
        head.translator.weight.normal_()
    head.train_record = {"steps": 3}
    head.save(tmp_path / "t")
    assert head_kind(tmp_path / "t") == "translator"
    record = json.loads((tmp_path / "t" / "head_config.json").read_text())
    assert record["kind"] == "translator" and record["train"] == {"steps": 3}
    loaded = load_head(tmp_path / "t", model)
    assert isinstance(loaded, TranslatorHead) and loaded.config == head.config
    h = torch.randn(2, 4, 32)
    with torch.no_grad():
        assert torch.equal(loaded(h), head(h))
    TrainedHead.from_model(model, 3).save(tmp_path / "f")
    assert head_kind(tmp_path / "f") == "full"
    assert isinstance(load_head(tmp_path / "f"), TrainedHead)
    with pytest.raises(ValueError, match="model is required"):
        load_head(tmp_path / "t")
    with pytest.raises(ValueError, match="not a full head"):
        TrainedHead.load(tmp_path / "t")
    with pytest.raises(ValueError, match="not a translator"):
        TranslatorHead.load(tmp_path / "f", model)
    with pytest.raises(FileNotFoundError, match="no head_config.json"):
        head_kind(tmp_path)


def test_config_checks():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"layer must be an integer in \[1, 4\)"):
        TranslatorConfig.for_model(model, 4)
    with pytest.raises(ValueError, match="hidden_size must be an integer >= 1"):
        TranslatorConfig(layer=1, hidden_size=0, vocab_size=5)
    with pytest.raises(ValueError, match="unknown TranslatorConfig fields"):
        TranslatorConfig.from_dict({"layer": 1, "hidden_size": 2, "vocab_size": 3, "x": 1})
    other = tiny_model("llama", hidden_size=64, intermediate_size=64)
    head = TranslatorHead(TranslatorConfig.for_model(model, 1), model)
    with pytest.raises(ValueError, match="hidden_size=32 does not match the model"):
        head.attach(other)


def test_group_heads():
    model = tiny_model("llama")
    full2, full3 = TrainedHead.from_model(model, 2), TrainedHead.from_model(model, 3)
    tr2 = TranslatorHead(TranslatorConfig.for_model(model, 2), model)
    groups = group_heads([tr2, full3, full2])
    assert list(groups) == ["trained", "translator"]
    assert list(groups["trained"]) == [2, 3] and groups["translator"] == {2: tr2}
    assert group_heads({2: full2}) == {"trained": {2: full2}}
    assert group_heads(None) == {}
    with pytest.raises(ValueError, match="heads\\[3\\] was trained for layer 2"):
        group_heads({3: full2})
    with pytest.raises(ValueError, match="two 'trained' heads for layer 2"):
        group_heads([full2, full2])


def test_stacked_logits_equal_row_by_row():
    model = tiny_model("llama")
    heads = [TranslatorHead(TranslatorConfig.for_model(model, layer), model) for layer in (1, 2)]
    with torch.no_grad():
        for head in heads:
            head.translator.weight.normal_()
        hs = [torch.randn(1, 1, 32), torch.randn(1, 1, 32)]
        rows = torch.cat([head(h)[0] for head, h in zip(heads, hs, strict=True)])
        torch.testing.assert_close(stacked_logits(heads, hs), rows)
    second = tiny_model("llama", seed=1)
    other = TranslatorHead(TranslatorConfig.for_model(second, 1), second)
    with pytest.raises(ValueError, match="same model"):
        stacked_logits([heads[0], other], hs)
