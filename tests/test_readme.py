"""The README runs as written: its quickstart blocks (the measure one on a tiny local model), the
scripts it names, its headline figure against the script behind it, its prediction formula."""

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


def _headline_defaults() -> dict[str, str]:
    """The settings experiments/where_ppd_wins.sh runs with unless told otherwise."""
    script = (README.parent / "experiments" / "where_ppd_wins.sh").read_text(encoding="utf-8")
    return dict(re.findall(r"^([A-Z_]+)=\$\{\1:-([^}]*)\}$", script, flags=re.M))


def test_every_script_the_readme_names_exists_and_parses():
    import subprocess

    text = README.read_text(encoding="utf-8")
    named = set(re.findall(r"(?:benchmarks|experiments|docs)/[\w./-]+\.(?:sh|py)", text))
    assert "experiments/where_ppd_wins.sh" in named
    root = README.parent
    for path in sorted(named):
        assert (root / path).is_file(), path
        if path.endswith(".sh"):
            subprocess.run(["bash", "-n", str(root / path)], check=True)


def test_the_headline_figure_states_what_its_script_runs():
    """The README's "where PPD wins" figure says what experiments/where_ppd_wins.sh does (p,
    prompts, head budget) and what it measured, with the interval."""
    defaults = _headline_defaults()
    assert (defaults["LAYER"], defaults["EPOCHS"], defaults["NEW_TOKENS"]) == ("15", "4", "64")
    text = " ".join(README.read_text(encoding="utf-8").split())
    start = text.index("Where PPD wins on this CPU")
    section = text[start : text.index("Early exit, predicted then measured", start)]
    assert "Run in full on the project's shared 2-vCPU virtual machine, 2026-11-27" in section
    assert "1.04x faster than greedy, 95 % interval [1.00, 1.09]" in section
    assert "**1.01x [0.98, 1.06]**" in section  # the repeat, with a fresh profile
    assert "p = 0.33 over 141 tokens" in section
    held = defaults["HELDOUT"].split()
    assert f"held-out questions {held[0]}, {held[1]} and {held[2]}" in section
    assert f"head at layer {defaults['LAYER']}" in section
    assert f"a fixed budget of {defaults['EPOCHS']} epochs" in section
    assert f"{defaults['NEW_TOKENS']} new tokens" in section
    assert f"{defaults['REPEATS']} interleaved rounds" in section
    assert f"({defaults['PROFILE_REPEATS']} rounds)" in section
    assert "p = 0.30" in section  # the newcomer's reproduction, with its p


def test_the_headline_questions_are_held_out_from_the_head():
    pytest.importorskip("torch")
    import measure

    spec = README.parent.parent / "shared" / "data" / "spec_bench_questions.jsonl"
    if not spec.is_file():
        pytest.skip(f"{spec} is not present")
    held = {p.id for p in measure.load_prompts(spec, "spec-bench", split="heldout")}
    assert set(_headline_defaults()["HELDOUT"].split()) <= held
    assert not {"161", "241", "321"} & held  # the 2026-11-22 figure's questions were not


def test_the_readme_prediction_formula_is_what_predict_computes():
    """T_pred = sum_runs (ell B - M S - c (B - G)), c = 1 for a run that reached the limit."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from measure.eval.predict import predict_ppd
    from measure.eval.repeat import PPDConfig
    from ppdmodel.cost_profile import parse_cost_profile
    from ppdmodel.passes import pass_times
    from tests.ppdmodel.profiles import minimal_profile

    text = README.read_text(encoding="utf-8")
    assert "T_pred = sum_runs ( ell B - M S - c (B - G) )" in text
    profile = parse_cost_profile(minimal_profile(d=30, serial=True))
    runs = [SimpleNamespace(m=[1, 0, 1, 1, 0, 0, 1], tokens=list(range(8))),
            SimpleNamespace(m=[0, 0, 1], tokens=list(range(4)))]  # fmt: skip
    for config in (PPDConfig(15, 3), PPDConfig(20, 1)):
        costs = profile.costs("single", d_bar=config.d_bar)
        shape = dict(d=30, d_bar=config.d_bar, k=config.k, costs=costs, early_head="main")
        times = pass_times(**shape)
        b, s, g = times.miss_only_s, times.saving_s, costs.greedy_token_seconds(30)
        expected = sum(
            (len(r.m) + 1) * b - sum(r.m) * s - (len(r.m) + 1 == 8) * (b - g) for r in runs
        )
        got = predict_ppd(profile, runs, config, max_new_tokens=8).closed_form_s
        assert got == pytest.approx(float(expected), rel=1e-12)
