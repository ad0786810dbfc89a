"""Which weight files a model directory may be loaded from: safetensors (or GGUF), never pickles.

A ``pytorch_model.bin`` (or ``.pt``/``.pth``/``.ckpt``) is a Python pickle: loading one can run
arbitrary code. transformers falls back to it when a directory has no safetensors; this module
refuses such a directory before transformers sees it.
"""

from __future__ import annotations

from pathlib import Path

SAFE_SUFFIXES = (".safetensors", ".gguf")
"""Weight formats that hold tensors only."""
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
"""Weight formats that are Python pickles (never loaded)."""


def refuse_pickle_weights(path) -> None:
    """ValueError if the model directory ``path`` holds pickle weights and no safe ones.

    A path that is not a directory (a single GGUF file) is left to the loader.
    """
    root = Path(path)
    if not root.is_dir():
        return
    names = [p.name for p in root.iterdir() if p.is_file()]
    if any(name.endswith(SAFE_SUFFIXES) for name in names):
        return
    pickles = sorted(name for name in names if name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise ValueError(
            f"model directory {root} holds only pickle weights ({', '.join(pickles)}); pickles "
            "can run code when loaded and are never loaded here: convert the weights to "
            "safetensors (model.save_pretrained(dir, safe_serialization=True) in a trusted "
            "environment)"
        )
