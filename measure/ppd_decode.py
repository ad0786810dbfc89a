"""Real PPD decoding (paper Algorithm 2) whose output is exactly greedy decoding.

Schedule (d layers, early prediction at d_bar, e = d - d_bar candidate layers, k candidates).
The prompt minus its last token is prefilled; then each generated token t = 1..ell is one
*pass* of the main process over the previous token:

1. main runs layers [a, d_bar) of the pass (a = 0, or a = e after a hand-off);
2. the early head at d_bar gives the top-k candidates for the pass's output token;
3. the k candidates run as ONE batch of k rows through layers [0, e) at the next position,
   sharing the prefix KV cache, while main runs layers [d_bar, d) and the LM head;
4. if the final token is candidate j, row j's hidden state at layer e and its KV entries for
   layers [0, e) are handed to main, and the next pass starts at layer e (m_t = 1); otherwise
   the next pass starts at layer 0 (m_t = 0).

Main's own computation is the greedy computation, so the tokens are greedy's; after a hand-off
main's cache equals greedy's up to the rounding of the batched candidate rows (exactly so at
k = 1 on CPU). Latency in layer units is d_bar*ell + e*N (N = 1 + sum(1 - m_t)).

Backends: ``single`` (one process; sequential emulation on CPU, main and candidates on two CUDA
streams on a GPU) and ``dist`` (torch.distributed ranks, see ``measure.ppd_dist``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from measure.layer_split import LayerSplitModel
from measure.ppd_local import MAIN, LocalCandidates, Recorder, synchronize
from sim.formats import MatchTrace


@dataclass
class PPDResult:
    """One PPD generation: the tokens, the match outcomes and the timed trace."""

    tokens: list[int]
    """Generated token ids (prompt excluded); equal to greedy decoding's."""
    m: list[int]
    """m_t for t = 2..ell: 1 if pass t started from a handed-off candidate."""
    n_runs: int
    """N = 1 + sum(1 - m_t)."""
    trace: MatchTrace
    """Replay-format trace (source ``ppd_run``) with timed events (``sim.formats.EVENT_KEYS``)."""
    wall_s: float
    """Wall-clock seconds of the decode passes (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each generated token was known."""
    prefill_s: float = 0.0
    """Wall-clock seconds of the prefill (prompt minus its last token)."""
    backend: str = "single"
    """``single`` or ``dist``."""
    handoff_bytes: int = 0
    """Bytes of one hand-off message (hidden state + KV entries of layers [0, e))."""
    link_samples: list[tuple[int, float]] = field(default_factory=list)
    """(bytes, one-way seconds) of link probes between ranks (``dist`` only)."""

    @property
    def ell(self) -> int:
        """Number of generated tokens."""
        return len(self.tokens)


@dataclass
class GreedyResult:
    """A plain greedy decode (the reference PPD must reproduce), timed the same way."""

    tokens: list[int]
    """Generated token ids (prompt excluded)."""
    wall_s: float
    """Wall-clock seconds of the decode steps (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each token was known."""
    prefill_s: float = 0.0
    """Wall-clock seconds of the prefill."""


def _is_int(x) -> bool:
    """True for integers (Python or numpy, or integral floats), False for bool, NaN, None, str."""
    try:
        return not isinstance(x, bool | str) and int(x) == x
    except (TypeError, ValueError, OverflowError):
        return False


def check_max_new_tokens(max_new_tokens) -> None:
    """ValueError unless max_new_tokens is an integer >= 1."""
    if not _is_int(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")


def check_ppd_args(d: int, d_bar: int, k: int, vocab_size: int, max_new_tokens: int) -> None:
    """Validate PPD parameters; ValueError names the bad one and its allowed range."""
    if not _is_int(d_bar) or not d / 2 <= d_bar < d:
        raise ValueError(f"d_bar must be an integer with d/2 <= d_bar < d = {d}, got {d_bar!r}")
    if not _is_int(k) or not 1 <= k <= vocab_size:
        raise ValueError(f"k must be an integer in [1, vocab_size = {vocab_size}], got {k!r}")
    check_max_new_tokens(max_new_tokens)


def check_prompt_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """ValueError unless every prompt token id is in [0, vocab_size)."""
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"input_ids must be token ids in [0, {vocab_size}), got {bad}")


def check_head_layer(head, d_bar: int) -> None:
    """ValueError if a trained head was trained for another layer than d_bar."""
    layer = getattr(getattr(head, "config", None), "layer", None)
    if layer is not None and layer != d_bar:
        raise ValueError(f"head is trained for layer {layer}; d_bar must equal it, got {d_bar}")


def as_prompt_ids(input_ids, device) -> torch.Tensor:
    """A prompt as a [1, P] int64 tensor on `device` (accepts a list, [P] or [1, P])."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError(f"input_ids must hold one non-empty prompt, got shape {tuple(ids.shape)}")
    return ids.to(device)


def eos_set(eos_token_id) -> set[int]:
    """EOS ids as a set (None -> empty; an int or a list of ints)."""
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, int):
        return {eos_token_id}
    return {int(x) for x in eos_token_id}


def run_main(lsm, ids, *, d_bar, k, max_new_tokens, eos, candidates_factory, host_clock=False):
    """The main process of PPD (shared by both backends); returns (result fields, cache).

    ``candidates_factory(cache, e, recorder)`` gives the candidate executor: ``start``,
    ``accept`` and ``reject`` as in ``LocalCandidates``.
    """
    d = lsm.num_layers
    e = d - d_bar
    device = lsm.device
    cache = lsm.new_cache()
    t0 = time.perf_counter()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)  # positions 0..P-2
    synchronize(device)
    prefill_s = time.perf_counter() - t0
    rec = Recorder(device, host_clock=host_clock)
    cand = candidates_factory(cache, e, rec)
    token, position = ids[:, -1:], ids.shape[1] - 1  # token: [1, 1]
    handed = None  # h [1, 1, H] at layer e after a hand-off
    tokens, m, times = [], [], []
    for t in range(1, max_new_tokens + 1):
        if t > 1:
            m.append(int(handed is not None))
        pos = torch.full((1, 1), position, dtype=torch.long, device=device)  # [1, 1]
        a = e if handed is not None else 0
        start = rec.mark()
        h = handed if handed is not None else lsm.embed(token, pos)  # [1, 1, H]
        h = lsm.run_layers(h, a, d_bar, cache, pos)
        early = rec.mark()
        rec.add(MAIN, t, a, d_bar, "layers", start, early)
        cands = None
        if t < max_new_tokens:
            cands = torch.topk(lsm.early_logits(h)[:, -1].float(), k, dim=-1).indices  # [1, k]
            launched = rec.mark()
            rec.add(MAIN, t, d_bar, d_bar, "head", early, launched)
            cand.start(cands, position + 1, t + 1)
            early = rec.mark()
        h = lsm.run_layers(h, d_bar, d, cache, pos)
        late = rec.mark()
        rec.add(MAIN, t, d_bar, d, "layers", early, late)
        nxt = int(lsm.logits(h)[:, -1].float().argmax(-1))
        rec.add(MAIN, t, d, d, "head", late, rec.mark())
        tokens.append(nxt)
        times.append(rec.host_seconds())
        if nxt in eos or cands is None:
            break
        hits = (cands[0] == nxt).nonzero()
        if len(hits):
            handed = cand.accept(int(hits[0, 0]), nxt, position + 1, t + 1)
        else:
            handed = None
            cand.reject(nxt, position + 1, t + 1)
        token = torch.full((1, 1), nxt, dtype=torch.long, device=device)
        position += 1
    synchronize(device)
    wall_s = rec.host_seconds()  # the last token is known; collecting peer events is not timed
    if hasattr(cand, "finish"):
        cand.finish()
    return dict(
        tokens=tokens,
        m=m,
        token_times_s=times,
        wall_s=wall_s,
        prefill_s=prefill_s,
        events=rec.events(),
        cand=cand,
    ), cache


def handoff_nbytes(lsm: LayerSplitModel, cache, e: int) -> int:
    """Bytes of one hand-off: hidden state [H] plus one position's K and V in layers [0, e)."""
    size = cache.layers[0].keys.element_size()
    hidden_size = lsm.model.config.get_text_config().hidden_size
    per_layer = [
        2 * cache.layers[i].keys.shape[1] * cache.layers[i].keys.shape[3] for i in range(e)
    ]
    return size * (hidden_size + sum(per_layer))


def build_result(fields: dict, *, d, d_bar, k, sequence, backend, head_name, nbytes=0, link=()):
    """Assemble a PPDResult (and its MatchTrace) from ``run_main``'s fields."""
    m = fields["m"]
    trace = MatchTrace(
        sequence=sequence,
        d=d,
        d_bar=d_bar,
        k=k,
        m=m,
        head=head_name,
        source="ppd_run",
        tokens=fields["tokens"],
        events=fields["events"],
    )
    return PPDResult(
        tokens=fields["tokens"],
        m=m,
        n_runs=1 + sum(1 - x for x in m),
        trace=trace,
        wall_s=fields["wall_s"],
        token_times_s=fields["token_times_s"],
        prefill_s=fields["prefill_s"],
        backend=backend,
        handoff_bytes=nbytes,
        link_samples=list(link),
    )


@torch.no_grad()
def ppd_single(
    model,
    input_ids,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos_token_id=None,
    head=None,
    sequence="0",
    return_cache=False,
):
    """PPD in one process (sequential on CPU, two CUDA streams on a GPU); see ``ppd_generate``."""
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model, head=head)
    d = lsm.num_layers
    vocab = lsm.model.config.get_text_config().vocab_size
    check_ppd_args(d, d_bar, k, vocab, max_new_tokens)
    check_head_layer(lsm.head, d_bar)
    ids = as_prompt_ids(input_ids, lsm.device)
    check_prompt_ids(ids, vocab)
    fields, cache = run_main(
        lsm,
        ids,
        d_bar=d_bar,
        k=k,
        max_new_tokens=max_new_tokens,
        eos=eos_set(eos_token_id),
        candidates_factory=lambda c, e, rec: LocalCandidates(lsm, c, e, rec),
    )
    result = build_result(
        fields,
        d=d,
        d_bar=d_bar,
        k=k,
        sequence=sequence,
        backend="single",
        head_name="trained" if lsm.head is not None else "shared",
        nbytes=handoff_nbytes(lsm, cache, d - d_bar),
    )
    return (result, cache) if return_cache else result


@torch.no_grad()
def greedy_generate(model, input_ids, *, max_new_tokens, eos_token_id=None, return_cache=False):
    """Plain greedy decoding with the same prefill/decode split as PPD (the exactness reference)."""
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
    check_max_new_tokens(max_new_tokens)
    ids = as_prompt_ids(input_ids, lsm.device)
    check_prompt_ids(ids, lsm.model.config.get_text_config().vocab_size)
    eos = eos_set(eos_token_id)
    cache = lsm.new_cache()
    t0 = time.perf_counter()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)
    synchronize(lsm.device)
    t1 = time.perf_counter()
    token, position, tokens, times = ids[:, -1:], ids.shape[1] - 1, [], []
    for _ in range(max_new_tokens):
        nxt = int(lsm.decode_step(token, cache, position).float().argmax(-1))
        tokens.append(nxt)
        times.append(time.perf_counter() - t1)
        if nxt in eos:
            break
        token = torch.full((1, 1), nxt, dtype=torch.long, device=lsm.device)
        position += 1
    synchronize(lsm.device)
    result = GreedyResult(tokens, time.perf_counter() - t1, times, prefill_s=t1 - t0)
    return (result, cache) if return_cache else result


def ppd_generate(
    model,
    input_ids,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos_token_id=None,
    backend="single",
    head=None,
    world_size=2,
    timeout_s=120.0,
    sequence="0",
):
    """Real PPD decoding (paper Algorithm 2); the tokens equal greedy decoding's.

    model: a Hugging Face causal LM (or, for ``dist``, a local model directory);
    input_ids: one prompt ([P], [1, P] or a list); d_bar: early-prediction layer,
    d/2 <= d_bar < d; k: candidates, 1..vocab; backend: ``single`` or ``dist``
    (``world_size`` ranks: main + world_size - 1 candidate ranks, ``timeout_s`` per run).
    """
    if backend == "single":
        if isinstance(model, str | Path):  # a local model directory
            from measure.loading import load_model

            model = load_model(model)[0]
        return ppd_single(
            model,
            input_ids,
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            head=head,
            sequence=sequence,
        )
    if backend == "dist":
        from measure.ppd_launch import ppd_dist_many

        results = ppd_dist_many(
            model,
            [input_ids],
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            world_size=world_size,
            timeout_s=timeout_s,
            head=head,
        )
        return results[0]
    raise ValueError(f"backend must be 'single' or 'dist', got {backend!r}")
