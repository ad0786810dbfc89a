"""The notebooks' inputs and outputs are resolved from the source tree, not the working dir."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from measure.datasets import Prompt, sample_path  # noqa: E402
from measure.notebook_inputs import (  # noqa: E402
    NOTEBOOK_OUT,
    REPO_ROOT,
    SHARED_SPEC_BENCH,
    interleave_categories,
    model_argument,
    notebook_out_dir,
    repo_path,
    spec_bench_file,
)


def test_repo_root_holds_the_packages_and_out_is_git_ignored():
    assert (REPO_ROOT / "measure" / "notebook_inputs.py").is_file()
    ignored = (REPO_ROOT / ".gitignore").read_text().split()
    assert f"/{NOTEBOOK_OUT.parts[0]}/" in ignored


def test_out_dir_defaults_under_the_repo_and_takes_an_override(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory plays no part
    target = tmp_path / "given" / "deeper"
    assert notebook_out_dir("nb", target) == target and target.is_dir()
    monkeypatch.setattr("measure.notebook_inputs.REPO_ROOT", tmp_path / "repo")
    assert notebook_out_dir("nb") == tmp_path / "repo" / "out" / "notebooks" / "nb"
    assert (tmp_path / "repo" / "out" / "notebooks" / "nb").is_dir()
    for bad in ("", "a/b", "..", 3):
        with pytest.raises(ValueError, match="name must be a plain directory name"):
            notebook_out_dir(bad, target)


def test_paths_and_model_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert repo_path(None) is None
    assert repo_path("measure/data") == REPO_ROOT / "measure" / "data"
    assert repo_path(tmp_path) == tmp_path
    assert model_argument("smollm2") == "smollm2"  # a known name, as --model smollm2
    assert model_argument("models/x") == REPO_ROOT / "models" / "x"
    assert model_argument(str(tmp_path)) == tmp_path
    with pytest.raises(ValueError, match="MODEL must be a known name"):
        model_argument(None)


def test_spec_bench_file_prefers_the_shared_questions(tmp_path):
    assert spec_bench_file(tmp_path) == sample_path("spec-bench")  # nothing beside it
    root = tmp_path / "repo"
    shared = root / SHARED_SPEC_BENCH
    shared.parent.mkdir(parents=True)
    shared.write_text("{}\n")
    assert spec_bench_file(root) == shared.resolve()


def test_interleave_categories_takes_each_category_in_turn():
    prompts = [Prompt(str(i), "t", category=c) for i, c in enumerate("aaabbc")]
    assert [p.id for p in interleave_categories(prompts, 4)] == ["0", "3", "5", "1"]
    assert len(interleave_categories(prompts, 10)) == 6
    assert [p.id for p in interleave_categories([Prompt("x", "t")], 2)] == ["x"]
    with pytest.raises(ValueError, match=r"n must be a positive integer \(>= 1\)"):
        interleave_categories(prompts, 0)
