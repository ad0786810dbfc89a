"""The layout's rules: imports point one way (measure -> sim -> ppdmodel, and inside measure from
the entry points down to the ground floor) and form no cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppdmodel", "sim", "measure")
LAYER = {"ppdmodel": 0, "sim": 1, "measure": 2}
"""A package may import only packages of a lower or equal layer."""
MEASURE_LAYERS = {
    # ground floor: loading and model surgery, versions, prompts, the one clock, the checks,
    "hf": 0, "versions": 0, "chat": 0, "datasets": 0, "degenerate": 0, "clock": 0, "checks": 0,
    "lifeline": 0,  # spawn and watch ranks tied to this process
    "settings": 0,  # the settings every command shares (the model, the prompts), declared once
    "train": 1,  # trained heads (on hf)
    "decode": 2,  # the PPD decoder and its launcher (loads trained heads)
    "match": 3,  # match rates (main's token rule of decode.sampling)
    "free": 3,  # FREE decoding
    "profile": 3,  # the cost profile (times the decoder's backends and ranks)
    "eval": 4,  # prediction, validation, reports (on all of the above)
    "doctor": 4,  # the self-check (greedy against PPD)
    "cli": 5, "notebook_inputs": 5,  # entry points
}  # fmt: skip
"""Layers inside ``measure`` (its sub-packages and top-level modules): a part may import only
parts of a lower layer, or, on the ground floor, other ground-floor modules. ``measure`` itself
(``__init__``: lazy exports, no imports of its own) is below them all."""


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


def _measure_part(module: str) -> str | None:
    """The sub-package or top-level module of ``measure`` that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "measure" and len(parts) > 1 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports inside ``measure`` that break ``MEASURE_LAYERS`` (or name an unplaced part)."""
    bad = []
    for name, targets in graph.items():
        source = _measure_part(name)
        if source is None:
            continue
        for target in map(_measure_part, targets):
            if target is None or target == source:
                continue
            if source not in MEASURE_LAYERS or target not in MEASURE_LAYERS:
                bad.append(f"{name}: {source if source not in MEASURE_LAYERS else target} "
                           "has no layer in MEASURE_LAYERS")  # fmt: skip
                continue
            low, high = MEASURE_LAYERS[target], MEASURE_LAYERS[source]
            if low > high or (low == high and high > 0):
                bad.append(f"{name} (layer {high}) imports measure.{target} (layer {low})")
    return sorted(set(bad))


def test_imports_inside_measure_point_down():
    parts = {_measure_part(name) for name in _modules()} - {None}
    assert parts <= set(MEASURE_LAYERS), f"no layer for {sorted(parts - set(MEASURE_LAYERS))}"
    assert not upward_imports(import_graph()), upward_imports(import_graph())


def test_an_upward_import_inside_measure_is_found():
    graph = {"measure.profile.timing": {"measure.clock", "measure.decode.checks", "sim.run"}}
    assert upward_imports(graph) == []
    graph["measure.decode.greedy"] = {"measure.profile.clock", "measure.hf.loading", "measure"}
    graph["measure.match.rate"] = {"measure.free.decode"}  # siblings above the ground floor
    graph["measure.hf.arch"] = {"measure.nowhere"}
    assert upward_imports(graph) == [
        "measure.decode.greedy (layer 2) imports measure.profile (layer 3)",
        "measure.hf.arch: nowhere has no layer in MEASURE_LAYERS",
        "measure.match.rate (layer 3) imports measure.free (layer 3)",
    ]


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
