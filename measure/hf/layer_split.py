"""Layer-split decoding: prefill, then run any layer range [a, b) one decode step at a time.

Works for any causal LM whose layout ``measure.hf.arch.arch_spec`` finds (Llama, Mistral,
Qwen2/3, Gemma 2/3, Phi-3, GPT-2, OPT, ...). Each wrapped model is checked once against its own
forward pass (``verify_layout``), so a forward that does something the common layout misses is
a ValueError, not silently different logits.
"""

from __future__ import annotations

import copy
import inspect
import weakref

import torch
from transformers import DynamicCache

from measure.checks import check_model
from measure.hf.arch import ArchSpec, arch_spec, get_module
from measure.hf.compat import model_cache_keyword
from measure.hf.lens import EarlyHead, LogitLens, resolve_head
from ppdmodel.validation import check_flag, check_instance

VERIFY_IDS = (1, 2, 3, 4)
"""Token ids (mod the vocabulary) of the short sequence ``verify_layout`` runs."""
VERIFY_RTOL = {torch.float32: 1e-3, torch.float64: 1e-6}
"""Allowed logit difference of ``verify_layout`` relative to the largest |logit| (0.1 for
16-bit formats, whose rounding differs between the fused forward and the split path)."""

_verified: weakref.WeakSet = weakref.WeakSet()
"""Models already checked by ``verify_layout`` (by identity)."""


class LayerSplitModel:
    """Run any layer range [a, b) of a causal LM one decode step at a time with a KV cache.

    The decoder layers write their keys and values into ``cache`` at their own layer index, so
    running [0, j) and then [j, d) fills the same cache as one full step. Hidden states between
    ranges are the residual stream, ``h: [B, S, H]``. ``verify=False`` skips the one-time check
    of the split path against the model's own logits.
    """

    def __init__(self, model, head: EarlyHead | None = None, *, verify: bool = True):
        check_model(model)
        check_flag("verify", verify)
        self.model = model
        self.spec: ArchSpec = arch_spec(model)
        self.layers: torch.nn.ModuleList = get_module(model, self.spec.layers)
        self.num_layers: int = len(self.layers)
        self.lens = LogitLens(model)
        """The model's own final norm + LM head (``measure.hf.lens.LogitLens``)."""
        self.head = resolve_head(head, self.lens)
        """The early head: ``head``, checked against this model's LM head, or the lens."""
        self._embed_tokens = get_module(model, self.spec.embed_tokens)
        self._embed_positions = get_module(model, self.spec.embed_positions)
        self._rotary_emb = get_module(model, self.spec.rotary_emb)
        self._project_in = get_module(model, self.spec.project_in)
        self._layers_of_type = _indices_by_type(self.spec.layer_types)
        forward_params = inspect.signature(model.forward).parameters
        self._keeps_logits = "logits_to_keep" in forward_params
        self._cache_kw = model_cache_keyword(model)
        if verify and model not in _verified:
            verify_layout(self)
            _verified.add(model)

    @property
    def device(self) -> torch.device:
        """Device of the embedding weights (where input ids must live)."""
        return self._embed_tokens.weight.device

    def new_cache(self) -> DynamicCache:
        """An empty KV cache laid out for this model's layers (sliding layers keep a window)."""
        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
        """Run the whole model on the prompt, filling `cache`; logits of the last position.

        input_ids: [B, S] -> [B, V]. Positions continue from what `cache` already holds.
        """
        kwargs = {"logits_to_keep": 1} if self._keeps_logits else {}
        kwargs[self._cache_kw] = cache
        out = self.model(input_ids=input_ids, use_cache=True, **kwargs)
        return out.logits[:, -1]  # [B, V]

    @torch.no_grad()
    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Token (+ learned position) embedding: input_ids, position_ids [B, S] -> h [B, S, H]."""
        h = self._embed_tokens(input_ids)  # [B, S, E]; Gemma scales by sqrt(H) in here
        if self.spec.embedding_multiplier != 1.0:
            h = h * self.spec.embedding_multiplier  # Granite
        if self._project_in is not None:
            h = self._project_in(h)  # OPT: [B, S, E] -> [B, S, H]
        if self._embed_positions is not None:
            if self.spec.positions_by_keyword:  # OPT: (attention_mask, past_len, position_ids)
                h = h + self._embed_positions(None, 0, position_ids=position_ids)
            else:
                h = h + self._embed_positions(position_ids)
        return h  # [B, S, H]

    def layer_kwargs(self, h: torch.Tensor, a: int, cache: DynamicCache, position_ids) -> dict:
        """Keyword arguments for layers a.. of one call, by layer type: mask, positions, cache.

        Returns ``{layer_type: kwargs}`` for ``run_layer``. A single query token needs no mask
        (a sliding layer's cache keeps only its window); S > 1 new tokens get an explicit
        causal (and, for sliding layers, windowed) mask over the keys cached plus the new ones.
        Rotary ``(cos, sin)`` is computed once per call, per layer type where it differs.
        """
        out, shared_rotary = {}, None
        for layer_type, first in self._layers_of_type.items():
            i = next((j for j in first if j >= a), None)
            if i is None:
                continue
            window = self.spec.sliding_window if layer_type == "sliding_attention" else None
            kwargs = {
                "attention_mask": _causal_mask(h, _cached(cache, i), window),
                "position_ids": position_ids,
                self.spec.cache_arg: cache,
                "use_cache": True,
            }
            if self._rotary_emb is not None:
                if self.spec.rotary_per_layer_type:  # Gemma 3: local and global frequencies
                    kwargs["position_embeddings"] = self._rotary_emb(h, position_ids, layer_type)
                else:
                    if shared_rotary is None:
                        shared_rotary = self._rotary_emb(h, position_ids)  # (cos, sin)
                    kwargs["position_embeddings"] = shared_rotary
            out[layer_type] = kwargs
        return out

    def run_layer(self, i: int, h: torch.Tensor, kwargs: dict) -> torch.Tensor:
        """Decoder layer i (0-based), kwargs from ``layer_kwargs``: h [B, S, H] -> [B, S, H]."""
        out = self.layers[i](h, **kwargs[self.spec.layer_types[i]])
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
        """The logit lens (``lens``): final norm (+ OPT project_out) + LM head, h [B, S, H] ->
        [B, S, V]; on the last layer's output it equals the model's logits."""
        return self.lens(h)

    def early_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Early prediction by ``head`` (the logit lens unless a trained head was given)."""
        return self.head(h)

    @torch.no_grad()
    def decode_step(self, token: torch.Tensor, cache: DynamicCache, position: int) -> torch.Tensor:
        """One greedy decode step through all d layers: token [B, 1] -> final logits [B, V]."""
        position_ids = torch.full_like(token, position)  # [B, 1]
        h = self.embed(token, position_ids)  # [B, 1, H]
        h = self.run_layers(h, 0, self.num_layers, cache, position_ids)
        return self.logits(h)[:, -1]  # [B, V]


@torch.no_grad()
def verify_layout(lsm: LayerSplitModel) -> float:
    """Check the split path against the model's own forward on a short sequence.

    Runs 4 tokens as prefill(2) + a 2-token block through layers [0, 1) and [1, d), and as
    prefill(3) + one decode step; both must reproduce ``model(ids).logits``. Returns the largest
    difference; ValueError if it exceeds VERIFY_RTOL times the largest |logit|.
    """
    check_instance("lsm", lsm, LayerSplitModel)
    model, d = lsm.model, lsm.num_layers
    vocab = int(lsm.lens.lm_head.weight.shape[0])
    ids = torch.tensor([VERIFY_IDS], device=lsm.device) % vocab  # [1, 4]
    what = f"layer-split decoding of {type(model).__name__} (model_type {lsm.spec.model_type!r})"
    was_training = model.training
    model.eval()
    try:
        ref = model(input_ids=ids, use_cache=False).logits.float()  # [1, 4, V]
        cache = lsm.new_cache()
        lsm.prefill(ids[:, :2], cache)
        pos = torch.arange(2, 4, device=lsm.device)[None]  # [1, 2]
        h = lsm.run_layers(lsm.embed(ids[:, 2:], pos), 0, min(1, d), cache, pos)
        block = lsm.logits(lsm.run_layers(h, min(1, d), d, cache, pos)).float()  # [1, 2, V]
        cache = lsm.new_cache()
        lsm.prefill(ids[:, :3], cache)
        step = lsm.decode_step(ids[:, 3:], cache, 3).float()  # [1, V]
    except torch.cuda.OutOfMemoryError:
        raise
    except (TypeError, RuntimeError) as exc:  # e.g. a layer wants other arguments or shapes
        raise ValueError(f"{what} failed: {exc}; {_EXCEPTION_HINT}") from exc
    finally:
        model.train(was_training)
    diff = max(float((block - ref[:, 2:]).abs().max()), float((step - ref[:, 3]).abs().max()))
    dtype = next(model.parameters()).dtype
    tol = VERIFY_RTOL.get(dtype, 0.1) * max(1.0, float(ref.abs().max()))
    if not diff <= tol:
        raise ValueError(
            f"{what} does not reproduce the model's own logits (max difference {diff:.3g} > "
            f"{tol:.3g}): its forward does something the common layout does not cover; "
            f"{_EXCEPTION_HINT}"
        )
    return diff


_EXCEPTION_HINT = "add its model_type to measure.hf.arch.EXCEPTIONS"


def _indices_by_type(layer_types) -> dict[str, list[int]]:
    """Layer indices of each layer type, in order: {type: [i, ...]}."""
    out: dict[str, list[int]] = {}
    for i, layer_type in enumerate(layer_types):
        out.setdefault(layer_type, []).append(i)
    return out


def _cached(cache: DynamicCache, i: int) -> int:
    """Key positions held by layer i of `cache` (a sliding layer holds at most its window - 1)."""
    if i >= len(cache.layers):
        return 0
    keys = cache.layers[i].keys
    return 0 if keys is None or not cache.layers[i].is_initialized else int(keys.shape[-2])


def _causal_mask(h: torch.Tensor, cached: int, window: int | None) -> torch.Tensor | None:
    """Additive mask [B, 1, S, cached + S] for S new queries after `cached` keys, or None.

    Query s sits at relative position cached + s and sees key j iff 0 <= (cached + s) - j and,
    in a sliding layer, (cached + s) - j < window.
    """
    batch, seq = h.shape[:2]
    if seq == 1 and (window is None or cached < window):
        return None  # one query sees every cached key
    q_pos = cached + torch.arange(seq, device=h.device)  # [S]
    k_pos = torch.arange(cached + seq, device=h.device)  # [P + S]
    dist = q_pos[:, None] - k_pos[None, :]  # [S, P + S]
    blocked = dist < 0
    if window is not None:
        blocked |= dist >= window
    mask = torch.zeros(seq, cached + seq, dtype=h.dtype, device=h.device)
    mask.masked_fill_(blocked, torch.finfo(h.dtype).min)
    return mask[None, None].expand(batch, 1, seq, cached + seq)  # [B, 1, S, P + S]


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
