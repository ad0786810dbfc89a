"""Sampled PPD (paper Appendix B) equals seeded ``model.generate(do_sample=True)``."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from measure.decode.backends import ppd_generate, ppd_many  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.sampling import Decoding, prompt_seed  # noqa: E402
from measure.decode.settings import RunSettings  # noqa: E402
from tests.measure.tiny_models import ALL_ARCHS, tiny_model  # noqa: E402

PROMPTS = [[5, 9, 17, 3, 22, 40], [7, 8, 30]]
NEW_TOKENS = 10
SEEDS = (0, 1, 2)
SAMPLINGS = ({"top_k": 20}, {"top_p": 0.9}, {"top_k": 8, "temperature": 0.7})
"""top-k, top-p (with transformers' default top_k 50) and top-k with a temperature."""

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return {arch: tiny_model(arch, seed=1) for arch in ALL_ARCHS}


def generate_sampled(model, prompt, seed, **sampling) -> list[int]:
    """The contract's reference: ``torch.manual_seed(seed); model.generate(...)``."""
    ids = torch.tensor([prompt])
    torch.manual_seed(seed)
    out = model.generate(ids, do_sample=True, max_new_tokens=NEW_TOKENS, **sampling)
    return out[0, len(prompt) :].tolist()


def eos(model) -> list[int]:
    value = model.generation_config.eos_token_id
    return [] if value is None else [value] if isinstance(value, int) else list(value)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_sampled_ppd_equals_sampled_generate(models, arch):
    """Every arch, both placements, 3 seeds, top-k / top-p / temperature: the same tokens."""
    model = models[arch]
    matched = 0
    for prompt in PROMPTS:
        for seed in SEEDS:
            for sampling in SAMPLINGS:
                ref = generate_sampled(model, prompt, seed, **sampling)
                for early_head, k in (("main", 3), ("candidates", 2)):
                    got = ppd_generate(
                        model,
                        prompt,
                        d_bar=2,
                        k=k,
                        max_new_tokens=NEW_TOKENS,
                        eos_token_id=eos(model),
                        do_sample=True,
                        seed=seed,
                        early_head=early_head,
                        **sampling,
                    )
                    assert got.tokens == ref, (arch, prompt, seed, sampling, early_head)
                    assert got.decoding.startswith("sample") and got.n_runs == 1 + got.m.count(0)
                    matched += sum(got.m)
    assert matched > 0  # hand-offs happened under sampling


def test_seeds_differ_and_the_reference_samples_alike(models):
    model = models["llama"]
    decoding = Decoding(do_sample=True, top_k=20)
    runs = {}
    for seed in SEEDS:
        ppd = ppd_generate(
            model,
            PROMPTS[0],
            d_bar=3,
            k=2,
            max_new_tokens=NEW_TOKENS,
            do_sample=True,
            top_k=20,
            seed=seed,
        )
        ref = greedy_generate(
            model, PROMPTS[0], max_new_tokens=NEW_TOKENS, decoding=decoding, seed=seed
        )
        assert ppd.tokens == ref.tokens
        runs[seed] = ppd.tokens
    assert len({tuple(t) for t in runs.values()}) == len(SEEDS)
    greedy = greedy_generate(model, PROMPTS[0], max_new_tokens=NEW_TOKENS).tokens
    assert any(t != greedy for t in runs.values())


def test_a_generator_gives_the_draws_and_the_global_stream_is_untouched(models):
    """With generator=, every draw comes from it: the global RNG is not advanced at all (the
    candidate side never draws), and equal generators give equal tokens."""
    model = models["qwen2"]
    state = torch.get_rng_state()
    runs = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(7)
        runs.append(
            ppd_generate(
                model,
                PROMPTS[1],
                d_bar=2,
                k=3,
                max_new_tokens=NEW_TOKENS,
                do_sample=True,
                top_p=0.9,
                generator=gen,
            )
        )
        for head in ("main", "candidates"):
            g2 = torch.Generator().manual_seed(7)
            again = ppd_generate(
                model,
                PROMPTS[1],
                d_bar=2,
                k=3,
                max_new_tokens=NEW_TOKENS,
                do_sample=True,
                top_p=0.9,
                generator=g2,
                early_head=head,
            )
            assert again.tokens == runs[-1].tokens
    assert torch.equal(torch.get_rng_state(), state)
    assert runs[0].tokens == runs[1].tokens
    assert (
        runs[0].tokens
        == ppd_generate(
            model,
            PROMPTS[1],
            d_bar=2,
            k=3,
            max_new_tokens=NEW_TOKENS,
            do_sample=True,
            top_p=0.9,
            seed=7,
        ).tokens
    )


def test_processors_from_the_model_generation_config_apply_as_in_generate(models):
    """A repetition penalty and a temperature set in the model's generation config."""
    model = copy.deepcopy(models["llama"])
    model.generation_config.repetition_penalty = 1.5
    model.generation_config.temperature = 0.8
    for seed in SEEDS:
        ref = generate_sampled(model, PROMPTS[0], seed, top_k=30)
        got = ppd_generate(
            model,
            PROMPTS[0],
            d_bar=2,
            k=2,
            max_new_tokens=NEW_TOKENS,
            do_sample=True,
            top_k=30,
            seed=seed,
            eos_token_id=eos(model),
        )
        assert got.tokens == ref


def test_ppd_many_seeds_each_prompt(models):
    model = models["gpt2"]
    decoding = Decoding(do_sample=True, top_k=20)
    seeds = [prompt_seed(3, "a"), prompt_seed(3, "b")]
    runs = ppd_many(
        model,
        PROMPTS,
        d_bar=2,
        k=2,
        max_new_tokens=NEW_TOKENS,
        settings=RunSettings(decoding=decoding),
        seeds=seeds,
        sequences=["a", "b"],
    )
    for prompt, seed, run in zip(PROMPTS, seeds, runs, strict=True):
        assert run.tokens == generate_sampled(model, prompt, seed, top_k=20)[: len(run.tokens)]


def test_bad_sampling_arguments_are_refused(models):
    model = models["llama"]
    args = dict(d_bar=2, k=1, max_new_tokens=3)
    cases = [
        (dict(top_k=5), "top_k apply to sampling: pass do_sample=True"),
        (dict(temperature=0.5, top_p=0.5), "temperature, top_p apply to sampling"),
        (dict(do_sample=True, temperature=0), "temperature must be a number > 0"),
        (dict(do_sample=True, top_k=-1), "top_k must be an integer >= 0"),
        (dict(do_sample=True, top_k=2.5), "top_k must be an integer >= 0"),
        (dict(do_sample=True, top_p=1.5), r"top_p must be in \(0, 1\]"),
        (dict(do_sample="yes"), "do_sample must be True or False"),
        (dict(do_sample=True, seed=-1), r"seed must be an integer in \[0, 2\*\*63\)"),
        (dict(do_sample=True, seed=1, generator=torch.Generator()), "seed or generator"),
        (dict(do_sample=True, generator=3), "generator must be a torch.Generator"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            ppd_generate(model, PROMPTS[0], **args, **kwargs)
    with pytest.raises(ValueError, match="one seed per prompt"):
        ppd_many(model, PROMPTS, **args, settings=RunSettings(decoding=Decoding(True)), seeds=[1])


def test_classifier_free_guidance_is_refused(models):
    model = copy.deepcopy(models["llama"])
    model.generation_config.guidance_scale = 1.5
    with pytest.raises(ValueError, match="guidance_scale"):
        ppd_generate(model, PROMPTS[0], d_bar=2, k=1, max_new_tokens=3, do_sample=True, seed=0)


def test_dist_backend_samples_as_single(tmp_path):
    """gloo ranks: main seeds its own process (seeds) or restores a generator's state."""
    model = tiny_model("mistral", seed=2)
    model.save_pretrained(tmp_path / "m")
    decoding = Decoding(do_sample=True, top_p=0.9)
    seeds = [11, 12]
    settings = RunSettings(decoding=decoding, world_size=3, timeout_s=60)
    single = ppd_many(
        model, PROMPTS, d_bar=2, k=3, max_new_tokens=NEW_TOKENS, settings=settings, seeds=seeds
    )
    dist = ppd_many(
        str(tmp_path / "m"),
        PROMPTS,
        d_bar=2,
        k=3,
        max_new_tokens=NEW_TOKENS,
        seeds=seeds,
        backend="dist",
        settings=settings,
    )
    assert [r.tokens for r in dist] == [r.tokens for r in single]
    assert [r.m for r in dist] == [r.m for r in single]
    assert all(r.decoding == "sample top_p=0.9" for r in dist)
    ref = [generate_sampled(model, p, s, top_p=0.9) for p, s in zip(PROMPTS, seeds, strict=True)]
    assert [r.tokens for r in dist] == ref
    got = ppd_generate(
        str(tmp_path / "m"),
        PROMPTS[0],
        d_bar=3,
        k=1,
        max_new_tokens=NEW_TOKENS,
        do_sample=True,
        top_p=0.9,
        generator=torch.Generator().manual_seed(11),
        backend="dist",
        early_head="candidates",
    )
    assert got.tokens == ref[0]
