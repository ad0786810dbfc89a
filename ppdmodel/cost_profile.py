"""A measured cost profile (the JSON ``ppd measure profile`` writes) read as DecodeCosts.

The one definition of the profile's layout and of its checks, shared by every reader (the
closed form's ``ppd latency --costs``, ``measure.profile.load_profile`` for the simulator and
``ppd validate``, the planner's ``sim.hardware_costs.load_profile``). ``parse_cost_profile``
checks a decoded JSON object; ``read_cost_profile`` reads a file with one set of errors (the
file's only I/O in ``ppdmodel``: every reader of a profile file goes through it).

Layout (``PROFILE_FORMAT``, version ``PROFILE_VERSION``)::

    {"format": "ppd-cost-profile", "version": 1,
     "model": {"name": ..., "d": 30, ...},
     "backends": {"single": {"costs": {<every DecodeCosts field>},
                             "per_candidate_layer_s": {"handoff_s": ..., ...}}, "dist": ...},
     "figures": ..., "provenance": ..., "warnings": [...]}

``costs`` holds every ``DecodeCosts`` field in seconds with the message terms at zero
candidate layers; ``serial`` (optional, default false) says the backend runs main and the
candidate side one after the other on one device (the single backend), so a pass costs the
same whichever side runs the early head: ``BackendCosts.placement`` then evaluates both
placements with the closed form's ``main`` schedule, and the costs carry
``DecodeCosts.serial_device`` (the batch runs to its end before main's suffix; exact whether
or not it outlasts that suffix; the slowdown of 2 in ``costs`` is kept for older readers).
``per_candidate_layer_s`` says how much ``handoff_s``, ``candidate_dispatch_s`` and
``hidden_dispatch_s`` grow per candidate layer e = d - d_bar (the KV entries of layers [0, e)
travel with them), so ``CostProfile.costs(backend, d_bar=)`` is the DecodeCosts of one
configuration. ``greedy_host_s`` (optional) is greedy decoding's host time measured with
that backend's figures, where ``costs.host_s`` is PPD's own (``dist``):
``CostProfile.greedy_costs(backend)`` prices greedy on the backend it is compared with.
``cost_replicates`` (optional) are bootstrap replicates of the entry (``costs``,
``per_candidate_layer_s``, ``greedy_host_s``) rebuilt from the figures' timed samples redrawn
(``measure.profile.replicates``): ``CostProfile.cost_replicates`` gives them as DecodeCosts
for the intervals of ``ppdmodel.intervals``. ``figures`` (with their samples), ``provenance``
and ``warnings`` are carried along for reports.

A ``dist`` entry may carry ``pair_slowdowns`` (``{"d_bar", "by_k": {k: {"main",
"candidate"}}}``: each side's own slowdown where a run overlaps, measured by the profiler's
pair probe at that d_bar; ``cost_replicates`` carry their own, redrawn; optionally
``"by_k_candidates"``, the same shape, measured with the early head on the candidate side,
which runs it and then the batch beside main: the factors of the ``candidates`` placement,
which takes ``by_k`` where it is absent; the profiler writes each side's factor pooled over k
and placements where they agree, and keeps the ratios as measured in ``"measured"`` and what
it pooled in ``"pooled"``, which reports and warnings read, predictions not). Then the costs
of a configuration with k candidates (``CostProfile.costs(backend, d_bar=, k=,
early_head=)``) take main's
factor as ``shared_device_slowdown`` and the batch's as ``candidate_device_slowdown`` from
the measured k nearest to k (the smaller on a tie); a factor measured below 1 (noise: two
sides do not speed each other up) is taken as 1, as the profiler does with the stream figure;
a profile whose ``provenance.device`` is not the CPU applies none (its ``dist`` ranks run on
two devices; the pair probe's ran on the CPU). Without ``pair_slowdowns``, or without k,
``costs``' one ``shared_device_slowdown`` applies to both sides; ``CostProfile.sharing`` says
which factors a prediction used and why. ``costs`` may also give ``candidate_device_slowdown``
itself (optional, ``OPTIONAL_COST_FIELDS``).

``wide_prices`` (optional; absent in older files: none) lists the prices whose spread stayed
too wide to predict from after the profiler re-measured them, each
``{"backend", "figure", "rel_spread", "threshold"}`` (IQR / median and the limit it exceeded):
``check_wide_prices`` refuses such a profile unless the caller accepts it explicitly
(``ppd validate --profile``, ``ppd plan --profile``, ``ppd latency --costs``).

``machine`` (optional, informational) records how far the machine's speed moved while the
profile was taken: ``{"sentinel", "threads", "windows_s", "log_sd", "rel_range"}``, a greedy
step's layers timed in several windows (``measure.profile.drift``), and in newer files
``floor_log_sd`` (the machine's drift over minutes given with ``--drift-floor``, 0 for none)
and ``applied_log_sd`` (the larger of the two). That spread is already in ``cost_replicates``
(each replicate scaled by one draw of it, the same in every backend), so no reader needs it to
price an interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from numbers import Real

from ppdmodel.costs import EARLY_HEAD_PLACEMENTS, DecodeCosts, check_early_head
from ppdmodel.validation import (
    as_int,
    as_path,
    as_real,
    check_choice,
    check_d_bar,
    check_flag,
    check_positive_int,
    is_finite,
)

PROFILE_FORMAT = "ppd-cost-profile"
"""The value of the profile's ``format`` field."""
PROFILE_VERSION = 1
"""The layout version this module reads and ``measure.profile`` writes."""
PER_LAYER_FIELDS = ("handoff_s", "candidate_dispatch_s", "hidden_dispatch_s")
"""DecodeCosts fields that grow with the number of candidate layers e = d - d_bar."""
OPTIONAL_COST_FIELDS = ("candidate_device_slowdown",)
"""DecodeCosts fields a backend's ``costs`` may give (older profiles lack them)."""
COST_FIELDS = tuple(f.name for f in fields(DecodeCosts)
                    if f.name not in ("serial_device", *OPTIONAL_COST_FIELDS))  # fmt: skip
"""Every field a backend's ``costs`` must give (none is defaulted when reading a profile);
``DecodeCosts.serial_device`` comes from the entry's ``serial``."""


@dataclass(frozen=True)
class BackendCosts:
    """One backend's measured costs: DecodeCosts at e = 0 and the per-candidate-layer growth."""

    base: DecodeCosts
    """Every term, with the message terms of ``PER_LAYER_FIELDS`` at zero candidate layers."""
    per_candidate_layer_s: Mapping[str, float] = field(default_factory=dict)
    """Seconds added to each of ``PER_LAYER_FIELDS`` per candidate layer (missing: 0)."""
    serial: bool = False
    """Main and the candidate side run one after the other on one device (module doc)."""
    greedy_host_s: float | None = None
    """Greedy decoding's host time per token measured with this backend's compute figures
    (its threads, at the same time), where ``base.host_s`` is PPD's own (the ``dist`` ranks'
    host time); None: ``base.host_s`` is greedy's too."""
    replicates: tuple[BackendCosts, ...] = field(default=(), repr=False, compare=False)
    """Bootstrap replicates of these costs from the profile's timed samples (empty for an
    older profile): the spread behind a prediction's interval (``ppdmodel.intervals``)."""
    pair_slowdowns: tuple[tuple[int, float, float], ...] = ()
    """(k, main's factor, the batch's factor) per k the pair probe measured, as recorded
    (sorted by k; empty: none measured)."""
    pair_d_bar: int | None = None
    """The early layer the pair probe split the model at."""
    pair_slowdowns_candidates: tuple[tuple[int, float, float], ...] = ()
    """(k, main's factor, the candidate side's factor) per k with the early head on the
    candidate side (``by_k_candidates``: its early head, then the batch, beside main), as
    recorded (sorted by k; empty: none measured, the ``candidates`` placement takes
    ``pair_slowdowns``)."""
    host_s_by_placement: Mapping[str, float] = field(default_factory=dict)
    """PPD's host time per pass for an early-head placement, where measured on real runs of
    that placement (``dist``: the mean over the profile's short runs, main's wait for the
    candidate rank's ids included); a placement not in it takes ``base.host_s``."""
    batch_startup_s: float = 0.0
    """The candidate batch's start-up right after an early head on the candidate side, beyond
    its embedding and layers, where ``base.hidden_dispatch_s`` already holds it (``dist``: the
    ``candidates`` placement); kept apart so the term check prices the batch with it. 0: none
    recorded (a ``single`` profile holds its start-up in both dispatch terms)."""
    rank_startup_s_by_k: tuple[tuple[int, float], ...] = ()
    """(k, seconds) per k: the start-up of the candidate rank's own call with the early head
    on its side (``dist``: the pair probe's early head, top-k and k-row batch alone on the rank
    beyond the one-process prices of those parts), which replaces ``batch_startup_s`` for the
    ``candidates`` placement at the nearest measured k (sorted by k; empty: none measured)."""

    def sharing(self, k: int | None = None, early_head: str | None = None) -> SharingFactors:
        """The factors the costs of a configuration with ``k`` candidates and the early head
        at ``early_head`` apply (module doc): the ``candidates`` placement takes
        ``pair_slowdowns_candidates`` where measured, every other case ``pair_slowdowns``."""
        if k is not None:
            check_positive_int("k", k)
        if early_head is not None:
            check_early_head(early_head)
        if self.serial:
            return SharingFactors(1.0, 1.0, "serial")
        if k is None or not self.pair_slowdowns:
            base = self.base
            return SharingFactors(base.shared_device_slowdown, base.candidate_slowdown, "costs")
        rows, placement = self.pair_slowdowns, None
        if early_head == "candidates" and self.pair_slowdowns_candidates:
            rows, placement = self.pair_slowdowns_candidates, "candidates"
        measured, main, cand = _nearest_k(rows, k)
        return SharingFactors(max(main, 1.0), max(cand, 1.0), "pair", k=k, measured_k=measured,
                              d_bar=self.pair_d_bar, measured=(main, cand),
                              placement=placement)  # fmt: skip

    def batch_startup(self, early_head: str, k: int | None = None) -> float:
        """Seconds the candidate batch's start-up after an early head adds under ``early_head``:
        a serial backend's whole dispatch (no message travels there); with the early head on
        the candidate side of ``dist``, the rank's own start-up at the nearest measured k
        (``rank_startup_s_by_k``, given k) or else ``batch_startup_s``; else 0 (the batch
        follows a message)."""
        check_early_head(early_head)
        if k is not None:
            check_positive_int("k", k)
        if self.serial:
            return self.base.dispatch_seconds(early_head)
        if early_head != "candidates":
            return 0.0
        if k is not None and self.rank_startup_s_by_k:
            return _nearest_k(self.rank_startup_s_by_k, k)[1]
        return self.batch_startup_s

    def placement(self, early_head: str) -> str:
        """The schedule that prices ``early_head`` here: ``main`` on a serial backend."""
        check_early_head(early_head)
        return "main" if self.serial else early_head

    def costs(
        self, *, d: int, d_bar: int, k: int | None = None, early_head: str | None = None
    ) -> DecodeCosts:
        """DecodeCosts of a configuration with early layer ``d_bar`` (e = d - d_bar) and, when
        given, ``k`` candidates: each side's sharing factor from ``pair_slowdowns`` then (from
        ``pair_slowdowns_candidates`` for ``early_head="candidates"``, where measured)."""
        d, d_bar = as_int("d", d), as_int("d_bar", d_bar)
        check_d_bar(d, d_bar)
        e = d - d_bar
        grown = {
            name: getattr(self.base, name) + e * self.per_candidate_layer_s.get(name, 0.0)
            for name in PER_LAYER_FIELDS
        }
        sharing = self.sharing(k, early_head)  # checks k and early_head, naming them
        if early_head in self.host_s_by_placement:
            grown["host_s"] = self.host_s_by_placement[early_head]
        if early_head == "candidates" and not self.serial:  # the rank's start-up at this k
            grown["hidden_dispatch_s"] += self.batch_startup(early_head, k) - self.batch_startup_s
        return sharing.applied_to(replace(self.base, **grown))

    def greedy_costs(self, *, d: int, d_bar: int) -> DecodeCosts:
        """DecodeCosts that price greedy decoding on this backend's measured compute figures
        (its layers, embedding, final head, and greedy's own host time)."""
        costs = self.costs(d=d, d_bar=d_bar)
        if self.greedy_host_s is None:
            return costs
        return replace(costs, host_s=self.greedy_host_s)

    @property
    def measured_ks(self) -> tuple[int, ...]:
        """Candidate counts k whose batch time was measured."""
        return tuple(k for k, _ in self.base.candidate_layer_s_by_k)


@dataclass(frozen=True)
class SharingFactors:
    """The shared-device factors a configuration's costs apply, and where they come from."""

    main: float
    """s_m: main's factor while the candidate batch computes beside it."""
    candidate: float
    """s_c: the batch's factor while main computes beside it."""
    source: str
    """``pair`` (the profile's ``pair_slowdowns``), ``costs`` (the entry's own factors) or
    ``serial`` (one side after the other: nothing overlaps, no factor applies)."""
    k: int | None = None
    """The configuration's candidate count (``pair``)."""
    measured_k: int | None = None
    """The measured k whose factors apply: k, or the nearest measured one (``pair``)."""
    d_bar: int | None = None
    """The early layer the pair probe measured at (``pair``)."""
    measured: tuple[float, float] | None = None
    """The recorded (main, candidate) factors before those below 1 are taken as 1 (``pair``)."""
    placement: str | None = None
    """``candidates``: the factors were measured with the early head on the candidate side
    (``pair_slowdowns_candidates``); None: main's placement (the pair probe's batch alone)."""

    def __post_init__(self) -> None:
        check_choice("source", self.source, ("pair", "costs", "serial"))
        if self.placement is not None:
            check_choice("placement", self.placement, ("candidates",))
        for name in ("main", "candidate"):
            object.__setattr__(self, name, as_real(name, getattr(self, name), minimum=1.0))
        if self.source != "pair":
            return
        for name in ("k", "measured_k", "d_bar"):
            check_positive_int(name, getattr(self, name))
        measured = self.measured
        if not isinstance(measured, tuple | list) or len(measured) != 2:
            raise ValueError(
                f"measured must be the (main, candidate) factors, got {measured!r:.60}"
            )
        object.__setattr__(self, "measured", tuple(
            as_real("measured", x, minimum=0.0, strict=True) for x in measured))  # fmt: skip

    def applied_to(self, costs: DecodeCosts) -> DecodeCosts:
        """``costs`` with these factors: the pair probe's as ``shared_device_slowdown`` and
        ``candidate_device_slowdown``; ``costs``' own factors otherwise (``costs``, ``serial``).
        The one place a profile's sharing factors enter DecodeCosts (``BackendCosts.costs``,
        the planner's ``sim.hardware_costs.ProfileHardware``)."""
        if not isinstance(costs, DecodeCosts):
            raise ValueError(f"costs must be a DecodeCosts, got {type(costs).__name__}")
        if self.source != "pair":
            return costs
        return replace(costs, shared_device_slowdown=self.main,
                       candidate_device_slowdown=self.candidate)  # fmt: skip

    def describe(self) -> str:
        """One line: the factors and their source, and any substitution made."""
        if self.source == "serial":
            return "serial device: the batch runs before main's suffix, no sharing factor"
        if self.source == "costs":
            if self.main == self.candidate:
                return f"sharing x{self.main:.3f} both sides (shared_device_slowdown)"
            return (f"sharing x{self.main:.3f} main, x{self.candidate:.3f} candidate batch "
                    "(the costs' own factors)")  # fmt: skip
        at = f"k={self.k}" if self.measured_k == self.k else (
            f"k={self.measured_k}, the nearest measured to k={self.k}")  # fmt: skip
        clamped = [f"{side} profiled x{raw:.3f}, taken as 1"
                   for side, raw in zip(("main", "candidate"), self.measured, strict=True)
                   if raw < 1]  # fmt: skip
        side = "candidate batch" if self.placement is None else "early head + batch"
        where = ", early head on the candidate side" if self.placement == "candidates" else ""
        return (
            f"sharing x{self.main:.3f} main, x{self.candidate:.3f} {side} (pair "
            f"probe at {at}, d_bar={self.d_bar}{where}" + "".join(f"; {c}" for c in clamped) + ")"
        )


@dataclass(frozen=True)
class CostProfile:
    """A validated cost profile: the model's name and depth and the costs of each backend."""

    model_name: str
    """The profiled model (its directory name or config name)."""
    d: int
    """Decoder layers of the profiled model."""
    backends: Mapping[str, BackendCosts]
    """Backend name (``single``, ``dist``) -> its costs."""
    data: Mapping = field(default_factory=dict, repr=False)
    """The whole decoded JSON object (figures, provenance, warnings)."""

    def cost_replicates(
        self,
        backend: str = "single",
        *,
        d_bar: int,
        k: int | None = None,
        greedy: bool = False,
        early_head: str | None = None,
    ):
        """The bootstrap replicates of ``costs(backend, d_bar=, k=, early_head=)`` (or of
        ``greedy_costs``), a list of DecodeCosts (each with its own redrawn pair factors);
        empty when the profile kept no timed samples."""
        check_flag("greedy", greedy)
        self.costs(backend, d_bar=d_bar, k=k, early_head=early_head)
        reps = self.backends[backend].replicates
        if greedy:
            return [r.greedy_costs(d=self.d, d_bar=d_bar) for r in reps]
        return [r.costs(d=self.d, d_bar=d_bar, k=k, early_head=early_head) for r in reps]

    def costs(
        self,
        backend: str = "single",
        *,
        d_bar: int,
        k: int | None = None,
        early_head: str | None = None,
    ) -> DecodeCosts:
        """DecodeCosts of ``backend`` at early layer ``d_bar`` and, when given, ``k`` candidates
        and the early head's placement (each side's sharing factor from the pair probe,
        ``sharing``); ValueError for a backend not in the profile."""
        return self._backend(backend).costs(d=self.d, d_bar=d_bar, k=k, early_head=early_head)

    def sharing(
        self, backend: str = "single", k: int | None = None, early_head: str | None = None
    ) -> SharingFactors:
        """The shared-device factors ``costs(backend, d_bar=, k=, early_head=)`` applies, and
        their source."""
        return self._backend(backend).sharing(k, early_head)

    def _backend(self, backend: str) -> BackendCosts:
        if not isinstance(backend, str) or backend not in self.backends:
            raise ValueError(
                f"backend must be one of the profiled backends {sorted(self.backends)}, "
                f"got {backend!r}"
            )
        return self.backends[backend]

    def greedy_costs(self, backend: str = "single", *, d_bar: int) -> DecodeCosts:
        """Greedy decoding priced on ``backend``'s figures (``BackendCosts.greedy_costs``), so
        a backend's predicted speed-up rests on figures measured together."""
        self.costs(backend, d_bar=d_bar)  # the backend is in the profile
        backend_costs = self.backends[backend]
        if backend_costs.greedy_host_s is None and backend != "single":
            host = self.data.get("figures", {}).get(backend, {}).get("host_s")
            if isinstance(host, Mapping) and isinstance(host.get("median"), Real):
                median = _seconds(f"figures.{backend}.host_s.median", host["median"])
                backend_costs = replace(backend_costs, greedy_host_s=median)
        return backend_costs.greedy_costs(d=self.d, d_bar=d_bar)

    @property
    def wide_prices(self) -> tuple[WidePrice, ...]:
        """Prices the profiler marked too wide to predict from (empty for older files)."""
        return tuple(_wide_price(f"wide_prices[{i}]", e)
                     for i, e in enumerate(self.data.get("wide_prices", [])))  # fmt: skip

    @property
    def warnings(self) -> list[str]:
        """Warnings recorded while the profile was measured (noisy figures, a loaded machine)."""
        return list(self.data.get("warnings", []))

    @property
    def provenance(self) -> dict:
        """Where and how the profile was measured."""
        return dict(self.data.get("provenance", {}))


@dataclass(frozen=True)
class WidePrice:
    """A price whose relative spread (IQR / median) exceeded the profiler's threshold."""

    backend: str
    figure: str
    rel_spread: float
    """IQR / median of the figure's samples after the last re-measurement."""
    threshold: float

    def describe(self) -> str:
        """'dist candidate_layer_s[3]: IQR/median 27.3 % > 20 %'."""
        return (
            f"{self.backend} {self.figure}: IQR/median {100 * self.rel_spread:.1f} % > "
            f"{100 * self.threshold:g} %"
        )

    def to_dict(self) -> dict:
        return {"backend": self.backend, "figure": self.figure,
                "rel_spread": self.rel_spread, "threshold": self.threshold}  # fmt: skip


def _wide_price(path: str, entry) -> WidePrice:
    """One ``wide_prices`` entry; ValueError naming the field when malformed."""
    if not isinstance(entry, Mapping):
        raise ValueError(f"cost profile: {path} must be an object, got {entry!r:.60}")
    for key in ("backend", "figure"):
        if not isinstance(entry.get(key), str):
            raise ValueError(f"cost profile: {path}.{key} must be a string")
    rel, limit = entry.get("rel_spread"), entry.get("threshold")
    for key, value in (("rel_spread", rel), ("threshold", limit)):
        ok = isinstance(value, Real) and not isinstance(value, bool) and is_finite(value)
        if not ok or value < 0:
            raise ValueError(f"cost profile: {path}.{key} must be a finite number >= 0, "
                             f"got {value!r:.60}")  # fmt: skip
    return WidePrice(entry["backend"], entry["figure"], float(rel), float(limit))


ACCEPT_WIDE_FLAG = "--accept-wide-prices"
"""The command-line flag that accepts a profile with wide prices."""


def check_wide_prices(profile: CostProfile, *, accept: bool = False) -> list[str]:
    """Refuse a profile with prices too wide to predict from (ValueError, one line naming the
    first price, its spread and the threshold), unless ``accept``: then the note lines every
    prediction prints (empty when no price is wide)."""
    if not isinstance(profile, CostProfile):
        raise ValueError(f"profile must be a CostProfile, got {type(profile).__name__}")
    if not isinstance(accept, bool):
        raise ValueError(f"accept must be true or false, got {accept!r:.60}")
    wide = profile.wide_prices
    if not wide:
        return []
    if not accept:
        more = f" (and {len(wide) - 1} more)" if len(wide) > 1 else ""
        raise ValueError(
            f"cost profile price too wide to predict from: {wide[0].describe()}{more}; "
            f"re-profile on a quieter machine, or pass {ACCEPT_WIDE_FLAG} to predict anyway"
        )
    return [f"note: this prediction uses a wide price ({w.describe()})" for w in wide]


def _get(data, path: str):
    """``data[a][b]...`` for path "a.b..."; ValueError naming the first missing field."""
    node = data
    walked = []
    for key in path.split("."):
        walked.append(key)
        if not isinstance(node, Mapping) or key not in node:
            raise ValueError(f"cost profile: field {'.'.join(walked)} is missing")
        node = node[key]
    return node


MAX_SECONDS = 1e6
"""The largest cost a profile may state (about 11.6 days a pass): a larger one is a corrupt
file, and its products with depths and token counts would overflow to inf or NaN."""

MAX_SLOWDOWN = 1e6
"""The largest ``shared_device_slowdown`` a profile may state (for the same reason)."""


def _seconds(path: str, value, *, positive: bool = False) -> float:
    """A finite real >= 0 (> 0 if positive) and <= MAX_SECONDS for field ``path``; ValueError
    naming it."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and is_finite(value)
    bound = "> 0" if positive else ">= 0"
    if not ok or value < 0 or (positive and value == 0) or value > MAX_SECONDS:
        raise ValueError(
            f"cost profile: {path} must be a finite number of seconds {bound} and "
            f"<= {MAX_SECONDS:g}, got {value!r}"
        )
    return float(value)


def _backend(name: str, entry, prefix: str | None = None, *, pairs: bool = True) -> BackendCosts:
    """Check one ``backends.<name>`` entry and build its BackendCosts (with its replicates);
    ``pairs`` False: its ``pair_slowdowns`` are checked but not applied."""
    prefix = prefix or f"backends.{name}"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("costs"), Mapping):
        raise ValueError(f"cost profile: field {prefix}.costs is missing")
    costs = entry["costs"]
    values = {}
    for key in COST_FIELDS + OPTIONAL_COST_FIELDS:
        if key not in costs:
            if key in OPTIONAL_COST_FIELDS:
                continue
            raise ValueError(f"cost profile: field {prefix}.costs.{key} is missing")
        value = costs[key]
        if key in OPTIONAL_COST_FIELDS and value is None:
            continue
        if key == "candidate_layer_s_by_k":
            if not isinstance(value, Mapping) or not value:
                raise ValueError(
                    f"cost profile: {prefix}.costs.{key} must map k to seconds, got {value!r}"
                )
            for k, seconds in value.items():
                _seconds(f"{prefix}.costs.{key}[{k}]", seconds, positive=True)
        elif key in ("shared_device_slowdown", "candidate_device_slowdown"):
            _factor(f"{prefix}.costs.{key}", value)
        else:
            _seconds(f"{prefix}.costs.{key}", value, positive=key == "layer_s")
        values[key] = value
    growth = entry.get("per_candidate_layer_s", {})
    if not isinstance(growth, Mapping):
        raise ValueError(f"cost profile: {prefix}.per_candidate_layer_s must be an object")
    unknown = sorted(set(growth) - set(PER_LAYER_FIELDS))
    if unknown:
        raise ValueError(
            f"cost profile: {prefix}.per_candidate_layer_s has unknown fields {unknown}; "
            f"known {list(PER_LAYER_FIELDS)}"
        )
    per_layer = {
        key: _seconds(f"{prefix}.per_candidate_layer_s.{key}", value)
        for key, value in growth.items()
    }
    serial = entry.get("serial", False)
    if not isinstance(serial, bool):
        raise ValueError(f"cost profile: {prefix}.serial must be true or false, got {serial!r}")
    greedy_host = entry.get("greedy_host_s")
    if greedy_host is not None:
        greedy_host = _seconds(f"{prefix}.greedy_host_s", greedy_host)
    by_placement = _host_by_placement(f"{prefix}.host_s_by_placement",
                                      entry.get("host_s_by_placement", {}))  # fmt: skip
    startup = _seconds(f"{prefix}.batch_startup_s", entry.get("batch_startup_s", 0.0))
    pair_d_bar, pair_rows, cand_rows = _pair_slowdowns(
        f"{prefix}.pair_slowdowns", entry.get("pair_slowdowns")
    )
    pair_rows, cand_rows = (pair_rows, cand_rows) if pairs else ((), ())
    raw = entry.get("cost_replicates", [])
    if not isinstance(raw, list):
        raise ValueError(f"cost profile: {prefix}.cost_replicates must be a list")
    replicates = tuple(
        _backend(name, {**rep, "serial": serial}, f"{prefix}.cost_replicates[{i}]", pairs=pairs)
        if isinstance(rep, Mapping)
        else _backend(name, rep, f"{prefix}.cost_replicates[{i}]", pairs=pairs)
        for i, rep in enumerate(raw)
    )
    # a replicate written before the pair factors were redrawn keeps the entry's (no spread);
    # one written before the candidates placement was probed keeps the entry's candidates rows
    replicates = tuple(rep if rep.pair_slowdowns else
                       replace(rep, pair_slowdowns=pair_rows, pair_d_bar=pair_d_bar)
                       for rep in replicates)  # fmt: skip
    replicates = tuple(rep if rep.pair_slowdowns_candidates else
                       replace(rep, pair_slowdowns_candidates=cand_rows)
                       for rep in replicates)  # fmt: skip
    replicates = tuple(rep if rep.host_s_by_placement or not by_placement else
                       replace(rep, host_s_by_placement=by_placement)
                       for rep in replicates)  # fmt: skip
    replicates = tuple(rep if isinstance(raw_rep, Mapping) and "batch_startup_s" in raw_rep
                       else replace(rep, batch_startup_s=startup)
                       for rep, raw_rep in zip(replicates, raw, strict=True))  # fmt: skip
    rank_rows = _rank_startup(f"{prefix}.rank_startup_s_by_k",
                              entry.get("rank_startup_s_by_k", {}))  # fmt: skip
    replicates = tuple(rep if isinstance(raw_rep, Mapping) and "rank_startup_s_by_k" in raw_rep
                       else replace(rep, rank_startup_s_by_k=rank_rows)
                       for rep, raw_rep in zip(replicates, raw, strict=True))  # fmt: skip
    return BackendCosts(
        base=DecodeCosts.from_dict({**values, "serial_device": serial}),
        per_candidate_layer_s=per_layer,
        serial=serial,
        greedy_host_s=greedy_host,
        replicates=replicates,
        pair_slowdowns=pair_rows,
        pair_d_bar=pair_d_bar,
        pair_slowdowns_candidates=cand_rows,
        host_s_by_placement=by_placement,
        batch_startup_s=startup,
        rank_startup_s_by_k=rank_rows,
    )


def _nearest_k(rows, k: int) -> tuple:
    """The row (k first) of ``rows`` measured nearest to ``k``; the smaller k on a tie."""
    return min(rows, key=lambda row: (abs(row[0] - k), row[0]))


def _rank_startup(path: str, value) -> tuple[tuple[int, float], ...]:
    """An object mapping candidate counts k >= 1 to seconds, for field ``path``, as sorted
    (k, seconds) rows; ValueError naming it."""
    if not isinstance(value, Mapping):
        raise ValueError(f"cost profile: {path} must map k to seconds, got {value!r}")
    rows = []
    for k, seconds in value.items():
        try:
            count = int(k)
        except (TypeError, ValueError):
            count = 0
        if count < 1 or str(count) != str(k):
            raise ValueError(f"cost profile: {path} keys must be integers k >= 1, got {k!r}")
        rows.append((count, _seconds(f"{path}[{k}]", seconds)))
    return tuple(sorted(rows))


def _host_by_placement(path: str, value) -> dict[str, float]:
    """An object mapping early-head placements to host seconds per pass, for field ``path``;
    ValueError naming it."""
    if not isinstance(value, Mapping):
        raise ValueError(f"cost profile: {path} must map placements to seconds, got {value!r}")
    out = {}
    for placement, seconds in value.items():
        if placement not in EARLY_HEAD_PLACEMENTS:
            raise ValueError(f"cost profile: {path} has placement {placement!r}; known "
                             f"{list(EARLY_HEAD_PLACEMENTS)}")  # fmt: skip
        out[placement] = _seconds(f"{path}.{placement}", seconds)
    return out


def _factor(path: str, value, *, low: float = 1.0) -> float:
    """A finite real >= ``low`` (> 0 when ``low`` is 0) and <= MAX_SLOWDOWN for field
    ``path``; ValueError naming it."""
    bad = not (isinstance(value, Real) and not isinstance(value, bool))
    if bad or not math.isfinite(value) or not low <= value <= MAX_SLOWDOWN or value <= 0:
        bound = f">= {low:g}" if low > 0 else "> 0"
        raise ValueError(
            f"cost profile: {path} must be a finite factor {bound} and <= {MAX_SLOWDOWN:g}, "
            f"got {value!r}"
        )
    return float(value)


def _pair_slowdowns(path: str, raw) -> tuple[int | None, tuple, tuple]:
    """(d_bar, ((k, main, candidate), ...) of ``by_k``, the same of ``by_k_candidates``) of a
    ``pair_slowdowns`` entry (None: (None, (), ())); ValueError naming the bad field. A factor
    below 1 is kept as recorded (> 0: the profiler writes ratios of means, noise included;
    ``BackendCosts.sharing`` takes it as 1)."""
    if raw is None:
        return None, (), ()
    if not isinstance(raw, Mapping) or not isinstance(raw.get("by_k"), Mapping) or not raw["by_k"]:
        raise ValueError(f"cost profile: {path} must be an object with by_k mapping k to "
                         f"{{'main', 'candidate'}} factors, got {raw!r:.80}")  # fmt: skip
    d_bar = raw.get("d_bar")
    if d_bar is not None and (isinstance(d_bar, bool) or not isinstance(d_bar, int) or d_bar < 1):
        raise ValueError(f"cost profile: {path}.d_bar must be a positive integer, got {d_bar!r}")
    rows = _pair_rows(f"{path}.by_k", raw["by_k"])
    cands = raw.get("by_k_candidates")
    if cands is None:
        return d_bar, rows, ()
    if not isinstance(cands, Mapping) or not cands:
        raise ValueError(f"cost profile: {path}.by_k_candidates must map k to "
                         f"{{'main', 'candidate'}} factors, got {cands!r:.80}")  # fmt: skip
    return d_bar, rows, _pair_rows(f"{path}.by_k_candidates", cands)


def _pair_rows(path: str, by_k: Mapping) -> tuple[tuple[int, float, float], ...]:
    """((k, main, candidate), ...) sorted by k of one ``by_k`` mapping at field ``path``."""
    rows = {}
    for key, sides in by_k.items():
        k = int(key) if isinstance(key, str) and key.strip().isdigit() else key
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"cost profile: {path} key must be a candidate count k >= 1, "
                             f"got {key!r}")  # fmt: skip
        if not isinstance(sides, Mapping):
            raise ValueError(f"cost profile: {path}[{k}] must be an object with 'main' "
                             f"and 'candidate', got {sides!r:.60}")  # fmt: skip
        for side in ("main", "candidate"):
            if side not in sides:
                raise ValueError(f"cost profile: field {path}[{k}].{side} is missing")
        rows[k] = tuple(_factor(f"{path}[{k}].{side}", sides[side], low=0.0)
                        for side in ("main", "candidate"))  # fmt: skip
    return tuple((k, *rows[k]) for k in sorted(rows))


def parse_cost_profile(data: Mapping, *, d: int | None = None) -> CostProfile:
    """Check a decoded profile and return a CostProfile; ValueError naming the bad field.

    Refused: a missing field, a negative or non-finite time, a slowdown below 1, another
    ``format`` or ``version``, and, when ``d`` is given, a depth ``model.d`` other than ``d``
    (the profile was measured on another model).
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"cost profile data must be a JSON object, got {type(data).__name__}")
    if d is not None:
        d = as_int("d", d)
    fmt = _get(data, "format")
    if fmt != PROFILE_FORMAT:
        raise ValueError(f"cost profile: format must be {PROFILE_FORMAT!r}, got {fmt!r}")
    version = _get(data, "version")
    if version != PROFILE_VERSION:
        raise ValueError(f"cost profile: version must be {PROFILE_VERSION}, got {version!r}")
    depth = _get(data, "model.d")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"cost profile: model.d must be a positive integer, got {depth!r}")
    if d is not None and depth != d:
        raise ValueError(
            f"cost profile: model.d = {depth} does not match the model's depth d = {d} "
            "(the profile was measured on another model)"
        )
    name = _get(data, "model.name")
    backends = _get(data, "backends")
    if not isinstance(backends, Mapping) or not backends:
        raise ValueError("cost profile: backends must name at least one backend")
    # the pair probe's ranks run on the CPU: its factors price a run only where the profiled
    # model ran there too (elsewhere the dist ranks use two devices and share nothing)
    device = data.get("provenance", {}).get("device", "cpu") if isinstance(
        data.get("provenance"), Mapping) else "cpu"  # fmt: skip
    pairs = str(device).startswith("cpu")
    parsed = {str(key): _backend(str(key), entry, pairs=pairs) for key, entry in backends.items()}
    wide = data.get("wide_prices", [])
    if not isinstance(wide, list):
        raise ValueError("cost profile: wide_prices must be a list")
    for i, entry in enumerate(wide):
        _wide_price(f"wide_prices[{i}]", entry)
    return CostProfile(model_name=str(name), d=depth, backends=parsed, data=data)


def read_profile_data(path) -> dict:
    """The JSON object in a profile file; ValueError naming the file when it is missing,
    unreadable, not JSON or not an object (no layout checks: ``parse_cost_profile``)."""
    path = as_path("path", path)
    if not path.is_file():
        raise ValueError(f"cost profile path {str(path)!r}: no such file")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"cost profile file {path} is not JSON: {exc}") from None
    except OSError as exc:
        raise ValueError(f"cost profile file {path} cannot be read: {exc.strerror}") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ValueError(f"cost profile file {path} must hold a JSON object, got {kind}")
    return data


def read_cost_profile(path, d: int | None = None) -> CostProfile:
    """Read and check a profile file (``read_profile_data``, then ``parse_cost_profile``);
    ValueError naming the file or the bad field, or, given ``d``, a profile of another depth."""
    return parse_cost_profile(read_profile_data(path), d=d)
