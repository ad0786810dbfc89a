"""The candidate-executor protocol: what PPD's main loop asks of the side running the k candidates.

Two implementations: ``measure.decode.local.LocalCandidates`` (in the main process: sequential on
CPU, a second CUDA stream on a GPU) and ``measure.decode.dist.RemoteCandidates`` (a proxy of the
candidate ranks of a torch.distributed run).
"""

from __future__ import annotations

from typing import Protocol

import torch


class CandidateExecutor(Protocol):
    """Runs the k candidate rows of a pass and hands the accepted one to main."""

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        """Start candidate tokens ``cands`` [1, k] at ``position`` through layers [0, e)."""

    def accept(self, j: int, token_id: int, position: int, token: int) -> torch.Tensor:
        """Candidate j matched: append its KV for [0, e) to main's cache; return h [1, 1, H]."""

    def reject(self, token_id: int, position: int, token: int) -> None:
        """No candidate matched: drop the rows (main recomputes the token from layer 0)."""

    def finish(self) -> None:
        """The sequence ended: collect timed events from the candidate side, release resources."""
