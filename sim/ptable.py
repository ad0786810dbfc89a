"""p-tables: p_correct per workload, early-prediction layer, k and head, for the planner.

A p-table is a tidy DataFrame with columns ``workload`` (a dataset or prompt category),
``layer`` (1-based, of a model with ``d`` layers), ``k``, ``head`` (``shared``: the model's own
LM head on layer d_bar, the logit lens; ``trained``, ``translator``, ...) and ``p_correct``.
``PTable.paper()`` is the paper's Table 2 (Vicuna-13B, d = 40; its ``trained`` column becomes
head ``trained`` / ``shared``); ``PTable.from_frame`` accepts the same shape with the columns
``dataset`` or ``category`` for the workload and ``trained`` for the head (a measured atlas),
and ``PTable.read`` a CSV or Parquet file of it. ``PTable.from_traces`` derives p per
(d_bar, k, head) from measured m_t sequences, and ``PTable.from_run`` reads the output folder
of ``ppd measure match-rate`` or ``ppd validate`` (or a ``traces.jsonl``) that way, with the
model the folder names.

A table may say how many predictable tokens each p was measured over (column ``n_tokens``):
``PTable.grid_draws`` then draws p from Jeffreys' posterior (``ppdmodel.intervals.p_draws``),
the planner's p spread. ``model`` names the model a table was measured on ("" when unknown),
so a planner can refuse to recommend for one model from another's rates (``same_model``).

``PTable.grid`` evaluates p at every layer 0..d of a model (which may have another depth:
layers map by relative depth, layer / d) and every k up to the largest measured, linearly in
relative depth between measured layers, with p = 0 at depth 0 and p = 1 at depth 1 (the last
layer's prediction is the final one), and linearly in k between measured k (never beyond).

What p rests on (``PTable.bounds``, ``PTable.p_draws``): a layer nobody measured lies anywhere
between its measured neighbours (the bracket; a layer beyond the deepest measured one between
it and p = 1), and a table of another model (``borrowed``) says little about this one: its p
widens to the range that every reference table (``REFERENCE_TABLES``: the paper's Table 2 and
the shipped atlases) gives at the same relative depth, head kind and k, for the same workload
family (``WORKLOAD_FAMILIES``) where a reference has it. ``p_draws`` draws p uniformly inside
those bounds (one position per draw, workload and head, shared by every layer and k) plus,
for this model's own table, p's sampling error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from numbers import Real
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel import paper
from ppdmodel.intervals import MAX_DRAWS, p_draws
from ppdmodel.validation import (
    as_int,
    as_path,
    as_real_array,
    check_columns,
    check_input_file,
    check_instance,
    check_names,
    is_finite,
)
from sim.formats import MatchTrace, read_traces

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
N_COLUMN = "n_tokens"
"""The column holding the predictable tokens behind each p_correct (optional)."""
PAPER_MODEL = "vicuna-13b"
"""The model of the paper's Table 2."""
RUN_SIDECARS = ("run.json", "profile.json")
"""Files of an output folder that name its model: ``ppd measure match-rate``'s and ``ppd
validate``'s ``run.json`` (key ``model``), a profile ``ppd validate`` measured (``model.name``)."""
TRACES = "traces.jsonl"
"""The traces file of a match-rate or validate folder."""
REFERENCE_TABLES = ("paper", "smollm2")
"""Built-in tables whose p, at a relative depth, spans the prior of a borrowed p-table."""
WORKLOAD_FAMILIES = {
    "qa": ("squad", "qa", "question_answering", "questions"),
    "summarization": ("cnn/dm", "cnndm", "summarization", "summary"),
    "translation": ("wmt", "translation"),
    "math": ("math_reasoning", "math", "gsm8k"),
    "conversation": ("multi-turn conversation", "multi_turn_conversation", "chat", "mt_bench",
                     "conversation"),
    "rag": ("rag", "retrieval"),
}  # fmt: skip
"""Workload names that measure the same kind of text (Spec-Bench's categories, the paper's
data sets), for the prior of a borrowed table."""


def workload_family(name: str) -> str:
    """The family of a workload name (``WORKLOAD_FAMILIES``), or the name itself in lower case."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a workload name (str), got {name!r:.60}")
    key = name.strip().lower()
    for family, names in WORKLOAD_FAMILIES.items():
        if key == family or key in names:
            return family
    return key


@dataclass(frozen=True)
class PTable:
    """p_correct per (workload, head, layer, k) measured on a model with ``d`` layers."""

    df: pd.DataFrame
    """Columns ``COLUMNS`` (plus any others, kept as they are)."""
    d: int
    """Layers of the model the table was measured on."""
    name: str = "p-table"
    """Where it came from (for reports)."""
    model: str = ""
    """The model it was measured on ("": unknown)."""

    def __post_init__(self) -> None:
        check_columns("p-table df", self.df, ())
        if not isinstance(self.model, str):
            raise ValueError(f"p-table: model must be a name (str), got {self.model!r:.60}")
        missing = [c for c in COLUMNS if c not in self.df.columns]
        if missing:
            raise ValueError(f"p-table: missing columns {missing}; needs {list(COLUMNS)}")
        d = self.d
        if isinstance(d, bool) or not isinstance(d, Real) or not is_finite(d) or d != int(d) or (
                d < 2):  # fmt: skip
            raise ValueError(f"p-table: d must be an integer >= 2, got {self.d!r:.60}")
        p, layers, ks = (as_real_array(f"p-table column {c}", self.df[c].to_numpy())
                         for c in ("p_correct", "layer", "k"))  # fmt: skip
        if not np.all((p >= 0) & (p <= 1)):
            raise ValueError("p-table: p_correct must lie in [0, 1] (undefined rates dropped)")
        if np.any(layers < 1) or np.any(layers > self.d) or np.any(ks < 1):
            raise ValueError(f"p-table: layers must be in [1, d={self.d}] and k >= 1")

    @classmethod
    def paper(cls) -> PTable:
        """The paper's Table 2 (Vicuna-13B, d = 40), heads ``shared`` and ``trained``."""
        table = cls.from_frame(paper.TABLE2, d=paper.MODEL_LAYERS, name="paper Table 2")
        return replace(table, model=PAPER_MODEL)

    @classmethod
    def builtin(cls, name: str) -> PTable:
        """A built-in table: ``paper`` (Table 2) or a shipped atlas (``ppdmodel.ptables``)."""
        check_instance("name", name, str)
        if name == "paper":
            return cls.paper()
        if builtin_tables is None:
            raise ValueError(f"table {name!r}: this install ships Table 2 ('paper') only")
        df = builtin_tables.load(name)
        table = cls.from_frame(df, d=int(df["d"].iloc[0]), name=f"{name} atlas")
        return replace(table, model=name)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, *, d: int, name: str = "p-table") -> PTable:
        """Normalise a Table-2-shaped frame: ``dataset``/``category``/``prompt_set`` -> workload,
        ``trained`` (bool) -> head ``trained``/``shared``, ``p`` -> p_correct; rows with
        undefined p dropped; a single-valued ``model`` column names the model."""
        check_columns("df", df, ())
        d = as_int("d", d, minimum=2)
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
        model = ""
        if "model" in df.columns and df["model"].nunique() == 1:
            model = str(df["model"].iloc[0])
        return cls(df.reset_index(drop=True), d, name, model)

    @classmethod
    def read(cls, path: str | Path, *, d: int | None = None) -> PTable:
        """A CSV or Parquet p-table; ``d`` from the argument or a ``d`` column."""
        path = check_input_file("p-table path", path)
        if d is not None:
            d = as_int("d", d, minimum=2)
        try:
            df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
        except (ValueError, OSError, ImportError, UnicodeDecodeError) as exc:
            raise ValueError(f"p-table path {str(path)!r}: not a readable table ({exc})") from None
        if d is None:
            if "d" not in df.columns or df["d"].nunique() != 1:
                raise ValueError("p-table: give d (the model's layers) or a single-valued d column")
            d = int(df["d"].iloc[0])
        return cls.from_frame(df, d=d, name=path.name)

    @classmethod
    def from_traces(cls, traces: Sequence[MatchTrace], *, workload: str = "measured",
                    name: str = "traces", model: str = "") -> PTable:  # fmt: skip
        """p per (head, d_bar, k) from measured m_t: matches / predictable tokens over the
        sequences (each sequence counted once: repeated rounds, backends and placements of a
        validation replay the same m_t), with ``n_tokens``; the traces must share one d."""
        if isinstance(traces, str | bytes) or not isinstance(traces, Sequence) or not traces:
            raise ValueError("traces must be a non-empty sequence of MatchTrace")
        if not all(isinstance(t, MatchTrace) for t in traces):
            raise ValueError("traces must hold sim.formats.MatchTrace values")
        if not isinstance(workload, str) or not workload:
            raise ValueError(f"workload must be a non-empty name, got {workload!r:.60}")
        depths = {t.d for t in traces}
        if len(depths) != 1:
            raise ValueError(f"traces must come from one model, got depths d = {sorted(depths)}")
        seen: dict[tuple, list[int]] = {}
        for t in traces:
            seen.setdefault((t.head, t.d_bar, t.k, t.sequence), t.m)
        rows: dict[tuple, list[int]] = {}
        for (head, d_bar, k, _), m in seen.items():
            counts = rows.setdefault((head, d_bar, k), [0, 0])
            counts[0] += sum(m)
            counts[1] += len(m)
        df = pd.DataFrame(
            [(workload, head, d_bar, k, hits / n, n) for (head, d_bar, k), (hits, n)
             in rows.items() if n],
            columns=[*COLUMNS, N_COLUMN],
        )  # fmt: skip
        if df.empty:
            raise ValueError("traces: no predictable token (every m_t sequence is empty)")
        return cls(df, depths.pop(), name, model)

    @classmethod
    def from_run(cls, path: str | Path) -> PTable:
        """The p-table of a ``ppd measure match-rate`` or ``ppd validate`` output folder (or
        its ``traces.jsonl``): ``from_traces`` of its traces, the workload named after the
        prompts file and the model after the folder's ``RUN_SIDECARS`` ("" if none)."""
        path = as_path("path", path)
        traces_path = path / TRACES if path.is_dir() else path
        if not traces_path.is_file():
            raise ValueError(f"p-table path {str(path)!r}: no {TRACES} there (give a ppd measure "
                             "match-rate or ppd validate output folder)")  # fmt: skip
        meta = run_metadata(traces_path.parent)
        prompts = meta.get("prompts") or ""
        workload = Path(prompts).stem if prompts else "measured"
        name = str(path if path.is_dir() else traces_path)
        return cls.from_traces(read_traces(traces_path), workload=workload, name=name,
                               model=str(meta.get("model") or ""))  # fmt: skip

    def grid_draws(self, d_model: int, workloads=None, heads=None, *, draws: int,
                   seed: int = 0) -> np.ndarray | None:  # fmt: skip
        """[draws, w, h, layer, k] draws of ``grid``: each cell's p drawn from its ``n_tokens``
        (interpolated as p is, but held beyond the deepest measured layer; Jeffreys' posterior,
        ``p_draws``; a cell without n, or a row without it counted as 0, keeps its p); None
        when the table gives no n."""
        draws = as_int("draws", draws, limit=MAX_DRAWS)
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r:.60}")
        if N_COLUMN not in self.df.columns or not pd.to_numeric(
                self.df[N_COLUMN], errors="coerce").gt(0).any():  # fmt: skip
            return None
        p = self.grid(d_model, workloads, heads)
        df = self.df.assign(**{N_COLUMN: pd.to_numeric(self.df[N_COLUMN], errors="coerce")
                               .fillna(0)})  # fmt: skip
        deepest = df.sort_values("layer").groupby(["workload", "head", "k"]).tail(1)
        df = pd.concat([df, deepest.assign(layer=self.d)], ignore_index=True)  # n holds on top
        n = replace(self, df=df).grid(d_model, workloads, heads, column=N_COLUMN)
        out = np.repeat(p[None], draws, axis=0)
        for i, cell in enumerate(zip(*np.nonzero(np.isfinite(p) & (n >= 1)), strict=True)):
            out[(slice(None), *cell)] = p_draws(p=float(p[cell]), n=int(n[cell]), draws=draws,
                                                seed=int(seed) + i)  # fmt: skip
        return out

    def bounds(self, d_model: int, workloads=None, heads=None, *,
               borrowed: bool = False) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """(low, high) of p at every cell of ``grid``: the bracket of measured neighbours
        around each layer nobody measured, widened for a ``borrowed`` table to the reference
        tables' p at the same relative depth, head and k (module docstring)."""
        if not isinstance(borrowed, bool):
            raise ValueError(f"borrowed must be True or False, got {borrowed!r:.60}")
        d_model = as_int("d_model", d_model, limit=MAX_D_MODEL)
        workloads = self.workloads if workloads is None else check_names("workloads", workloads)
        heads = self.heads if heads is None else check_names("heads", heads)
        self.grid(d_model, workloads, heads)  # the same checks as the nominal grid
        depth = np.arange(d_model + 1) / d_model
        low = np.full((len(workloads), len(heads), d_model + 1, self.max_k + 1), np.nan)
        high = low.copy()
        for i, w in enumerate(workloads):
            for j, h in enumerate(heads):
                low[i, j], high[i, j] = self._bracket(w, h, depth)
        if borrowed:
            for ref in _references():
                for i, w in enumerate(workloads):
                    for j, h in enumerate(heads):
                        values = ref.nominal_at(w, h, d_model, self.max_k)
                        if values is not None:
                            low[i, j] = np.fmin(low[i, j], values.min(axis=0))
                            high[i, j] = np.fmax(high[i, j], values.max(axis=0))
        return low, high

    def nominal_at(self, workload: str, head: str, d_model: int, max_k: int):
        """This table's p for ``workload``'s family (every workload of it; all workloads where
        none is of that family) and ``head``, on a ``d_model``-layer model and k up to ``max_k``
        (k beyond this table's largest held at it): [workloads, layer, k]; None without that
        head."""
        if not isinstance(workload, str):
            raise ValueError(f"workload must be a workload name (str), got {workload!r:.60}")
        if not isinstance(head, str):
            raise ValueError(f"head must be a head name (str), got {head!r:.60}")
        d_model = as_int("d_model", d_model, limit=MAX_D_MODEL)
        max_k = as_int("max_k", max_k, limit=10**4)
        if head not in self.heads:
            return None
        family = workload_family(workload)
        same = [w for w in self.workloads if workload_family(w) == family]
        grid = self.grid(d_model, same or None, (head,))[:, 0]
        out = np.full((grid.shape[0], d_model + 1, max_k + 1), np.nan)
        top = min(max_k, self.max_k)
        out[..., 1 : top + 1] = grid[..., 1 : top + 1]
        out[..., top + 1 :] = grid[..., top : top + 1]
        return out

    def p_draws(self, d_model: int, workloads=None, heads=None, *, draws: int, seed: int = 0,
                borrowed: bool = False, bounds=None) -> np.ndarray | None:  # fmt: skip
        """[draws, w, h, layer, k] draws of p inside ``bounds`` (uniform, one position per
        draw, workload and head), plus p's sampling error (``grid_draws``) where the table is
        this model's; None when nothing spreads (every cell measured, no n). ``bounds``:
        ``self.bounds(...)``'s result when the caller has it already."""
        draws = as_int("draws", draws, limit=MAX_DRAWS)
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r:.60}")
        nominal = self.grid(d_model, workloads, heads)
        if bounds is None:
            bounds = self.bounds(d_model, workloads, heads, borrowed=borrowed)
        ok = isinstance(bounds, tuple) and len(bounds) == 2
        if not ok or not all(isinstance(b, np.ndarray) and b.shape == nominal.shape
                             for b in bounds):  # fmt: skip
            raise ValueError(f"bounds must be (low, high) arrays of shape {nominal.shape} (the "
                             f"bounds method's), got {type(bounds).__name__}")  # fmt: skip
        low, high = bounds
        sampled = None if borrowed else self.grid_draws(d_model, workloads, heads, draws=draws,
                                                        seed=seed)  # fmt: skip
        width = np.nan_to_num(high - low)
        if sampled is None and not (width > 0).any():
            return None
        rng = np.random.default_rng([int(seed), 0x9E37])
        u = rng.uniform(size=(draws, *nominal.shape[:2], 1, 1))
        out = low[None] + u * width[None]
        if sampled is not None:
            out = out + (sampled - nominal[None])
        return np.clip(out, 0.0, 1.0)

    def _bracket(self, workload: str, head: str, depth: np.ndarray):
        """(low, high) [layer, k]: a measured layer's own p; between two measured layers (p = 0
        at depth 0, p = 1 at the last layer unless measured) the smaller and larger of the two;
        an unmeasured k between the lower k's low and the upper k's high."""
        rows = self.df[(self.df["workload"] == workload) & (self.df["head"] == head)]
        rates = rows.dropna(subset=["p_correct"]).groupby(["k", "layer"])["p_correct"].mean()
        measured_k = np.array(sorted(rates.index.get_level_values("k").unique()))
        lows, highs = [], []
        for k in measured_k:
            series = rates.loc[k]
            layers = series.index.to_numpy()
            top = [] if layers.max() == self.d else [1.0]
            x = np.concatenate([[0.0], layers / self.d, top])
            y = np.concatenate([[0.0], series.to_numpy(), top])
            exact = np.isclose(depth[:, None], x[None, :], rtol=0, atol=1e-9)
            right = np.clip(np.searchsorted(x, depth, side="right"), 1, len(x) - 1)
            left = right - 1
            lo = np.minimum(y[left], y[right])
            hi = np.maximum(y[left], y[right])
            hit = exact.any(axis=1)
            at = y[exact.argmax(axis=1)]
            lows.append(np.where(hit, at, lo))
            highs.append(np.where(hit, at, hi))
        low = np.full((depth.size, self.max_k + 1), np.nan)
        high = low.copy()
        for k in range(int(measured_k.min()), int(measured_k.max()) + 1):
            hi_i = int(np.searchsorted(measured_k, k))
            lo_i = hi_i if measured_k[hi_i] == k else hi_i - 1
            low[:, k], high[:, k] = lows[lo_i], highs[hi_i]
        return low, high

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
        if not isinstance(column, str) or column not in self.df.columns:
            raise ValueError(f"column must name a column of the p-table, got {column!r:.60}")
        workloads = self.workloads if workloads is None else check_names("workloads", workloads)
        heads = self.heads if heads is None else check_names("heads", heads)
        for label, wanted, known in (("workloads", workloads, self.workloads),
                                     ("heads", heads, self.heads)):  # fmt: skip
            unknown = sorted(set(wanted) - set(known))
            if unknown:
                raise ValueError(f"{label} holds an unknown {label[:-1]} {unknown}; the p-table "
                                 f"has {sorted(known)}")  # fmt: skip
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


@cache
def _references() -> tuple[PTable, ...]:
    """The built-in tables of ``REFERENCE_TABLES`` this install ships."""
    out = []
    for name in REFERENCE_TABLES:
        try:
            out.append(PTable.builtin(name))
        except ValueError:  # pragma: no cover - an install without the atlases
            continue
    return tuple(out)


def p_origin(table: PTable, model: str | None) -> str:
    """Whose p ``table`` holds for the planned ``model``: ``own`` (both named, the same
    model), ``other`` (another named model), ``unknown`` (either is not named: treated as
    borrowed)."""
    check_instance("table", table, PTable)
    if model is not None and not isinstance(model, str):
        raise ValueError(f"model must be a model name or None, got {model!r:.60}")
    if not model or not table.model:
        return "unknown"
    return "own" if same_model(table.model, model) else "other"


def run_metadata(directory: str | Path) -> dict:
    """What an output folder says about its run: ``model`` and ``prompts`` from its
    ``run.json`` (match-rate, validate) or the model of a ``profile.json`` it holds; {} if none."""
    directory = as_path("directory", directory)
    for sidecar in RUN_SIDECARS:
        path = directory / sidecar
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"p-table: {path} is not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise ValueError(f"p-table: {path} must hold a JSON object")
        model = data.get("model")
        if isinstance(model, dict):  # a cost profile
            model = model.get("name")
        return {
            "model": model if isinstance(model, str) else "",
            "prompts": data.get("prompts") if isinstance(data.get("prompts"), str) else "",
        }
    return {}


def model_key(name) -> str:
    """A model name or path reduced to what identifies it: its last path part, lower case."""
    if not isinstance(name, str | Path):
        raise ValueError(f"name must be a model name or path, got {name!r:.60}")
    return Path(str(name).rstrip("/\\")).name.lower()


def same_model(a, b) -> bool:
    """True when two model names (or paths) name the same model (``model_key``), or either
    is unknown ("")."""
    for label, value in (("a", a), ("b", b)):
        if not isinstance(value, str | Path):
            raise ValueError(f"{label} must be a model name or path, got {value!r:.60}")
    key_a, key_b = model_key(a), model_key(b)
    return not key_a or not key_b or key_a == key_b
