"""Built-in p_correct tables: the paper's Table 2 and measured atlases shipped with the package.

Every table comes in one schema (``COLUMNS``): prompt_set, head, layer, d, relative_depth, k,
n_tokens, p_correct and the 95 % intervals (bootstrap over prompts and Wilson; NaN where the
source gives none). Names:

* ``"paper"``: the paper's Table 2 (Vicuna-13B, d = 40; ``ppdmodel.paper.TABLE2``); heads
  "shared" (its N rows) and "trained" (its Y rows); no n or intervals;
* ``"smollm2"``: SmolLM2-135M-Instruct (d = 30) measured by ``ppd measure atlas`` on held-out
  Spec-Bench questions, heads "shared" (logit lens), "translator" and "trained" (full head);
  its provenance (command, model sha256, prompts, date, versions) is `provenance("smollm2")`.

Measured tables are package data (``ppdmodel/data/<name>_atlas.csv`` + ``.json``), read here
and nowhere else. `table2_view` gives any table the columns of ``paper.TABLE2`` (dataset, k,
trained, layer, p_correct), so ``tradeoff_curves(table=...)`` and the rest take it as Table 2.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

from ppdmodel.validation import as_int, check_choice, check_names

NAMES = ("paper", "smollm2")
"""Names of the built-in tables."""
COLUMNS = (
    "prompt_set",
    "head",
    "layer",
    "d",
    "relative_depth",
    "k",
    "n_tokens",
    "n_prompts",
    "matches",
    "p_correct",
    "wilson_low",
    "wilson_high",
    "boot_low",
    "boot_high",
)
"""Columns of every table returned by `load`."""
HEADS = ("shared", "translator", "trained")
"""Head names: the logit lens, the translator (tuned lens), the full per-layer head."""
DEFAULT_TRAINED_HEAD = {"paper": "trained", "smollm2": "translator"}
"""The head `table2_view` calls "trained" for each table."""


def _check_name(name: str) -> None:
    check_choice("name", name, NAMES)


@cache
def _load(name: str) -> pd.DataFrame:
    if name == "paper":
        from ppdmodel import paper

        t2 = paper.TABLE2
        out = pd.DataFrame(
            {
                "prompt_set": t2["dataset"],
                "head": np.where(t2["trained"], "trained", "shared"),
                "layer": t2["layer"],
                "d": paper.MODEL_LAYERS,
                "relative_depth": t2["layer"] / paper.MODEL_LAYERS,
                "k": t2["k"],
                "p_correct": t2["p_correct"],
            }
        )
        return out.reindex(columns=list(COLUMNS))
    with resources.files("ppdmodel").joinpath(f"data/{name}_atlas.csv").open("rb") as fh:
        table = pd.read_csv(fh)
    missing = set(COLUMNS) - set(table.columns)
    if missing:
        raise ValueError(f"built-in table {name!r} lacks columns {sorted(missing)}")
    return table[list(COLUMNS)]


def load(name: str = "smollm2") -> pd.DataFrame:
    """The built-in table ``name`` (one of ``NAMES``) in the common schema (a copy)."""
    _check_name(name)
    return _load(name).copy()


def provenance(name: str = "smollm2") -> dict:
    """How a measured table was made: command, model and prompts hashes, date, versions."""
    _check_name(name)
    if name == "paper":
        return {"source": "Yang et al., TMLR 2024, Table 2 (ppdmodel.paper.TABLE2)"}
    text = resources.files("ppdmodel").joinpath(f"data/{name}_atlas.json").read_text()
    return json.loads(text)


def p_correct(name: str = "smollm2", *, prompt_set: str, head: str, layer: int, k: int) -> float:
    """One rate of a built-in table, as a fraction (NaN if its n was 0)."""
    for label, value in (("prompt_set", prompt_set), ("head", head)):
        if not isinstance(value, str):
            raise ValueError(f"{label} must be a name, got {value!r:.60}")
    layer, k = as_int("layer", layer), as_int("k", k)
    table = load(name)
    rows = table[
        (table["prompt_set"] == prompt_set)
        & (table["head"] == head)
        & (table["layer"] == layer)
        & (table["k"] == k)
    ]
    if rows.empty:
        for column, value in (("prompt_set", prompt_set), ("head", head), ("layer", layer)):
            if value not in set(table[column]):
                allowed = sorted(set(table[column]), key=str)
                raise ValueError(f"{column} must be one of {allowed} in {name!r}, got {value!r}")
        raise ValueError(f"k must be one of {sorted(set(table['k']))} in {name!r}, got {k!r}")
    return float(rows["p_correct"].iloc[0])


def table2_view(
    name: str = "smollm2", *, trained_head: str | None = None, prompt_sets=None
) -> pd.DataFrame:
    """A table with ``paper.TABLE2``'s columns (dataset, k, trained, layer, p_correct) and d.

    ``trained`` is False for the logit lens ("shared") and True for ``trained_head`` (default:
    the paper's trained heads, the translator for smollm2); other heads are left out.
    prompt_sets: keep only these (default: all).
    """
    table = load(name)
    trained_head = DEFAULT_TRAINED_HEAD[name] if trained_head is None else trained_head
    if not isinstance(trained_head, str) or trained_head not in set(table["head"]) - {"shared"}:
        allowed = sorted(set(table["head"]) - {"shared"})
        raise ValueError(
            f"trained_head must be one of {allowed} for {name!r}, got {trained_head!r}"
        )
    if prompt_sets is not None:
        prompt_sets = check_names("prompt_sets", prompt_sets)
        unknown = sorted(set(prompt_sets) - set(table["prompt_set"]))
        if unknown:
            allowed = sorted(set(table["prompt_set"]))
            raise ValueError(f"prompt_sets must be among {allowed} for {name!r}, got {unknown}")
        table = table[table["prompt_set"].isin(list(prompt_sets))]
    rows = table[table["head"].isin(["shared", trained_head])]
    return pd.DataFrame(
        {
            "dataset": rows["prompt_set"],
            "k": rows["k"].astype(int),
            "trained": rows["head"] != "shared",
            "layer": rows["layer"].astype(int),
            "p_correct": rows["p_correct"],
            "d": rows["d"].astype(int),
        }
    ).reset_index(drop=True)


def model_layers(name: str = "smollm2") -> int:
    """d of the model behind a built-in table."""
    return int(load(name)["d"].iloc[0])
