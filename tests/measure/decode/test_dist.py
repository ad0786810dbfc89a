"""Distributed PPD on gloo: exact on every arch with 2 and 3 ranks; failures end with an error."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from measure.decode.backends import ppd_generate  # noqa: E402
from measure.decode.dist import DistJob, DistTask  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.launch import ppd_dist_many, run_job  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from measure.decode.settings import RunSettings  # noqa: E402
from tests.measure.decode.test_local import NEW_TOKENS, prompts  # noqa: E402
from tests.measure.tiny_models import ARCHS, tiny_model  # noqa: E402

DIST_ARCHS = (*ARCHS, "gemma2")
"""The core archs plus Gemma 2 (alternating sliding-window layers across the hand-off)."""
CONFIG = {2: (2, 1), 3: (3, 3)}
"""(d_bar, k) per world size: 2 ranks run k = 1; 3 ranks split k = 3 candidates 2 + 1."""


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Every tiny arch saved once; the ranks load the same weights."""
    root = tmp_path_factory.mktemp("ppd-dist-models")
    models = {}
    for arch in DIST_ARCHS:
        model = tiny_model(arch, seed=2)
        model.save_pretrained(root / arch)
        models[arch] = (model, str(root / arch))
    return models


@pytest.fixture(scope="module")
def references(saved_models):
    """Greedy tokens of every arch on the 50 prompts (computed once)."""
    torch.set_num_threads(1)
    return {
        arch: [greedy_generate(model, p, max_new_tokens=NEW_TOKENS).tokens for p in prompts()]
        for arch, (model, _) in saved_models.items()
    }


@pytest.mark.parametrize(("world_size", "n_prompts"), [(2, 50), (3, 10)])
def test_gloo_equals_greedy_every_arch(saved_models, references, world_size, n_prompts):
    """2 ranks: 50 prompts per arch; 3 ranks (candidates split 2 + 1): 10 per arch."""
    d_bar, k = CONFIG[world_size]
    prompt_ids = prompts()[:n_prompts]
    tasks = [
        DistTask(path, prompt_ids, d_bar=d_bar, k=k, max_new_tokens=NEW_TOKENS)
        for _, path in saved_models.values()
    ]
    job = DistJob(tasks, world_size=world_size, attn_implementation="eager", timeout_s=60)
    results = run_job(job)
    assert len(results) == len(DIST_ARCHS)
    for arch, per_task in zip(DIST_ARCHS, results, strict=True):
        model = saved_models[arch][0]
        assert [r.tokens for r in per_task] == references[arch][:n_prompts], arch
        for i in (0, 7):  # same states on every rank: the same m as one process
            single = ppd_single(model, prompt_ids[i], d_bar=d_bar, k=k, max_new_tokens=NEW_TOKENS)
            assert per_task[i].m == single.m, (arch, i)
        assert sum(sum(r.m) for r in per_task) > 0, arch
        for got in per_task:
            assert {ev["process"] for ev in got.trace.events} == set(range(world_size))
            assert sum(
                ev["kind"] == "handoff" and ev["process"] == 0 for ev in got.trace.events
            ) == sum(got.m)
    link = results[0][0].link_samples
    assert link and all(nbytes > 0 and seconds > 0 for nbytes, seconds in link)


def test_ppd_generate_dispatches_to_dist(monkeypatch):
    import measure.decode.backends as backends

    calls = []  # the one PPDRequest, whole
    monkeypatch.setattr(backends, "ppd_dist_many", lambda m, p, r: calls.append(r) or ["ok"])
    assert (
        ppd_generate(None, [1], d_bar=2, k=1, max_new_tokens=3, backend="dist",
                     settings=RunSettings(world_size=3, timeout_s=7))
        == "ok"
    )  # fmt: skip
    assert calls[0].settings.world_size == 3 and calls[0].d_bar == 2
    assert calls[0].settings.timeout_s == 7


@pytest.mark.parametrize("fail", ["crash", "hang"])
def test_failing_rank_ends_with_clear_error_within_timeout(fail):
    """Through ppd_dist_many with a loaded model (saved to a temporary directory)."""
    model = tiny_model("gpt2", seed=4)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="PPD dist run") as info:
        ppd_dist_many(
            model,
            prompts(3),
            d_bar=2,
            k=1,
            max_new_tokens=6,
            world_size=2,
            timeout_s=5,
            startup_s=60,
            fail=fail,
            fail_rank=1,
            link_probe=False,
        )
    assert time.monotonic() - start < 90  # start-up (up to startup_s) + timeout + grace
    message = str(info.value)
    if fail == "crash":
        assert "rank 1" in message and "injected failure" in message
    else:  # rank 0 times out waiting for rank 1, which is killed
        assert "rank 0" in message and "from rank 1" in message and "Timed out" in message


def test_dist_refuses_bad_d_bar_before_spawning(saved_models):
    with pytest.raises(ValueError, match="d_bar"):
        ppd_dist_many(saved_models["opt"][1], [[1, 2]], d_bar=1, k=1, max_new_tokens=2)


def test_dist_refuses_bad_prompt_and_head_before_spawning(saved_models):
    from measure.train.heads import TrainedHead

    model_dir = saved_models["llama"][1]
    with pytest.raises(ValueError, match="input_ids"):
        ppd_dist_many(model_dir, [[2, 10**6]], d_bar=2, k=1, max_new_tokens=2)
    head = TrainedHead.from_model(tiny_model("llama"), 3)
    with pytest.raises(ValueError, match="head is trained for layer 3"):
        ppd_dist_many(model_dir, [[2, 3]], d_bar=2, k=1, max_new_tokens=2, head=head)


def test_world_size_out_of_range_is_refused(saved_models):
    task = DistTask(saved_models["llama"][1], [[1, 2]], d_bar=2, k=1, max_new_tokens=2)
    with pytest.raises(ValueError, match="world_size"):
        run_job(DistJob([task], world_size=3))
    with pytest.raises(ValueError, match="world_size"):
        run_job(DistJob([task], world_size=1))
