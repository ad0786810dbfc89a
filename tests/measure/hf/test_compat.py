"""The transformers internals the toolkit uses are found by type, and a rename is named."""

from __future__ import annotations

import inspect

import pytest
import torch
from transformers import Cache, DynamicCache

from measure.hf import compat
from measure.hf.arch import arch_spec, get_module
from tests.measure.tiny_models import ALL_ARCHS, tiny_model


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_cache_keyword_is_the_one_the_model_passes(arch):
    """The keyword arch_spec found is the one the model's own forward hands its Cache to."""
    model = tiny_model(arch)
    spec = arch_spec(model)
    seen = []

    layer = get_module(model, spec.layers)[0]

    def record(_module, args, kwargs):  # bound to the signature: GPT-2 passes it by position
        bound = inspect.signature(layer.forward).bind(*args, **kwargs).arguments
        seen.extend(name for name, value in bound.items() if isinstance(value, Cache))

    handle = layer.register_forward_pre_hook(record, with_kwargs=True)
    try:
        model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    finally:
        handle.remove()
    assert seen == [spec.cache_arg]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_model_keyword_and_output_cache(arch):
    model = tiny_model(arch)
    cache = DynamicCache(config=model.config)
    kwargs = {compat.model_cache_keyword(model): cache}
    out = model(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True, **kwargs)
    assert compat.output_cache(out) is cache and cache.get_seq_length() == 3


def test_keyword_found_by_annotation_not_by_name():
    def new(self, h, mask=None, kv: Cache | None = None, use_cache=False): ...
    def string(self, h, layer_past: "DynamicCache | None" = None): ...  # noqa: UP037
    def legacy(self, h, past_key_values: tuple | None = None): ...
    def two(self, h, a: Cache | None = None, b: Cache | None = None): ...

    assert compat.cache_keyword(new, "new") == "kv"
    assert compat.cache_keyword(string, "string") == "layer_past"
    for fn, found in ((legacy, "no parameter"), (two, "2 parameters")):
        with pytest.raises(ValueError, match=rf"{found}.*transformers \d+\.\d+.*tested"):
            compat.cache_keyword(fn, fn.__name__)


def test_output_without_cache_is_named():
    model = tiny_model("llama")
    out = model(input_ids=torch.tensor([[1, 2]]), use_cache=False)
    with pytest.raises(ValueError, match="no transformers Cache.*use_cache=True"):
        compat.output_cache(out)


def test_internals_present_and_a_rename_is_reported(monkeypatch):
    assert compat.check_internals() == []
    monkeypatch.setattr(compat, "GENERATION_FIELDS", (*compat.GENERATION_FIELDS, "renamed"))
    monkeypatch.setattr(compat, "CACHE_LAYER_ATTRS", (*compat.CACHE_LAYER_ATTRS, "gone"))
    problems = compat.check_internals()
    assert any("GenerationConfig has no field 'renamed'" in p for p in problems)
    assert any("'gone'" in p and "transformers" in p for p in problems)
