"""The cost-model options of ``ppd latency`` and ``ppd compute`` (this project's extension).

The terms of ``ppdmodel.DecodeCosts`` come from flags (``--layer-s`` ...) or a profile file
(``--costs FILE`` from ``ppd measure profile``, read by ``ppdmodel.cost_profile``; the flags
override its terms). Each row then gains PPD and greedy seconds per token, the speed-up and
the break-even p, per early-head placement, and with ``--waterfall`` the per-token split.
Greedy is priced on the same backend's figures (``CostProfile.greedy_costs``). A profile that
kept its timed samples (or ``--p-tokens N``, the tokens behind --p) adds 95 % intervals:
``ppd_s_low``/``ppd_s_high`` and ``speedup_low``/``speedup_high`` (``ppdmodel.intervals``).
A row priced from a profile is priced at its k (a ``dist`` profile's pair factors: main's and
the batch's own sharing factors, ``CostProfile.sharing``) and says which in ``sharing``.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import numpy as np

from ppdmodel.cli_args import existing_file, nonnegative_float, positive_float, positive_int
from ppdmodel.cost_profile import check_wide_prices, read_cost_profile
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS, SECONDS_FIELDS, DecodeCosts
from ppdmodel.intervals import MISSING_LOG_SD, prediction_interval
from ppdmodel.options import Settings, option
from ppdmodel.seconds import break_even_p, expected_latency_seconds, greedy_latency_seconds
from ppdmodel.waterfall import latency_waterfall

COSTS_GROUP = "cost terms in seconds"
COSTS_ABOUT = (
    "this project's extension, ppdmodel.DecodeCosts; any of them adds PPD and greedy seconds per "
    "token, the speed-up and the break-even p"
)


def _term(help: str, slowdown: bool = False):
    """A DecodeCosts term given as a flag (None: the profile's, or DecodeCosts' default)."""
    kind = positive_float if slowdown else nonnegative_float
    return option(None, type=kind, help=help)


@dataclass(frozen=True, kw_only=True)
class CostSettings(Settings):
    """The cost terms of ``ppd latency`` and ``ppd compute``: a profile and/or the terms of
    ``DecodeCosts`` as flags (which override the profile's), the early head's placements,
    the waterfall and the intervals' token count (module docstring)."""

    GROUP = COSTS_GROUP
    ABOUT = COSTS_ABOUT

    costs: str | None = option(
        None, type=existing_file, metavar="FILE",
        help="a cost profile (ppd measure profile); the flags below override its terms",
    )  # fmt: skip
    backend: str | None = option(
        None, choices=("single", "dist"), help="the profile's backend to use (default: single)"
    )
    layer_s: float | None = _term(
        "one decoder layer at batch 1 (default 1: the other terms in layer units)"
    )
    candidate_extra_row_layer_s: float | None = _term(
        "per-layer time each candidate row adds beyond the first"
    )
    embedding_s: float | None = _term("token embedding")
    early_head_s: float | None = _term(
        "early prediction at d_bar: final norm, LM head and top-k on one row"
    )
    final_head_s: float | None = _term("final norm and LM head after layer d")
    candidate_dispatch_s: float | None = _term(
        "message starting the candidates (early head on main; one device running one stream: "
        "the batch's start-up)"
    )
    hidden_dispatch_s: float | None = _term(
        "message with main's hidden state (early head on the candidates; one device running "
        "one stream: the batch's start-up)"
    )
    handoff_s: float | None = _term("one accepted hand-off (hidden state and KV entries to main)")
    host_s: float | None = _term("host time per generated token")
    shared_device_slowdown: float | None = _term(
        "factor >= 1 by which main (and, unless the next flag is given, the candidates) slows "
        "beside the other side on one device (1: separate devices)",
        slowdown=True,
    )
    candidate_device_slowdown: float | None = _term(
        "factor >= 1 by which the candidate batch slows beside main on one device (default: "
        "--shared-device-slowdown's)",
        slowdown=True,
    )
    early_head: tuple[str, ...] | None = option(
        None, nargs="+", choices=EARLY_HEAD_PLACEMENTS,
        help="where the early head runs: main (default) and/or candidates",
    )  # fmt: skip
    waterfall: bool = option(
        False, action="store_true", help="print where PPD's time per token goes"
    )
    accept_wide_prices: bool = option(
        False, action="store_true",
        help="predict from a --costs profile whose prices are marked too wide (each row says so)",
    )  # fmt: skip
    p_tokens: int | None = option(
        None, type=positive_int, metavar="N",
        help="predictable tokens behind --p (its sampling error joins the profile's spread in "
        "the 95 %% interval columns ppd_s_low/high and speedup_low/high)",
    )  # fmt: skip

    def overrides(self) -> dict[str, float]:
        """The DecodeCosts terms given as flags."""
        terms = {f.name for f in dataclasses.fields(DecodeCosts)}
        return {
            f.name: getattr(self, f.name)
            for f in self.options()
            if f.name in terms and getattr(self, f.name) is not None
        }

    @property
    def given(self) -> bool:
        """Any cost option given (--accept-wide-prices alone is not: it only qualifies
        --costs): the rows are then priced in seconds."""
        return bool(
            self.costs is not None or self.backend is not None or self.waterfall
            or self.early_head is not None or self.p_tokens is not None or self.overrides()
        )  # fmt: skip


SLOWDOWN_FLAGS = ("shared_device_slowdown", "candidate_device_slowdown")
"""The flags of the sharing factors (dimensionless)."""
LATENCY_K_CHANGE = {
    "action": None, "help": "candidates, one batch (cost terms only; default 1)"
}  # fmt: skip
"""``ppd latency``'s ``--k`` (``ModelGrid.k``): one list (a repeat replaces it), priced by the
cost terms only."""


COST_METAVARS = {
    name: {"metavar": "COST_" + name.upper()}
    for name in (f.name for f in CostSettings.options())
    if name in {f.name for f in dataclasses.fields(DecodeCosts)}
}
"""``changes`` of ``CostSettings.add_to`` keeping the metavars the term flags always showed."""


def add_cost_settings(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """``CostSettings``' options as their titled group of ``parser``."""
    return CostSettings.add_to(parser, changes=COST_METAVARS)


class CostTerms:
    """The cost terms given on the command line: a profile and/or flags, per d_bar."""

    def __init__(self, settings: CostSettings, d: tuple[int, ...] | None = None):
        """``settings`` checked against the profile; ``d``: the depths asked for (each must be
        the profile's)."""
        self.overrides = settings.overrides()
        self.profile = None
        self.wide: list[str] = []
        if settings.costs is not None:
            self.profile = read_cost_profile(settings.costs)
            bad = [x for x in d or () if x != self.profile.d]
            if bad:
                raise ValueError(
                    f"--d {bad[0]} does not match the profile's depth d = {self.profile.d} "
                    f"({self.profile.model_name})"
                )
            self.wide = [w.describe() for w in self.profile.wide_prices]
            check_wide_prices(self.profile, accept=settings.accept_wide_prices)
        elif settings.backend is not None:
            raise ValueError("--backend selects a backend of a profile: give --costs FILE too")
        self.backend = settings.backend or "single"
        self.placements = list(settings.early_head or ["main"])
        self.waterfall = settings.waterfall
        self.p_tokens = settings.p_tokens
        if self.profile is None:
            DecodeCosts(**self.overrides)  # bad values are refused before any row is printed
        elif self.backend not in self.profile.backends:
            raise ValueError(
                f"--backend must be one of the profile's backends "
                f"{sorted(self.profile.backends)}, got {self.backend!r}"
            )

    @classmethod
    def given(cls, settings: CostSettings, d: tuple[int, ...] | None = None):
        """CostTerms when any cost option was given, else None (the unit-layer model only)."""
        return cls(settings, d) if settings.given else None

    @property
    def profile_d(self) -> int | None:
        """The profiled model's depth (None without a profile)."""
        return None if self.profile is None else self.profile.d

    def schedule(self, early_head: str) -> str:
        """The closed form's placement for ``early_head`` (a serial backend: ``main``)."""
        if self.profile is None:
            return early_head
        return self.profile.backends[self.backend].placement(early_head)

    def costs(self, d_bar: int, k: int | None = None, early_head: str | None = None) -> DecodeCosts:
        """DecodeCosts at early layer d_bar, k candidates and the early head's placement (the
        profile's, with the flags on top: --shared-device-slowdown alone sets one factor for
        both sides)."""
        if self.profile is None:
            return DecodeCosts(**self.overrides)
        costs = self.profile.costs(self.backend, d_bar=d_bar, k=k, early_head=early_head)
        return self._on_top(costs)

    def _on_top(self, costs: DecodeCosts) -> DecodeCosts:
        """``costs`` with the flags' terms."""
        overrides = dict(self.overrides)
        if "shared_device_slowdown" in overrides:
            overrides.setdefault("candidate_device_slowdown", None)
        return dataclasses.replace(costs, **overrides)

    def sharing(self, d_bar: int, k: int, early_head: str | None = None) -> str:
        """Which sharing factors a profile row at ``d_bar``, ``k`` and ``early_head`` applies,
        and whence."""
        if any(name in self.overrides for name in SLOWDOWN_FLAGS):
            costs = self.costs(d_bar, k, early_head)
            return (f"sharing x{costs.shared_device_slowdown:.3f} main, "
                    f"x{costs.candidate_slowdown:.3f} candidate batch (flags)")  # fmt: skip
        return self.profile.sharing(self.backend, k, early_head).describe()

    def greedy_costs(self, d_bar: int) -> DecodeCosts:
        """Greedy's costs on the same backend (``CostProfile.greedy_costs``), flags on top."""
        if self.profile is None:
            return self.costs(d_bar)
        return self._on_top(self.profile.greedy_costs(self.backend, d_bar=d_bar))

    def replicates(
        self, d_bar: int, k: int | None = None, early_head: str | None = None
    ) -> list[tuple[DecodeCosts, DecodeCosts]]:
        """(PPD, greedy) cost replicates of the profile at k and the early head's placement
        (flags on top); [] without samples."""
        if self.profile is None:
            return []
        pairs = zip(
            self.profile.cost_replicates(self.backend, d_bar=d_bar, k=k, early_head=early_head),
            self.profile.cost_replicates(self.backend, d_bar=d_bar, greedy=True),
            strict=True,
        )
        return [(self._on_top(c), self._on_top(g)) for c, g in pairs]


def cost_rows(row: dict, params: dict, terms: CostTerms) -> list[dict]:
    """``row`` once per early-head placement, with PPD and greedy seconds per token, the
    speed-up and the break-even p (and the waterfall's terms when asked for)."""
    d, d_bar, ell, p = params["d"], params["d_bar"], params["ell"], params["p"]
    k = params.get("k") or 1
    greedy_costs = terms.greedy_costs(d_bar)
    out = []
    for early_head in terms.placements:
        # each placement its own sharing factors (the pair probe's by_k_candidates)
        costs = terms.costs(d_bar, k, early_head)
        replicates = terms.replicates(d_bar, k, early_head)
        schedule = terms.schedule(early_head)
        shape = dict(d=d, d_bar=d_bar, k=k, costs=costs, early_head=schedule)
        ppd = expected_latency_seconds(ell=ell, p=p, **shape) / ell
        greedy = greedy_latency_seconds(d=d, ell=ell, costs=greedy_costs) / ell
        extra = {
            "early_head": early_head,
            "ppd_s_per_token": ppd,
            "greedy_s_per_token": greedy,
            "speedup": greedy / ppd,
            "break_even_p": break_even_p(**shape),
        }
        if (terms.profile is not None or terms.p_tokens) and np.ndim(p) == 0:
            extra.update(
                _interval_columns(d, d_bar, k, ell, p, early_head, schedule, terms, replicates)
            )
            extra["interval_covers"] = interval_covers(terms, bool(replicates))
        if terms.profile is not None:
            extra["backend"] = terms.backend
            extra["priced_as"] = schedule  # "main" on a serial backend (both sides alike)
            extra["sharing"] = terms.sharing(d_bar, k, early_head)
            if terms.wide:
                extra["wide_prices"] = "; ".join(terms.wide)
        if "k" not in row:
            extra["k"] = k
        if terms.waterfall:
            split = latency_waterfall(ell=ell, p=p, **shape)
            extra["waterfall_s"] = {name: float(v) for name, v in split.terms().items()}
        out.append({**row, **extra})
    return out


def interval_covers(terms: CostTerms, replicates: bool) -> str:
    """What the interval columns of a row cover, in words."""
    costs = ("the profile's cost replicates" if replicates else
             f"no replicates in the profile: +-{1.96 * MISSING_LOG_SD:.0%} stated"
             if terms.profile is not None else "")  # fmt: skip
    p = (f"p's sampling error over {terms.p_tokens} tokens" if terms.p_tokens else
         "p as given (no spread: --p-tokens N adds its sampling error)")  # fmt: skip
    return "; ".join(filter(None, (costs, p)))


def _missing_replicates(costs: DecodeCosts, greedy: DecodeCosts, n: int = 40) -> list:
    """Stand-ins for replicates a profile did not keep: every timed figure scaled by
    exp(N(0, ``MISSING_LOG_SD``)), the same factor for PPD's and greedy's costs of a draw
    (seeded)."""
    factors = np.exp(MISSING_LOG_SD * np.random.default_rng(0).standard_normal(n))
    return [tuple(dataclasses.replace(c, **{f: getattr(c, f) * float(x) for f in SECONDS_FIELDS},
                                      candidate_layer_s_by_k=tuple(
                                          (kk, s * float(x)) for kk, s in c.candidate_layer_s_by_k))
                  for c in (costs, greedy)) for x in factors]  # fmt: skip


def _interval_columns(d, d_bar, k, ell, p, early_head, schedule, terms, replicates) -> dict:
    """95 % intervals of PPD's seconds per token and of the speed-up (``ppdmodel.intervals``):
    the profile's cost replicates (stated stand-ins where it kept none) and, with --p-tokens,
    p's sampling error."""
    pairs = replicates or [(terms.costs(d_bar, k, early_head), terms.greedy_costs(d_bar))]
    if not replicates and terms.profile is not None:
        pairs = _missing_replicates(*pairs[0])
    by_id = {id(c): g for c, g in pairs}

    def ppd(c, q):
        return expected_latency_seconds(d=d, d_bar=d_bar, ell=ell, p=q, k=k, costs=c,
                                        early_head=schedule) / ell  # fmt: skip

    def speedup(c, q):
        return greedy_latency_seconds(d=d, ell=ell, costs=by_id[id(c)]) / ell / ppd(c, q)

    ppd_costs = [c for c, _ in pairs]
    args = dict(p=float(p), n=terms.p_tokens)
    band = prediction_interval(ppd, ppd_costs[0], ppd_costs, **args)
    gain = prediction_interval(speedup, ppd_costs[0], ppd_costs, **args)
    return {"ppd_s_low": band.low, "ppd_s_high": band.high,
            "speedup_low": gain.low, "speedup_high": gain.high}  # fmt: skip


WATERFALL_LABELS = {
    "ideal_s": "ideal (Theorem 4.1 x layer time)",
    "embedding_s": "+ embedding",
    "final_head_s": "+ final head",
    "early_head_s": "+ early head",
    "batching_s": "+ k-row batch",
    "dispatch_s": "+ dispatch message",
    "sharing_s": "+ sharing one device",
    "handoff_s": "+ hand-off",
    "host_s": "+ host",
}
"""Labels of ``LatencyWaterfall`` terms, in order."""


def format_waterfall(row: dict) -> str:
    """One row's waterfall as aligned text, per token (ms below one second per token, else s)."""
    p = row.get("p_mean", row["p"])
    scale, unit = (1e3, "ms") if row["greedy_s_per_token"] < 1 else (1.0, "s")
    head = (
        f"where PPD's time per token goes ({unit}): d={row['d']} d_bar={row['d_bar']} "
        f"k={row['k']} ell={row['ell']} p={p:.4g} early head on {row['early_head']}"
    )
    lines = [head]
    for name, value in row["waterfall_s"].items():
        lines.append(f"  {WATERFALL_LABELS[name]:34s} {scale * value:10.4f}")
    lines.append(f"  {'= PPD':34s} {scale * row['ppd_s_per_token']:10.4f}")
    lines.append(
        f"  {'greedy':34s} {scale * row['greedy_s_per_token']:10.4f}   speed-up "
        f"{row['speedup']:.3f}x, break-even p {row['break_even_p']:.4g}"
    )
    return "\n".join(lines)


def with_costs(rows_params, terms: CostTerms | None) -> list[dict]:
    """Rows, each expanded by ``cost_rows`` when cost terms were given."""
    if terms is None:
        return [row for row, _ in rows_params]
    return [out for row, params in rows_params for out in cost_rows(row, params, terms)]
