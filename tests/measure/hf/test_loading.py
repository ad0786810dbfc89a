"""Loading a model directory saved with safetensors, and the errors for bad paths and options."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from measure.hf.loading import load_model, resolve_device, resolve_dtype  # noqa: E402
from tests.measure.tiny_models import char_tokenizer, tiny_model  # noqa: E402


def _save(model, path, tokenizer=None):
    model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_round_trip_reproduces_logits(tmp_path, arch):
    model = tiny_model(arch, attn_implementation="sdpa")
    _save(model, tmp_path)
    assert list(tmp_path.glob("*.safetensors"))
    loaded, tokenizer = load_model(tmp_path)
    assert tokenizer is None
    assert not loaded.training and loaded.dtype == torch.float32
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=1e-5, rtol=0)
    assert LayerSplitModel(loaded).num_layers == model.config.num_hidden_layers


def test_tokenizer_and_dtype(tmp_path):
    _save(tiny_model("gpt2"), tmp_path, tokenizer=char_tokenizer())
    model, tokenizer = load_model(tmp_path, dtype="bf16")
    assert model.dtype == torch.bfloat16
    assert tokenizer("ab")["input_ids"] == char_tokenizer()("ab")["input_ids"] == [66, 67]


def test_bin_weights_are_not_required(tmp_path):
    """A directory with safetensors must not fall back to pickled weights."""
    _save(tiny_model("qwen2"), tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle: must never be read")
    model, _ = load_model(tmp_path)
    assert model.config.model_type == "qwen2"


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_model(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path)


@pytest.mark.parametrize("bad", ["float64", "int8", "half-ish", None])
def test_bad_dtype_names_allowed_values(tmp_path, bad):
    _save(tiny_model("gpt2"), tmp_path)
    with pytest.raises(ValueError, match="dtype must be one of .*bf16"):
        load_model(tmp_path, dtype=bad)


def test_resolve_dtype_aliases():
    assert resolve_dtype("fp16") is torch.float16
    assert resolve_dtype("BFloat16") is torch.bfloat16
    assert resolve_dtype("torch.float32") is torch.float32
    assert resolve_dtype(torch.float16) is torch.float16


def test_bad_device(tmp_path):
    _save(tiny_model("gpt2"), tmp_path)
    with pytest.raises(ValueError, match="device must be"):
        load_model(tmp_path, device="gpu0")
    with pytest.raises(ValueError, match="device must be"):
        resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            load_model(tmp_path, device="cuda")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_load_on_cuda(tmp_path):
    _save(tiny_model("llama"), tmp_path)
    model, _ = load_model(tmp_path, device="cuda", dtype="bf16")
    assert next(model.parameters()).device.type == "cuda"
