"""Execute every notebook on CPU with small parameters, and check that they are stored clean."""

from __future__ import annotations

import nbformat
import pytest

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
)

TINY_REFERENCE = {
    "corpus_max_bytes": 20_000,
    "vocab_size": 300,
    "hidden_size": 32,
    "num_layers": 4,
    "num_heads": 2,
    "intermediate_size": 64,
    "seq_len": 64,
    "batch_size": 4,
    "steps": 5,
}
"""A reference-model run of a few seconds: notebook 03 trains it through its default path."""

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
        "REFERENCE_CONFIG": TINY_REFERENCE,
        "N_PROMPTS": 3,
        "PROMPT_CHARS": 60,
        "MAX_NEW_TOKENS": 8,
        "HEAD_TRAIN_BYTES": 4000,
        "HEAD_SEQ_LEN": 32,
        "HEAD_BATCH": 4,
    },
    "04_validation.ipynb": {
        "N_PROMPTS": 2,
        "PROMPT_CHARS": 60,
        "MAX_NEW_TOKENS": 8,
        "TIMING_TOKENS": 4,
    },
    "05_planning.ipynb": {
        "GPU_NAMES": ("h100-sxm",),
        "LINK_NAMES": ("nvlink4",),
        "MAX_DEVICES": 4,
        "CONFIRM_N": 4,
        "WORKERS": 1,
        "SMOLLM2_ATLAS": "paper",
    },
}
"""Parameter overrides that keep each notebook to a few seconds on CPU (model dirs added below)."""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama + tokenizer directory, built once for the measure notebooks."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.measure.tiny_models import save_tiny_model_dir

    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def kernel_env(monkeypatch, tmp_path):
    """Headless matplotlib and one thread per kernel; the kernel runs in an empty tmp dir."""
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


def test_03_measure_p_correct(kernel_env):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    run_notebook("03_measure_p_correct.ipynb", SMALL["03_measure_p_correct.ipynb"], kernel_env)
    # MODEL_DIR = None: the reference model was trained under the kernel's working directory
    assert (kernel_env / "ppd-out" / "reference-model" / "config.json").exists()


def test_04_validation(kernel_env, tiny_model_dir):
    overrides = {**SMALL["04_validation.ipynb"], "MODEL_DIR": str(tiny_model_dir)}
    nb = run_notebook("04_validation.ipynb", overrides, kernel_env)
    text = "".join(
        out.get("text", "") for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs
    )
    assert "PPD output == greedy output" in text
    assert not (kernel_env / "ppd-out").exists(), "a given MODEL_DIR must not train the reference"


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
