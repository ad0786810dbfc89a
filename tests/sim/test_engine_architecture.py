"""One simulator engine: every schedule (PPD, greedy, FREE) runs on ``sim.schedule.SimEngine``,
and no other module of ``sim`` creates a SimPy environment or a device resource."""

from __future__ import annotations

import ast
from pathlib import Path

import sim
from sim.free_schedule import FreeSchedule
from sim.schedule import Schedule, SimEngine

SIM_DIR = Path(sim.__file__).parent
ENGINE = "schedule.py"
"""The one module that builds environments, resources and stores."""
BUILDERS = {"Environment", "RealtimeEnvironment", "Resource", "PriorityResource",
            "PreemptiveResource", "Container", "Store", "FilterStore", "PriorityStore"}  # fmt: skip
"""SimPy constructors of an environment or a shared thing processes wait for."""


def simpy_builds(source: str) -> list[str]:
    """The SimPy constructors ``source`` calls (``simpy.X(...)`` or an imported ``X(...)``)."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name: alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simpy")
                for alias in node.names if alias.name in BUILDERS}  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in BUILDERS:
            found.append(f.attr)
        elif isinstance(f, ast.Name) and f.id in imported:
            found.append(imported[f.id])
    return found


def test_only_the_engine_creates_a_simpy_environment_or_resource():
    offenders = {path.name: builds for path in sorted(SIM_DIR.rglob("*.py"))
                 if path.name != ENGINE and (builds := simpy_builds(path.read_text()))}  # fmt: skip
    assert offenders == {}
    assert "Environment" in simpy_builds((SIM_DIR / ENGINE).read_text())


def test_the_scan_finds_a_planted_environment():
    assert simpy_builds("import simpy\nenv = simpy.Environment()\n") == ["Environment"]
    assert simpy_builds("from simpy import Resource as R\nR(env, 1)\n") == ["Resource"]
    assert simpy_builds("env.timeout(1)\n") == []


def test_every_schedule_is_the_engine():
    assert issubclass(Schedule, SimEngine) and issubclass(FreeSchedule, SimEngine)
