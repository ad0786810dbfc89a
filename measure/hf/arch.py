"""Per-architecture module paths (embedding, positions, layers, norm, head) in one small table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchSpec:
    """Where the parts of a causal LM live, as dotted attribute paths from the *ForCausalLM root."""

    model_type: str
    """Hugging Face ``config.model_type``: llama, mistral, qwen2, gpt2 or opt."""
    embed_tokens: str
    """Token embedding, e.g. ``model.embed_tokens`` or ``transformer.wte``."""
    embed_positions: str | None
    """Learned absolute position embedding (GPT-2, OPT); None for rotary models."""
    layers: str
    """The ``nn.ModuleList`` of decoder layers."""
    final_norm: str | None
    """Norm applied after the last layer; None where the model has none (e.g. OPT-350m)."""
    lm_head: str
    """Output projection to the vocabulary."""
    rotary_emb: str | None = None
    """Rotary embedding module that yields ``(cos, sin)`` for the layers (Llama family)."""
    project_in: str | None = None
    """OPT's projection from ``word_embed_proj_dim`` to ``hidden_size`` (None if absent)."""
    project_out: str | None = None
    """OPT's projection from ``hidden_size`` back to ``word_embed_proj_dim`` (None if absent)."""


def _rope(model_type: str) -> ArchSpec:
    return ArchSpec(
        model_type=model_type,
        embed_tokens="model.embed_tokens",
        embed_positions=None,
        layers="model.layers",
        final_norm="model.norm",
        lm_head="lm_head",
        rotary_emb="model.rotary_emb",
    )


ARCH_TABLE: dict[str, ArchSpec] = {
    "llama": _rope("llama"),
    "mistral": _rope("mistral"),
    "qwen2": _rope("qwen2"),
    "gpt2": ArchSpec(
        model_type="gpt2",
        embed_tokens="transformer.wte",
        embed_positions="transformer.wpe",
        layers="transformer.h",
        final_norm="transformer.ln_f",
        lm_head="lm_head",
    ),
    "opt": ArchSpec(
        model_type="opt",
        embed_tokens="model.decoder.embed_tokens",
        embed_positions="model.decoder.embed_positions",
        layers="model.decoder.layers",
        final_norm="model.decoder.final_layer_norm",
        lm_head="lm_head",
        project_in="model.decoder.project_in",
        project_out="model.decoder.project_out",
    ),
}
"""Supported architectures, keyed by ``config.model_type``."""


def arch_spec(model_or_config) -> ArchSpec:
    """The ArchSpec of a model or config; ValueError naming an unsupported ``model_type``."""
    config = getattr(model_or_config, "config", model_or_config)
    model_type = getattr(config, "model_type", None)
    if model_type not in ARCH_TABLE:
        raise ValueError(
            f"model_type {model_type!r} is not supported by measure/; "
            f"supported model types: {', '.join(sorted(ARCH_TABLE))}"
        )
    return ARCH_TABLE[model_type]


def get_module(root, path: str | None):
    """Follow a dotted attribute path from `root`; None if `path` is None or ends at None."""
    if path is None:
        return None
    obj = root
    for name in path.split("."):
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj
