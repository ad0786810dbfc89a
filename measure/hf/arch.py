"""Where the parts of a decoder-only causal LM live, found by model surgery on its module tree.

Most Hugging Face decoder-only models share one layout: a token embedding, a list of decoder
layers, a final norm, an LM head, and rotary or learned absolute positions, with some layers
attending over a sliding window. ``arch_spec`` finds those parts by searching common attribute
names (as tuned-lens's ``model_surgery`` does) and reads the config-driven scalings (Gemma 2's
logit soft-capping, Granite's multipliers); ``EXCEPTIONS`` holds the few models that differ
(OPT). A layout it does not understand gets a ValueError naming the missing part.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from measure.hf.compat import cache_keyword

FINAL_NORM_NAMES = ("norm", "final_layernorm", "final_layer_norm", "ln_f", "norm_f", "final_norm")
"""Attribute names of the final norm, searched on the module that holds the layer list."""
ROTARY_NAMES = ("rotary_emb", "rotary_embedding", "rotary_embeddings")
"""Attribute names of a model-level rotary embedding yielding ``(cos, sin)`` for the layers."""
ABSOLUTE_POSITION_NAMES = ("wpe", "embed_positions", "position_embeddings")
"""Attribute names of a learned absolute position embedding called with position ids."""
LAYER_TYPES = ("full_attention", "sliding_attention")
"""Attention kinds layer-split decoding knows how to mask."""


@dataclass(frozen=True)
class ArchSpec:
    """Where the parts of a causal LM live (dotted paths from the *ForCausalLM root) and how
    the model's own forward combines them."""

    model_type: str
    """Hugging Face ``config.model_type`` (text config), e.g. llama, gemma3_text, gpt2."""
    embed_tokens: str
    """Token embedding (``get_input_embeddings``), e.g. ``model.embed_tokens``."""
    embed_positions: str | None
    """Learned absolute position embedding (GPT-2, OPT); None for rotary models."""
    layers: str
    """The ``nn.ModuleList`` of decoder layers."""
    final_norm: str | None
    """Norm applied after the last layer; None only where EXCEPTIONS allow it (OPT-350m)."""
    lm_head: str
    """Output projection to the vocabulary (``get_output_embeddings``)."""
    rotary_emb: str | None = None
    """Model-level rotary embedding that yields ``(cos, sin)`` for the layers."""
    project_in: str | None = None
    """OPT's projection from ``word_embed_proj_dim`` to ``hidden_size`` (None if absent)."""
    project_out: str | None = None
    """OPT's projection from ``hidden_size`` back to ``word_embed_proj_dim`` (None if absent)."""
    layer_types: tuple[str, ...] = ()
    """Per decoder layer: "full_attention" or "sliding_attention" (config ``layer_types``)."""
    sliding_window: int | None = None
    """Keys a sliding-attention layer sees, its own position included (config)."""
    rotary_per_layer_type: bool = False
    """The rotary module takes a ``layer_type`` (Gemma 3: local and global frequencies)."""
    cache_arg: str = "cache"
    """Keyword under which the decoder layers take the KV cache (found by its ``Cache`` type:
    ``cache`` from transformers 5.24, ``past_key_values`` before, ``layer_past`` in GPT-NeoX)."""
    positions_by_keyword: bool = False
    """The absolute position module is called as ``(None, 0, position_ids=...)`` (OPT)."""
    embedding_multiplier: float = 1.0
    """Factor on the token embedding applied by the model's forward (Granite)."""
    logit_scale: float = 1.0
    """Factor on the LM head's output (Cohere ``logit_scale``, Granite 1/``logits_scaling``)."""
    logit_softcap: float | None = None
    """Final logit soft-capping c: logits -> c * tanh(logits / c) (Gemma 2)."""


EXCEPTIONS: dict[str, dict] = {
    "opt": dict(
        project_in="model.decoder.project_in",
        project_out="model.decoder.project_out",
        positions_by_keyword=True,
        final_norm_optional=True,  # OPT-350m (do_layer_norm_before=False) has none
    ),
}
"""Model types whose layout the search alone gets wrong, keyed by ``model_type``."""


def arch_spec(model_or_config) -> ArchSpec:
    """The ArchSpec of a causal LM (or of a config: found on a weightless meta-device model).

    Raises ValueError naming the part (layer list, final norm, LM head, positions, ...) that
    the search could not find.
    """
    if isinstance(model_or_config, nn.Module):
        return _find_parts(model_or_config)
    config = getattr(model_or_config, "config", model_or_config)
    if not hasattr(config, "model_type") or not hasattr(config, "to_dict"):
        raise ValueError(f"model_or_config must be a causal LM or its config, got "
                         f"{type(model_or_config).__name__}")  # fmt: skip
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except ValueError as exc:
        raise ValueError(
            f"model_type {config.model_type!r} has no causal LM class in transformers: {exc}"
        ) from exc
    return _find_parts(model)


def _find_parts(model: nn.Module) -> ArchSpec:
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"{type(model).__name__} has no config: not a Hugging Face model")
    text = config.get_text_config()
    model_type = str(text.model_type)
    extra = EXCEPTIONS.get(model_type, {})
    what = f"{type(model).__name__} (model_type {model_type!r})"
    names = {id(module): name for name, module in model.named_modules()}

    layers_path = _find_layers(model, text, what)
    owner_path = layers_path.rpartition(".")[0]
    owner = get_module(model, owner_path) if owner_path else model
    embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if embed is None or id(embed) not in names:
        raise ValueError(f"{what}: no token embedding found (get_input_embeddings)")
    if head is None or id(head) not in names:
        raise ValueError(f"{what}: no LM head found (get_output_embeddings)")
    final_norm = _child(owner, owner_path, FINAL_NORM_NAMES)
    if final_norm is None and not extra.get("final_norm_optional"):
        raise ValueError(
            f"{what}: no final norm found; looked for {', '.join(FINAL_NORM_NAMES)} "
            f"next to the layer list {layers_path!r}"
        )
    rotary = _child(owner, owner_path, ROTARY_NAMES)
    absolute = None if rotary else _child(owner, owner_path, ABSOLUTE_POSITION_NAMES)
    if rotary is None and absolute is None:
        raise ValueError(
            f"{what}: no position embedding found; looked for rotary "
            f"({', '.join(ROTARY_NAMES)}) and absolute ({', '.join(ABSOLUTE_POSITION_NAMES)}) "
            f"next to the layer list {layers_path!r} (ALiBi and in-attention positions are "
            "not supported)"
        )
    layers = get_module(model, layers_path)
    return ArchSpec(
        model_type=model_type,
        embed_tokens=names[id(embed)],
        embed_positions=absolute,
        layers=layers_path,
        final_norm=final_norm,
        lm_head=names[id(head)],
        rotary_emb=rotary,
        project_in=extra.get("project_in"),
        project_out=extra.get("project_out"),
        layer_types=_layer_types(text, len(layers), what),
        sliding_window=getattr(text, "sliding_window", None),
        rotary_per_layer_type=rotary is not None
        and "layer_type" in inspect.signature(get_module(model, rotary).forward).parameters,
        cache_arg=cache_keyword(
            layers[0].forward, f"{what}: decoder layer {type(layers[0]).__name__}"
        ),
        positions_by_keyword=extra.get("positions_by_keyword", False),
        embedding_multiplier=float(getattr(text, "embedding_multiplier", None) or 1.0),
        logit_scale=_logit_scale(text),
        logit_softcap=getattr(text, "final_logit_softcapping", None),
    )


def _find_layers(model: nn.Module, text, what: str) -> str:
    """Path of the first ModuleList holding ``num_hidden_layers`` modules."""
    n = getattr(text, "num_hidden_layers", None)
    if n is None:
        raise ValueError(f"{what}: config has no num_hidden_layers")
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n and name:
            return name
    raise ValueError(f"{what}: no decoder layer list found (an nn.ModuleList of {n} layers)")


def _child(owner: nn.Module, owner_path: str, candidates: tuple[str, ...]) -> str | None:
    for name in candidates:
        if isinstance(getattr(owner, name, None), nn.Module):
            return f"{owner_path}.{name}" if owner_path else name
    return None


def _layer_types(text, n: int, what: str) -> tuple[str, ...]:
    """Per-layer attention kind: config ``layer_types``, else from ``sliding_window``."""
    types = getattr(text, "layer_types", None)
    if types is None:
        sliding = getattr(text, "sliding_window", None) is not None
        types = ["sliding_attention" if sliding else "full_attention"] * n
    types = tuple(types)[:n]
    unknown = sorted(set(types) - set(LAYER_TYPES))
    if unknown or len(types) != n:
        raise ValueError(
            f"{what}: layer types {unknown or types} are not supported; "
            f"supported: {', '.join(LAYER_TYPES)}"
        )
    if "sliding_attention" in types and not getattr(text, "sliding_window", None):
        raise ValueError(f"{what}: sliding-attention layers but no sliding_window in the config")
    return types


def _logit_scale(text) -> float:
    scale = float(getattr(text, "logit_scale", None) or 1.0)  # Cohere: logits * logit_scale
    divide = getattr(text, "logits_scaling", None)  # Granite: logits / logits_scaling
    return scale / float(divide) if divide else scale


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
