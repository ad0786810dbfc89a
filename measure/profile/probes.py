"""Timed pieces of a decode step, run the way ``measure.decode`` runs them (cost profile input).

``DecodeProbe`` holds a model's KV cache at a fixed context length and times, on the one
clock of ``measure`` (``measure.clock``):

- ``step``: one greedy decode step as ``greedy_generate`` runs it, with a lap after each
  piece: host bookkeeping, embedding (with the layers' shared inputs: rotary tables, mask),
  every decoder layer at batch 1, the final head (norm, LM head, argmax);
- ``early_head(k)``: the early prediction at d_bar (LM head on one row and top-k);
- ``candidates(k)``: the k-row candidate batch as ``LocalCandidates`` runs it (a fresh row
  cache sharing the prefix, embedding, every layer); per-layer seconds over all d layers;
- ``suffix(d_bar)`` and ``batch(k, d_bar)``: the two pieces a ``dist`` run overlaps (main's
  layers d_bar+1..d and final head; the candidate rank's k-row batch over its d - d_bar layers
  with its embedding), whole-call seconds, for the pair probe of ``measure.profile.ranks``;
  ``batch_after_head(k, d_bar)``: the same batch right after an early head, as the single
  backend runs it and a ``dist`` candidate rank with the early head on its side (its start-up);
- ``handoff``: the in-process hand-off of one row's hidden state and KV entries over all d
  layers, and the two halves of the ``dist`` hand-off copy (pack on the candidate rank,
  unpack and append on main).

Every timed call leaves the cache as it found it (new entries are cropped, untimed), so the
context length stays fixed and rounds can be interleaved and repeated.
"""

from __future__ import annotations

from itertools import pairwise

import torch

from measure import clock as clocks
from measure.clock import Clock
from measure.hf.kv_ops import (
    append_entries,
    crop_last,
    last_entries,
    pack,
    rewindable,
    share_prefix,
    unpack,
)
from measure.hf.layer_split import LayerSplitModel


def context_ids(context_tokens: int, vocab_size: int) -> torch.Tensor:
    """A fixed, deterministic [1, context_tokens] prompt (the cost does not depend on ids)."""
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int):
        raise ValueError(f"context_tokens must be an integer >= 2, got {context_tokens!r}")
    if context_tokens < 2:
        raise ValueError(f"context_tokens must be an integer >= 2, got {context_tokens}")
    return ((torch.arange(context_tokens) * 7919 + 11) % vocab_size)[None]


class DecodeProbe:
    """A model's decode pieces at a fixed context length (``context_tokens`` cached positions).

    ``model`` is a Hugging Face causal LM (or a LayerSplitModel); its device and dtype are
    the ones timed.
    """

    def __init__(self, model, *, context_tokens: int = 128):
        self.lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
        config = self.lsm.model.config.get_text_config()
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and context_tokens > limit:
            raise ValueError(
                f"context_tokens must be <= max_position_embeddings = {limit}, got {context_tokens}"
            )
        self.d = self.lsm.num_layers
        self.device = self.lsm.device
        self.clock = Clock(self.device)
        ids = context_ids(context_tokens, config.vocab_size).to(self.device)
        self.cache = self.lsm.new_cache()
        with torch.no_grad():
            self.lsm.prefill(ids[:, :-1], self.cache)  # positions 0..S-2, as PPD's prefill
        rewindable(self.cache)  # timed calls crop what they add, sliding layers too
        self.token = ids[:, -1:]  # [1, 1]
        self.position = context_tokens - 1
        self.hidden = None  # [1, 1, H]: the last step's output of layer d (for the heads)
        self.rows = self.rows_hidden = None  # the last candidate batch (for the hand-off)
        self._split = None  # (d_bar, main's hidden state at d_bar) for ``suffix``
        self.step()  # first touch of every weight, untimed by callers that discard it

    @torch.no_grad()
    def step(self) -> dict[str, float]:
        """One greedy step: laps ``host_s``, ``embedding_s``, ``layer_s[i]``, ``final_head_s``
        plus ``layers_s`` (their sum over the d layers)."""
        lsm, clock, marks = self.lsm, self.clock, []
        marks.append(clock.mark())
        pos = torch.full_like(self.token, self.position)  # decode_step's position ids
        marks.append(clock.mark())
        h = lsm.embed(self.token, pos)  # [1, 1, H]
        kwargs = lsm.layer_kwargs(h, 0, self.cache, pos)
        marks.append(clock.mark())
        for i in range(self.d):
            h = lsm.run_layer(i, h, kwargs)
            marks.append(clock.mark())
        nxt = int(lsm.logits(h)[:, -1].float().argmax(-1))
        marks.append(clock.mark())
        _greedy_bookkeeping(nxt, self.device)
        marks.append(clock.mark())
        clock.resolve()
        laps = [clock.seconds(a, b) for a, b in pairwise(marks)]
        crop_last(self.cache, range(self.d))
        self.hidden = h
        layers = laps[2 : 2 + self.d]
        out = {f"layer_s[{i}]": s for i, s in enumerate(layers)}
        out.update(
            host_s=laps[0] + laps[-1],
            embedding_s=laps[1],
            final_head_s=laps[-2],
            layers_s=float(sum(layers)),
        )
        return out

    @torch.no_grad()
    def early_head(self, k: int) -> float:
        """Seconds of the early prediction on one row: LM head and top-k (as ``run_main``)."""
        start = self.clock.mark()
        cands = torch.topk(self.lsm.early_logits(self.hidden)[:, -1].float(), k, dim=-1).indices
        end = self.clock.mark()
        self.clock.resolve()
        del cands
        return self.clock.seconds(start, end)

    @torch.no_grad()
    def candidates(self, k: int) -> dict[str, float]:
        """The k-row batch over all d layers: ``candidate_embedding_s[k]`` (row cache, ids,
        embedding) and ``candidate_layer_s[k]`` (prefix sharing and layers, per layer)."""
        lsm, clock = self.lsm, self.clock
        ids = torch.arange(k, device=self.device)[:, None]  # [k, 1]
        start = clock.mark()
        rows = lsm.new_cache()
        pos = torch.full((k, 1), self.position + 1, dtype=torch.long, device=self.device)
        h = lsm.embed(ids, pos)  # [k, 1, H]
        mid = clock.mark()
        share_prefix(self.cache, rows, range(self.d), k)
        h = lsm.run_layers(h, 0, self.d, rows, pos)  # [k, 1, H]
        end = clock.mark()
        clock.resolve()
        self.rows, self.rows_hidden = rows, h
        return {
            f"candidate_embedding_s[{k}]": clock.seconds(start, mid),
            f"candidate_layer_s[{k}]": clock.seconds(mid, end) / self.d,
        }

    @torch.no_grad()
    def suffix(self, d_bar: int) -> float:
        """Seconds of main's suffix after the split: layers d_bar..d-1 and the final head (norm,
        LM head, argmax) on this step's token. The prefix runs once per d_bar, untimed, and its
        output is kept, so repeated calls run (and overlap with another rank) the suffix only."""
        lsm, clock = self.lsm, self.clock
        pos = torch.full_like(self.token, self.position)
        if self._split is None or self._split[0] != d_bar:
            h = lsm.run_layers(lsm.embed(self.token, pos), 0, d_bar, self.cache, pos)
            crop_last(self.cache, range(d_bar))
            self._split = (d_bar, h)
        start = clock.mark()
        h = lsm.run_layers(self._split[1], d_bar, self.d, self.cache, pos)
        nxt = lsm.logits(h)[:, -1].float().argmax(-1)
        end = clock.mark()
        clock.resolve()
        del nxt
        crop_last(self.cache, range(d_bar, self.d))
        return clock.seconds(start, end)

    @torch.no_grad()
    def batch(self, k: int, d_bar: int, *, early_head: bool = False) -> float:
        """Seconds of the candidate rank's k-row batch at d_bar: a fresh row cache sharing the
        prefix, embedding, layers 0..d-d_bar-1 (as ``LocalCandidates`` and the dist worker).
        With ``early_head`` the timed call first runs the early prediction on one row (LM head
        and top-k, as ``early_head``), as the candidate rank does with the early head on its
        side (the ``candidates`` placement)."""
        lsm, clock, gap = self.lsm, self.clock, self.d - d_bar
        ids = torch.arange(k, device=self.device)[:, None]  # [k, 1]
        start = clock.mark()
        if early_head:
            top = torch.topk(lsm.early_logits(self.hidden)[:, -1].float(), k, dim=-1)
            ids = top.indices.reshape(k, 1)  # [k, 1]
        rows = lsm.new_cache()
        pos = torch.full((k, 1), self.position + 1, dtype=torch.long, device=self.device)
        h = lsm.embed(ids, pos)  # [k, 1, H]
        share_prefix(self.cache, rows, range(gap), k)
        h = lsm.run_layers(h, 0, gap, rows, pos)
        end = clock.mark()
        clock.resolve()
        del h, rows
        return clock.seconds(start, end)

    def batch_after_head(self, k: int, d_bar: int) -> float:
        """Seconds of ``batch(k, d_bar)`` right after an untimed early head, the order in which
        the single backend runs them (and a ``dist`` candidate rank with the early head on its
        side): the LM head's sweep over its vocabulary leaves the
        batch to start cold (small-wide-vocab, 64 Ki vocabulary: 6.1 ms against 5.1 ms after
        another batch on the 2-vCPU VM)."""
        self.early_head(k)
        return self.batch(k, d_bar)

    @torch.no_grad()
    def handoff(self) -> dict[str, float]:
        """Per-layer seconds of the hand-off copies of row 0 of the last candidate batch:
        ``handoff_copy_s`` (in process: KV entries appended to main's cache), ``pack_s``
        (``dist`` candidate rank: entries and hidden state packed into one message) and
        ``unpack_append_s`` (``dist`` main: unpacked and appended)."""
        if self.rows is None:
            self.candidates(1)
        lsm, clock, layers = self.lsm, self.clock, range(self.d)
        start = clock.mark()
        entries = last_entries(self.rows, layers, 0)
        hidden = self.rows_hidden[0:1]  # [1, 1, H]
        append_entries(self.cache, layers, entries)
        copied = clock.mark()
        crop_last(self.cache, layers)
        packed_start = clock.mark()
        flat = pack(hidden, last_entries(self.rows, layers, 0))
        packed = clock.mark()
        shapes = [self.cache.layers[i].keys[:, :, -1:].shape for i in layers]
        hidden_size = lsm.model.config.get_text_config().hidden_size
        _, entries = unpack(flat, (1, 1, hidden_size), shapes)
        append_entries(self.cache, layers, entries)
        appended = clock.mark()
        clock.resolve()
        crop_last(self.cache, layers)
        seconds = clock.seconds
        return {
            "handoff_copy_s": seconds(start, copied) / self.d,
            "pack_s": seconds(packed_start, packed) / self.d,
            "unpack_append_s": seconds(packed, appended) / self.d,
        }

    def shapes(self) -> dict[str, int]:
        """Sizes the message terms need: hidden size, KV heads, head dim, element bytes."""
        keys = self.cache.layers[0].keys  # [1, kv_heads, S, Dh]
        return {
            "hidden_size": int(self.lsm.model.config.get_text_config().hidden_size),
            "kv_heads": int(keys.shape[1]),
            "head_dim": int(keys.shape[3]),
            "element_bytes": int(keys.element_size()),
        }


def _greedy_bookkeeping(nxt: int, device) -> None:
    """What ``greedy_generate`` does per token besides the model: record the token and its
    time, test for end of sequence, build the next input."""
    tokens, times = [nxt], [clocks.host_clock()]
    if nxt in ():
        return
    torch.full((1, 1), nxt, dtype=torch.long, device=device)
    del tokens, times
