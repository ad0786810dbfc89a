"""PPD as a transformers generation method: ``generate(custom_generate=ppd_generate_hf)``."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from transformers import StoppingCriteria, StoppingCriteriaList  # noqa: E402

import measure  # noqa: E402
from measure.decode.backends import ppd_generate  # noqa: E402
from measure.decode.hf_generate import PPDGenerateOutput, ppd_generate_hf  # noqa: E402
from measure.hf.compat import output_cache  # noqa: E402
from tests.measure.tiny_models import ALL_ARCHS, tiny_model  # noqa: E402

PROMPT = [5, 9, 17, 3, 22, 40]
NEW_TOKENS = 10

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return {arch: tiny_model(arch, seed=4) for arch in ALL_ARCHS}


class RecordingStreamer:
    """A streamer that records what ``put`` and ``end`` receive."""

    def __init__(self):
        self.puts: list[list] = []
        self.ends = 0

    def put(self, value) -> None:
        assert self.ends == 0, "put after end"
        self.puts.append(value.tolist())

    def end(self) -> None:
        self.ends += 1


def generate(model, seed=None, **kwargs):
    """``model.generate`` on PROMPT after ``torch.manual_seed(seed)`` (when given)."""
    if seed is not None:
        torch.manual_seed(seed)
    kwargs.setdefault("max_new_tokens", NEW_TOKENS)
    return model.generate(torch.tensor([PROMPT]), **kwargs)


def eos(model) -> list[int]:
    value = model.generation_config.eos_token_id
    return [] if value is None else [value] if isinstance(value, int) else list(value)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_custom_generate_equals_generate_and_ppd_generate(models, arch):
    """Greedy and sampled (top-k, top-p), both placements: generate's tokens, ppd_generate's m."""
    model = models[arch]
    for seed, sampling in ((None, {}), (0, {"top_k": 20}), (1, {"top_p": 0.9})):
        sample = {"do_sample": True, **sampling} if sampling else {}
        ref = generate(model, seed, **sample)
        for early_head in ("main", "candidates"):
            out = generate(
                model,
                seed,
                **sample,
                custom_generate=ppd_generate_hf,
                d_bar=2,
                k=3,
                early_head=early_head,
                return_dict_in_generate=True,
            )
            assert isinstance(out, PPDGenerateOutput)
            assert out.sequences.tolist() == ref.tolist(), (arch, seed, sampling, early_head)
            run = ppd_generate(
                model,
                PROMPT,
                d_bar=2,
                k=3,
                max_new_tokens=NEW_TOKENS,
                eos_token_id=eos(model),
                seed=seed,
                early_head=early_head,
                **sample,
            )
            assert run.tokens == out.sequences[0, len(PROMPT) :].tolist()
            assert out.ppd.m == run.m and out.matches == sum(run.m) and out.n_runs == run.n_runs


def test_plain_tensor_output_and_processors_from_generate_kwargs(models):
    """repetition_penalty, no_repeat_ngram_size, min_new_tokens: applied as in generate."""
    model = models["llama"]
    extra = dict(repetition_penalty=1.4, no_repeat_ngram_size=2, min_new_tokens=4)
    for seed, sample in ((None, {}), (5, {"do_sample": True, "temperature": 0.7})):
        ref = generate(model, seed, **extra, **sample)
        out = generate(model, seed, **extra, **sample, custom_generate=ppd_generate_hf, d_bar=3)
        assert isinstance(out, torch.Tensor) and out.tolist() == ref.tolist()


def test_scores_and_logits_are_returned_when_asked(models):
    model = models["qwen2"]
    asked = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)
    ref = generate(model, 2, do_sample=True, top_k=10, **asked)
    out = generate(
        model, 2, do_sample=True, top_k=10, **asked, custom_generate=ppd_generate_hf, d_bar=2, k=2
    )
    assert out.sequences.tolist() == ref.sequences.tolist()
    assert len(out.scores) == len(ref.scores) == len(out.logits) == out.sequences.shape[1] - 6
    for mine, theirs in zip(out.scores + out.logits, ref.scores + ref.logits, strict=True):
        finite = torch.isfinite(theirs)
        assert torch.equal(finite, torch.isfinite(mine))
        assert torch.allclose(mine[finite], theirs[finite], atol=1e-4)
    cache = output_cache(
        out
    )  # the field is `cache` from transformers 5.24, `past_key_values` before
    assert cache.get_seq_length() == out.sequences.shape[1] - 1


def test_streamer_gets_every_token_once_in_order(models):
    """generate puts the prompt; PPD puts each new token as main produces it, then ends."""
    model = models["gpt2"]
    for seed, sample in ((None, {}), (3, {"do_sample": True, "top_p": 0.8})):
        streamer = RecordingStreamer()
        out = generate(
            model, seed, **sample, custom_generate=ppd_generate_hf, d_bar=2, k=2, streamer=streamer
        )
        assert streamer.puts[0] == [PROMPT]
        assert [x for put in streamer.puts[1:] for x in put] == out[0, len(PROMPT) :].tolist()
        assert all(len(put) == 1 for put in streamer.puts[1:]) and streamer.ends == 1
        reference = RecordingStreamer()
        generate(model, seed, **sample, streamer=reference)
        assert reference.puts == streamer.puts


class StopAt(StoppingCriteria):
    """Stops once the sequence holds ``length`` tokens."""

    def __init__(self, length: int):
        self.length = length

    def __call__(self, input_ids, scores, **kwargs):
        return torch.full((input_ids.shape[0],), input_ids.shape[1] >= self.length)


def test_stopping_criteria_and_eos_end_the_sequence(models):
    model = models["llama"]
    stop = StoppingCriteriaList([StopAt(len(PROMPT) + 4)])
    ref = generate(model, stopping_criteria=stop)
    out = generate(model, stopping_criteria=stop, custom_generate=ppd_generate_hf, d_bar=2, k=2)
    assert out.tolist() == ref.tolist() and out.shape[1] == len(PROMPT) + 4
    free = generate(model, max_new_tokens=12).tolist()[0][len(PROMPT) :]
    end = free[5]
    ref = generate(model, max_new_tokens=12, eos_token_id=end)
    out = generate(model, max_new_tokens=12, eos_token_id=end, custom_generate=ppd_generate_hf)
    assert out.tolist() == ref.tolist() and out[0, -1] == end


def test_the_custom_generate_folder_is_the_same_method(models):
    model = models["mistral"]
    folder = measure.custom_generate_dir()
    ref = generate(model, 4, do_sample=True, top_k=15)
    streamer = RecordingStreamer()
    out = generate(
        model,
        4,
        do_sample=True,
        top_k=15,
        custom_generate=folder,
        trust_remote_code=True,
        d_bar=3,
        k=2,
        streamer=streamer,
    )
    assert out.tolist() == ref.tolist()
    assert [x for put in streamer.puts[1:] for x in put] == out[0, len(PROMPT) :].tolist()
    with pytest.raises(ValueError, match="trust_remote_code"):
        generate(model, custom_generate=folder, d_bar=3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_beams=2), "num_beams=2: beam search"),
        (dict(num_return_sequences=2, do_sample=True), "num_return_sequences=2"),
        (dict(prompt_lookup_num_tokens=3), "prompt_lookup_num_tokens: assisted decoding"),
        (dict(assistant_early_exit=2), "assistant_early_exit: assisted decoding"),
        (dict(output_attentions=True, return_dict_in_generate=True), "output_attentions"),
        (dict(output_hidden_states=True, return_dict_in_generate=True), "output_hidden_states"),
        (dict(guidance_scale=2.0), "guidance_scale"),
        (dict(d_bar=1), r"d_bar must be an integer with d/2 <= d_bar < d"),
        (dict(k=0), r"k must be an integer in \[1, vocab_size"),
    ],
)
def test_bad_combinations_are_refused_naming_the_option(models, kwargs, message):
    model = models["llama"]
    kwargs = {"d_bar": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(model, max_new_tokens=4, custom_generate=ppd_generate_hf, **kwargs)


def test_assistant_model_batches_and_padding_are_refused(models):
    model = models["llama"]
    with pytest.raises(ValueError, match="assistant_model: assisted decoding"):
        generate(model, assistant_model=copy.deepcopy(model), custom_generate=ppd_generate_hf)
    two = torch.tensor([PROMPT, PROMPT])
    with pytest.raises(ValueError, match=r"input_ids: PPD decodes one prompt \(batch size 1\)"):
        model.generate(
            two,
            attention_mask=torch.ones_like(two),
            max_new_tokens=4,
            custom_generate=ppd_generate_hf,
        )
    mask = torch.ones(1, len(PROMPT), dtype=torch.long)
    mask[0, 0] = 0
    with pytest.raises(ValueError, match="attention_mask: PPD decodes one unpadded prompt"):
        model.generate(
            torch.tensor([PROMPT]),
            attention_mask=mask,
            max_new_tokens=4,
            custom_generate=ppd_generate_hf,
        )
