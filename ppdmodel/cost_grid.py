"""DecodeCosts over a grid of configurations: every cost term an array, evaluated in one pass.

A planner screens 10^5-10^6 configurations (hardware, tensor-parallel degree, d_bar, k, head)
whose cost terms differ row by row. ``DecodeCostsGrid`` holds the fields of
``ppdmodel.DecodeCosts`` as arrays that broadcast together (one row per configuration, or any
broadcastable shape), so the one per-pass schedule of ``ppdmodel.passes`` and the compute of
``ppdmodel.compute_seconds`` evaluate the whole grid with numpy at once: no second copy of
any formula. ``ppd_grid_per_token`` returns PPD's seconds per token, busy device-seconds per
token (each side times its device count) and break-even p for every row.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass

import numpy as np

from ppdmodel.compute_seconds import compute_terms
from ppdmodel.costs import DecodeCosts, check_early_head
from ppdmodel.passes import pass_times
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_nonnegative,
    check_positive,
    check_positive_int,
    check_probability,
)

BATCH_MODEL = ("candidate_extra_row_layer_s", "candidate_layer_s_by_k")
"""``DecodeCosts``' model of the candidate batch's layer time at any k; a grid row holds it
evaluated at the row's k instead (``candidate_layer_s``)."""


class _GridTerms:
    """The fields of ``DecodeCosts`` as broadcastable arrays (seconds; SI units).

    ``candidate_layer_s`` (> 0) is the per-layer time of each row's candidate batch (k rows, or
    g + 1 verify rows), already evaluated at that row's k (the grid fixes k per row) in place
    of ``BATCH_MODEL``; ``candidate_layer_seconds(k)`` returns it, so code written for
    ``DecodeCosts`` runs unchanged. ``serial_device`` holds booleans per row;
    ``candidate_device_slowdown`` factors >= 1 per row, or None (main's factor for both sides).
    """

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            name = f"DecodeCostsGrid.{f.name}"
            if f.name == "candidate_device_slowdown" and value is None:
                continue
            if f.name == "serial_device":
                flags = np.asarray(value)
                if flags.dtype != bool:
                    raise ValueError(f"{name} must be booleans, got {value!r}")
                value = bool(flags) if flags.ndim == 0 else flags
            elif f.name in ("layer_s", "candidate_layer_s"):
                value = check_positive(name, value)
            else:
                value = check_nonnegative(name, value)
            slowdowns = ("shared_device_slowdown", "candidate_device_slowdown")
            if f.name in slowdowns and np.any(np.asarray(value) < 1):
                raise ValueError(f"{name} must be a factor >= 1")
            object.__setattr__(self, f.name, value)
        check_broadcast(**{f"DecodeCostsGrid.{f.name}": np.shape(getattr(self, f.name))
                           for f in fields(self)})  # fmt: skip

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """The shape the fields broadcast to."""
        return np.broadcast_shapes(*(np.shape(getattr(self, f.name)) for f in fields(self)))

    def candidate_layer_seconds(self, k):
        """The row's candidate-batch layer time (already at the row's k; ``k`` must broadcast)."""
        k = check_positive_int("k", k)
        check_broadcast(k=np.shape(k), candidate_layer_s=np.shape(self.candidate_layer_s))
        return self.candidate_layer_s

    def dispatch_seconds(self, early_head: str):
        """The message that starts the candidates under ``early_head``, seconds."""
        if check_early_head(early_head) == "main":
            return self.candidate_dispatch_s
        return self.hidden_dispatch_s

    def greedy_token_seconds(self, d):
        """One greedy token: embedding + d layers + final head + host time, seconds (``d``:
        positive integers broadcasting with the grid; ValueError naming it otherwise)."""
        d = check_positive_int("d", d)
        check_broadcast(d=np.shape(d), costs=self.grid_shape)
        return self.embedding_s + np.multiply(d, self.layer_s) + self.final_head_s + self.host_s


def _grid_fields() -> list:
    """``DecodeCosts``' fields as grid columns with its defaults, ``BATCH_MODEL`` replaced by
    ``candidate_layer_s``; that and ``layer_s`` are required."""
    columns = [("layer_s", object), ("candidate_layer_s", object)]
    columns += [(f.name, object, field(default=f.default)) for f in fields(DecodeCosts)
                if f.name not in ("layer_s", *BATCH_MODEL)]  # fmt: skip
    return columns


DecodeCostsGrid = make_dataclass(
    "DecodeCostsGrid", _grid_fields(), bases=(_GridTerms,), frozen=True,
    namespace={"__module__": __name__, "__doc__": _GridTerms.__doc__},
)  # fmt: skip


def check_cost_terms(costs):
    """Return ``costs`` if it is a ``DecodeCosts`` or a ``DecodeCostsGrid``, else ValueError."""
    if not isinstance(costs, DecodeCosts | DecodeCostsGrid):
        raise ValueError(
            f"costs must be a ppdmodel.DecodeCosts or DecodeCostsGrid, got {type(costs).__name__}"
        )
    return costs


@dataclass(frozen=True)
class GridPerToken:
    """PPD per token over a grid (arrays of the grid's shape)."""

    latency_s: np.ndarray
    """Expected seconds per token over ell tokens: B - S (ell - 1) p / ell."""
    compute_s: np.ndarray
    """Expected busy device-seconds per token, main's and the candidates' devices counted."""
    break_even_p: np.ndarray
    """Smallest p at which PPD per token (ell -> inf) is no slower than greedy (inf: none)."""
    greedy_latency_s: np.ndarray
    """Greedy seconds per token under the same costs (main's devices only)."""
    latency_per_p_s: np.ndarray | float = 0.0
    """d latency_s / d p: -S (ell - 1) / ell (latency is linear in p; <= 0)."""


def ppd_grid_per_token(
    *, d, d_bar, k, p, ell, costs: DecodeCostsGrid, early_head: str,
    devices_main=1, devices_candidates=1,
) -> GridPerToken:  # fmt: skip
    """PPD per token on every row of a grid (i.i.d. p per row; ell tokens; see module doc).

    E[T] / ell = B - S (ell - 1) p / ell (``ppdmodel.passes``); compute from
    ``ppdmodel.compute_seconds`` at the same match rate, each side times its device count.
    """
    if not isinstance(costs, DecodeCostsGrid):
        raise ValueError(f"costs must be a DecodeCostsGrid, got {type(costs).__name__}")
    d = check_positive_int("d", d)
    ell = check_positive_int("ell", ell)
    check_d_bar(d, d_bar)
    k = check_positive_int("k", k)
    p = check_probability("p", p)
    devices_main = check_positive_int("devices_main", devices_main)
    devices_candidates = check_positive_int("devices_candidates", devices_candidates)
    check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), k=np.shape(k), p=np.shape(p),
                    ell=np.shape(ell), devices_main=np.shape(devices_main),
                    devices_candidates=np.shape(devices_candidates),
                    costs=costs.grid_shape)  # fmt: skip
    times = pass_times(d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head)
    rate = np.multiply(p, np.subtract(ell, 1) / np.asarray(ell, dtype=float))
    latency = times.miss_only_s - rate * times.saving_s
    terms = compute_terms(d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head)
    main, cand = terms.per_token(rate, devices_main, devices_candidates)
    shape = np.broadcast_shapes(np.shape(latency), np.shape(main), np.shape(cand))
    return GridPerToken(
        latency_s=np.broadcast_to(latency, shape),
        compute_s=np.broadcast_to(main + cand, shape),
        break_even_p=np.broadcast_to(times.break_even_p, shape),
        greedy_latency_s=np.broadcast_to(costs.greedy_token_seconds(d), shape),
        latency_per_p_s=np.broadcast_to(-times.saving_s * np.subtract(ell, 1) / ell, shape),
    )
