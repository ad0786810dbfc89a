"""Load a causal LM and its tokenizer from a local directory: no downloads, no remote code."""

from __future__ import annotations

from pathlib import Path

import torch

from measure.hf.weight_files import refuse_pickle_weights

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
"""Accepted dtype names and the torch dtypes they stand for."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Files whose presence means the directory ships a tokenizer."""


def resolve_dtype(name) -> torch.dtype:
    """torch dtype for a name in DTYPES (or a torch.dtype among them); ValueError otherwise."""
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[key]


def resolve_device(name) -> torch.device:
    """torch device for `name` ("cpu", "cuda", "cuda:1", ...); ValueError if unusable here."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}") from exc
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {name!r} requested but CUDA is not available here")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device index must be in [0, {count}), got {name!r}")
    elif device.type != "cpu":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    return device


def load_model(path, *, dtype="float32", device="cpu", attn_implementation: str | None = None):
    """(model, tokenizer or None) from a local Hugging Face directory, in eval mode on `device`.

    Only local files are read (``local_files_only``), ``trust_remote_code`` is off, and
    safetensors weights are required whenever the directory has any.
    """
    model = load_causal_lm(
        path, dtype=dtype, device=device, attn_implementation=attn_implementation
    )
    return model, load_tokenizer(path)


def load_causal_lm(path, *, dtype="float32", device="cpu", attn_implementation: str | None = None):
    """The model alone (no tokenizer), loaded as `load_model` does."""
    from transformers import AutoModelForCausalLM

    root = _model_dir(path)
    refuse_pickle_weights(root)
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(
        root,
        local_files_only=True,
        trust_remote_code=False,
        dtype=torch_dtype,
        use_safetensors=any(root.glob("*.safetensors")) or None,
        **kwargs,
    )
    return model.to(torch_device).eval()


def load_tokenizer(path):
    """The directory's tokenizer (local files only, no remote code), or None if it has none."""
    from transformers import AutoTokenizer

    root = _model_dir(path)
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        return None
    return AutoTokenizer.from_pretrained(root, local_files_only=True, trust_remote_code=False)


def _model_dir(path) -> Path:
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"model directory not found: {root} (nothing is downloaded)")
    if not (root / "config.json").is_file():
        raise FileNotFoundError(f"model directory {root} has no config.json")
    return root
