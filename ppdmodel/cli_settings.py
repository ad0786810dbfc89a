"""The settings of the closed-form commands (``ppd latency | compute | tradeoff``), declared once
(``ppdmodel.options``): the paper's symbols, the seconds of a layer, the p_correct table, output.

``ModelParameters`` holds one value of each symbol (d, d_bar, k, ell, p); ``ModelGrid`` takes
one or more of each (every combination is evaluated) and derives its fields from
``ModelParameters``, so each symbol's type and help are written once. Both are torch- and
pandas-free, so ``sim`` and ``measure`` may build their options from them too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ppdmodel.cli_args import DEFAULT_D, nonnegative_float, output_dir, positive_int, probability
from ppdmodel.options import Settings, like, option

DEFAULT_ELL = 128
"""Tokens of a sequence when ``--ell`` is not given."""
DEFAULT_OUT = "ppd-out"
"""Where ``ppd tradeoff`` writes its figures and CSV unless --out says otherwise."""


@dataclass(frozen=True, kw_only=True)
class ModelParameters(Settings):
    """One value of each of the paper's symbols (None: the command's default)."""

    GROUP = "model parameters"
    ABOUT = "the paper's symbols"

    d: int | None = option(None, type=positive_int, help=f"layers (default {DEFAULT_D})")
    d_bar: int | None = option(
        None, type=positive_int, help="early-prediction layer (default: the smallest layer >= d/2)"
    )
    ell: int | None = option(None, type=positive_int, help=f"tokens (default {DEFAULT_ELL})")
    p: float | None = option(None, type=probability, help="match rate p_correct")
    k: int | None = option(None, type=positive_int, help="candidates (default 1)")


def several(settings: type[Settings], name: str) -> dataclasses.Field:
    """Field ``name`` of ``settings`` taking one or more values (repeats extend the list;
    None: the command's default)."""
    return like(settings, name, None, nargs="+", action="extend")


PAPER_POSITIONS_EXAMPLE = "squad:3:Y:20"


def parse_paper_positions(spec: str) -> tuple[str, int, bool, int]:
    """'squad:3:Y:20' -> (dataset, k, trained, layer) naming a per-position table of the paper
    (Tables 6-8); a ValueError naming ``--paper-positions`` when malformed."""
    parts = spec.split(":")
    if len(parts) != 4 or parts[2].upper() not in ("Y", "N") or not parts[1].isdigit():
        raise ValueError(
            f"--paper-positions must look like {PAPER_POSITIONS_EXAMPLE}, got {spec!r}"
        )
    if not parts[3].isdigit():
        from ppdmodel.paper import LAYERS  # pandas: only when the option is given

        raise ValueError(f"--paper-positions layer must be one of {LAYERS}, got {spec!r}")
    return parts[0], int(parts[1]), parts[2].upper() == "Y", int(parts[3])


@dataclass(frozen=True, kw_only=True)
class ModelGrid(Settings):
    """One or more values of each symbol (``ModelParameters``): every combination is evaluated.
    ``paper_positions`` takes p (and the defaults of ell, d_bar and k) from a table of the
    paper instead of ``p``."""

    GROUP = ModelParameters.GROUP
    ABOUT = "the paper's symbols; each takes several values (every combination is evaluated)"

    d: tuple[int, ...] | None = several(ModelParameters, "d")
    d_bar: tuple[int, ...] | None = several(ModelParameters, "d_bar")
    ell: tuple[int, ...] | None = several(ModelParameters, "ell")
    p: tuple[float, ...] | None = several(ModelParameters, "p")
    paper_positions: str | None = option(
        None, metavar="DATASET:K:TRAINED:LAYER",
        help=f"use the paper's per-position p_t (Tables 6-8) instead of --p, e.g. "
        f"{PAPER_POSITIONS_EXAMPLE}; ell, d_bar and k default to the table's (16 or 128, the "
        "layer, K); a smaller --ell uses the first ell - 1 values",
    )  # fmt: skip
    k: tuple[int, ...] | None = several(ModelParameters, "k")

    def check(self) -> None:
        if self.paper_positions is not None and self.p:
            raise ValueError("give --p or --paper-positions, not both (--paper-positions sets p)")
        if self.paper_positions is None and not self.p:
            raise ValueError("give --p (one or more match rates) or --paper-positions")
        if self.paper_positions is not None:
            parse_paper_positions(self.paper_positions)


@dataclass(frozen=True, kw_only=True)
class LayerSeconds(Settings):
    """Seconds of the unit-layer model: a layer's time and the two overheads (``ppd latency``;
    the cost terms of ``ppdmodel.cli_costs.CostSettings`` are the finer model)."""

    GROUP = "seconds per layer"

    seconds_per_layer: float | None = option(
        None, type=nonnegative_float, help="also report seconds"
    )
    per_token_overhead_s: float = option(
        0.0, type=nonnegative_float, help="seconds added per generated token (with the above)"
    )
    per_handoff_overhead_s: float = option(
        0.0, type=nonnegative_float, help="seconds added per hand-off (with the above)"
    )

    def terms(self) -> dict | None:
        """Keyword arguments of ``ppdmodel.expected_latency_seconds``; None without seconds."""
        if self.seconds_per_layer is None:
            return None
        return {
            "seconds_per_layer": self.seconds_per_layer,
            "per_token_overhead_s": self.per_token_overhead_s,
            "per_handoff_overhead_s": self.per_handoff_overhead_s,
        }


@dataclass(frozen=True, kw_only=True)
class TradeoffTable(Settings):
    """The p_correct table ``ppd tradeoff`` draws from, and its early-prediction layer (the
    model's depth is ``ModelParameters.d``)."""

    GROUP = "p_correct table"

    table: str = option(
        "paper", choices=("paper", "smollm2"),
        help="p_correct table: paper (Vicuna-13B, Table 2; default) or smollm2 (the measured "
        "SmolLM2-135M-Instruct atlas shipped with the package, translator as trained head)",
    )  # fmt: skip
    layer: int | None = option(
        None, type=positive_int, help="early-prediction layer (20; smollm2: 15)"
    )


TRADEOFF_D_HELP = "model layers (40, Vicuna-13B; smollm2: 30)"
"""``ppd tradeoff``'s help of ``--d`` (``ModelParameters.d``)."""


@dataclass(frozen=True, kw_only=True)
class OutputSettings(Settings):
    """What a command prints (``json``) or where it writes (``out``; None: its default)."""

    GROUP = "output"

    json: bool = option(False, action="store_true", help="print JSON records, not a table")
    out: str | None = option(None, type=output_dir, help=f"output folder ({DEFAULT_OUT})")


__all__ = [
    "DEFAULT_ELL",
    "DEFAULT_OUT",
    "LayerSeconds",
    "ModelGrid",
    "ModelParameters",
    "OutputSettings",
    "TradeoffTable",
    "parse_paper_positions",
    "several",
]
