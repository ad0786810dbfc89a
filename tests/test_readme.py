"""The README runs as written: its quickstart blocks (the measure one on a tiny local model), and
it stays a front page (its length, the planning command near the top, the test command CI runs).
The guide's commands, figures and headline are checked in tests/test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_core_and_measure_quickstarts():
    blocks = python_blocks()
    assert len(blocks) == 2
    assert "import ppdmodel, sim" in blocks[0]
    assert "import measure" in blocks[1]


def test_core_quickstart_runs_and_its_comments_are_true():
    namespace: dict = {}
    exec(compile(python_blocks()[0], "README.md", "exec"), namespace)
    ppdmodel = namespace["ppdmodel"]
    assert ppdmodel.expected_latency(d=40, d_bar=20, ell=128, p=0.6837) == pytest.approx(3383.4)
    assert ppdmodel.latency_per_token(d=40, p=0.6837) / 40 == pytest.approx(0.658, abs=5e-4)
    assert ppdmodel.compute_per_time(d=40, p=0.6837, k=3) == pytest.approx(3.279, abs=5e-4)
    assert namespace["summary"].n == 1000
    costs = namespace["costs"]
    assert ppdmodel.break_even_p(d=30, d_bar=15, k=3, costs=costs) == pytest.approx(0.33, abs=5e-3)
    assert ppdmodel.break_even_p(d=30, d_bar=15, k=3, costs=costs, early_head="candidates") == 0


def test_measure_quickstart_runs_on_a_local_model(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from measure.decode.greedy import greedy_generate
    from tests.measure.tiny_models import save_tiny_model_dir

    model_dir = save_tiny_model_dir(tmp_path / "tiny")
    code = python_blocks()[1].replace("path/to/local/hf-model", str(model_dir))
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    out, model, input_ids = namespace["out"], namespace["model"], namespace["input_ids"]
    greedy = greedy_generate(model, input_ids, max_new_tokens=16)
    assert out.tokens == greedy.tokens
    assert set(namespace["df"]["k"]) == {1, 3}
    import torch

    ids = torch.tensor([input_ids])
    assert namespace["seq"].tolist() == model.generate(ids, max_new_tokens=16).tolist()
    torch.manual_seed(0)
    sampled = model.generate(ids, do_sample=True, top_k=50, max_new_tokens=16)
    assert namespace["sampled"].tokens == sampled[0, ids.shape[1] :].tolist()


def test_measure_exports_resolve_lazily():
    pytest.importorskip("torch")
    import measure

    for name in measure.__all__:
        assert getattr(measure, name) is not None, name
    assert measure.datasets.sample_path("squad").is_file()  # submodules resolve too
    with pytest.raises(AttributeError, match="no_such_name"):
        measure.no_such_name  # noqa: B018


def test_the_readme_is_a_front_page():
    """At most about 300 lines, with the planning command for the reader's own GPUs within the
    first 100, the three steps of the path in order, and the guide one link away."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, len(lines)
    plan = next(i for i, line in enumerate(lines) if line.startswith("ppd plan --shape"))
    assert plan < 100 and "--gpu" in lines[plan] and "--devices" in lines[plan]
    steps = [i for i, line in enumerate(lines) if re.match(r"### [123]\. ", line)]
    assert len(steps) == 3 and steps[0] < plan < steps[1]
    path = "\n".join(lines[steps[0] :])
    for command in ("ppd measure match-rate", "ppd measure profile", "ppd plan --table",
                    "ppd validate"):  # fmt: skip
        assert command in path, command
    assert "](docs/index.md)" in "\n".join(lines)


def test_the_test_command_is_the_one_ci_runs():
    """.ci/run installs as the README says and runs the README's test command."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Run the tests") :]
    command = re.search(r"```bash\n(.*?)\n```", section, flags=re.S).group(1).strip()
    assert command == "python -m pytest"
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(command)}$", ci, flags=re.M)
    install = re.search(r"```bash\n(pip install torch.*?)\n```", text).group(1)
    torch_pin = re.search(r"torch==[\d.]+", install).group()
    assert f'"{torch_pin}"' in ci  # the same CPU build of torch
