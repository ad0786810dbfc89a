"""Model directories with only pickle weights are refused; safetensors and GGUF pass."""

from __future__ import annotations

import pytest

from measure.hf.weight_files import refuse_pickle_weights


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.pth", "x.ckpt"])
def test_only_pickle_weights_are_refused(tmp_path, name):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / name).write_bytes(b"\x80\x04")
    with pytest.raises(ValueError, match=f"only pickle weights \\({name}\\).*safetensors"):
        refuse_pickle_weights(tmp_path)


@pytest.mark.parametrize(
    "safe", ["model.safetensors", "model-00001-of-00002.safetensors", "m.gguf"]
)
def test_safe_weights_pass_even_beside_a_pickle(tmp_path, safe):
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04")
    (tmp_path / safe).write_bytes(b"")
    refuse_pickle_weights(tmp_path)


def test_no_weights_and_single_files_are_left_to_the_loader(tmp_path):
    refuse_pickle_weights(tmp_path)  # transformers reports the missing weights
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"")
    refuse_pickle_weights(gguf)
