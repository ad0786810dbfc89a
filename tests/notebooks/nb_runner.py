"""Run a stored notebook with its parameter cell overridden, for the notebook tests."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
"""The stored notebooks of the repository."""


def parameter_cell_index(nb) -> int:
    """Index of the first code cell, which holds the notebook's parameters."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            return i
    raise ValueError("notebook has no code cell")


def parameter_names(source: str) -> dict[str, object]:
    """Names assigned in a parameter cell and their literal values; ValueError for anything else."""
    names: dict[str, object] = {}
    for stmt in ast.parse(source).body:
        if not (
            isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets)
        ):
            raise ValueError(
                f"parameter cell may hold only plain assignments, got {ast.dump(stmt)}"
            )
        value = ast.literal_eval(stmt.value)
        for target in stmt.targets:
            names[target.id] = value
    return names


def with_parameters(nb, overrides: dict[str, object]):
    """A copy of `nb` with an override cell right after its parameter cell.

    Every overridden name must already be a parameter, so a renamed parameter fails the test
    instead of being silently ignored.
    """
    nb = nbformat.from_dict(nb)
    idx = parameter_cell_index(nb)
    known = parameter_names(nb.cells[idx].source)
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(
            f"overrides {unknown} are not parameters of the notebook ({sorted(known)})"
        )
    lines = [f"{name} = {value!r}" for name, value in overrides.items()]
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell("\n".join(lines)))
    return nb


def run_notebook(name: str, overrides: dict[str, object], cwd: Path, timeout_s: int = 120):
    """Execute notebook `name` in directory `cwd` with `overrides`; return the executed notebook."""
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    nb = with_parameters(nb, overrides)
    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb
