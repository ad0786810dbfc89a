"""``ppd latency | compute | tradeoff``: evaluate the closed form and redraw Figures 3 and 4.

``latency`` and ``compute`` also take the cost terms of ``ppdmodel.DecodeCosts`` (flags, or a
profile file from ``ppd measure profile`` via ``--costs``; this project's extension) and then
print PPD vs greedy seconds per token, the speed-up and the break-even p, and with
``--waterfall`` where PPD's time per token goes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import textwrap
from pathlib import Path

from ppdmodel.cli_args import (
    DEFAULT_D,
    default_d_bar,
    nonnegative_float,
    output_dir,
    positive_int,
    probability,
)
from ppdmodel.cli_costs import CostTerms, add_cost_args, format_waterfall, with_costs

DEFAULT_OUT = "ppd-out"
"""Where ``ppd tradeoff`` writes its figures and CSV unless --out says otherwise."""


def _add_model_args(parser: argparse.ArgumentParser, with_k: bool) -> None:
    """Options shared by ``latency`` and ``compute``; each accepts several values (a grid)."""
    many = {"action": "extend", "nargs": "+"}
    parser.add_argument(
        "--d", type=positive_int, default=None, help=f"layers (default {DEFAULT_D})", **many
    )
    parser.add_argument(
        "--d-bar",
        type=positive_int,
        default=None,
        help="early-prediction layer (default: the smallest layer >= d/2)",
        **many,
    )
    parser.add_argument(
        "--ell", type=positive_int, default=None, help="tokens (default 128)", **many
    )
    parser.add_argument("--p", type=probability, default=None, help="match rate p_correct", **many)
    parser.add_argument(
        "--paper-positions",
        metavar="DATASET:K:TRAINED:LAYER",
        default=None,
        help="use the paper's per-position p_t (Tables 6-8) instead of --p, e.g. squad:3:Y:20; "
        "ell, d_bar and k default to the table's (16 or 128, the layer, K); a smaller --ell "
        "uses the first ell - 1 values",
    )
    if with_k:
        parser.add_argument(
            "--k", type=positive_int, default=None, help="candidates (default 1)", **many
        )
    parser.add_argument("--json", action="store_true", help="print JSON records, not a table")


def register(subparsers) -> None:
    """Add the ``latency``, ``compute`` and ``tradeoff`` sub-commands."""
    latency = subparsers.add_parser(
        "latency", help="expected PPD latency (Theorem 4.1), its exact law and ell->inf figure"
    )
    _add_model_args(latency, with_k=False)
    latency.add_argument(
        "--seconds-per-layer", type=nonnegative_float, default=None, help="also report seconds"
    )
    latency.add_argument("--per-token-overhead-s", type=nonnegative_float, default=0.0)
    latency.add_argument("--per-handoff-overhead-s", type=nonnegative_float, default=0.0)
    add_cost_args(latency, with_k=False)
    latency.set_defaults(func=run_latency)

    compute = subparsers.add_parser(
        "compute", help="expected PPD compute (Theorem 4.1) and ell->inf per-token figures"
    )
    _add_model_args(compute, with_k=True)
    add_cost_args(compute, with_k=True)
    compute.set_defaults(func=run_compute)

    tradeoff = subparsers.add_parser(
        "tradeoff", help="redraw the paper's Figures 3 and 4 from its Table 2 (PNG + CSV)"
    )
    tradeoff.add_argument(
        "--out", type=output_dir, default=DEFAULT_OUT, help=f"output folder ({DEFAULT_OUT})"
    )
    tradeoff.add_argument(
        "--table",
        default="paper",
        choices=("paper", "smollm2"),
        help="p_correct table: paper (Vicuna-13B, Table 2; default) or smollm2 (the measured "
        "SmolLM2-135M-Instruct atlas shipped with the package, translator as trained head)",
    )
    tradeoff.add_argument(
        "--layer", type=positive_int, default=None, help="early-prediction layer (20; smollm2: 15)"
    )
    tradeoff.add_argument(
        "--d", type=positive_int, default=None, help="model layers (40, Vicuna-13B; smollm2: 30)"
    )
    tradeoff.set_defaults(func=run_tradeoff)


def _paper_positions(spec: str):
    """'squad:3:Y:20' -> (label, per-position p_t, ell, layer) from the paper's Tables 6-8."""
    from ppdmodel import paper

    parts = spec.split(":")
    if len(parts) != 4 or parts[2].upper() not in ("Y", "N") or not parts[1].isdigit():
        raise ValueError(f"--paper-positions must look like squad:3:Y:20, got {spec!r}")
    if not parts[3].isdigit():
        raise ValueError(f"--paper-positions layer must be one of {paper.LAYERS}, got {spec!r}")
    dataset, k, trained, layer = parts[0], int(parts[1]), parts[2].upper() == "Y", int(parts[3])
    p_t = paper.per_position_p(dataset=dataset, k=k, trained=trained, layer=layer)
    return f"Tables 6-8 {spec}", p_t, p_t.size + 1, layer, k


def _grid(args, with_k: bool):
    """All parameter combinations given on the command line, as keyword dicts."""
    ds = args.d or [getattr(args, "profile_d", None) or DEFAULT_D]
    d_bars = args.d_bar or [None]
    ells = args.ell or [128]
    ks = (args.k or [1]) if with_k else [None]
    p_values = args.p
    if args.paper_positions and p_values:
        raise ValueError("give --p or --paper-positions, not both (--paper-positions sets p)")
    if args.paper_positions:
        label, p_t, table_ell, layer, table_k = _paper_positions(args.paper_positions)
        p_values, ells, d_bars = [(label, p_t)], args.ell or [table_ell], args.d_bar or [layer]
        ks = (args.k or [table_k]) if with_k else [None]
        bad = [ell for ell in ells if not 2 <= ell <= table_ell]
        if bad:
            raise ValueError(
                f"ell must be in [2, {table_ell}] with --paper-positions {args.paper_positions}"
                f" (the table covers {table_ell} tokens), got {bad[0]}"
            )
    elif not p_values:
        raise ValueError("give --p (one or more match rates) or --paper-positions")
    for d, d_bar, ell, p, k in itertools.product(ds, d_bars, ells, p_values, ks):
        if isinstance(p, tuple):  # per-position: p_t for t = 2..ell
            p = (p[0], p[1][: ell - 1])
        d_bar = default_d_bar(d) if d_bar is None else d_bar
        yield {"d": d, "d_bar": d_bar, "ell": ell, "p": p, **({"k": k} if with_k else {})}


def _describe_p(row: dict, params: dict) -> dict:
    """Replace a per-position (label, p_t) by its label and the mean p_t, for printing."""
    if isinstance(params["p"], tuple):
        row["p"], p_t = params["p"]
        row["p_mean"] = float(p_t.mean())
        params["p"] = p_t
    return row


def latency_row(params: dict, seconds: dict | None) -> dict:
    """One output row of ``ppd latency``."""
    import ppdmodel

    row = _describe_p(dict(params), params)
    law = ppdmodel.latency_distribution(**params)
    row["expected_latency"] = ppdmodel.expected_latency(**params)
    row["normalized_latency"] = row["expected_latency"] / (params["d"] * params["ell"])
    row["std"] = law.std
    row["p50"] = law.p50
    row["p99"] = law.p99
    row["latency_per_token_inf"] = ppdmodel.latency_per_token(
        d=params["d"], d_bar=params["d_bar"], p=row.get("p_mean", params["p"])
    )
    row["normalized_per_token_inf"] = row["latency_per_token_inf"] / params["d"]
    if seconds is not None:
        row["expected_latency_s"] = ppdmodel.expected_latency_seconds(**params, **seconds)
    return row


def compute_row(params: dict) -> dict:
    """One output row of ``ppd compute``."""
    import ppdmodel

    row = _describe_p(dict(params), params)
    theorem = {key: params[key] for key in ("d", "d_bar", "ell", "p")}
    limit = {key: params[key] for key in ("d", "d_bar", "k")}
    limit["p"] = row.get("p_mean", params["p"])
    row["expected_latency"] = ppdmodel.expected_latency(**theorem)
    row["expected_compute"] = ppdmodel.expected_compute(**params)
    row["compute_ratio"] = row["expected_compute"] / row["expected_latency"]
    row["compute_per_time_inf"] = ppdmodel.compute_per_time(**limit)
    row["compute_per_token_inf"] = ppdmodel.compute_per_token(**limit)
    return row


def _finite_or_none(row: dict) -> dict:
    """``row`` with non-finite floats replaced by None."""
    return {
        key: None if isinstance(v, float) and not math.isfinite(v) else v for key, v in row.items()
    }


LATENCY_LEGEND = (
    "normalized_latency: E[T] / (d ell) at the given ell (greedy decoding = 1); "
    "latency_per_token_inf: E[T] / ell as ell -> infinity, in layer units; "
    "normalized_per_token_inf: the same over d (Theorem 4.1: 1 - p (d - d_bar) / d)"
)
"""What the columns of ``ppd latency`` that look alike mean (printed under the table)."""


def _print_rows(rows: list[dict], as_json: bool, legend: str | None = None) -> None:
    """Print rows as JSON records or as an aligned table (with ``legend`` under it)."""
    if as_json:  # strict JSON: an unreachable break-even p (inf) is null
        print(json.dumps([_finite_or_none(row) for row in rows], indent=2, allow_nan=False))
        return
    import pandas as pd

    table = [{k: v for k, v in row.items() if k != "waterfall_s"} for row in rows]
    print(pd.DataFrame(table).to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    if legend:
        print(textwrap.fill(legend, width=100))
    for row in rows:
        if "waterfall_s" in row:
            print()
            print(format_waterfall(row))


def run_latency(args) -> int:
    """Handler of ``ppd latency``."""
    terms = CostTerms.from_args(args)
    seconds = None
    if args.seconds_per_layer is not None:
        if terms is not None:
            raise ValueError(
                "give either --seconds-per-layer (and the two overheads) or the cost terms "
                "(--costs, --layer-s, ...), not both"
            )
        seconds = {
            "seconds_per_layer": args.seconds_per_layer,
            "per_token_overhead_s": args.per_token_overhead_s,
            "per_handoff_overhead_s": args.per_handoff_overhead_s,
        }
    if args.k is not None and terms is None:
        raise ValueError("--k of ppd latency applies to the cost terms: give --costs or a flag")
    pairs = []
    for params in _grid(args, with_k=False):
        for k in args.k or [None]:
            row = latency_row(params, seconds)
            if k is not None:  # k right after the paper's symbols, before the figures
                keys = list(row)
                at = keys.index("p") + 1
                row = {**{x: row[x] for x in keys[:at]}, "k": k, **{x: row[x] for x in keys[at:]}}
            pairs.append((row, {**params, **({"k": k} if k else {})}))
    _print_rows(with_costs(pairs, terms), args.json, LATENCY_LEGEND)
    return 0


def run_compute(args) -> int:
    """Handler of ``ppd compute``."""
    terms = CostTerms.from_args(args)
    pairs = [(compute_row(params), params) for params in _grid(args, with_k=True)]
    _print_rows(with_costs(pairs, terms), args.json)
    return 0


def _endpoint(curves, column: str, pick: str) -> str:
    """'0.629 (SQuAD+tr, k=5)' for the row where ``column`` is smallest/largest."""
    from ppdmodel.tradeoff import curve_label

    row = curves.loc[getattr(curves[column], pick)()]
    return f"{row[column]:.3f} ({curve_label(row['dataset'], row['trained'])}, k={row['k']})"


def run_tradeoff(args) -> int:
    """Handler of ``ppd tradeoff``: write fig3/fig4 PNGs and the curves CSV, print endpoints."""
    import matplotlib

    matplotlib.use("Agg")
    from ppdmodel.tradeoff import plot_tradeoff, tradeoff_curves

    table, source = None, "the paper's Table 2"
    if args.table != "paper":
        from ppdmodel import ptables

        table, source = ptables.table2_view(args.table), f"the built-in {args.table} atlas"
    d = args.d if args.d is not None else (40 if table is None else int(table["d"].iloc[0]))
    layer = args.layer if args.layer is not None else (20 if table is None else default_d_bar(d))
    curves = tradeoff_curves(layer=layer, d=d, table=table)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out must be a folder (new or existing), got the file {out}")
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "csv": out / "tradeoff_curves.csv",
        "fig3": out / "fig3_latency_vs_compute_per_time.png",
        "fig4": out / "fig4_latency_vs_compute_per_token.png",
    }
    curves.to_csv(paths["csv"], index=False, float_format="%.6g")
    for figure in (3, 4):
        plot_tradeoff(curves, figure=figure).savefig(paths[f"fig{figure}"], dpi=120)
    print(f"PPD trade-off from {source}: layer {layer} of d={d}")
    lat = (_endpoint(curves, "normalized_latency", n) for n in ("idxmin", "idxmax"))
    cpt = (_endpoint(curves, "compute_per_time", n) for n in ("idxmin", "idxmax"))
    print("normalized latency per token: {} .. {}".format(*lat))
    print("compute per time unit:        {} .. {}".format(*cpt))
    for path in paths.values():
        print(f"wrote {path}")
    return 0
