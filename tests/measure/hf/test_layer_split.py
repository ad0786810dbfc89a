"""Layer-split decoding reproduces the model's own logits for every architecture with a tiny
config (llama, mistral, qwen2/3, gemma2, gemma3_text, phi3, gpt2, opt) and verifies others."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import measure.hf.layer_split as layer_split  # noqa: E402
from measure.hf.layer_split import LayerSplitModel, expand_cache, verify_layout  # noqa: E402
from tests.measure.tiny_models import (  # noqa: E402
    ALL_ARCHS,
    ARCHS,
    SLIDING_WINDOW,
    VOCAB_SIZE,
    tiny_model,
)

ATOL = 1e-4
PROMPT_LEN = 6
N_STEPS = 8

CASES = [(arch, "eager", {}) for arch in ALL_ARCHS]
CASES += [(arch, "sdpa", {}) for arch in (*ARCHS, "gemma3_text")]
CASES += [("opt", "eager", {"word_embed_proj_dim": 16})]
CASES += [("mistral", "eager", {"sliding_window": SLIDING_WINDOW})]


pytestmark = pytest.mark.usefixtures("one_thread")


def _case_id(case) -> str:
    arch, attn, overrides = case
    return "-".join([arch, attn, *(f"{k}{v}" for k, v in overrides.items())])


def _reference(model, seq):
    """The model's own last-position logits for full sequences seq: [B, S] -> [B, V]."""
    with torch.no_grad():
        return model(seq).logits[:, -1]


def _split_step(split, token, cache, position, j):
    """One decode step run as layers [0, j) then [j, d): token [B, 1] -> logits [B, V]."""
    position_ids = torch.full_like(token, position)
    h = split.embed(token, position_ids)  # [B, 1, H]
    h = split.run_layers(h, 0, j, cache, position_ids)
    h = split.run_layers(h, j, split.num_layers, cache, position_ids)
    return split.logits(h)[:, -1]


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("batch", [1, 3])
def test_split_decode_matches_model(case, batch):
    arch, attn, overrides = case
    model = tiny_model(arch, attn_implementation=attn, **overrides)
    split = LayerSplitModel(model)
    d = split.num_layers
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, VOCAB_SIZE, (1, PROMPT_LEN), generator=gen)

    full_cache = split.new_cache()
    first = split.prefill(prompt, full_cache)  # [1, V]
    torch.testing.assert_close(first, _reference(model, prompt), atol=ATOL, rtol=0)
    caches = [expand_cache(full_cache, batch) for _ in range(d + 1)]  # one per split point j
    full_cache = expand_cache(full_cache, batch)

    # candidate rows: row 0 greedy, others start from a different token, then go greedy
    token = first.argmax(-1, keepdim=True).repeat(batch, 1)  # [B, 1]
    token[1:, 0] = torch.randint(0, VOCAB_SIZE, (batch - 1,), generator=gen)
    seq = torch.cat([prompt.repeat(batch, 1), token], dim=1)
    for _ in range(N_STEPS):
        position = seq.shape[1] - 1
        ref = _reference(model, seq)
        logits = split.decode_step(token, full_cache, position)
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)
        for j, cache in enumerate(caches):
            got = _split_step(split, token, cache, position, j)
            torch.testing.assert_close(got, ref, atol=ATOL, rtol=0, msg=f"split at j={j}")
        token = logits.argmax(-1, keepdim=True)
        seq = torch.cat([seq, token], dim=1)
    assert full_cache.get_seq_length() == seq.shape[1] - 1
    assert full_cache.layers[0].keys.shape[0] == batch


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_multi_token_block_matches_model(case):
    """S > 1 new tokens through split ranges need (and get) a causal mask over the cache."""
    arch, attn, overrides = case
    model = tiny_model(arch, attn_implementation=attn, **overrides)
    split = LayerSplitModel(model)
    seq = torch.randint(0, VOCAB_SIZE, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = model(seq).logits[:, -4:]  # [B, 4, V]
    cache = split.new_cache()
    split.prefill(seq[:, :5], cache)
    position_ids = torch.arange(5, 9).expand(2, 4)
    h = split.embed(seq[:, 5:], position_ids)  # [B, 4, H]
    h = split.run_layers(h, 0, 1, cache, position_ids)
    h = split.run_layers(h, 1, split.num_layers, cache, position_ids)
    torch.testing.assert_close(split.logits(h), ref, atol=ATOL, rtol=0)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt"])
def test_wrong_position_or_missing_cache_is_detected(arch):
    """The tolerance is tight enough to catch an off-by-one position or a missing cache row."""
    model = tiny_model(arch)
    split = LayerSplitModel(model)
    prompt = torch.randint(
        0, VOCAB_SIZE, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(3)
    )
    token = torch.tensor([[7]])
    ref = _reference(model, torch.cat([prompt, token], dim=1))
    cache = split.new_cache()
    split.prefill(prompt, cache)
    shifted = split.decode_step(token, cache, PROMPT_LEN + 1)
    assert (shifted - ref).abs().max() > 100 * ATOL
    short = split.new_cache()
    split.prefill(prompt[:, 1:], short)
    missing = split.decode_step(token, short, PROMPT_LEN)
    assert (missing - ref).abs().max() > 100 * ATOL


def test_early_logits_use_the_trained_head_when_given():
    model = tiny_model("llama")
    h = torch.randn(2, 3, model.config.hidden_size)
    plain = LayerSplitModel(model)
    torch.testing.assert_close(plain.early_logits(h), plain.logits(h))
    head = torch.nn.Linear(model.config.hidden_size, VOCAB_SIZE)
    headed = LayerSplitModel(model, head=head)
    torch.testing.assert_close(headed.early_logits(h), head(h))
    assert headed.early_logits(h).shape == (2, 3, VOCAB_SIZE)


def test_logit_lens_of_last_layer_output_is_final_logits():
    model = tiny_model("opt", word_embed_proj_dim=16)
    split = LayerSplitModel(model)
    seq = torch.randint(0, VOCAB_SIZE, (1, 5), generator=torch.Generator().manual_seed(4))
    cache = split.new_cache()
    positions = torch.arange(5)[None]
    h = split.run_layers(split.embed(seq, positions), 0, split.num_layers, cache, positions)
    torch.testing.assert_close(split.logits(h), _reference_all(model, seq), atol=ATOL, rtol=0)


def _reference_all(model, seq):
    with torch.no_grad():
        return model(seq).logits


def test_run_layers_rejects_bad_range():
    split = LayerSplitModel(tiny_model("gpt2"))
    h = torch.zeros(1, 1, 32)
    pos = torch.zeros(1, 1, dtype=torch.long)
    for a, b in [(-1, 2), (3, 2), (0, 5)]:
        with pytest.raises(ValueError, match="layer range"):
            split.run_layers(h, a, b, split.new_cache(), pos)
    assert split.run_layers(h, 2, 2, split.new_cache(), pos) is h


def test_expand_cache_copies_rows_and_checks_input():
    split = LayerSplitModel(tiny_model("qwen2"))
    cache = split.new_cache()
    split.prefill(torch.tensor([[1, 2, 3]]), cache)
    wide = expand_cache(cache, 3)
    assert cache.layers[1].keys.shape[0] == 1  # original untouched
    assert wide.layers[1].keys.shape[0] == 3
    torch.testing.assert_close(wide.layers[1].keys[2], cache.layers[1].keys[0])
    with pytest.raises(ValueError, match="batch_size"):
        expand_cache(cache, 0)
    with pytest.raises(ValueError, match="one row"):
        expand_cache(wide, 2)


@pytest.mark.parametrize(
    ("arch", "field", "value", "error"),
    [
        ("gemma2", "logit_softcap", None, "does not reproduce"),
        ("llama", "logit_scale", 2.0, "does not reproduce"),
        ("llama", "cache_arg", "layer_past", "failed: .*size"),  # a swallowed keyword
        ("gpt2", "embed_positions", None, "does not reproduce"),
        ("gemma3_text", "rotary_per_layer_type", False, "failed: .*layer_type"),
    ],
)
def test_verification_catches_a_missed_part(arch, field, value, error):
    """A spec that misses one part of the model's forward is refused, not silently wrong."""
    split = LayerSplitModel(tiny_model(arch))
    assert verify_layout(split) <= 1e-4
    split.spec = split.lens.spec = dataclasses.replace(split.spec, **{field: value})
    if field == "embed_positions":
        split._embed_positions = None
    with pytest.raises(ValueError, match=f"model_type '{arch}'.*{error}"):
        verify_layout(split)


def test_verification_runs_once_per_model(monkeypatch):
    calls = []
    monkeypatch.setattr(layer_split, "verify_layout", lambda lsm: calls.append(lsm.model))
    model = tiny_model("qwen3", seed=5)
    LayerSplitModel(model)
    LayerSplitModel(model)
    LayerSplitModel(tiny_model("qwen3", seed=6), verify=False)
    assert calls == [model]
