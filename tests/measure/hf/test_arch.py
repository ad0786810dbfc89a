"""The architecture table finds every part of each supported model and rejects the rest."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from measure.hf.arch import ARCH_TABLE, ArchSpec, arch_spec, get_module  # noqa: E402
from tests.measure.tiny_models import ARCHS, tiny_config, tiny_model  # noqa: E402


def test_table_covers_exactly_the_supported_archs():
    assert set(ARCH_TABLE) == set(ARCHS)
    for name, spec in ARCH_TABLE.items():
        assert isinstance(spec, ArchSpec) and spec.model_type == name


@pytest.mark.parametrize("arch", ARCHS)
def test_paths_resolve_to_modules(arch):
    model = tiny_model(arch)
    spec = arch_spec(model)
    assert arch_spec(model.config) is spec
    layers = get_module(model, spec.layers)
    assert isinstance(layers, torch.nn.ModuleList) and len(layers) == model.config.num_hidden_layers
    assert isinstance(get_module(model, spec.embed_tokens), torch.nn.Embedding)
    assert isinstance(get_module(model, spec.lm_head), torch.nn.Linear)
    assert get_module(model, spec.final_norm) is not None
    assert (get_module(model, spec.rotary_emb) is not None) == (
        arch in ("llama", "mistral", "qwen2")
    )
    assert (get_module(model, spec.embed_positions) is not None) == (arch in ("gpt2", "opt"))


def test_opt_projections_present_only_when_dims_differ():
    spec = ARCH_TABLE["opt"]
    plain = tiny_model("opt")
    assert (
        get_module(plain, spec.project_in) is None and get_module(plain, spec.project_out) is None
    )
    projected = tiny_model("opt", word_embed_proj_dim=16)
    assert get_module(projected, spec.project_in).in_features == 16
    assert get_module(projected, spec.project_out).out_features == 16


@pytest.mark.parametrize("model_type", ["gpt_neox", "bloom"])
def test_unsupported_model_type_is_named(model_type):
    config = transformers.AutoConfig.for_model(model_type)
    with pytest.raises(ValueError, match=f"'{model_type}'.*llama, mistral, opt, qwen2"):
        arch_spec(config)


def test_unsupported_model_instance_is_named():
    config = transformers.AutoConfig.for_model(
        "gpt_neox",
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=64,
    )
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(ValueError, match="gpt_neox"):
        arch_spec(model)


def test_object_without_config_is_rejected():
    with pytest.raises(ValueError, match="None"):
        arch_spec(object())


def test_get_module_follows_paths():
    config = tiny_config("gpt2")
    model = transformers.AutoModelForCausalLM.from_config(config)
    assert get_module(model, "transformer.ln_f") is model.transformer.ln_f
    assert get_module(model, None) is None
    assert get_module(model, "transformer.missing") is None
