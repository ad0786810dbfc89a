"""The layout's rules: imports point one way (measure -> sim -> ppdmodel) and form no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppdmodel", "sim", "measure")
LAYER = {"ppdmodel": 0, "sim": 1, "measure": 2}
"""A package may import only packages of a lower or equal layer."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Project modules imported anywhere in the file (module level or inside functions)."""
    is_pkg = path.name == "__init__.py"
    base = name if is_pkg else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                up = base.split(".")[: len(base.split(".")) - node.level + 1]
                module = ".".join([*up, module] if module else up)
            targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
        else:
            continue
        for target in targets:
            # the longest known module that the target names (a submodule, or its package)
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports."""
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    graph = import_graph()
    # a package's __init__ importing its own submodules is not a cycle through the package:
    # drop edges from a submodule to its (ancestor) packages, which Python resolves first
    pruned = {
        name: {t for t in targets if not name.startswith(t + ".")}
        for name, targets in graph.items()
    }
    assert _cycle(pruned) is None, f"import cycle: {' -> '.join(_cycle(pruned))}"


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package):
    bad = sorted(
        f"{name} imports {target}"
        for name, targets in import_graph().items()
        if name.split(".")[0] == package
        for target in targets
        if LAYER[target.split(".")[0]] > LAYER[package]
    )
    assert not bad, bad


def test_the_graph_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from sim.run import simulate\n    import measure.hf\n")
    assert _imports(source, "ppdmodel.m", {"sim.run", "measure.hf", "measure"}) == {
        "sim.run",
        "measure.hf",
    }


def test_cycle_detection_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_sim_and_ppdmodel_never_import_torch():
    for name, path in _modules().items():
        if name.split(".")[0] in ("sim", "ppdmodel"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {
                alias.name.split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in (node.names if isinstance(node, ast.Import) else [])
            } | {
                (node.module or "").split(".")[0]
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
            }
            assert not names & {"torch", "transformers"}, name
