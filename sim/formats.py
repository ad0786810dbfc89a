"""File formats shared by measure/ (writer) and sim/ (reader): per-layer times, match traces
and FREE tables.

Both formats are plain text so that a run on one machine can be replayed on another:

* **Per-layer times** (CSV, ``LAYER_TIMES_COLUMNS``), one row per measured component:

  ============  =====  ====================================================================
  column        type   meaning
  ============  =====  ====================================================================
  component     str    ``embed`` (token + position embedding), ``layer`` (one decoder layer),
                       ``head`` (final norm + LM head), ``token`` (one whole greedy decode
                       step, end to end)
  layer         int    decoder-layer index 0..d-1 for ``layer`` rows, -1 otherwise
  batch         int    rows decoded together (1 for greedy; k for batched candidates)
  seconds       float  mean wall-clock time of one decode step of this component, seconds
  std_seconds   float  sample standard deviation of that time, seconds
  n_samples     int    number of timed decode steps (warm-up excluded)
  ============  =====  ====================================================================

* **Match traces** (JSON Lines), one object per generated sequence::

      {"sequence": "squad-0", "d": 40, "d_bar": 20, "k": 3, "m": [1, 0, 1, ...],
       "head": "shared", "source": "match_rate", "tokens": [...], "events": [...]}

  ``m`` holds m_t for t = 2..ell (so ``len(m) == ell - 1``): 1 if the pass producing token t
  started from a handed-over candidate, i.e. the match at token position t - 1
  (``ppdmodel.positions`` states the rule). ``tokens``,
  ``head``, ``source`` and ``events`` are optional. ``events`` (real PPD runs only) lists
  timed layer blocks and hand-offs as objects with keys ``EVENT_KEYS``.

* **FREE tables** (CSV, ``FREE_TABLE_COLUMNS`` and optionally ``FREE_TABLE_OPTIONAL``), one
  row per exit layer and threshold FREE was measured at (``ppd validate --free`` and
  ``experiments/free_smollm2.py`` write ``free_table.csv``; ``ppd plan --free-table`` reads it):

  ==============  =====  ==================================================================
  column          type   meaning
  ==============  =====  ==================================================================
  exit_layer      int    L_s, the shallow model's layers (1 <= L_s < d of the planned model)
  threshold       float  exit threshold on the exit head's top probability (>= 0; above 1:
                         never exits)
  exit_rate       float  share of generated tokens that exited, in [0, 1] (the planner's
                         i.i.d. exit rate q)
  quality         float  output quality against greedy decoding's, in [0, 1] (1: the same)
  quality_metric  str    optional: what ``quality`` is (``rouge_l_vs_greedy``: ROUGE-L of the
                         output against greedy's; ``tokens_vs_greedy``: share of equal tokens)
  mode            str    optional: ``sync`` or ``copy`` (``measure.free``), for the label
  head            str    optional: the exit head, named as the p-table names heads (priced as
                         the planner prices that early head); default ``shared`` (logit lens)
  workload        str    optional: the workload it was measured on (empty: every workload)
  ==============  =====  ==================================================================
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel.validation import (
    MAX_EXACT_INT,
    as_int,
    check_columns,
    check_flag,
    check_input_file,
    check_instance,
    check_path,
    ndim,
)

_EXACT_FLOATS = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
"""read_csv options that read floats back exactly as written (pandas 3 does by default)."""

LAYER_TIMES_COLUMNS = ("component", "layer", "batch", "seconds", "std_seconds", "n_samples")
COMPONENTS = ("embed", "layer", "head", "token")
EVENT_KEYS = ("process", "token", "layer_start", "layer_end", "start_s", "end_s", "kind")
FREE_TABLE_COLUMNS = ("exit_layer", "threshold", "exit_rate", "quality")
FREE_TABLE_OPTIONAL = {"quality_metric": "", "mode": "sync", "head": "shared", "workload": ""}
"""Optional FREE-table columns and the value an absent column or an empty cell takes."""


def read_layer_times(path: str | Path) -> pd.DataFrame:
    """Read and validate a per-layer times CSV; returns a DataFrame with the schema columns."""
    check_input_file("path", path)
    df = pd.read_csv(path, **_EXACT_FLOATS)
    missing = [c for c in LAYER_TIMES_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"layer-times file {path}: missing columns {missing}")
    return validate_layer_times(df[list(LAYER_TIMES_COLUMNS)].copy(), source=str(path))


def validate_layer_times(df: pd.DataFrame, source: str = "layer times") -> pd.DataFrame:
    """Check types and ranges of a per-layer times table; raises ValueError naming the column.

    Every column of ``LAYER_TIMES_COLUMNS`` must be present; ``layer``, ``batch`` and
    ``n_samples`` must hold integers (cast to int), ``seconds`` and ``std_seconds`` finite
    numbers >= 0; ``layer`` is >= 0 on ``layer`` rows and -1 on the others.
    """
    _check_source(source)
    check_instance("df", df, pd.DataFrame)
    check_columns(source, df, LAYER_TIMES_COLUMNS)
    bad = sorted({str(c) for c in df["component"]} - set(COMPONENTS))
    if bad:
        raise ValueError(f"{source}: component must be one of {COMPONENTS}, got {bad}")
    for column, low in (("layer", -1), ("batch", 1), ("n_samples", 1)):
        values = _numbers(df, column, source)
        if not (np.all(values == np.floor(values)) and np.all(np.abs(values) <= MAX_EXACT_INT)):
            raise ValueError(f"{source}: {column} must hold integers")
        if (values < low).any():
            raise ValueError(f"{source}: {column} must be >= {low}")
        df[column] = values.astype(int)
    for column in ("seconds", "std_seconds"):
        values = _numbers(df, column, source)
        if not (np.all(np.isfinite(values)) and (values >= 0).all()):
            raise ValueError(f"{source}: {column} must be finite and >= 0")
        df[column] = values
    layer_rows = (df["component"] == "layer").to_numpy()
    if (df.loc[layer_rows, "layer"] < 0).any():
        raise ValueError(f"{source}: layer must be >= 0 for component 'layer'")
    if (df.loc[~layer_rows, "layer"] != -1).any():
        raise ValueError(f"{source}: layer must be -1 for components embed, head and token")
    return df


def _check_source(source) -> None:
    """A table's ``source`` (what its messages name it by) must be a non-empty string."""
    if not isinstance(source, str) or not source:
        raise ValueError(f"source must be a non-empty label, got {source!r:.60}")


def _numbers(df: pd.DataFrame, column: str, source: str) -> np.ndarray:
    """A column as a float64 array (NaN for empty cells); ValueError naming it if it holds
    text, None or booleans."""
    series = df[column]
    if series.dtype.kind not in "iuf":
        raise ValueError(f"{source}: {column} must hold numbers, got dtype {series.dtype}")
    return series.to_numpy(dtype=float)


def write_layer_times(path: str | Path, df: pd.DataFrame) -> Path:
    """Validate and write a per-layer times table (columns ``LAYER_TIMES_COLUMNS``)."""
    path = check_path("path", path)
    check_columns("df", df, LAYER_TIMES_COLUMNS)
    df = validate_layer_times(df[list(LAYER_TIMES_COLUMNS)].copy(), source=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def read_free_table(path: str | Path) -> pd.DataFrame:
    """Read and validate a FREE table CSV (module docstring); ValueError naming the file."""
    check_input_file("path", path)
    try:
        df = pd.read_csv(path, keep_default_na=False,
                         na_values={c: [""] for c in FREE_TABLE_COLUMNS},
                         dtype={c: str for c in FREE_TABLE_OPTIONAL})  # fmt: skip
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"FREE table {path}: not a CSV ({exc})") from None
    return validate_free_table(df, source=f"FREE table {path}")


def validate_free_table(df: pd.DataFrame, source: str = "FREE table") -> pd.DataFrame:
    """A checked copy of a FREE table: the schema's columns (optional ones filled), numbers in
    range; ValueError naming the column otherwise."""
    _check_source(source)
    check_instance("df", df, pd.DataFrame)
    check_columns(source, df, FREE_TABLE_COLUMNS)
    if not len(df):
        raise ValueError(f"{source}: no rows")
    out = pd.DataFrame(index=range(len(df)))
    layers = _numbers(df, "exit_layer", source)
    if not (np.all(np.isfinite(layers)) and np.all(layers == np.floor(layers))):
        raise ValueError(f"{source}: exit_layer must hold integers")
    if (layers < 1).any() or (layers > 10**6).any():
        raise ValueError(f"{source}: exit_layer must be in [1, 10^6]")
    out["exit_layer"] = layers.astype(int)
    for column, high in (("threshold", None), ("exit_rate", 1.0), ("quality", 1.0)):
        values = _numbers(df, column, source)
        if not (np.all(np.isfinite(values)) and (values >= 0).all()):
            raise ValueError(f"{source}: {column} must be finite and >= 0")
        if high is not None and (values > high).any():
            raise ValueError(f"{source}: {column} must be in [0, {high}]")
        out[column] = values
    for column, default in FREE_TABLE_OPTIONAL.items():
        values = df[column] if column in df else pd.Series([default] * len(df))
        text = [default if v is None or (isinstance(v, float) and np.isnan(v)) or v == ""
                else v for v in values]  # fmt: skip
        if any(not isinstance(v, str) for v in text):
            raise ValueError(f"{source}: {column} must hold text")
        out[column] = text
    return out


def write_free_table(path: str | Path, df: pd.DataFrame) -> Path:
    """Validate and write a FREE table (``FREE_TABLE_COLUMNS`` + ``FREE_TABLE_OPTIONAL``)."""
    path = check_path("path", path)
    df = validate_free_table(df, source=f"FREE table {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


@dataclass
class MatchTrace:
    """One generated sequence's early-prediction outcomes m_t, t = 2..ell."""

    sequence: str
    """Identifier of the sequence (prompt id, optionally with a suffix)."""
    d: int
    """Number of decoder layers of the model that produced the trace."""
    d_bar: int
    """Layer whose output made the early prediction (1-based count of layers run)."""
    k: int
    """Number of early candidates."""
    m: list[int]
    """m_t for t = 2..ell, each 0 or 1; ``len(m) == ell - 1``."""
    head: str = "shared"
    """``shared`` (the model's own LM head) or ``trained`` (a per-layer head)."""
    source: str = "match_rate"
    """What produced it: ``match_rate`` (measure.match_rates) or ``ppd_run`` (ppd_generate)."""
    tokens: list[int] | None = None
    """Generated token ids (optional)."""
    events: list[dict] | None = field(default=None, repr=False)
    """Timed layer blocks and hand-offs of a real PPD run (keys ``EVENT_KEYS``), optional."""
    backend: str | None = None
    """The PPD backend of a real run (``single``, ``dist``); None for a match-rate trace."""
    early_head: str | None = None
    """Where a real run's early head ran (``main``, ``candidates``); None for a match-rate
    trace."""

    def __post_init__(self) -> None:
        for name in ("backend", "early_head"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"trace {self.sequence!r}: {name} must be a string or None")
        for name in ("d", "d_bar", "k"):
            try:
                setattr(self, name, as_int(name, getattr(self, name)))
            except ValueError as exc:
                raise ValueError(f"trace {self.sequence!r}: {exc}") from None
        if not 1 <= self.d_bar < self.d:
            raise ValueError(f"trace {self.sequence!r}: d_bar must be in [1, d), got {self.d_bar}")
        if not isinstance(self.m, list | tuple | np.ndarray) or ndim("m", self.m) != 1:
            raise ValueError(f"trace {self.sequence!r}: m must be a list of 0 and 1")
        if any(
            not isinstance(x, int | float | np.number | np.bool_) or x not in (0, 1) for x in self.m
        ):
            raise ValueError(f"trace {self.sequence!r}: m must hold only 0 and 1")
        self.m = [int(x) for x in self.m]
        self.sequence = str(self.sequence)

    @property
    def ell(self) -> int:
        """Number of generated tokens, ell = len(m) + 1."""
        return len(self.m) + 1

    @property
    def n_runs(self) -> int:
        """N = 1 + sum(1 - m_t): the number of runs."""
        return 1 + sum(1 - x for x in self.m)

    def to_dict(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict) -> MatchTrace:
        if not isinstance(data, dict):
            raise ValueError(f"data must be a dict (a trace line), got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})


def write_traces(path: str | Path, traces: Iterable[MatchTrace], append: bool = False) -> Path:
    """Write traces as JSON Lines; with ``append`` add to an existing file (for resumable runs)."""
    check_path("path", path)
    check_flag("append", append)
    traces = list(traces) if isinstance(traces, list | tuple) else traces
    if not isinstance(traces, list):
        raise ValueError(f"traces must be a list of MatchTrace, got {type(traces).__name__}")
    for i, trace in enumerate(traces):
        if not isinstance(trace, MatchTrace):
            raise ValueError(f"traces[{i}] must be a MatchTrace, got {type(trace).__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        for trace in traces:
            fh.write(json.dumps(trace.to_dict(), allow_nan=False) + "\n")
            fh.flush()
    return path


def parse_jsonl(lines: Iterable[str], source: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank JSON Lines line; ValueError names the line.

    The one JSON Lines reader of the toolkit (traces, prompt files, match-rate part files).
    """
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{source}:{lineno}: expected a JSON object per line")
        yield lineno, record


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """``parse_jsonl`` over a file's lines (UTF-8)."""
    check_input_file("path", path)
    with Path(path).open(encoding="utf-8") as fh:
        yield from parse_jsonl(fh, path)


def read_traces(path: str | Path) -> list[MatchTrace]:
    """Read a JSON Lines trace file written by ``write_traces`` (blank lines are skipped)."""
    traces = []
    for lineno, data in read_jsonl(path):
        try:
            traces.append(MatchTrace.from_dict(data))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{lineno}: not a match trace ({exc})") from None
    return traces
