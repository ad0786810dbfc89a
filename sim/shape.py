"""Transformer decoder shapes: what a layer computes and what a hand-off has to carry."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ppdmodel.validation import as_int

MAX_DIMENSION = 2**40
"""Largest model dimension accepted (about 10^12): products of a few stay exact in float64."""


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
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("ModelShape.hidden_size must be divisible by num_attention_heads")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("ModelShape.num_key_value_heads must divide num_attention_heads")

    @property
    def head_dim(self) -> int:
        """Width of one attention head, hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection, num_key_value_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    def layer_params(self) -> int:
        """Weights of one decoder layer: q, o (h x h), k, v (h x kv_width), 3 MLP matrices."""
        h = self.hidden_size
        return 2 * h * h + 2 * h * self.kv_width + 3 * h * self.intermediate_size

    def kv_bytes_per_token_layer(self) -> int:
        """Bytes of one token's key and value entries in one layer."""
        return 2 * self.kv_width * self.dtype_bytes

    def handoff_bytes(self, n_missing_tokens: int = 1, n_layers: int = 1) -> int:
        """Bytes of one hand-off: one hidden-state row plus the KV entries the receiver lacks.

        After an accepted early prediction the receiving process lacks the keys and values
        of ``n_missing_tokens`` tokens in the ``n_layers`` layers the sender ran for them.
        """
        n_missing_tokens = as_int(
            "n_missing_tokens", n_missing_tokens, minimum=0, limit=MAX_DIMENSION
        )
        n_layers = as_int("n_layers", n_layers, minimum=0, limit=MAX_DIMENSION)
        hidden = self.hidden_size * self.dtype_bytes
        return hidden + n_missing_tokens * n_layers * self.kv_bytes_per_token_layer()

    def with_context(self, context_len: int) -> ModelShape:
        """The same model at another context length."""
        return replace(self, context_len=context_len)

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
}
