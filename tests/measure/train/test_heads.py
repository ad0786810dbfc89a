"""Per-layer trained heads: copy of the model's head, save/load, and beating the shared head."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from measure.hf.arch import arch_spec, get_module
from measure.train.heads import HeadConfig, TrainedHead, hidden_at_layer, token_blocks, train_head
from tests.measure.tiny_models import ARCHS, tiny_model

torch.set_num_threads(1)


def _final_head_logits(model, h):
    """The model's own final norm (+ project_out) + LM head on h: the logit lens."""
    spec = arch_spec(model)
    for path in (spec.final_norm, spec.project_out, spec.lm_head):
        module = get_module(model, path)
        if module is not None:
            h = module(h)
    return h


@pytest.mark.parametrize("arch", ARCHS)
def test_from_model_reproduces_the_shared_head(arch):
    overrides = {"word_embed_proj_dim": 16} if arch == "opt" else {}
    model = tiny_model(arch, **overrides)
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        head = TrainedHead.from_model(model, 2)
        h = out.hidden_states[2]
        torch.testing.assert_close(head(h), _final_head_logits(model, h), atol=1e-5, rtol=1e-5)
    assert head.config.model_type == arch
    for layer in range(4):  # the early-stopped forward gives the same hidden states
        torch.testing.assert_close(hidden_at_layer(model, ids, layer), out.hidden_states[layer])
    assert (head.project_out is not None) == (arch == "opt")
    # the head holds copies: changing it leaves the model alone
    before = get_module(model, arch_spec(model).lm_head).weight.clone()
    with torch.no_grad():
        head.lm_head.weight.add_(1.0)
    torch.testing.assert_close(get_module(model, arch_spec(model).lm_head).weight, before)


def test_config_validation_and_round_trip():
    model = tiny_model("llama")
    config = HeadConfig.for_model(model, 1, loss="kl", lr=1e-3)
    assert config.norm == "rms" and config.vocab_size == 128 and config.hidden_size == 32
    assert config.warmup_ratio == 0.04 and config.epochs == 3 and config.batch_size == 128
    assert HeadConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"layer must be in \[0, 4\)"):
        HeadConfig.for_model(model, 4)
    with pytest.raises(ValueError, match="loss must be one of"):
        dataclasses.replace(config, loss="mse")
    with pytest.raises(ValueError, match="warmup_ratio must be in"):
        dataclasses.replace(config, warmup_ratio=1.0)
    with pytest.raises(ValueError, match="unknown HeadConfig fields"):
        HeadConfig.from_dict({**config.to_dict(), "colour": 1})
    with pytest.raises(ValueError, match="does not match the model"):
        TrainedHead.from_model(model, 1, dataclasses.replace(config, vocab_size=64))


def test_token_blocks_packs_sequences():
    blocks = token_blocks([[1, 2, 3], [4, 5], [6, 7, 8, 9]], 4)
    assert blocks.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert token_blocks([[1, 2, 3]], 8).tolist() == [[1, 2, 3]]
    assert token_blocks(torch.arange(12).reshape(2, 6), 4).tolist() == [[0, 1, 2, 3], [6, 7, 8, 9]]


def _top1_match(model, head, ids, layer):
    """Fraction of positions where the head's argmax at `layer` equals the final argmax."""
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        early = head(out.hidden_states[layer])
    return (early.argmax(-1) == out.logits.argmax(-1))[:, 2:].float().mean().item()


@pytest.mark.parametrize("loss", ["ce", "kl"])
def test_trained_head_beats_shared_head(trained_tiny_llama, loss):
    model, train_data, test_data = trained_tiny_llama
    layer = 2
    before = [p.clone() for p in model.parameters()]
    config = HeadConfig.for_model(
        model, layer, loss=loss, lr=1e-2, epochs=20, batch_size=16, warmup_ratio=0.1
    )
    head = train_head(model, layer, train_data, config)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert len(head.train_losses) == 20 * 4
    assert head.train_losses[-1] < 0.5 * head.train_losses[0]
    shared = _top1_match(model, TrainedHead.from_model(model, layer), test_data, layer)
    trained = _top1_match(model, head, test_data, layer)
    assert trained > shared + 0.1, (trained, shared)


def test_save_load_round_trip(tmp_path):
    model = tiny_model("gpt2")
    data = torch.randint(0, 128, (4, 9), generator=torch.Generator().manual_seed(0))
    config = HeadConfig.for_model(model, 1, epochs=1, batch_size=2, micro_batch_size=1, lr=1e-3)
    head = train_head(model, 1, data, config)
    head.save(tmp_path / "head")
    loaded = TrainedHead.load(tmp_path / "head")
    assert loaded.config == head.config
    assert loaded.train_losses == head.train_losses
    h = torch.randn(2, 5, 32)
    with torch.no_grad():
        assert torch.equal(loaded(h), head(h))
    with pytest.raises(ValueError, match="tokenizer is required"):
        train_head(model, 1, ["some text"], config)
    with pytest.raises(FileNotFoundError, match="no head_config.json"):
        TrainedHead.load(tmp_path)
