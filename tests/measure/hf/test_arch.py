"""Model surgery finds the parts of every tiny architecture and names what it cannot find."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from measure.hf.arch import EXCEPTIONS, ArchSpec, arch_spec, get_module  # noqa: E402
from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from tests.measure.tiny_models import ALL_ARCHS, tiny_config, tiny_model  # noqa: E402

ROTARY = {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3"}


def _tiny(model_type: str, **overrides):
    """A 2-layer random model of any model type (vocabulary 64), built from its config."""
    base = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=64,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    config = transformers.AutoConfig.for_model(model_type, **{**base, **overrides})
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_paths_resolve_to_modules(arch):
    model = tiny_model(arch)
    spec = arch_spec(model)
    assert isinstance(spec, ArchSpec) and spec.model_type == arch
    assert arch_spec(model.config) == spec  # found again on a weightless meta-device model
    layers = get_module(model, spec.layers)
    assert isinstance(layers, torch.nn.ModuleList) and len(layers) == model.config.num_hidden_layers
    assert get_module(model, spec.embed_tokens) is model.get_input_embeddings()
    assert get_module(model, spec.lm_head) is model.get_output_embeddings()
    assert get_module(model, spec.final_norm) is not None
    assert (get_module(model, spec.rotary_emb) is not None) == (arch in ROTARY)
    assert (get_module(model, spec.embed_positions) is not None) == (arch in ("gpt2", "opt"))
    assert len(spec.layer_types) == len(layers)


def test_config_driven_parts():
    gemma2, gemma3 = arch_spec(tiny_model("gemma2")), arch_spec(tiny_model("gemma3_text"))
    assert gemma2.logit_softcap == 5.0 and not gemma2.rotary_per_layer_type
    assert gemma2.layer_types == ("sliding_attention", "full_attention") * 2
    assert gemma3.rotary_per_layer_type and gemma3.sliding_window == 4
    assert arch_spec(tiny_model("llama")).layer_types == ("full_attention",) * 4
    mistral = arch_spec(tiny_model("mistral", sliding_window=3))
    assert mistral.layer_types == ("sliding_attention",) * 4 and mistral.sliding_window == 3
    granite = arch_spec(_tiny("granite", embedding_multiplier=12.0, logits_scaling=8.0))
    assert granite.embedding_multiplier == 12.0 and granite.logit_scale == 1 / 8
    assert arch_spec(_tiny("cohere", logit_scale=0.25)).logit_scale == 0.25
    assert arch_spec(_tiny("gpt_neox")).cache_arg in ("layer_past", "cache")  # by its Cache type


def test_opt_is_the_table_exception():
    assert set(EXCEPTIONS) == {"opt"}
    plain = tiny_model("opt")
    spec = arch_spec(plain)
    assert spec.positions_by_keyword
    assert get_module(plain, spec.project_in) is None
    assert get_module(plain, spec.project_out) is None
    projected = tiny_model("opt", word_embed_proj_dim=16)
    assert get_module(projected, spec.project_in).in_features == 16
    assert get_module(projected, spec.project_out).out_features == 16
    no_norm = tiny_model("opt", do_layer_norm_before=False)  # OPT-350m has no final norm
    assert arch_spec(no_norm).final_norm is None
    LayerSplitModel(no_norm)  # and still reproduces its logits


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("gpt_neox", {}),  # layers take the cache as layer_past
        ("granite", dict(embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.5)),
        ("cohere", dict(logit_scale=0.25)),
        ("olmo2", {}),  # QK norms, post-norm layers
        ("starcoder2", dict(sliding_window=2)),  # LayerNorm with bias, sliding window everywhere
    ],
)
def test_layouts_without_a_tiny_config_verify(model_type, overrides):
    """Any common layout works: the split path reproduces the model's own logits (verified)."""
    split = LayerSplitModel(_tiny(model_type, **overrides))
    assert split.num_layers == 2


@pytest.mark.parametrize(
    ("model_type", "overrides", "missing"),
    [
        ("bloom", {}, "no position embedding found.*ALiBi"),
        ("falcon", dict(alibi=False), "layer-split decoding of FalconForCausalLM.*failed"),
    ],
)
def test_layouts_not_understood_name_what_is_missing(model_type, overrides, missing):
    model = _tiny(model_type, **overrides)
    with pytest.raises(ValueError, match=missing):
        LayerSplitModel(model)


def test_gptj_follows_its_release():
    """GPT-J computes rotary positions inside attention before transformers 5.24 (refused,
    named) and in a model-level rotary module from 5.24 on (understood and verified)."""
    model = _tiny("gptj", rotary_dim=4)
    if any(name.endswith("rotary_emb") for name, _ in model.named_modules()):
        assert LayerSplitModel(model).num_layers == 2
    else:
        with pytest.raises(ValueError, match="no position embedding found"):
            LayerSplitModel(model)


def test_missing_parts_are_named():
    model = tiny_model("llama")
    model.model.norm = None
    with pytest.raises(ValueError, match="no final norm found; looked for norm, "):
        arch_spec(model)
    model = tiny_model("llama")
    model.model.layers = torch.nn.ModuleList(list(model.model.layers)[:2])
    with pytest.raises(ValueError, match="no decoder layer list found .*4 layers"):
        arch_spec(model)
    with pytest.raises(ValueError, match="layer types .*chunked_attention"):
        arch_spec(tiny_config("llama", layer_types=["chunked_attention"] * 4))


def test_objects_that_are_not_models_are_rejected():
    with pytest.raises(ValueError, match="causal LM or its config"):
        arch_spec(object())
    with pytest.raises(ValueError, match="no config"):
        arch_spec(torch.nn.Linear(2, 2))


def test_get_module_follows_paths():
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("gpt2"))
    assert get_module(model, "transformer.ln_f") is model.transformer.ln_f
    assert get_module(model, None) is None
    assert get_module(model, "transformer.missing") is None
