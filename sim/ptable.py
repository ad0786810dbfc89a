"""p-tables: p_correct per workload, early-prediction layer, k and head, for the planner.

A p-table is a tidy DataFrame with columns ``workload`` (a dataset or prompt category),
``layer`` (1-based, of a model with ``d`` layers), ``k``, ``head`` (``shared``: the model's own
LM head on layer d_bar, the logit lens; ``trained``, ``translator``, ...) and ``p_correct``.
``PTable.paper()`` is the paper's Table 2 (Vicuna-13B, d = 40; its ``trained`` column becomes
head ``trained`` / ``shared``); ``PTable.from_frame`` accepts the same shape with the columns
``dataset`` or ``category`` for the workload and ``trained`` for the head (a measured atlas),
and ``PTable.read`` a CSV or Parquet file of it.

``PTable.grid`` evaluates p at every layer 0..d of a model (which may have another depth:
layers map by relative depth, layer / d) and every k up to the largest measured, linearly in
relative depth between measured layers, with p = 0 at depth 0 and p = 1 at depth 1 (the last
layer's prediction is the final one), and linearly in k between measured k (never beyond).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel import paper
from ppdmodel.validation import as_int, check_columns

try:  # built-in measured atlases (the SmolLM2 one), shipped with the package once they land
    from ppdmodel import ptables as builtin_tables
except ImportError:  # pragma: no cover - an install without them has Table 2 only
    builtin_tables = None

COLUMNS = ("workload", "head", "layer", "k", "p_correct")
"""Columns of a normalised p-table."""
MAX_D_MODEL = 10**5
"""Largest model depth a p-table is mapped to (layers)."""
LOWER_BOUND_COLUMNS = ("boot_low", "wilson_low", "p_low")
"""Columns that may hold the lower end of a 95 % interval of p_correct (first present wins:
the bootstrap over prompts respects correlation within a sequence, Wilson does not)."""


@dataclass(frozen=True)
class PTable:
    """p_correct per (workload, head, layer, k) measured on a model with ``d`` layers."""

    df: pd.DataFrame
    """Columns ``COLUMNS`` (plus any others, kept as they are)."""
    d: int
    """Layers of the model the table was measured on."""
    name: str = "p-table"
    """Where it came from (for reports)."""

    def __post_init__(self) -> None:
        check_columns("p-table df", self.df, ())
        missing = [c for c in COLUMNS if c not in self.df.columns]
        if missing:
            raise ValueError(f"p-table: missing columns {missing}; needs {list(COLUMNS)}")
        if isinstance(self.d, bool) or int(self.d) != self.d or self.d < 2:
            raise ValueError(f"p-table: d must be an integer >= 2, got {self.d!r}")
        p = self.df["p_correct"].to_numpy(dtype=float)
        if not np.all((p >= 0) & (p <= 1)):
            raise ValueError("p-table: p_correct must lie in [0, 1] (undefined rates dropped)")
        layers, ks = self.df["layer"].to_numpy(), self.df["k"].to_numpy()
        if np.any(layers < 1) or np.any(layers > self.d) or np.any(ks < 1):
            raise ValueError(f"p-table: layers must be in [1, d={self.d}] and k >= 1")

    @classmethod
    def paper(cls) -> PTable:
        """The paper's Table 2 (Vicuna-13B, d = 40), heads ``shared`` and ``trained``."""
        return cls.from_frame(paper.TABLE2, d=paper.MODEL_LAYERS, name="paper Table 2")

    @classmethod
    def builtin(cls, name: str) -> PTable:
        """A built-in table: ``paper`` (Table 2) or a shipped atlas (``ppdmodel.ptables``)."""
        if name == "paper":
            return cls.paper()
        if builtin_tables is None:
            raise ValueError(f"table {name!r}: this install ships Table 2 ('paper') only")
        df = builtin_tables.load(name)
        return cls.from_frame(df, d=int(df["d"].iloc[0]), name=f"{name} atlas")

    @classmethod
    def from_frame(cls, df: pd.DataFrame, *, d: int, name: str = "p-table") -> PTable:
        """Normalise a Table-2-shaped frame: ``dataset``/``category``/``prompt_set`` -> workload,
        ``trained`` (bool) -> head ``trained``/``shared``, ``p`` -> p_correct; rows with
        undefined p dropped."""
        check_columns("df", df, ())
        df = df.copy()
        for alias in ("dataset", "category", "prompt_set"):
            if "workload" not in df.columns and alias in df.columns:
                df = df.rename(columns={alias: "workload"})
        if "p_correct" not in df.columns and "p" in df.columns:
            df = df.rename(columns={"p": "p_correct"})
        if "head" not in df.columns and "trained" in df.columns:
            df["head"] = np.where(df["trained"].astype(bool), "trained", "shared")
        df = df.dropna(subset=[c for c in ("p_correct",) if c in df.columns])
        if "d" in df.columns:
            df = df.drop(columns="d")
        return cls(df.reset_index(drop=True), int(d), name)

    @classmethod
    def read(cls, path: str | Path, *, d: int | None = None) -> PTable:
        """A CSV or Parquet p-table; ``d`` from the argument or a ``d`` column."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"p-table: no such file {str(path)!r}")
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        if d is None:
            if "d" not in df.columns or df["d"].nunique() != 1:
                raise ValueError("p-table: give d (the model's layers) or a single-valued d column")
            d = int(df["d"].iloc[0])
        return cls.from_frame(df, d=d, name=path.name)

    @property
    def workloads(self) -> tuple[str, ...]:
        return tuple(pd.unique(self.df["workload"]))

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(pd.unique(self.df["head"]))

    @property
    def max_k(self) -> int:
        return int(self.df["k"].max())

    @property
    def lower_bound_column(self) -> str | None:
        """The column holding the lower end of p_correct's interval, if the table has one."""
        for column in LOWER_BOUND_COLUMNS:
            if column in self.df.columns and self.df[column].notna().any():
                return column
        return None

    def grid(self, d_model: int, workloads=None, heads=None, column="p_correct") -> np.ndarray:
        """p[w, h, layer, k] for layer 0..d_model and k 0..max_k (index = the value; k = 0 is
        unused and NaN), over ``workloads`` x ``heads`` (default: all), by interpolation;
        ``column``: p_correct, or an interval bound such as ``lower_bound_column``."""
        d_model = as_int("d_model", d_model, limit=MAX_D_MODEL)
        if column not in self.df.columns or isinstance(column, bool):
            raise ValueError(f"column must name a column of the p-table, got {column!r}")
        for label, names in (("workloads", workloads), ("heads", heads)):
            if names is not None and (
                isinstance(names, str)
                or not all(isinstance(n, str) for n in np.ravel(np.asarray(names, dtype=object)))
            ):
                raise ValueError(f"{label} must be a sequence of names, got {names!r:.80}")
        workloads = self.workloads if workloads is None else tuple(workloads)
        heads = self.heads if heads is None else tuple(heads)
        for label, wanted, known in (("workload", workloads, self.workloads),
                                     ("head", heads, self.heads)):  # fmt: skip
            unknown = sorted(set(wanted) - set(known))
            if unknown:
                raise ValueError(f"p-table: unknown {label} {unknown}; known {sorted(known)}")
        depth = np.arange(d_model + 1) / d_model
        out = np.full((len(workloads), len(heads), d_model + 1, self.max_k + 1), np.nan)
        for i, w in enumerate(workloads):
            for j, h in enumerate(heads):
                out[i, j] = self._interpolate(w, h, depth, column)
        return out

    def _interpolate(self, workload: str, head: str, depth: np.ndarray, column: str):
        rows = self.df[(self.df["workload"] == workload) & (self.df["head"] == head)]
        rows = rows.dropna(subset=[column])
        if rows.empty:
            raise ValueError(f"p-table: no {column} for workload {workload!r} with head {head!r}")
        rates = rows.groupby(["k", "layer"])[column].mean()
        measured_k = np.array(sorted(rates.index.get_level_values("k").unique()))
        by_k = np.empty((len(measured_k), depth.size))
        for n, k in enumerate(measured_k):
            series = rates.loc[k]
            layers = series.index.to_numpy()
            top = [] if layers.max() == self.d else [1.0]  # a measured last layer wins
            x = np.concatenate([[0.0], layers / self.d, top])
            y = np.concatenate([[0.0], series.to_numpy(), top])
            by_k[n] = np.interp(depth, x, y)
        out = np.full((depth.size, self.max_k + 1), np.nan)
        for k in range(int(measured_k.min()), int(measured_k.max()) + 1):
            hi = int(np.searchsorted(measured_k, k))
            if measured_k[hi] == k:
                out[:, k] = by_k[hi]
            else:
                lo, w = hi - 1, (k - measured_k[hi - 1]) / (measured_k[hi] - measured_k[hi - 1])
                out[:, k] = (1 - w) * by_k[lo] + w * by_k[hi]
        return out
