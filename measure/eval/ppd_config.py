"""One PPD configuration to time and predict (``ppd validate``'s ``--d-bar``, ``--k``,
``--early-head``, ``--backend``): data only, read by the prediction, the term and pass checks
and the probes, decoded and judged by ``measure.eval.methods.ppd``."""

from __future__ import annotations

from dataclasses import dataclass

from ppdmodel.costs import check_early_head


@dataclass(frozen=True)
class PPDConfig:
    """One PPD configuration to time (and predict)."""

    d_bar: int
    k: int
    early_head: str = "main"
    backend: str = "single"

    def __post_init__(self) -> None:
        check_early_head(self.early_head)
        if self.backend not in ("single", "dist"):
            raise ValueError(f"backend must be 'single' or 'dist', got {self.backend!r}")

    @property
    def label(self) -> str:
        """'ppd d_bar=15 k=3 main single'."""
        return f"ppd d_bar={self.d_bar} k={self.k} {self.early_head} {self.backend}"
