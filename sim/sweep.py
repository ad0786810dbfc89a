"""Sweeps that outgrow one machine: cells run through any ``concurrent.futures.Executor``.

``run_sweep(fn, cells, seed=..., executor=..., out_dir=...)`` calls ``fn(cell, seed_seq)`` for
every cell (a dict of JSON-ready parameters) and returns one DataFrame of the rows ``fn``
returns. Cell i is seeded with ``SeedSequence(seed).spawn(len(cells))[i]``, so the numbers do
not depend on the executor, the number of workers, the chunking or the order cells finish.

* Executors: a local process pool by default; ``open_executor("dask://host:8786")`` (or
  ``"dask"`` for a local cluster) gives Dask's ``distributed.Client(...).get_executor()``,
  ``open_executor("ray")`` / ``"ray://host:10001"`` a thin Ray adapter. ``fn`` must be a
  module-level function (workers import it).
* Resuming: with ``out_dir`` every finished chunk of cells is written by the caller (never by
  a worker, so workers need no shared disk) as ``part-<first>-<last>.jsonl``, atomically: the
  rows ``fn`` returned, one JSON object a line (floats exact, no dependency beyond the core
  install); a rerun with the same cells and seed reads the parts that exist and runs only the
  rest, each part's rows made into a DataFrame as a fresh chunk's are. The sweep's identity (a
  hash of cells and seed) is kept in ``sweep.json``; another sweep in the same directory is
  refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future, as_completed
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ppdmodel.validation import as_int, check_instance, check_names, check_seed
from sim.pool import MAX_WORKERS, tied_pool, useful_workers
from sim.progress import Progress

MANIFEST = "sweep.json"
"""File in ``out_dir`` naming the sweep its parts belong to."""
PART_SUFFIX = ".jsonl"
"""Suffix of a part: one finished chunk's rows (``part-<first>-<last>.jsonl``)."""
MAX_CELLS = 10**6
"""Largest number of cells of one sweep (one seed, one task and one row at least each)."""


def cell_seeds(n_cells: int, seed) -> list[np.random.SeedSequence]:
    """One SeedSequence per cell, spawned from ``SeedSequence(seed)`` (cell i gets the i-th)."""
    n_cells = as_int("n_cells", n_cells, minimum=0, limit=MAX_CELLS)
    return np.random.SeedSequence(check_seed("seed", seed, generator_ok=False)).spawn(n_cells)


def _run_chunk(fn: Callable, cells: list[dict], seeds: list, first: int) -> list[dict]:
    """Run ``fn`` on consecutive cells; every row gets its cell's index as ``cell``."""
    rows = []
    for offset, (cell, seed) in enumerate(zip(cells, seeds, strict=True)):
        out = fn(cell, seed)
        out = [out] if isinstance(out, dict) else out
        if not isinstance(out, list | tuple) or not all(isinstance(r, dict) for r in out):
            raise TypeError(f"fn must return a dict or a list of dicts (rows), got "
                            f"{type(out).__name__}")  # fmt: skip
        for row in out:
            rows.append({"cell": first + offset, **row})
    return rows


def run_sweep(
    fn: Callable[[dict, np.random.SeedSequence], dict | list[dict]],
    cells: Sequence[dict],
    *,
    seed=0,
    executor: Executor | None = None,
    out_dir: str | Path | None = None,
    chunk_size: int = 1,
    progress: str | None = None,
) -> pd.DataFrame:
    """Run ``fn(cell, seed_seq)`` over ``cells`` (module docstring); rows sorted by cell.

    ``executor``: any ``concurrent.futures.Executor`` (None: a local process pool tied to this
    process, ``sim.pool``, of at most one worker per CPU and per task, closed at the end; a
    single task runs in this process). ``chunk_size``: cells per task (amortises task
    overhead; parts hold a chunk). ``progress``: the label of progress lines on stderr over
    the cells this call runs (``sim.progress.Progress``: throttled, with the time left; a run
    shorter than its ``min_interval_s`` prints none); None: silent. An exception here (Ctrl-C
    included) cancels the tasks not yet started; the local pool's workers end at once.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a module-level function, got {type(fn).__name__}")
    if executor is not None:
        check_instance("executor", executor, Executor, "a concurrent.futures.Executor or None")
    if isinstance(cells, str | bytes | dict) or not hasattr(cells, "__len__"):
        raise ValueError(f"cells must be a sequence of dicts, got {type(cells).__name__}")
    if len(cells) > MAX_CELLS:
        raise ValueError(f"cells must hold at most {MAX_CELLS} cells (sim.sweep.MAX_CELLS), "
                         f"got {len(cells)}")  # fmt: skip
    for i, cell in enumerate(cells):
        check_instance(f"cells[{i}]", cell, dict)
    cells = [dict(c) for c in cells]
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if progress is not None:
        check_instance("progress", progress, str, "a label, or None")
    seeds = cell_seeds(len(cells), seed)
    chunks = [(i, min(i + chunk_size, len(cells))) for i in range(0, len(cells), chunk_size)]
    done: list[pd.DataFrame] = []
    if out_dir is not None:
        check_instance("out_dir", out_dir, str | os.PathLike, "a directory path or None")
        if not str(out_dir).strip():
            raise ValueError("out_dir must name a directory (None: write nothing), got ''")
        out_dir = _prepare(Path(out_dir), cells, seed, chunk_size)
        finished = {_part_range(p): p for p in out_dir.glob(f"part-*{PART_SUFFIX}")}
        done = [pd.DataFrame(_read_part(finished[c])) for c in chunks if c in finished]
        chunks = [c for c in chunks if c not in finished]
    shown = Progress(sum(b - a for a, b in chunks), progress or "", enabled=progress is not None)
    if executor is None and len(chunks) == 1:  # one task: no pool to start
        ((a, b),) = chunks
        rows = _run_chunk(fn, cells[a:b], seeds[a:b], a)
        if out_dir is not None:
            _write_part(out_dir, (a, b), rows)
        done.append(pd.DataFrame(rows))
        shown.advance(b - a)
        chunks = []
    with _executor_or_pool(executor, len(chunks)) as pool:
        futures: dict[Future, tuple[int, int]] = {
            pool.submit(_run_chunk, fn, cells[a:b], seeds[a:b], a): (a, b) for a, b in chunks
        }
        try:
            for future in as_completed(futures):
                rows = future.result()
                if out_dir is not None:
                    _write_part(out_dir, futures[future], rows)
                done.append(pd.DataFrame(rows))
                a, b = futures[future]
                shown.advance(b - a)
        except BaseException:  # Ctrl-C or a failed cell: start nothing more
            for future in futures:
                future.cancel()
            raise
    if not done:
        return pd.DataFrame(columns=["cell"])
    return (
        pd.concat(done, ignore_index=True).sort_values("cell", kind="stable").reset_index(drop=True)
    )


@contextmanager
def _executor_or_pool(executor: Executor | None, tasks: int) -> Iterator[Executor]:
    if executor is not None:
        yield executor
        return
    with tied_pool(useful_workers(None, tasks)) as pool:
        yield pool


def sweep_id(cells: Sequence[dict], seed, chunk_size: int) -> str:
    """A hash naming a sweep: its cells (as JSON), seed and chunking."""
    if isinstance(cells, str | bytes) or not isinstance(cells, Sequence):
        raise ValueError(f"cells must be a sequence of dicts, got {cells!r:.60}")
    for i, cell in enumerate(cells):
        check_instance(f"cells[{i}]", cell, dict)
        check_names(f"cells[{i}] keys", cell)
    check_seed("seed", seed, generator_ok=False)
    chunk_size = as_int("chunk_size", chunk_size)
    text = json.dumps({"cells": list(cells), "seed": seed, "chunk": chunk_size}, sort_keys=True,
                      default=str)  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _prepare(out_dir: Path, cells, seed, chunk_size: int) -> Path:
    """Create ``out_dir`` and its manifest, or refuse another sweep's parts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ident = {"sweep_id": sweep_id(cells, seed, chunk_size), "n_cells": len(cells)}
    manifest = out_dir / MANIFEST
    if manifest.exists():
        stored = json.loads(manifest.read_text(encoding="utf-8"))
        if stored.get("sweep_id") != ident["sweep_id"]:
            raise ValueError(
                f"out_dir {str(out_dir)!r} holds parts of another sweep (cells, seed or "
                "chunk_size differ); use a new directory"
            )
    else:
        manifest.write_text(json.dumps(ident), encoding="utf-8")
    return out_dir


def _part_range(path: Path) -> tuple[int, int]:
    _, first, last = path.name.removesuffix(PART_SUFFIX).split("-")
    return int(first), int(last) + 1


def _write_part(out_dir: Path, chunk: tuple[int, int], rows: list[dict]) -> None:
    """Write one chunk's rows atomically (a temporary name, then rename), a JSON object a line
    (Python's float repr: read back bit for bit; numpy scalars as their Python values)."""
    final = out_dir / f"part-{chunk[0]:08d}-{chunk[1] - 1:08d}{PART_SUFFIX}"
    tmp = final.with_suffix(".tmp")
    text = "".join(json.dumps(row, default=_plain) + "\n" for row in rows)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, final)


def _plain(value):
    """A numpy scalar as its Python value (the JSON encoder knows no numpy types)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a sweep row holds {type(value).__name__}, which a part cannot store")


def _read_part(path: Path) -> list[dict]:
    """The rows of one part (``_write_part``)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@contextmanager
def open_executor(spec: str | None = None, workers: int | None = None) -> Iterator[Executor]:
    """An executor named by ``spec``, closed on exit.

    None or ``"local"``: a process pool of ``workers`` tied to this process (``sim.pool``;
    default: CPU count; workers start as tasks arrive); ``"dask"``: a
    local Dask cluster; ``"dask://HOST:PORT"`` (or ``tcp://``): that Dask scheduler;
    ``"ray"``: a local Ray runtime; ``"ray://HOST:PORT"``: that Ray cluster.
    """
    if workers is not None:
        workers = as_int("workers", workers, limit=MAX_WORKERS)
    if spec is not None and not isinstance(spec, str):
        raise ValueError(f"executor must be a string or None, got {type(spec).__name__}")
    if spec in (None, "local"):
        with tied_pool(workers or os.cpu_count() or 1) as pool:
            yield pool
    elif spec == "dask" or spec.startswith(("dask://", "tcp://")):
        with _dask_executor(spec, workers) as pool:
            yield pool
    elif spec == "ray" or spec.startswith("ray://"):
        with _ray_executor(spec) as pool:
            yield pool
    else:
        raise ValueError(
            f"executor must be 'local', 'dask', 'dask://HOST:PORT', 'ray' or 'ray://HOST:PORT',"
            f" got {spec!r}"
        )


@contextmanager
def _dask_executor(spec: str, workers: int | None) -> Iterator[Executor]:
    try:
        import distributed  # optional extra: dask
    except ModuleNotFoundError:
        raise ValueError(
            "executor dask needs the dask extra: pip install 'dask[distributed]'"
        ) from None
    if spec == "dask":
        client = distributed.Client(
            n_workers=workers or os.cpu_count() or 1, dashboard_address=None
        )
    else:
        client = distributed.Client(spec.replace("dask://", "tcp://"))
    try:
        yield client.get_executor()
    finally:
        client.close()


class RayExecutor(Executor):
    """``concurrent.futures.Executor`` over Ray tasks: ``submit`` runs ``fn`` as a Ray task
    and returns the ObjectRef's ``future()``."""

    def __init__(self, ray_module) -> None:
        self._ray = ray_module

    def submit(self, fn, /, *args, **kwargs) -> Future:
        return self._ray.remote(fn).remote(*args, **kwargs).future()


@contextmanager
def _ray_executor(spec: str) -> Iterator[Executor]:
    try:
        import ray  # optional extra: ray
    except ModuleNotFoundError:
        raise ValueError("executor ray needs the ray extra: pip install 'ray'") from None
    ray.init(address=None if spec == "ray" else spec, ignore_reinit_error=True)
    try:
        yield RayExecutor(ray)
    finally:
        ray.shutdown()
