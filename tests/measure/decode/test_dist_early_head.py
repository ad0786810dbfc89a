"""Distributed PPD (gloo) with the early head on main and on the candidate ranks: exact."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.dist import DistJob, DistTask  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.launch import run_job  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from tests.measure.decode.test_early_head import perturbed_head  # noqa: E402
from tests.measure.decode.test_local import NEW_TOKENS, prompts  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

D_BAR, K, WORLD_SIZE, N_PROMPTS = 2, 3, 3, 5
"""3 ranks: the k = 3 candidates split 2 + 1 over two candidate ranks."""
TASKS = [("llama", "main", False), ("llama", "candidates", False), ("opt", "main", False),
         ("opt", "candidates", False), ("opt", "candidates", True)]  # fmt: skip
"""(arch, early_head, trained head) of the tasks of the one spawned job."""


def test_gloo_both_placements_equal_greedy(tmp_path, one_thread):
    models = {arch: tiny_model(arch, seed=2) for arch in ("llama", "opt")}
    for arch, model in models.items():
        model.save_pretrained(tmp_path / arch)
    head = perturbed_head(models["opt"], D_BAR, seed=3)
    head.save(tmp_path / "head")
    prompt_ids = prompts(N_PROMPTS, seed=13)
    tasks = [
        DistTask(
            str(tmp_path / arch),
            prompt_ids,
            d_bar=D_BAR,
            k=K,
            max_new_tokens=NEW_TOKENS,
            head_dir=str(tmp_path / "head") if trained else None,
            early_head=place,
        )
        for arch, place, trained in TASKS
    ]
    job = DistJob(tasks, world_size=WORLD_SIZE, attn_implementation="eager", timeout_s=60)
    results = run_job(job)
    for (arch, place, trained), runs in zip(TASKS, results, strict=True):
        model, name = models[arch], f"{arch} {place} trained={trained}"
        ref = [greedy_generate(model, p, max_new_tokens=NEW_TOKENS).tokens for p in prompt_ids]
        assert [r.tokens for r in runs] == ref, name
        for i, run in enumerate(runs):  # same candidates as one process: the same m
            single = ppd_single(
                model,
                prompt_ids[i],
                d_bar=D_BAR,
                k=K,
                max_new_tokens=NEW_TOKENS,
                head=head if trained else None,
                early_head=place,
            )
            assert run.m == single.m, (name, i)
            assert run.early_head == place and run.trace.head == (
                "trained" if trained else "shared"
            )
            early = [
                ev["process"]
                for ev in run.trace.events
                if ev["kind"] == "head" and ev["layer_start"] == D_BAR
            ]
            passes = run.ell - 1  # the last pass makes no candidates
            if place == "main":
                assert early == [0] * passes, name
            else:  # every candidate rank runs the early head once per pass
                assert sorted(early) == [1] * passes + [2] * passes, name
        assert sum(sum(r.m) for r in runs) > 0, name
