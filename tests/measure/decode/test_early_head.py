"""Both early-head placements in the real decoder: exact greedy output, traces, abandonment."""

from __future__ import annotations

import threading

import pytest

from sim.formats import MatchTrace

torch = pytest.importorskip("torch")

from measure.decode.backends import ppd_generate, ppd_many  # noqa: E402
from measure.decode.comm import HeaderReader, PendingRecv  # noqa: E402
from measure.decode.dist import (  # noqa: E402
    END,
    KIND_CODES,
    VERDICT,
    CandidateWorker,
    owner,
    share,
)
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.launch import ppd_dist_many  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from measure.train.heads import TrainedHead  # noqa: E402
from tests.measure.decode.test_local import NEW_TOKENS, FixedHead, prompts  # noqa: E402
from tests.measure.tiny_models import ARCHS, NUM_LAYERS, VOCAB_SIZE, tiny_model  # noqa: E402

PLACEMENTS = ("main", "candidates")
CONFIGS = [(2, 1), (3, 2), (2, 3), (3, 5), (2, 8)]
"""(d_bar, k) pairs cycled over the prompts (d = 4 layers)."""

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return {arch: tiny_model(arch, seed=1) for arch in ARCHS}


def perturbed_head(model, layer: int, seed: int = 0) -> TrainedHead:
    """A trained-head stand-in: the logit lens with its LM head weights perturbed."""
    head = TrainedHead.from_model(model, layer)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight = head.lm_head.weight
        weight.add_(0.5 * weight.std() * torch.randn(weight.shape, generator=gen))
    return head.eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_both_placements_equal_greedy_and_each_other(models, arch):
    """Same h, same head, same top-k: the placements differ in who computes it, not in m."""
    model, matched = models[arch], 0
    for i, prompt in enumerate(prompts(12, seed=11)):
        d_bar, k = CONFIGS[i % len(CONFIGS)]
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        runs = {
            place: ppd_single(
                model, prompt, d_bar=d_bar, k=k, max_new_tokens=NEW_TOKENS, early_head=place
            )
            for place in PLACEMENTS
        }
        for place, got in runs.items():
            assert got.tokens == ref, f"{arch} prompt {i} d_bar={d_bar} k={k} {place}"
            assert got.early_head == place
        assert runs["main"].m == runs["candidates"].m
        matched += sum(runs["candidates"].m)
    assert matched > 0  # the hand-off path ran under "candidates"


@pytest.mark.parametrize("arch", ARCHS)
def test_trained_head_on_the_candidate_side_equals_greedy(models, arch):
    model = models[arch]
    heads = {d_bar: perturbed_head(model, d_bar, seed=d_bar) for d_bar in (2, 3)}
    for i, prompt in enumerate(prompts(6, seed=12)):
        d_bar, k = CONFIGS[i % len(CONFIGS)]
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        runs = [
            ppd_single(
                model,
                prompt,
                d_bar=d_bar,
                k=k,
                max_new_tokens=NEW_TOKENS,
                head=heads[d_bar],
                early_head=place,
            )
            for place in PLACEMENTS
        ]
        assert [r.tokens for r in runs] == [ref, ref], f"{arch} prompt {i}"
        assert runs[0].m == runs[1].m and runs[1].trace.head == "trained"
        for run, place in zip(runs, PLACEMENTS, strict=True):  # traces.jsonl records both
            assert (run.trace.backend, run.trace.early_head) == ("single", place)
            again = MatchTrace.from_dict(run.trace.to_dict())
            assert (again.backend, again.early_head) == ("single", place)


def test_candidate_side_uses_the_given_head(models):
    """A head that always guesses wrong never matches, also when the candidates run it."""
    prompt = [9, 4, 33]
    ref = greedy_generate(models["qwen2"], prompt, max_new_tokens=10).tokens
    wrong = next(t for t in range(VOCAB_SIZE) if t not in ref)
    got = ppd_single(
        models["qwen2"],
        prompt,
        d_bar=3,
        k=1,
        max_new_tokens=10,
        head=FixedHead(wrong),
        early_head="candidates",
    )
    assert got.tokens == ref and got.m == [0] * 9


def test_candidates_trace_puts_the_early_head_on_the_candidate_process(models):
    d_bar, e = 3, NUM_LAYERS - 3
    got = ppd_single(
        models["llama"], [11, 12], d_bar=d_bar, k=2, max_new_tokens=8, early_head="candidates"
    )
    events = got.trace.events
    main_heads = [ev for ev in events if ev["process"] == 0 and ev["kind"] == "head"]
    assert [(ev["layer_start"], ev["layer_end"]) for ev in main_heads] == [(4, 4)] * got.ell
    cand = [ev for ev in events if ev["process"] == 1]
    per_token = [(ev["token"], ev["kind"], ev["layer_start"], ev["layer_end"]) for ev in cand]
    expected = [
        x for t in range(2, got.ell + 1) for x in ((t, "head", d_bar, d_bar), (t, "layers", 0, e))
    ]
    assert per_token == expected
    for head, layers in zip(cand[::2], cand[1::2], strict=True):
        assert head["end_s"] <= layers["start_s"]  # top-k first, then the k rows


def test_unknown_placement_is_refused_naming_early_head(models):
    for call in (
        lambda: ppd_generate(
            models["gpt2"], [2, 3], d_bar=2, k=1, max_new_tokens=2, early_head="x"
        ),
        lambda: ppd_many(models["gpt2"], [[2, 3]], d_bar=2, k=1, max_new_tokens=2, early_head=None),
        lambda: ppd_dist_many(
            models["gpt2"], [[2, 3]], d_bar=2, k=1, max_new_tokens=2, early_head=1
        ),
    ):
        with pytest.raises(ValueError, match="early_head must be one of"):
            call()


class FakeComm:
    """The slice of ``Comm`` a CandidateWorker uses, with main's next header set by the test."""

    def __init__(self, next_header=None):
        self.next_header, self.sent, self.prefetched = next_header, [], 0

    def prefetch_header(self):
        self.prefetched += 1

    def arrived_header(self):
        return self.next_header

    def send(self, tensor, dst):
        self.sent.append((tensor.clone(), dst))

    def recv_payload(self, numel, dtype):
        return torch.zeros(numel, dtype=dtype)

    def post_payload(self, numel, dtype):
        self.posted = getattr(self, "posted", []) + [(numel, dtype)]

    device = torch.device("cpu")


def _worker(model, comm, *, rank=1, world_size=2, k=3, d_bar=2):
    worker = CandidateWorker(LayerSplitModel(model), comm, rank, d_bar, k=k, world_size=world_size)
    worker.prompt(torch.tensor([[5, 6, 7]]))
    return worker


@pytest.mark.parametrize(
    ("header", "abandoned"),
    [
        (None, False),  # no verdict yet: the batch runs to the end
        ([VERDICT, 0, 9, 3, 0, 0, -1, -1, -1], False),  # a row here is accepted: finish
        ([VERDICT, -1, 9, 3, 0, 0, -1, -1, -1], True),  # rejected: stop after one layer
        ([END, -1, -1, -1, 0, 0, -1, -1, -1], True),  # the sequence ended: stop
    ],
)
def test_worker_abandons_a_rejected_batch_between_layers(models, header, abandoned):
    comm = FakeComm(header)
    worker = _worker(models["mistral"], comm)  # 2 KV heads of 8 dims, e = 2 layers
    worker.sync(torch.zeros(2 * 2 * 2 * 8), heads=2, dh=8)  # main's KV of the current token
    worker.candidates(3, [10, 11, 12], token=2)
    assert comm.prefetched == 1
    token, a, b, _, _, code = worker.events[-1]
    if abandoned:
        assert (token, a, b, code) == (2, 0, 1, KIND_CODES["abandoned"])
        assert worker.rows is None and worker.h is None
    else:
        assert (token, a, b, code) == (2, 0, 2, KIND_CODES["layers"])
        assert worker.h.shape == (3, 1, 32)


@pytest.mark.parametrize(("rank", "world_size"), [(1, 2), (1, 3), (2, 3)])
def test_worker_runs_the_early_head_and_reports_its_share(models, rank, world_size):
    model, k, d_bar = models["gpt2"], 5, 2
    lsm = LayerSplitModel(model)
    comm = FakeComm()
    worker = _worker(model, comm, rank=rank, world_size=world_size, k=k, d_bar=d_bar)
    cache = lsm.new_cache()  # main: the same prefill, then token 7 up to d_bar
    lsm.prefill(torch.tensor([[5, 6]]), cache)
    pos = torch.tensor([[2]])
    h = lsm.run_layers(lsm.embed(torch.tensor([[7]]), pos), 0, d_bar, cache, pos)  # [1, 1, H]
    top = torch.topk(lsm.logits(h)[:, -1].float(), k, dim=-1).indices[0].tolist()
    kv = [x[:, :, -1:] for i in (0, 1) for x in (cache.layers[i].keys, cache.layers[i].values)]
    flat = torch.cat([h.reshape(-1)] + [x.reshape(-1) for x in kv])
    mine = [top[j] for j in range(k) if owner(j, world_size)[0] == rank]
    assert share(top, rank, world_size) == mine
    heads, dh = kv[0].shape[1], kv[0].shape[3]
    worker.from_hidden(3, len(mine), 2, flat, heads=heads, dh=dh)
    ((ids, dst),) = comm.sent  # IDS: this rank's share, in row order
    assert dst == 0 and ids.tolist() == mine
    kinds = [(row[0], row[1], row[2], row[5]) for row in worker.events]
    assert kinds == [(2, d_bar, d_bar, KIND_CODES["head"]), (2, 0, 2, KIND_CODES["layers"])]
    assert worker.h.shape == (len(mine), 1, 32)
    for i in (0, 1):  # the SYNC entries made the mirror equal main's cache
        assert torch.equal(worker.cache.layers[i].keys, cache.layers[i].keys)
        assert torch.equal(worker.cache.layers[i].values, cache.layers[i].values)
    with pytest.raises(RuntimeError, match="HIDDEN asks for"):
        worker.from_hidden(3, len(mine) + 1, 2, flat, heads=heads, dh=dh)


def test_worker_posts_its_next_payload_once_a_header_gave_the_kv_shapes(models):
    """No receive before the KV shapes are known (a holder's [H] tells none); then, after every
    payload, one receive sized for the largest: [H] and the SYNC entries of e layers."""
    model = models["llama"]
    worker = _worker(model, FakeComm(), d_bar=2)
    hidden = model.config.hidden_size
    assert worker.payload(hidden, 0, 0).shape == (hidden,)
    assert not hasattr(worker.comm, "posted")
    heads, dh = 2, 8
    sync = 2 * worker.e * heads * dh
    worker.payload(hidden + sync, heads, dh)
    worker.payload(hidden, 0, 0)  # the holder's: sized all the same
    assert worker.comm.posted == [(hidden + sync, model.dtype)] * 2


def test_header_reader_peeks_without_blocking_and_raises_failures():
    gate, results = threading.Event(), [[3, -1], RuntimeError("waiting for rank 0 failed")]

    def receive():
        gate.wait()
        gate.clear()
        value = results.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    reader = HeaderReader(receive)
    assert reader.peek() is None  # nothing asked yet
    reader.start()
    assert reader.peek() is None  # asked, not arrived: returns at once
    gate.set()
    while reader.peek() is None:
        pass
    assert reader.peek() == [3, -1] and reader.take() == [3, -1] and not reader.pending
    reader.start()
    gate.set()
    with pytest.raises(RuntimeError, match="waiting for rank 0"):
        reader.take()


def test_pending_recv_names_the_silent_rank():
    """Main waits for a rank's IDS at verdict time; a timeout there names that rank."""

    class Work:
        def __init__(self, error=None):
            self.error = error

        def wait(self):
            if self.error:
                raise RuntimeError(self.error)

    ids = torch.tensor([4, 5])
    assert PendingRecv(Work(), ids, 2).wait() is ids
    with pytest.raises(RuntimeError, match="from rank 2 failed: Timed out"):
        PendingRecv(Work("Timed out"), ids, 2).wait()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_streams_candidates_placement_equals_greedy(dtype):
    """The early head and top-k on the candidate stream; main waits for the ids only."""
    model = tiny_model("llama", seed=1).to("cuda", dtype)
    for i, prompt in enumerate(prompts(10, seed=7)):
        d_bar, k = 2 + i % 2, 1  # k = 1: batched rows could round apart from greedy's
        ref = greedy_generate(model, prompt, max_new_tokens=NEW_TOKENS).tokens
        runs = [
            ppd_single(model, prompt, d_bar=d_bar, k=k, max_new_tokens=NEW_TOKENS, early_head=place)
            for place in PLACEMENTS
        ]
        assert [r.tokens for r in runs] == [ref, ref]
        assert runs[0].m == runs[1].m
