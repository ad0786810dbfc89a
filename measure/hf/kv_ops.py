"""KV-cache row helpers for PPD: share a prefix across k candidate rows, hand entries over.

All caches are transformers ``DynamicCache`` objects whose ``layers[i].keys/values`` are
``[B, heads, S, Dh]``. Only the layer indices passed in are touched, so a cache can hold
different lengths in different layers while a decode step is split across processes.
Entries are appended with each layer's own ``update`` so sliding-window layers stay valid.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache


def share_prefix(src: DynamicCache, dst: DynamicCache, layers: Sequence[int], rows: int) -> None:
    """Fill empty ``dst`` layers with ``src``'s single row repeated ``rows`` times.

    The k candidates of PPD continue the same prefix; ``dst`` gets ``[rows, heads, S, Dh]``.
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    for i in layers:
        keys, values = src.layers[i].keys, src.layers[i].values  # [1, h, S, Dh]
        if keys.shape[0] != 1:
            raise ValueError(f"src layer {i} must hold one row, got {keys.shape[0]}")
        shape = (rows, *keys.shape[1:])
        dst.layers[i].update(keys.expand(shape), values.expand(shape))


def last_entries(cache: DynamicCache, layers: Sequence[int], row: int) -> list[tuple]:
    """The newest position's (K, V) of one row in each layer: tuples of ``[1, h, 1, Dh]``."""
    out = []
    for i in layers:
        layer = cache.layers[i]
        out.append((layer.keys[row : row + 1, :, -1:], layer.values[row : row + 1, :, -1:]))
    return out


def append_entries(cache: DynamicCache, layers: Sequence[int], entries: Sequence[tuple]) -> None:
    """Append one position's (K, V) per layer (from ``last_entries``) to a batch-1 cache."""
    if len(entries) != len(layers):
        raise ValueError(
            f"entries must give one (K, V) per layer ({len(layers)}), got {len(entries)}"
        )
    for i, (keys, values) in zip(layers, entries, strict=True):
        cache.layers[i].update(keys, values)


def rewindable(cache: DynamicCache) -> DynamicCache:
    """``cache``, set so that ``crop_last`` can drop new entries from its sliding-window layers
    too: past its window such a layer (transformers' ``DynamicSlidingWindowLayer``) forgets its
    oldest entry on each update, and refuses to crop, unless it records the past. Call it after
    the prefill (a recording layer keeps every entry until its next crop, which the masks do not
    expect); what attention sees is unchanged."""
    if not isinstance(getattr(cache, "layers", None), list | tuple):
        raise ValueError(f"cache must be a transformers DynamicCache, got {type(cache).__name__}")
    for layer in cache.layers:
        record = getattr(layer, "activate_past_recording", None)
        if record is not None:
            record()
    return cache


def crop_last(cache: DynamicCache, layers: Sequence[int], n: int = 1) -> None:
    """Drop the newest ``n`` positions of ``layers`` (e.g. a speculative entry that lost); a
    sliding-window layer past its window needs a ``rewindable`` cache."""
    for i in layers:
        cache.layers[i].crop(-n)


def seq_lengths(cache: DynamicCache) -> list[int]:
    """Cached positions per layer (0 for a layer never written)."""
    return [layer.get_seq_length() for layer in cache.layers]


def entries_numel(cache: DynamicCache, layers: Sequence[int]) -> int:
    """Elements of one position's (K, V) over ``layers`` of a batch-1 cache (hand-off size)."""
    total = 0
    for i in layers:
        keys = cache.layers[i].keys  # [1, h, S, Dh]
        total += 2 * keys.shape[1] * keys.shape[3]
    return total


def pack(hidden: torch.Tensor, entries: Sequence[tuple]) -> torch.Tensor:
    """Flatten a hidden state and per-layer (K, V) into one 1-D tensor for a single send."""
    parts = [hidden.reshape(-1)]
    for keys, values in entries:
        parts += [keys.reshape(-1), values.reshape(-1)]
    return torch.cat(parts)


def unpack(flat: torch.Tensor, hidden_shape: tuple, entry_shapes: Sequence[tuple]):
    """Inverse of ``pack``: returns (hidden, [(K, V), ...]) with the given shapes."""
    n_hidden = int(torch.Size(hidden_shape).numel())
    expected = n_hidden + 2 * sum(int(torch.Size(shape).numel()) for shape in entry_shapes)
    if flat.numel() != expected:
        raise ValueError(f"packed hand-off has {flat.numel()} elements, expected {expected}")
    hidden = flat[:n_hidden].reshape(hidden_shape)
    offset, entries = n_hidden, []
    for shape in entry_shapes:
        n = int(torch.Size(shape).numel())
        keys = flat[offset : offset + n].reshape(shape)
        values = flat[offset + n : offset + 2 * n].reshape(shape)
        entries.append((keys, values))
        offset += 2 * n
    return hidden, entries
