"""Draft-model speculative decoding (Leviathan et al. 2023, section 3), greedy: exact.

One step: the draft proposes q <= g tokens greedily, one forward each, on its own KV cache;
the target verifies them in one forward over q + 1 positions (the last accepted token and the
q drafts); the longest prefix of drafts equal to the target's own argmax is accepted, and the
target's token after it is added (the correction, or a bonus token when all q are accepted).
Both caches are then cut back to the accepted tokens. The tokens are greedy decoding's: every
emitted token is the target's argmax given the accepted (hence greedy) prefix.

Timing as ``measure.decode.greedy``: the prompt minus its last token is prefilled on both
models, untimed; the clock starts at the first step. The draft never proposes past the token
limit: with r tokens left a step drafts min(g, r - 1) (0: a plain target step).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from measure import clock as clocks
from measure.checks import check_max_new_tokens, checked_prompt, eos_set
from measure.clock import synchronize
from measure.hf.arch import arch_spec, get_module
from measure.hf.kv_ops import crop_last, rewindable
from measure.hf.layer_split import LayerSplitModel
from ppdmodel.alternatives import MAX_DRAFT
from ppdmodel.validation import check_positive_int


@dataclass
class SpecResult:
    """One prompt decoded by draft-model speculative decoding."""

    tokens: list[int]
    """Generated token ids (prompt excluded): greedy decoding's."""
    wall_s: float
    """Seconds of the decode steps (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each token was known."""
    drafted: list[int] = field(default_factory=list)
    """Tokens the draft proposed in each step (q)."""
    accepted: list[int] = field(default_factory=list)
    """Drafted tokens the target accepted in each step (x <= q)."""
    draft_rows: list[int] = field(default_factory=list)
    """Rows of each step's first draft forward (2 after a fully accepted step, else 1)."""
    prefill_s: float = 0.0

    @property
    def acceptance(self) -> list[int]:
        """The run's acceptance sequence: per drafted token judged, 1 accepted, 0 rejected (a
        step's drafts after its first rejection are not judged)."""
        out: list[int] = []
        for q, x in zip(self.drafted, self.accepted, strict=True):
            out += [1] * x + ([0] if x < q else [])
        return out

    def __repr__(self) -> str:
        accepted = f"{sum(self.accepted)}/{sum(self.drafted)}"
        return (f"SpecResult(ell={len(self.tokens)}, steps={len(self.drafted)}, "
                f"accepted={accepted}, wall_s={self.wall_s:.4g})")  # fmt: skip


def forward(lsm: LayerSplitModel, ids: torch.Tensor, cache, position: int) -> torch.Tensor:
    """All layers over the S tokens ``ids`` [1, S] at positions position.. -> logits [1, S, V]."""
    position_ids = torch.arange(position, position + ids.shape[1], device=ids.device)[None]
    h = lsm.embed(ids, position_ids)  # [1, S, H]
    h = lsm.run_layers(h, 0, lsm.num_layers, cache, position_ids)
    return lsm.logits(h)  # [1, S, V]


def draft_tokens(draft: LayerSplitModel, pending: torch.Tensor, cache, position: int, q: int):
    """q greedy proposals of ``draft``: ``pending`` [1, r] (tokens its cache lacks, the last
    accepted one last) at positions position..; its cache then holds all but the last proposal.
    Returns the proposals [1, q]."""
    out = [pending[:, :0]]  # [1, 0]: nothing drafted for q = 0
    ids = pending
    for _ in range(q):
        nxt = forward(draft, ids, cache, position)[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        position += ids.shape[1]
        out.append(nxt)
        ids = nxt
    return torch.cat(out, dim=1)


def accepted_count(proposals: torch.Tensor, choices: torch.Tensor) -> int:
    """Longest prefix of ``proposals`` [q] equal to the target's ``choices`` [q + 1]."""
    same = (proposals == choices[: proposals.shape[0]]).long()
    return int(same.cumprod(0).sum())


@torch.no_grad()
def spec_generate(
    model, draft, input_ids, *, draft_tokens_per_step: int, max_new_tokens: int, eos_token_id=None
) -> SpecResult:
    """Greedy speculative decoding of one prompt: ``draft`` proposes up to
    ``draft_tokens_per_step`` tokens, ``model`` verifies (module docstring)."""
    g = int(check_positive_int("draft_tokens_per_step", draft_tokens_per_step, limit=MAX_DRAFT))
    check_max_new_tokens(max_new_tokens)
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
    dsm = draft if isinstance(draft, LayerSplitModel) else LayerSplitModel(draft)
    check_shared_vocab(lsm, dsm)
    ids = checked_prompt(lsm, input_ids, max_new_tokens)  # [1, P]
    eos = eos_set(eos_token_id)
    cache, draft_cache = lsm.new_cache(), dsm.new_cache()
    t0 = clocks.host_clock()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)
        dsm.prefill(ids[:, :-1].to(dsm.device), draft_cache)
    rewindable(cache), rewindable(draft_cache)  # sliding-window layers can be cut back too
    synchronize(lsm.device)
    t1 = clocks.host_clock()
    n = ids.shape[1] - 1  # positions both caches hold (the target's)
    last = ids[:, -1:]  # [1, 1]: the newest accepted token, in neither cache
    pending = last  # tokens the draft cache lacks, ending with ``last``
    result = SpecResult([], 0.0, [], prefill_s=t1 - t0)
    while len(result.tokens) < max_new_tokens:
        q = min(g, max_new_tokens - len(result.tokens) - 1)
        result.draft_rows.append(int(pending.shape[1]) if q else 0)
        proposals = draft_tokens(dsm, pending.to(dsm.device), draft_cache, n + 1 - pending.shape[1],
                                 q).to(lsm.device)  # fmt: skip  # [1, q]
        logits = forward(lsm, torch.cat([last, proposals], dim=1), cache, n)  # [1, q + 1, V]
        choices = logits[0].argmax(-1)  # [q + 1]
        x = accepted_count(proposals[0], choices)
        new = proposals[0, :x].tolist() + [int(choices[x])]
        _drop(cache, q - x)  # keep last, then the x accepted drafts
        result.drafted.append(q)
        result.accepted.append(x)
        stop = False
        for t in new:
            result.tokens.append(t)
            result.token_times_s.append(clocks.host_clock() - t1)
            if t in eos or len(result.tokens) == max_new_tokens:
                stop = True
                break
        if stop:
            break
        n += x + 1
        last = choices[x].view(1, 1)
        if x < q:  # the draft cache holds the old last, q - 1 drafts: keep x of them
            _drop(draft_cache, q - 1 - x)
            pending = last
        elif q:  # every draft accepted: the draft never fed its last proposal
            pending = torch.cat([proposals[:, q - 1 :], last], dim=1)
        else:  # nothing drafted: the draft still lacks what it lacked, then last
            pending = torch.cat([pending, last], dim=1)
    synchronize(lsm.device)
    result.wall_s = clocks.host_clock() - t1
    return result


def _drop(cache, n: int) -> None:
    """Drop the newest ``n`` positions of every layer of ``cache`` (none for n = 0)."""
    if n > 0:
        crop_last(cache, range(len(cache.layers)), n)


def check_shared_vocab(target: LayerSplitModel, draft: LayerSplitModel) -> None:
    """ValueError unless the draft scores the target's vocabulary (same size): its proposals
    are token ids of the target's tokenizer."""
    sizes = [m.model.config.get_text_config().vocab_size for m in (target, draft)]
    if sizes[0] != sizes[1]:
        raise ValueError(f"the draft's vocabulary ({sizes[1]} tokens) is not the target's "
                         f"({sizes[0]}): a draft must share the target's tokenizer")  # fmt: skip


def self_draft(model, layers: int):
    """A draft made of ``model``'s first ``layers`` decoder layers, its final norm and LM head
    (a copy; the layer list found by ``measure.hf.arch``): it shares the target's tokenizer."""
    spec = arch_spec(model)
    d = len(get_module(model, spec.layers))
    layers = int(check_positive_int("layers", layers))
    if layers >= d:
        raise ValueError(f"layers must be in [1, d - 1] = [1, {d - 1}] for a self-draft, got "
                         f"{layers}")  # fmt: skip
    draft = copy.deepcopy(model)
    parent, _, name = spec.layers.rpartition(".")
    holder = get_module(draft, parent) if parent else draft
    setattr(holder, name, torch.nn.ModuleList(list(getattr(holder, name))[:layers]))
    config = draft.config.get_text_config()
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    return draft.eval()
