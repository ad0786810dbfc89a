"""Early-prediction match rates (p_correct): one generation per prompt covers all layers and k.

Definition (paper section 4.3, Table 2, Tables 6-8). Let x_0 be the last prompt token
and x_1..x_ell the generated tokens; the forward pass whose *input* is x_{j-1} (at absolute
position S + j - 2 for a prompt of S tokens) produces x_j. The prompt minus x_0 is prefilled,
so every x_j, j = 1..ell, has its own pass, exactly as in real PPD (``measure.decode.loop``). During
that pass the hidden state after ``layer`` decoder layers (1-based: ``layer=20`` is the output
of the 20th layer, as in the paper's Table 2; PPD's d_bar) goes through the early head (the
model's own final norm + LM head, ``head="shared"``, or a per-layer trained head,
``head="trained"``), and the record at *position j* (the j-th generated token) is

    match_j(layer, k) = 1  iff  x_j is among the early head's top-k tokens of that pass.

x_j is the final layer's argmax (greedy) or, for appendix B, a token sampled from the final
distribution (top-k / top-p) exactly as ``generate`` and sampled PPD sample it
(``measure.decode.sampling``), from a generator seeded with ``prompt_seed(seed, prompt id)``:
``ppd_many(..., seeds=[prompt_seed(seed, id)])`` draws the same tokens, so its m equal these
records'. A sequence of ell tokens yields ell records per (layer, k, head),
positions 1..ell, as the paper counts them (Tables 6-8 start at position 1). The latency
model's m_t is the match at position t - 1 (the rule and its source, Algorithm 2, are in
``ppdmodel.positions``); ``to_traces`` builds these m (equal to ``PPDResult.m`` of the same
prompt, d_bar, k and head).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from measure.chat import encode_prompt
from measure.checks import as_prompt_ids, check_context, check_prompt_ids, eos_token_ids
from measure.decode.sampling import (
    Decoding,
    GreedyChoice,
    TransformersChoice,
    logits_processors,
    prompt_seed,
)
from measure.degenerate import DegenerateSummary, summarize, warn_degenerate
from measure.hf.compat import model_cache_keyword
from measure.hf.layer_split import LayerSplitModel
from measure.hf.lens import resolve_head
from measure.match.config import (  # noqa: F401 (re-exported)
    POSITIONS,
    RECORD_COLUMNS,
    MatchRateConfig,
    Sampling,
    make_config,
)
from measure.match.tables import by_position, table2, to_traces  # noqa: F401 (re-exported)
from measure.train.head_io import group_heads
from measure.train.translator import TranslatorHead, stacked_logits
from ppdmodel.validation import check_flag, items_of


@dataclass
class PromptResult:
    """One prompt's generation: its tokens and, per head, the rank of each x_j in the early top-K.

    ``ranks[head]`` is ``(layers, r)`` with ``r[j - 1, i]`` the 0-based rank of generated token
    x_j (j = 1..ell) among the top-K (K = max k) early predictions of layer ``layers[i]`` in the
    pass that produced x_j, or K if it is not among them; so match_j(layer, k) = ``r < k``.
    """

    prompt: str
    prompt_tokens: int
    tokens: list[int]
    decoding: str
    max_k: int
    ranks: dict[str, tuple[list[int], np.ndarray]] = field(default_factory=dict)

    @property
    def ell(self) -> int:
        return len(self.tokens)

    def to_frame(self, ks: Sequence[int]) -> pd.DataFrame:
        """Tidy records (``RECORD_COLUMNS``) for positions 1..ell, every layer, k and head."""
        frames = [self._head_frame(head, ks) for head in self.ranks]
        frames = [f for f in frames if len(f)]
        if not frames:
            return empty_records()
        return pd.concat(frames, ignore_index=True)

    def _head_frame(self, head: str, ks: Sequence[int]) -> pd.DataFrame:
        layers, r = self.ranks[head]
        n_pos, n_layers, ks_arr = r.shape[0], len(layers), np.asarray(ks)
        # order: layer, k, position (so each (layer, k) block is one trace in position order)
        shape = (n_layers, len(ks_arr), n_pos)
        match = r.T[:, None, :] < ks_arr[None, :, None]  # [L, K, P]
        position = np.broadcast_to(np.arange(1, n_pos + 1), shape)
        return pd.DataFrame(
            {
                "prompt": self.prompt,
                "position": position.ravel(),
                "layer": np.broadcast_to(np.asarray(layers)[:, None, None], shape).ravel(),
                "k": np.broadcast_to(ks_arr[None, :, None], shape).ravel(),
                "head": head,
                "decoding": self.decoding,
                "match": match.ravel(),
                "token": np.broadcast_to(np.asarray(self.tokens), shape).ravel(),
            }
        )

    def to_dict(self) -> dict:
        return {
            "prompt": self.prompt,
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "decoding": self.decoding,
            "max_k": self.max_k,
            "ranks": {h: {"layers": ls, "ranks": r.tolist()} for h, (ls, r) in self.ranks.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> PromptResult:
        ranks = {}
        for head, value in data["ranks"].items():
            r = np.asarray(value["ranks"], dtype=np.int64).reshape(-1, len(value["layers"]))
            if len(r) != len(data["tokens"]):
                raise ValueError(
                    f"prompt {data['prompt']!r}: {len(r)} ranks for {len(data['tokens'])} tokens "
                    "(a run recorded before positions 1..ell; re-run it in a new directory)"
                )
            ranks[head] = (list(value["layers"]), r)
        keys = ("prompt", "prompt_tokens", "tokens", "decoding", "max_k")
        return cls(**{key: data[key] for key in keys}, ranks=ranks)


def empty_records() -> pd.DataFrame:
    """An empty DataFrame with the record columns and dtypes."""
    dtypes = {
        "position": "int64",
        "layer": "int64",
        "k": "int64",
        "match": "bool",
        "token": "int64",
    }
    return pd.DataFrame({c: pd.Series(dtype=dtypes.get(c, "object")) for c in RECORD_COLUMNS})


class GreedyMismatchError(RuntimeError):
    """The layer-split generation disagrees with the model's own greedy forward pass."""


class MeasureOOMError(RuntimeError):
    """Out of memory while measuring one prompt; the message names the sizes that failed."""


def is_oom(exc: BaseException) -> bool:
    """True for torch's OutOfMemoryError and RuntimeErrors that report running out of memory."""
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(exc, oom_type) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()
    )


def measure_prompt(
    lsm,
    input_ids: torch.Tensor,
    prompt: str,
    config: MatchRateConfig,
    heads=None,
    eos_ids: Sequence[int] = (),
) -> PromptResult:
    """Generate up to ell tokens from ``input_ids`` [1, S] and rank each token in every early top-K.

    ``lsm`` is a measure.hf.layer_split.LayerSplitModel; ``heads`` ``{layer: head}``, a list
    of heads or ``{name: {layer: head}}`` (``measure.train.head_io.group_heads``).
    Out-of-memory becomes MeasureOOMError with the prompt length, batch, max_new_tokens and
    dtype in its message.
    """
    check_context(lsm.model.config, input_ids.shape[-1], config.max_new_tokens, names=[prompt])
    try:
        with torch.inference_mode():
            groups = _as_groups(heads)
            for by_layer in groups.values():  # refuse heads trained against another LM head
                for head in by_layer.values():
                    resolve_head(head, lsm.lens)
            result, cache = _generate(lsm, input_ids, prompt, config, groups, set(eos_ids))
            if config.verify and config.sampling is None:
                verify_greedy(lsm.model, input_ids, result.tokens, prompt, cache)
        return result
    except Exception as exc:
        if not is_oom(exc):
            raise
        dtype = next(lsm.model.parameters()).dtype
        raise MeasureOOMError(
            f"out of memory measuring prompt {prompt!r}: prompt_tokens={input_ids.shape[1]}, "
            f"batch={input_ids.shape[0]}, max_new_tokens={config.max_new_tokens}, dtype={dtype}, "
            f"device={input_ids.device}; use a shorter --max-new-tokens, a smaller dtype or "
            f"--limit/shorter prompts"
        ) from exc


def _as_groups(heads) -> dict[str, dict[int, torch.nn.Module]]:
    """``{name: {layer: head}}`` from any form `measure_prompt` accepts."""
    if isinstance(heads, Mapping) and heads and all(isinstance(v, Mapping) for v in heads.values()):
        return {name: dict(by_layer) for name, by_layer in heads.items()}
    return group_heads(heads)


def _generate(lsm, input_ids, prompt, config, groups, eos_ids) -> tuple[PromptResult, object]:
    # input_ids: [1, S]
    if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.shape[1] < 1:
        raise ValueError(f"prompt {prompt!r}: input_ids must have shape [1, S>=1]")
    d, max_k = lsm.num_layers, config.max_k
    if max_k > _vocab_size(lsm):
        raise ValueError(f"ks must be <= the vocabulary size {_vocab_size(lsm)}, got {max_k}")
    probed = {}  # name -> (layers, heads) of the trained heads this config probes
    for name, by_layer in groups.items():
        layers = [layer for layer in by_layer if layer in config.trained_layers]
        if layers:
            probed[name] = (layers, [by_layer[layer] for layer in layers])
    wanted = set(config.layers).union(*(layers for layers, _ in probed.values()))
    rule = _next_token_rule(lsm, input_ids, config, prompt)
    cache = lsm.new_cache()
    if input_ids.shape[1] > 1:
        lsm.prefill(input_ids[:, :-1], cache)  # as PPD: x_0 gets its own pass below
    token, start = input_ids[:, -1:], input_ids.shape[1] - 1  # x_0 [1, 1] and its position
    tokens, shared_ranks = [], []
    trained_ranks: dict[str, list[torch.Tensor]] = {name: [] for name in probed}
    for t in range(1, config.max_new_tokens + 1):  # the pass over x_{t-1} produces x_t
        position_ids = torch.full((1, 1), start + t - 1, dtype=torch.long, device=token.device)
        h = lsm.embed(token, position_ids)  # h: [1, 1, H]
        kwargs = lsm.layer_kwargs(h, 0, cache, position_ids)  # mask/rotary once per step
        saved = {}
        for i in range(d):
            h = lsm.run_layer(i, h, kwargs)  # = run_layers(h, i, i + 1, ...)
            if i + 1 in wanted:
                saved[i + 1] = h
        final = lsm.logits(h)[:, -1]  # [1, V], exactly the model's own greedy step
        token = torch.full_like(token, rule.choose(final))  # x_t: [1, 1]
        if config.layers:
            early = shared_logits(lsm, [saved[layer] for layer in config.layers])  # [L, V]
            shared_ranks.append(_ranks(early, token, max_k))
        for name, (layers, heads) in probed.items():
            early = torch.cat(
                [head(saved[lay])[0] for lay, head in zip(layers, heads, strict=True)]
            )
            trained_ranks[name].append(_ranks(early, token, max_k))
        tokens.append(token)
        if eos_ids and int(token) in eos_ids:
            break
    ranks = {}
    if config.layers:
        ranks["shared"] = (list(config.layers), _stack(shared_ranks, len(config.layers)))
    for name, (layers, _heads) in probed.items():
        ranks[name] = (list(layers), _stack(trained_ranks[name], len(layers)))
    ids = torch.cat(tokens, dim=1)[0].tolist()
    result = PromptResult(prompt, int(input_ids.shape[1]), ids, config.decoding, max_k, ranks)
    return result, cache


def shared_logits(lsm, hs: list[torch.Tensor]) -> torch.Tensor:
    """The shared head on L hidden states [1, 1, H] -> [L, V], as one stacked matmul.

    CPU BLAS runs 2-3 stacked rows slower than the same rows one by one, so there they go
    one by one; 4 or more rows, and any GPU, use the single stacked matmul.
    """
    if len(hs) >= 4 or hs[0].device.type != "cpu":
        return lsm.logits(torch.cat(hs, dim=1))[0]
    return torch.cat([lsm.logits(h)[0] for h in hs])


def head_logits(heads: list, hs: list[torch.Tensor]) -> torch.Tensor:
    """Trained heads on their hidden states [1, 1, H] -> [L, V]; translators of one model are
    stacked through its LM head in one matrix product."""
    if len(heads) > 1 and all(isinstance(h, TranslatorHead) for h in heads):
        return stacked_logits(heads, hs)
    return torch.cat([head(h)[0] for head, h in zip(heads, hs, strict=True)])


def _ranks(logits: torch.Tensor, token: torch.Tensor, max_k: int) -> torch.Tensor:
    """logits [L, V], token [1, 1] -> [L]: rank of token in each row's top-max_k, or max_k."""
    top = logits.topk(max_k, dim=-1).indices  # [L, K]
    hit = top == token.view(1, 1)
    return torch.where(hit.any(dim=-1), hit.int().argmax(dim=-1), max_k)


def _stack(rows: list[torch.Tensor], n_layers: int) -> np.ndarray:
    if not rows:
        return np.zeros((0, n_layers), dtype=np.int64)
    return torch.stack(rows).cpu().numpy().astype(np.int64)


def _next_token_rule(lsm, input_ids, config: MatchRateConfig, prompt: str):
    """Greedy (argmax), or sampled as ``generate`` samples from a generator seeded from
    (seed, prompt id), so resumed and sharded runs, and PPD runs, draw the same."""
    if config.sampling is None:
        return GreedyChoice()
    decoding = Decoding(**config.sampling.generate_kwargs())
    processors = logits_processors(lsm.model, decoding, input_ids, config.max_new_tokens)
    generator = torch.Generator(device=input_ids.device)
    generator.manual_seed(prompt_seed(config.seed, prompt))
    return TransformersChoice(input_ids, processors, generator=generator)


def _vocab_size(lsm) -> int:
    return int(lsm.model.get_output_embeddings().weight.shape[0])


@torch.no_grad()
def verify_greedy(
    model, input_ids: torch.Tensor, tokens: Sequence[int], prompt: str, cache=None
) -> None:
    """Check generated tokens against the model's own forward pass (teacher forcing).

    Without ``cache``: one pass over prompt + tokens[:-1], checking tokens 1..ell. With the
    generation's KV ``cache`` (cropped back to the prompt minus its last token here, so it is
    spent): one pass over the last prompt token + tokens[:-1] only, also checking tokens 1..ell.
    Raises GreedyMismatchError unless each token is the model's argmax, up to near ties (a logit
    gap above 1e-3 in fp32, 0.1 in 16-bit formats).
    """
    ids = torch.as_tensor(tokens, device=input_ids.device).view(1, -1)  # [1, ell]
    start = input_ids.shape[1]
    if cache is not None and (start < 2 or not _crop(cache, start - 1)):
        cache = None  # e.g. a sliding-window cache past its window: use the full pass
    if cache is None:
        feed = torch.cat([input_ids, ids[:, :-1]], dim=1)  # [1, S + ell - 1]
        logits = model(input_ids=feed, use_cache=False).logits[0, start - 1 :]  # [ell, V]
    else:
        feed = torch.cat([input_ids[:, -1:], ids[:, :-1]], dim=1)  # [1, ell]: x_0..x_{ell-1}
        kwargs = {model_cache_keyword(model): cache}
        logits = model(input_ids=feed, use_cache=True, **kwargs).logits[0]
    logits, target = logits.float(), ids[0]
    own = logits.argmax(dim=-1)
    gap = (logits.gather(-1, own[:, None]) - logits.gather(-1, target[:, None]))[:, 0]
    tol = 1e-3 if model.dtype == torch.float32 else 0.1
    bad = (gap > tol).nonzero()
    if len(bad):
        j = int(bad[0])
        raise GreedyMismatchError(
            f"prompt {prompt!r}: generated token {j + 1} is {int(target[j])} but the model's "
            f"own greedy token is {int(own[j])} (logit gap {float(gap[j]):.3g})"
        )


def _crop(cache, length: int) -> bool:
    """Cut ``cache`` back to its first ``length`` positions; False where it cannot."""
    try:
        extra = cache.get_seq_length() - length
        if extra > 0:
            cache.crop(-extra)
    except (ValueError, RuntimeError):
        return False
    return cache.get_seq_length() == length


def prompt_inputs(
    prompts, tokenizer=None, device="cpu", *, chat_template: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """(id, input_ids [1, S]) for Prompt objects, strings, token-id lists or tensors.

    Texts are encoded by ``measure.chat.encode_prompt``: as the user turn of the tokenizer's
    chat template when it has one and ``chat_template`` is on, else as bare text.
    """
    for index, item in enumerate(prompts):
        pid, value = str(index), item
        if hasattr(item, "text") and hasattr(item, "id"):
            pid, value = str(item.id), item.text
        if isinstance(value, str):
            if tokenizer is None:
                raise ValueError("tokenizer is required for text prompts")
            ids = torch.tensor(encode_prompt(tokenizer, value, chat_template=chat_template))
            if ids.numel() < 1:
                raise ValueError(f"prompts: prompt {pid!r} encodes to no token")
        ids = as_prompt_ids(ids if isinstance(value, str) else value, device, f"prompts[{index}]")
        yield pid, ids


def match_rates(
    model,
    prompts,
    *,
    layers: Iterable[int] | None = None,
    ks: Iterable[int] = (1, 3, 5),
    max_new_tokens: int = 16,
    heads=None,
    tokenizer=None,
    sampling=None,
    seed: int = 0,
    verify: bool = True,
    progress: bool = False,
    chat_template: bool = True,
) -> pd.DataFrame:
    """Early-prediction matches m_t for every prompt, layer, k and head, as a tidy DataFrame.

    model: a Hugging Face causal LM (or a LayerSplitModel); prompts: Prompt objects, strings
    (needs ``tokenizer``; encoded through its chat template unless ``chat_template=False``),
    token-id lists or tensors. layers: 1-based layer counts probed with the shared head
    (default 1..d-1). heads: ``{layer: head}`` or a list of heads (several kinds per layer
    allowed) adds rows named by each head (``"trained"`` for a TrainedHead, ``"translator"``
    for a TranslatorHead). sampling: None (greedy) or ``{"top_k": 50}`` / ``{"top_p": 0.9}``.
    Columns ``RECORD_COLUMNS``; positions 1..ell, one per generated token (module docstring).
    A UserWarning names prompts whose generation ended at once or fell into repetition
    (``measure.degenerate``).
    """
    from tqdm.auto import tqdm

    lsm = as_layer_split(model)
    for name, flag in (("verify", verify), ("progress", progress),
                       ("chat_template", chat_template)):  # fmt: skip
        check_flag(name, flag)
    if items_of(prompts) is None:
        raise ValueError(f"prompts must be a list of prompts, got {type(prompts).__name__}")
    groups = group_heads(heads)
    config = make_config(
        lsm.num_layers,
        layers=layers,
        ks=ks,
        max_new_tokens=max_new_tokens,
        trained_layers=trained_layers(groups),
        sampling=sampling,
        seed=seed,
        verify=verify,
    )
    eos = eos_token_ids(lsm.model)
    device = next(lsm.model.parameters()).device
    inputs = list(prompt_inputs(prompts, tokenizer, device, chat_template=chat_template))
    check_inputs_context(lsm, inputs, config.max_new_tokens)
    results = [
        measure_prompt(lsm, ids, pid, config, groups, eos)
        for pid, ids in tqdm(inputs, disable=not progress)
    ]
    warn_degenerate(degenerate_summary(results, eos), stacklevel=2)
    frames = [f for f in (r.to_frame(config.ks) for r in results) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else empty_records()


def check_inputs_context(lsm, inputs: Sequence[tuple[str, torch.Tensor]], max_new_tokens) -> None:
    """ValueError naming the first (id, input_ids [1, S]) prompt that cannot fit
    ``max_new_tokens`` more tokens in the model's context (checked before any work)."""
    vocab = lsm.model.config.get_text_config().vocab_size
    for i, (_, ids) in enumerate(inputs):
        check_prompt_ids(ids, vocab, f"prompts[{i}]")
    names = [pid for pid, _ in inputs]
    lengths = [ids.shape[-1] for _, ids in inputs]
    check_context(lsm.model.config, lengths, max_new_tokens, names=names, argument="prompts")


def trained_layers(groups: Mapping[str, Mapping[int, object]]) -> list[int]:
    """Every layer that some trained head of ``groups`` reads."""
    return sorted({layer for by_layer in groups.values() for layer in by_layer})


def degenerate_summary(results: Sequence[PromptResult], eos_ids) -> DegenerateSummary:
    """Which prompts' generations ended at once or fell into repetition (measure.degenerate)."""
    return summarize({r.prompt: r.tokens for r in results}, eos_ids)


def as_layer_split(model):
    """Wrap a causal LM in a LayerSplitModel (a LayerSplitModel is returned as is)."""
    return model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
