"""The candidate-executor protocol: what PPD's main loop asks of the side running the k candidates.

Two implementations: ``measure.decode.local.LocalCandidates`` (in the main process: sequential on
CPU, a second CUDA stream on a GPU) and ``measure.decode.dist.RemoteCandidates`` (a proxy of the
candidate ranks of a torch.distributed run).

A pass starts its candidates one of two ways (``early_head``, ``ppdmodel.EARLY_HEAD_PLACEMENTS``):
``start`` when main ran the early head itself ("main"), ``start_from_hidden`` when main hands
its layer-d_bar hidden state over and the candidate side runs the early head and the top-k
("candidates"). Either way main learns the k ids from ``candidate_ids`` when it needs them, to
decide the match; then it calls ``accept`` or ``reject``.
"""

from __future__ import annotations

from typing import Protocol

import torch


class CandidateExecutor(Protocol):
    """Runs the k candidate rows of a pass and hands the accepted one to main."""

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        """Start candidate tokens ``cands`` [1, k] at ``position`` through layers [0, e)."""

    def start_from_hidden(self, h: torch.Tensor, position: int, token: int) -> None:
        """Run the early head on main's h [1, 1, H] at d_bar, then its top-k as in ``start``."""

    def candidate_ids(self) -> list[int]:
        """The k ids of the running batch, row j = candidate j (waits for the top-k if needed)."""

    def accept(self, j: int, token_id: int, position: int, token: int) -> torch.Tensor:
        """Candidate j matched: append its KV for [0, e) to main's cache; return h [1, 1, H]."""

    def reject(self, token_id: int, position: int, token: int) -> None:
        """No candidate matched: drop the rows (main recomputes the token from layer 0)."""

    def finish(self) -> None:
        """The sequence ended: collect timed events from the candidate side, release resources."""
