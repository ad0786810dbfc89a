"""Layer-split decoding: prefill, then run any layer range [a, b) one decode step at a time."""

from __future__ import annotations

import copy
import inspect

import torch
from transformers import DynamicCache

from measure.hf.arch import ArchSpec, arch_spec, get_module


class LayerSplitModel:
    """Run any layer range [a, b) of a causal LM one decode step at a time with a KV cache.

    The decoder layers write their keys and values into ``cache`` at their own layer index, so
    running [0, j) and then [j, d) fills the same cache as one full step. Hidden states between
    ranges are the residual stream, ``h: [B, S, H]``.
    """

    def __init__(self, model, head: torch.nn.Module | None = None):
        self.model = model
        self.spec: ArchSpec = arch_spec(model)
        self.layers: torch.nn.ModuleList = get_module(model, self.spec.layers)
        self.num_layers: int = len(self.layers)
        self.head = head
        self._embed_tokens = get_module(model, self.spec.embed_tokens)
        self._embed_positions = get_module(model, self.spec.embed_positions)
        self._final_norm = get_module(model, self.spec.final_norm)
        self._lm_head = get_module(model, self.spec.lm_head)
        self._rotary_emb = get_module(model, self.spec.rotary_emb)
        self._project_in = get_module(model, self.spec.project_in)
        self._project_out = get_module(model, self.spec.project_out)
        forward_params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in forward_params

    @property
    def device(self) -> torch.device:
        """Device of the embedding weights (where input ids must live)."""
        return self._embed_tokens.weight.device

    def new_cache(self) -> DynamicCache:
        """An empty KV cache laid out for this model's layers."""
        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Run the whole model on the prompt, filling `cache`; logits of the last position.

        input_ids: [B, S] -> [B, V]. Positions continue from what `cache` already holds.
        """
        kwargs = {"logits_to_keep": 1} if self._keeps_logits else {}
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, **kwargs)
        return out.logits[:, -1]  # [B, V]

    @torch.no_grad()
    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Token (+ learned position) embedding: input_ids, position_ids [B, S] -> h [B, S, H]."""
        h = self._embed_tokens(input_ids)  # [B, S, E]
        if self._project_in is not None:
            h = self._project_in(h)  # OPT: [B, S, E] -> [B, S, H]
        if self.spec.model_type == "opt":
            h = h + self._embed_positions(None, 0, position_ids=position_ids)
        elif self._embed_positions is not None:
            h = h + self._embed_positions(position_ids)
        return h  # [B, S, H]

    def layer_kwargs(self, h: torch.Tensor, a: int, cache: DynamicCache, position_ids) -> dict:
        """Keyword arguments shared by layers a.. for one call: mask, positions, rotary, cache.

        A single query token needs no mask; S > 1 new tokens get an explicit causal mask over
        the keys already cached at layer `a` plus the new ones.
        """
        kwargs = {
            "attention_mask": self._causal_mask(h, a, cache),
            "position_ids": position_ids,
            "past_key_values": cache,
            "use_cache": True,
        }
        if self._rotary_emb is not None:
            kwargs["position_embeddings"] = self._rotary_emb(h, position_ids)  # (cos, sin)
        return kwargs

    def run_layer(self, i: int, h: torch.Tensor, kwargs: dict) -> torch.Tensor:
        """Decoder layer i (0-based), kwargs from ``layer_kwargs``: h [B, S, H] -> [B, S, H]."""
        out = self.layers[i](h, **kwargs)
        return out[0] if isinstance(out, tuple) else out

    @torch.no_grad()
    def run_layers(self, h, a: int, b: int, cache: DynamicCache, position_ids) -> torch.Tensor:
        """Layers a..b-1 (0-based): h [B, S, H] -> [B, S, H], appending their K/V to `cache`.

        position_ids: [B, S] absolute positions of the S new tokens.
        """
        if not 0 <= a <= b <= self.num_layers:
            raise ValueError(
                f"layer range must satisfy 0 <= a <= b <= {self.num_layers}, got [{a}, {b})"
            )
        if a == b:
            return h
        kwargs = self.layer_kwargs(h, a, cache, position_ids)
        for i in range(a, b):
            h = self.run_layer(i, h, kwargs)
        return h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm (+ OPT project_out) + LM head, the "logit lens": h [B, S, H] -> [B, S, V]."""
        if self._final_norm is not None:
            h = self._final_norm(h)
        if self._project_out is not None:
            h = self._project_out(h)
        return self._lm_head(h)

    def early_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Early prediction: the trained head if one was given, else ``logits``. [B, S, V]."""
        return self.head(h) if self.head is not None else self.logits(h)

    @torch.no_grad()
    def decode_step(self, token: torch.Tensor, cache: DynamicCache, position: int) -> torch.Tensor:
        """One greedy decode step through all d layers: token [B, 1] -> final logits [B, V]."""
        position_ids = torch.full_like(token, position)  # [B, 1]
        h = self.embed(token, position_ids)  # [B, 1, H]
        h = self.run_layers(h, 0, self.num_layers, cache, position_ids)
        return self.logits(h)[:, -1]  # [B, V]

    def _causal_mask(self, h: torch.Tensor, a: int, cache: DynamicCache) -> torch.Tensor | None:
        batch, seq = h.shape[:2]
        if seq == 1:
            return None
        past = cache.get_seq_length(a)
        q_pos = past + torch.arange(seq, device=h.device)  # [S]
        k_pos = torch.arange(past + seq, device=h.device)  # [P + S]
        mask = torch.zeros(seq, past + seq, dtype=h.dtype, device=h.device)
        mask.masked_fill_(k_pos[None, :] > q_pos[:, None], torch.finfo(h.dtype).min)
        return mask[None, None].expand(batch, 1, seq, past + seq)  # [B, 1, S, P + S]


def expand_cache(cache: DynamicCache, batch_size: int) -> DynamicCache:
    """A copy of a batch-1 `cache` with its row repeated `batch_size` times (shared prefix).

    Batched candidates share the prompt's cache: each of the k rows continues the same prefix.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    rows = {layer.keys.shape[0] for layer in cache.layers if layer.is_initialized}
    if rows != {1}:
        raise ValueError(f"cache must hold one row to expand, got batch sizes {sorted(rows)}")
    out = copy.deepcopy(cache)
    if batch_size > 1:
        out.batch_repeat_interleave(batch_size)
    return out
