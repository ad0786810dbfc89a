"""PPD decoding in one process: exact greedy output, forced match paths, KV cache, traces."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.backends import ppd_generate  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from measure.hf.kv_ops import append_entries, crop_last, last_entries, pack, unpack  # noqa: E402
from sim.formats import EVENT_KEYS, read_traces, write_traces  # noqa: E402
from tests.measure.tiny_models import (  # noqa: E402
    ALL_ARCHS,
    ARCHS,
    NUM_LAYERS,
    VOCAB_SIZE,
    tiny_model,
)

N_PROMPTS = 50
NEW_TOKENS = 12
CONFIGS = [(2, 1), (3, 1), (2, 3), (3, 5)]
"""(d_bar, k) pairs cycled over the prompts (d = 4 layers: d_bar in {2, 3})."""


def prompts(n: int = N_PROMPTS, seed: int = 0) -> list[list[int]]:
    """Short random prompts (1..8 tokens) avoiding the special ids 0 and 1."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n,), generator=gen).tolist()
    return [torch.randint(2, VOCAB_SIZE, (n_,), generator=gen).tolist() for n_ in lengths]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return {arch: tiny_model(arch, seed=1) for arch in ALL_ARCHS}


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_single_backend_equals_greedy_on_50_prompts(models, arch):
    """50 prompts on the core archs, 24 on the others (the suite has a time budget)."""
    model = models[arch]
    matched = 0
    for i, prompt in enumerate(prompts() if arch in ARCHS else prompts(24)):
        d_bar, k = CONFIGS[i % len(CONFIGS)]
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        got = ppd_single(model, prompt, d_bar=d_bar, k=k, max_new_tokens=NEW_TOKENS)
        assert got.tokens == ref, f"{arch} prompt {i} (d_bar={d_bar}, k={k})"
        assert len(got.m) == len(got.tokens) - 1
        assert got.n_runs == 1 + got.m.count(0)
        matched += sum(got.m)
    assert matched > 0  # the hand-off path ran


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_greedy_reference_equals_model_generate(models, arch):
    model = models[arch]
    for prompt in prompts(5, seed=3):
        ids = torch.tensor([prompt])
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            pad_token_id=0,
        )
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        assert out[0, len(prompt) :].tolist() == ref


def test_k_equal_vocab_always_matches(models):
    got = ppd_single(models["llama"], [5, 6, 7], d_bar=2, k=VOCAB_SIZE, max_new_tokens=10)
    assert got.m == [1] * 9
    assert got.n_runs == 1
    assert got.tokens == greedy_generate(models["llama"], [5, 6, 7], max_new_tokens=10).tokens


class FixedHead(torch.nn.Module):
    """An early head that always ranks `token` first (a wrong guess by construction)."""

    def __init__(self, token: int):
        super().__init__()
        self.token = token

    def forward(self, h):  # h: [B, S, H] -> [B, S, V]
        logits = torch.zeros(*h.shape[:2], VOCAB_SIZE)
        logits[..., self.token] = 1.0
        return logits


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_wrong_head_never_matches(models, arch):
    prompt = [9, 4, 33]
    ref = greedy_generate(models[arch], prompt, max_new_tokens=10).tokens
    wrong = next(t for t in range(VOCAB_SIZE) if t not in ref)
    got = ppd_single(models[arch], prompt, d_bar=3, k=1, max_new_tokens=10, head=FixedHead(wrong))
    assert got.tokens == ref
    assert got.m == [0] * 9
    assert got.n_runs == 10
    assert got.trace.head == "trained"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("k", [1, 3])
def test_main_cache_equals_greedy_cache_after_handoffs(models, arch, k):
    model, prompt = models[arch], [3, 17, 42, 8]
    ref, ref_cache = greedy_generate(model, prompt, max_new_tokens=12, return_cache=True)
    got, cache = ppd_single(model, prompt, d_bar=2, k=k, max_new_tokens=12, return_cache=True)
    if sum(got.m) == 0:  # the logit lens never guessed right: guess greedy's most common token
        head = FixedHead(max(set(ref.tokens), key=ref.tokens.count))
        got, cache = ppd_single(
            model, prompt, d_bar=2, k=k, max_new_tokens=12, head=head, return_cache=True
        )
    assert sum(got.m) > 0 and got.tokens == ref.tokens
    # the last token's pass left no KV in greedy either: both hold prompt + ell - 1 positions
    for layer, ref_layer in zip(cache.layers, ref_cache.layers, strict=True):
        assert (
            layer.keys.shape
            == ref_layer.keys.shape
            == (1, layer.keys.shape[1], len(prompt) + 11, layer.keys.shape[3])
        )
        if k == 1:  # batch-1 candidate rows: bit-identical to greedy
            assert torch.equal(layer.keys, ref_layer.keys)
            assert torch.equal(layer.values, ref_layer.values)
        else:  # k batched rows: equal up to the rounding of batched matmuls
            torch.testing.assert_close(layer.keys, ref_layer.keys, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(layer.values, ref_layer.values, rtol=1e-5, atol=1e-5)


def test_trace_events_and_schedule(models):
    got = ppd_single(models["qwen2"], [11, 12], d_bar=3, k=2, max_new_tokens=8)
    events = got.trace.events
    assert all(tuple(ev) == EVENT_KEYS for ev in events)
    assert got.trace.source == "ppd_run" and got.trace.tokens == got.tokens
    main_layers = [ev for ev in events if ev["process"] == 0 and ev["kind"] == "layers"]
    for t in range(1, got.ell + 1):  # pass t starts at layer 1 (= e) iff m_t = 1
        first = next(ev for ev in main_layers if ev["token"] == t)
        expected = 1 if t > 1 and got.m[t - 2] else 0
        assert (first["layer_start"], first["layer_end"]) == (expected, 3)
    cand = [ev for ev in events if ev["process"] == 1]
    assert [ev["token"] for ev in cand] == list(range(2, got.ell + 1))
    assert all((ev["layer_start"], ev["layer_end"]) == (0, 1) for ev in cand)
    handoffs = [ev for ev in events if ev["kind"] == "handoff"]
    assert len(handoffs) == sum(got.m)
    assert all(0 <= ev["start_s"] <= ev["end_s"] <= got.wall_s + 1e-3 for ev in events)
    assert got.token_times_s == sorted(got.token_times_s)


def test_trace_replays_in_simulator_to_same_n(models, tmp_path):
    import sim

    results = [
        ppd_single(models["opt"], p, d_bar=2, k=2, max_new_tokens=NEW_TOKENS, sequence=f"p{i}")
        for i, p in enumerate(prompts(6, seed=5))
    ]
    path = write_traces(tmp_path / "traces.jsonl", [r.trace for r in results])
    for result, trace in zip(results, read_traces(path), strict=True):
        assert trace.m == result.m and trace.events == result.trace.events
        config = sim.SimConfig(
            d=NUM_LAYERS, d_bar=2, k=2, ell=trace.ell, matches=sim.Replay.from_trace(trace)
        )
        out = sim.simulate(config)
        assert out.n_runs == result.n_runs == trace.n_runs
        assert out.latency_units == pytest.approx(2 * trace.ell + 2 * result.n_runs)


def test_eos_stops_and_m_matches_length(models):
    prompt = [21, 22, 23]
    ref = greedy_generate(models["mistral"], prompt, max_new_tokens=12).tokens
    eos = ref[4]
    got = ppd_single(models["mistral"], prompt, d_bar=2, k=3, max_new_tokens=12, eos_token_id=eos)
    assert got.tokens == ref[: ref.index(eos) + 1]
    assert len(got.m) == len(got.tokens) - 1


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(d_bar=1, k=1), "d_bar"),
        (dict(d_bar=4, k=1), "d_bar"),
        (dict(d_bar=2, k=0), "k"),
        (dict(d_bar=2, k=VOCAB_SIZE + 1), "k"),
    ],
)
def test_bad_arguments_name_the_parameter(models, kwargs, name):
    with pytest.raises(ValueError, match=name):
        ppd_generate(models["llama"], [1, 2], max_new_tokens=4, **kwargs)
    with pytest.raises(ValueError, match="backend"):
        ppd_generate(models["llama"], [1, 2], d_bar=2, k=1, max_new_tokens=4, backend="x")


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d_bar=float("nan")), "d_bar"),
        (dict(d_bar=None), "d_bar"),
        (dict(k="3"), "k"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=None), "max_new_tokens"),
    ],
)
def test_non_numeric_arguments_name_the_parameter(models, kwargs, name):
    args = {**dict(d_bar=2, k=1, max_new_tokens=4), **kwargs}
    with pytest.raises(ValueError, match=name):
        ppd_generate(models["llama"], [2, 3], **args)


def test_greedy_reference_refuses_zero_tokens(models):
    # `ppd run --max-new-tokens 0` used to end in a ZeroDivisionError in the report
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(models["llama"], [2, 3], max_new_tokens=0)


@pytest.mark.parametrize("bad", [-1, VOCAB_SIZE])
def test_out_of_vocabulary_prompt_is_refused(models, bad):
    with pytest.raises(ValueError, match=f"input_ids.*{VOCAB_SIZE}"):
        ppd_generate(models["gpt2"], [2, bad], d_bar=2, k=1, max_new_tokens=2)
    with pytest.raises(ValueError, match="input_ids"):
        greedy_generate(models["gpt2"], [bad], max_new_tokens=2)


def test_head_for_another_layer_is_refused(models):
    from measure.train.heads import TrainedHead

    head = TrainedHead.from_model(models["llama"], 2)
    with pytest.raises(ValueError, match="head is trained for layer 2; d_bar"):
        ppd_generate(models["llama"], [2, 3], d_bar=3, k=1, max_new_tokens=2, head=head)
    got = ppd_generate(models["llama"], [2, 3], d_bar=2, k=1, max_new_tokens=2, head=head)
    assert got.trace.head == "trained"


def test_kv_ops_pack_roundtrip_and_crop(models):
    from measure.hf.layer_split import LayerSplitModel

    lsm = LayerSplitModel(models["llama"])
    cache = lsm.new_cache()
    lsm.prefill(torch.tensor([[4, 5, 6]]), cache)
    entries = last_entries(cache, range(2), 0)
    hidden = torch.randn(1, 1, 32)
    back_h, back_e = unpack(pack(hidden, entries), (1, 1, 32), [k.shape for k, _ in entries])
    assert torch.equal(back_h, hidden)
    assert all(
        torch.equal(a, b)
        for pair, pair2 in zip(entries, back_e, strict=True)
        for a, b in zip(pair, pair2, strict=True)
    )
    append_entries(cache, range(2), entries)
    assert [layer.get_seq_length() for layer in cache.layers] == [4, 4, 3, 3]
    crop_last(cache, range(2))
    assert [layer.get_seq_length() for layer in cache.layers] == [3, 3, 3, 3]
    with pytest.raises(ValueError, match="packed"):
        unpack(pack(hidden, entries)[:-1], (1, 1, 32), [k.shape for k, _ in entries])


def test_rewindable_sliding_cache_crops_back_past_its_window():
    from measure.hf.kv_ops import rewindable
    from measure.hf.layer_split import LayerSplitModel
    from tests.measure.tiny_models import SLIDING_WINDOW, tiny_model

    lsm = LayerSplitModel(tiny_model("gemma3_text", seed=4))
    ids = torch.arange(2 * SLIDING_WINDOW)[None] % 50 + 3
    plain, kept = lsm.new_cache(), lsm.new_cache()
    for cache in (plain, kept):
        lsm.prefill(ids, cache)
    rewindable(kept)
    layers = range(lsm.num_layers)
    entries = last_entries(kept, layers, 0)
    with pytest.raises(RuntimeError, match="past"):  # what transformers does without it
        append_entries(plain, layers, entries)
        crop_last(plain, layers)
    before = [(layer.keys.clone(), layer.get_seq_length()) for layer in kept.layers]
    append_entries(kept, layers, entries)
    crop_last(kept, layers)
    after = [(layer.keys, layer.get_seq_length()) for layer in kept.layers]
    assert all(torch.equal(a, b) and m == n for (a, m), (b, n) in zip(before, after, strict=True))
    with pytest.raises(ValueError, match="cache must be a transformers DynamicCache"):
        rewindable([])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_streams_equal_greedy(dtype):
    model = tiny_model("llama", seed=1).to("cuda", dtype)
    for prompt in prompts(10, seed=7):
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        got = ppd_single(model, prompt, d_bar=2, k=1, max_new_tokens=NEW_TOKENS)
        assert got.tokens == ref


def test_ppd_generate_loads_a_model_directory(models, tmp_path):
    models["gpt2"].save_pretrained(tmp_path)
    got = ppd_generate(str(tmp_path), [3, 4], d_bar=2, k=2, max_new_tokens=5)
    assert got.tokens == greedy_generate(models["gpt2"], [3, 4], max_new_tokens=5).tokens
