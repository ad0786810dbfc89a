"""DecodeCosts: the seconds a PPD or greedy decode step spends on each part (this project's
extension of the paper's unit-layer model; the latency formulas are in ``ppdmodel.passes``).

Every field is in SI seconds (or a dimensionless factor) and can be filled from a measured
profile: per-layer times at batch 1 and at the candidate batch, the embedding, the two LM heads,
the messages between main and the candidate side, host time, and how much each side (main,
the candidate batch) slows while both share one device. ``DecodeCosts.unit()`` is the
paper's model (unit layers, everything else free): with it every formula reduces to Theorem
4.1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from numbers import Real

import numpy as np

from ppdmodel.validation import check_choice, check_positive_int, is_finite, items_of

EARLY_HEAD_PLACEMENTS = ("main", "candidates")
"""Where the early LM head at layer d_bar runs: on main's critical path, or on the candidate
side after main hands its layer-d_bar hidden state over."""

_SECONDS_FIELDS = (
    "layer_s",
    "candidate_extra_row_layer_s",
    "embedding_s",
    "early_head_s",
    "final_head_s",
    "candidate_dispatch_s",
    "hidden_dispatch_s",
    "handoff_s",
    "host_s",
)
SECONDS_FIELDS = _SECONDS_FIELDS
"""The fields of ``DecodeCosts`` that hold seconds (a machine twice as slow doubles each)."""


def link_seconds(*, latency_s: float, nbytes: float, bandwidth_bytes_per_s: float) -> float:
    """One message over a link: latency_s + nbytes / bandwidth_bytes_per_s, seconds."""
    for name, value in (("latency_s", latency_s), ("nbytes", nbytes)):
        _check_seconds(name, value)
    ok = isinstance(bandwidth_bytes_per_s, Real) and not isinstance(bandwidth_bytes_per_s, bool)
    if not (ok and is_finite(bandwidth_bytes_per_s) and bandwidth_bytes_per_s > 0):
        raise ValueError(f"bandwidth_bytes_per_s must be a finite number > 0, got "
                         f"{bandwidth_bytes_per_s!r:.60}")  # fmt: skip
    seconds = float(latency_s) + float(nbytes) / float(bandwidth_bytes_per_s)  # float64
    if not math.isfinite(seconds):
        raise ValueError(
            f"link_seconds: nbytes / bandwidth_bytes_per_s overflows float64 "
            f"(nbytes={nbytes!r}, bandwidth_bytes_per_s={bandwidth_bytes_per_s!r})"
        )
    return seconds


def check_early_head(early_head) -> str:
    """Return ``early_head`` if it is one of ``EARLY_HEAD_PLACEMENTS``, else ValueError."""
    return check_choice("early_head", early_head, EARLY_HEAD_PLACEMENTS)


def _check_seconds(name: str, value, *, positive: bool = False) -> None:
    """ValueError naming ``name`` unless ``value`` is a finite real >= 0 (> 0 if positive)."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and is_finite(value)
    bound = "> 0" if positive else ">= 0"
    if not ok or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number of seconds {bound}, got {value!r}")


@dataclass(frozen=True)
class DecodeCosts:
    """Seconds per part of a decode step (SI units; defaults: the paper's unit-layer model).

    Device work (layers, embedding, heads) is slowed while main and the candidate batch both
    compute on one device: main's by ``shared_device_slowdown``, the batch's by
    ``candidate_device_slowdown`` (None: the same factor); messages and host time are not.
    """

    layer_s: float = 1.0
    """One decoder layer at batch 1 (main process, and greedy decoding), seconds (> 0)."""
    candidate_extra_row_layer_s: float = 0.0
    """Per-layer time added by each candidate row beyond the first, seconds: the k-row batch
    runs a layer in layer_s + (k - 1) * candidate_extra_row_layer_s (linear fit of a profile).
    Ignored where ``candidate_layer_s_by_k`` is given."""
    candidate_layer_s_by_k: tuple[tuple[int, float], ...] = field(default=())
    """Measured per-layer time of the k-row candidate batch, as (k, seconds) pairs (a dict is
    accepted); other k are interpolated linearly between measured k and clamped outside them.
    Empty: the linear model above."""
    embedding_s: float = 0.0
    """Token embedding, seconds (paid where a pass starts at layer 1, by main or candidates)."""
    early_head_s: float = 0.0
    """Early prediction at layer d_bar: final norm, LM head and top-k on one row, seconds."""
    final_head_s: float = 0.0
    """Final norm and LM head after layer d (main and greedy), seconds."""
    candidate_dispatch_s: float = 0.0
    """Sending the k candidate ids from main to the candidate side (early_head="main"), with
    any state the candidate side lacks (e.g. KV entries), seconds. On a ``serial_device`` no
    message travels: a profile puts there the batch's start-up right after the early head."""
    hidden_dispatch_s: float = 0.0
    """Sending main's layer-d_bar hidden state to the candidate side (early_head="candidates"),
    seconds (on a ``serial_device``: the batch's start-up, as ``candidate_dispatch_s``; a
    ``dist`` profile adds the start-up of the batch after the candidate side's own early head,
    ``BackendCosts.batch_startup_s``)."""
    handoff_s: float = 0.0
    """One accepted hand-off: the matching candidate's hidden state and KV entries to main,
    seconds (a measured constant, or ``link_seconds(latency_s=, nbytes=, ...)``)."""
    host_s: float = 0.0
    """Host time per generated token (sampling, bookkeeping, launches), greedy and PPD, s."""
    shared_device_slowdown: float = 1.0
    """Factor (>= 1) by which main's device work slows while the candidate batch computes on
    the same device (and the batch's too, unless ``candidate_device_slowdown`` is given); 1:
    separate devices (or no contention). Not used when ``serial_device``."""
    serial_device: bool = False
    """True: main and the candidate batch share one device one stream at a time (the
    ``single`` backend: a CPU runs the batch on main's threads, and eager CUDA is launch-bound
    from one Python thread). At the split the whole batch runs (dispatch, the early head on
    the candidate side, embedding and d - d_bar layers of the k rows), rejected or not, and
    only then main's suffix (``ppdmodel.passes``); the slowdowns are then unused."""
    candidate_device_slowdown: float | None = None
    """Factor (>= 1) by which the candidate batch's device work slows while main computes on
    the same device (a ``dist`` profile's pair probe measures each side's own); None: the same
    as ``shared_device_slowdown``. Optional: left out of ``to_dict`` when None."""

    def __post_init__(self) -> None:
        for name in _SECONDS_FIELDS:
            _check_seconds(f"DecodeCosts.{name}", getattr(self, name), positive=name == "layer_s")
        _check_factor("DecodeCosts.shared_device_slowdown", self.shared_device_slowdown)
        if self.candidate_device_slowdown is not None:
            _check_factor("DecodeCosts.candidate_device_slowdown", self.candidate_device_slowdown)
        if not isinstance(self.serial_device, bool | np.bool_):
            raise ValueError(
                f"DecodeCosts.serial_device must be True or False, got {self.serial_device!r}"
            )
        object.__setattr__(self, "serial_device", bool(self.serial_device))
        object.__setattr__(self, "candidate_layer_s_by_k", _table(self.candidate_layer_s_by_k))

    @classmethod
    def unit(cls, seconds_per_layer: float = 1.0) -> DecodeCosts:
        """The paper's model: every layer ``seconds_per_layer`` at any batch, all else free."""
        _check_seconds("seconds_per_layer", seconds_per_layer, positive=True)
        return cls(layer_s=seconds_per_layer)

    @property
    def candidate_slowdown(self) -> float:
        """The candidate batch's factor while sharing: ``candidate_device_slowdown``, or
        ``shared_device_slowdown`` when that is None."""
        if self.candidate_device_slowdown is None:
            return self.shared_device_slowdown
        return self.candidate_device_slowdown

    @property
    def shared_device(self) -> bool:
        """True when main and candidates share one device: either slows beside the other
        (a slowdown > 1) or they run one after the other (``serial_device``)."""
        slowed = self.shared_device_slowdown > 1 or self.candidate_slowdown > 1
        return self.serial_device or slowed

    def candidate_layer_seconds(self, k):
        """Per-layer seconds of the k-row candidate batch (vectorised over k)."""
        k = check_positive_int("k", k)  # float64: no integer wrap-around
        if self.candidate_layer_s_by_k:
            ks, secs = zip(*self.candidate_layer_s_by_k, strict=True)
            out = np.interp(k, ks, secs)
            return float(out) if np.ndim(out) == 0 else out
        out = self.layer_s + np.multiply(np.subtract(k, 1), self.candidate_extra_row_layer_s)
        return float(out) if np.ndim(out) == 0 else out

    def dispatch_seconds(self, early_head: str) -> float:
        """The message that starts the candidates under ``early_head``, seconds."""
        if check_early_head(early_head) == "main":
            return self.candidate_dispatch_s
        return self.hidden_dispatch_s

    def greedy_token_seconds(self, d) -> float:
        """One greedy token: embedding + d layers + final head + host time, seconds."""
        d = check_positive_int("d", d)
        return self.embedding_s + np.multiply(d, self.layer_s) + self.final_head_s + self.host_s

    def to_dict(self) -> dict:
        """A JSON-ready dict (``from_dict`` inverts it); the batch table as {"k": seconds};
        ``candidate_device_slowdown`` only when it is set (older readers never see it)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["candidate_layer_s_by_k"] = {str(k): s for k, s in self.candidate_layer_s_by_k}
        if self.candidate_device_slowdown is None:
            del data["candidate_device_slowdown"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> DecodeCosts:
        """Build from ``to_dict``'s output; unknown keys raise a ValueError naming them."""
        if not isinstance(data, Mapping):
            raise ValueError(f"data must be a mapping of DecodeCosts fields, got "
                             f"{type(data).__name__}")  # fmt: skip
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"DecodeCosts.from_dict: unknown fields {unknown}; known {sorted(known)}"
            )
        return cls(**dict(data))


def _check_factor(name: str, value) -> None:
    """ValueError naming ``name`` unless ``value`` is a finite real factor >= 1."""
    ok = isinstance(value, Real) and not isinstance(value, bool)
    if not (ok and is_finite(value) and value >= 1):
        raise ValueError(f"{name} must be a finite factor >= 1, got {value!r}")


def _table(value) -> tuple[tuple[int, float], ...]:
    """Normalise the (k, seconds) table: sorted pairs, k positive ints, seconds finite > 0."""
    items = items_of(value.items() if isinstance(value, Mapping) else value)
    if items is None:
        raise ValueError(
            f"DecodeCosts.candidate_layer_s_by_k must hold (k, seconds) pairs, got {value!r:.60}"
        )
    pairs = {}
    for item in items:
        if not (isinstance(item, tuple | list) and len(item) == 2):
            raise ValueError(
                f"DecodeCosts.candidate_layer_s_by_k must hold (k, seconds) pairs, got {item!r}"
            )
        k, seconds = item
        k = int(k) if isinstance(k, str) and k.strip().isdigit() else k
        try:
            check_positive_int("DecodeCosts.candidate_layer_s_by_k key k", k)
        except ValueError as err:
            raise ValueError(f"{err} (the batch size of a measured candidate layer time)") from None
        _check_seconds(f"DecodeCosts.candidate_layer_s_by_k[{k}]", seconds, positive=True)
        pairs[int(k)] = float(seconds)
    return tuple(sorted(pairs.items()))
