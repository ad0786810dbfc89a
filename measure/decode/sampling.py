"""How main chooses each token: greedy (argmax), or sampled exactly as transformers' ``generate``.

Paper Appendix B: PPD applies to top-k and top-p sampling unchanged; only main's *final* token
is sampled, and a match (m_t = 1) is the sampled token among the early head's top-k candidates.

Exactness. ``model.generate(do_sample=True, ...)`` (``GenerationMixin._sample``) does, per
token: fp32 copy of the last logits -> the ``LogitsProcessorList`` it built from the generation
config (``model._get_logits_processor``: repetition penalty and the like, then temperature,
top-k, top-p, min-p, ... in that order) -> softmax -> ``torch.multinomial(probs, 1)`` on the
global RNG -> append -> stopping criteria. ``TransformersChoice`` does the same steps, with the
processors built by the same model methods from the same generation config, and draws once per
token from the same generator (the global one unless a ``generator`` is given). The candidate
side never draws: it takes the early head's top-k (``torch.topk``, no randomness), on either
backend. So with the same seed the tokens are ``generate``'s, up to the rounding of logits
computed in another order (PPD prefills the prompt minus its last token, as greedy PPD does):
a token changes only where two tokens are that close, as greedy's near ties.

The rule itself, ``Decoding`` (and ``GREEDY``), is a torch-free value in
``measure.decode.decoding``.

Refused (``check_processors``): classifier-free guidance (``guidance_scale``), whose processor
runs a second, unconditional model of its own inside the step; it is outside PPD's
layer-split schedule.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import numpy as np
import torch
from transformers import LogitsProcessorList
from transformers.generation.logits_process import UnbatchedClassifierFreeGuidanceLogitsProcessor

from measure.checks import checked_prompt, eos_set
from measure.decode.decoding import GREEDY as GREEDY  # the rule's values, re-exported here
from measure.decode.decoding import Decoding, is_integral


def prompt_seed(seed: int, prompt: str) -> int:
    """The seed of one prompt of a run seeded with ``seed``: the same for a prompt whatever else
    the run holds, so match-rate records and PPD runs of one prompt draw alike."""
    return int(seed) * 1_000_003 + zlib.crc32(str(prompt).encode("utf-8"))


def check_seed(seed, generator) -> None:
    """ValueError unless seed is None or an integer in [0, 2**63), and not both are given."""
    if seed is not None and generator is not None:
        raise ValueError("pass seed or generator, not both")
    bad = isinstance(seed, bool | np.bool_) or not is_integral(seed) or not 0 <= seed < 2**63
    if seed is not None and bad:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")


def generation_config(model, decoding: Decoding, max_new_tokens: int):
    """The GenerationConfig ``model.generate(**decoding.generate_kwargs(), max_new_tokens=)``
    would use: the model's own generation config, transformers' defaults, then these keywords."""
    config, _ = model._prepare_generation_config(
        None, **decoding.generate_kwargs(), max_new_tokens=max_new_tokens
    )
    return config


def logits_processors(model, decoding: Decoding, ids: torch.Tensor, max_new_tokens: int):
    """The processors ``generate`` builds for ``decoding`` on prompt ids [1, P] (its methods)."""
    config = generation_config(model, decoding, max_new_tokens)
    model._prepare_special_tokens(config, False, device=ids.device, batch_size=1)
    processors = model._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=ids.shape[1],
        encoder_input_ids=ids,
        logits_processor=LogitsProcessorList(),
        device=ids.device,
        model_kwargs={},
    )
    check_processors(processors)
    return processors


def check_processors(processors) -> None:
    """ValueError for a logits processor PPD cannot apply exactly (module docstring)."""
    for proc in processors:
        if isinstance(proc, UnbatchedClassifierFreeGuidanceLogitsProcessor):
            raise ValueError(
                "guidance_scale (classifier-free guidance) is not supported by PPD: its processor "
                "runs a second, unconditional model pass per token outside PPD's layer-split "
                "schedule; use guidance_scale=None or 1"
            )


class NextToken(Protocol):
    """Main's choice of each token from its final logits, and when the sequence ends."""

    def choose(self, logits: torch.Tensor) -> int:
        """The next token from the final head's logits [1, V] (model dtype)."""

    def stop(self, token: int) -> bool:
        """True when ``token`` (just chosen) ends the sequence."""


class GreedyChoice:
    """The argmax of the final logits (no processors); EOS ids end the sequence."""

    def __init__(self, eos=()):
        self.eos = set(eos)

    def choose(self, logits: torch.Tensor) -> int:
        return int(logits.float().argmax(-1))

    def stop(self, token: int) -> bool:
        return token in self.eos


class TransformersChoice:
    """One step of ``GenerationMixin._sample`` on main's final logits (module docstring).

    ids: the prompt [1, P] (grows by each token); processors: a ``LogitsProcessorList``;
    generator: None (the global RNG, as ``generate``) or a ``torch.Generator``; eos: ids that
    end the sequence; stopping_criteria: transformers' ``StoppingCriteriaList`` or None;
    streamer: gets each token as ``generate`` puts it ([1] on the CPU); keep_scores /
    keep_logits: keep the processed scores / raw fp32 logits of each step (``scores``, ``logits``).
    """

    def __init__(
        self,
        ids: torch.Tensor,
        processors,
        *,
        do_sample: bool = True,
        generator: torch.Generator | None = None,
        eos=(),
        stopping_criteria=None,
        streamer=None,
        keep_scores: bool = False,
        keep_logits: bool = False,
    ):
        self.ids, self.processors, self.do_sample = ids, processors, do_sample
        self.generator, self.eos = generator, set(eos)
        self.stopping_criteria, self.streamer = stopping_criteria, streamer
        self.scores: tuple | None = () if keep_scores else None
        self.logits: tuple | None = () if keep_logits else None

    def choose(self, logits: torch.Tensor) -> int:
        raw = logits.to(copy=True, dtype=torch.float32, device=self.ids.device)  # [1, V]
        scores = self.processors(self.ids, raw)
        if self.scores is not None:
            self.scores += (scores,)
        if self.logits is not None:
            self.logits += (raw,)
        if self.do_sample:
            probs = torch.nn.functional.softmax(scores, dim=-1)
            nxt = torch.multinomial(probs, num_samples=1, generator=self.generator).squeeze(1)
        else:
            nxt = torch.argmax(scores, dim=-1)  # [1]
        self.ids = torch.cat([self.ids, nxt[:, None]], dim=-1)
        if self.streamer is not None:
            self.streamer.put(nxt.cpu())
        return int(nxt)

    def stop(self, token: int) -> bool:
        if token in self.eos:
            return True
        if self.stopping_criteria is None:
            return False
        return bool(self.stopping_criteria(self.ids, self.scores).all())


def next_token_rule(
    model,
    ids: torch.Tensor,
    decoding: Decoding,
    *,
    max_new_tokens: int,
    eos=(),
    seed: int | None = None,
    generator: torch.Generator | None = None,
) -> NextToken:
    """Main's rule for one prompt ids [1, P]: greedy, or sampled as ``generate`` samples.

    eos: the ids that stop it (None, an int or several). Sampled with ``seed``: torch's global
    generator is seeded with it now, as a user does with ``torch.manual_seed(seed)`` before
    ``generate``; with ``generator``: draws come from it.
    """
    eos = eos_set(eos)
    if not decoding.do_sample:
        return GreedyChoice(eos)
    if seed is not None:
        torch.manual_seed(seed)
    processors = logits_processors(model, decoding, ids, max_new_tokens)
    return TransformersChoice(ids, processors, generator=generator, eos=eos)


def prompt_and_rule(
    lsm, input_ids, decoding: Decoding, *, max_new_tokens, eos=None, seed=None, generator=None
) -> tuple[torch.Tensor, NextToken]:
    """A decoder's start: the prompt checked (``measure.checks.checked_prompt``) as ids [1, P]
    on ``lsm``'s device, and main's rule for it (``next_token_rule``)."""
    ids = checked_prompt(lsm, input_ids, max_new_tokens)
    rule = next_token_rule(
        lsm.model, ids, decoding, max_new_tokens=max_new_tokens, eos=eos, seed=seed,
        generator=generator,
    )  # fmt: skip
    return ids, rule
