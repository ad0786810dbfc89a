"""PPD as a transformers generation method: ``generate(ids, custom_generate=ppd_generate_hf)``.

``generate`` prepares the inputs, the generation config, the logits processors, the stopping
criteria and the cache, then calls ``ppd_generate_hf(model, input_ids, logits_processor=,
stopping_criteria=, generation_config=, **model_kwargs)``; PPD's own keywords (``d_bar``,
``k``, ``early_head``, ``head``) pass through ``generate``'s keywords. The tokens are those
``generate`` would give without ``custom_generate`` (greedy or sampled, with the same seed):
main applies the processors ``generate`` built, in its order, draws once per token from the
global generator as ``_sample`` does, and checks the stopping criteria after each token; the
candidates never draw (``measure.decode.sampling``). The single backend runs in this process.

A ``streamer`` gets each token once, in order, as main produces it (``generate`` has already
put the prompt), then ``end()``. With ``return_dict_in_generate=True`` the output is a
``PPDGenerateOutput``: ``generate``'s fields (``sequences``, ``scores`` / ``logits`` when asked,
the cache) plus ``matches``, ``n_runs`` and the whole ``PPDResult`` (``ppd``).

Refused with a ValueError naming the option: beam search (``num_beams``), several sequences
(``num_return_sequences``, or a batch of prompts), assisted decoding (``assistant_model``,
``prompt_lookup_num_tokens``, ``assistant_early_exit``), constrained and contrastive search,
per-step ``output_attentions`` / ``output_hidden_states`` (PPD splits each step between two
processes), classifier-free guidance, padded prompts and a cache already holding tokens.

``measure/decode/custom_generate/generate.py`` is the same method as a folder that
``generate(custom_generate=PATH, trust_remote_code=True)`` loads (``custom_generate_dir``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import StoppingCriteriaList
from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerationMixin

from measure.checks import check_max_new_tokens, is_int
from measure.decode.decoding import Decoding
from measure.decode.local import ppd_single
from measure.decode.results import PPDResult
from measure.decode.sampling import TransformersChoice, check_processors
from measure.hf.compat import generate_call_locals, output_cache_field
from measure.hf.layer_split import LayerSplitModel
from measure.train.head_io import head_layer
from ppdmodel.defaults import default_d_bar
from ppdmodel.validation import check_flag

ASSISTED_OPTIONS = ("prompt_lookup_num_tokens", "assistant_early_exit", "use_mtp")
"""Generation-config fields that turn ``generate`` into assisted decoding."""


@dataclass
class PPDGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate``'s output (``return_dict_in_generate=True``) with PPD's statistics."""

    matches: int | None = None
    """sum of m_t: tokens whose pass started from a handed-off candidate."""
    n_runs: int | None = None
    """N = 1 + sum(1 - m_t), the passes that ran all d layers."""
    ppd: PPDResult | None = None
    """The whole PPD run: m, trace, timings."""


def custom_generate_dir() -> str:
    """The folder to pass as ``generate(custom_generate=...)`` (it holds ``custom_generate/``);
    a str, as ``generate`` takes a path only as a str."""
    return str(Path(__file__).resolve().parent)


@torch.no_grad()
def ppd_generate_hf(
    model,
    input_ids: torch.LongTensor,
    logits_processor=None,
    stopping_criteria=None,
    generation_config=None,
    synced_gpus: bool = False,
    streamer=None,
    d_bar: int | None = None,
    k: int = 1,
    early_head: str = "main",
    head=None,
    **model_kwargs,
):
    """PPD decoding as ``generate``'s decoding loop (module docstring); pass it as
    ``model.generate(ids, custom_generate=ppd_generate_hf, d_bar=15, k=3, ...)``.

    d_bar: early-prediction layer, d/2 <= d_bar < d (default: the smallest layer >= d/2);
    k: candidates; early_head: ``main`` or ``candidates``; head: a trained early head.
    Returns the prompt plus the new tokens [1, P + ell], or a ``PPDGenerateOutput``.
    """
    called = generate_call_locals()
    streamer = streamer if streamer is not None else called.get("streamer")
    config = generation_config if generation_config is not None else model.generation_config
    _check_request(model, input_ids, config, called.get("assistant_model"), synced_gpus)
    _check_model_kwargs(model_kwargs)
    processors = logits_processor if logits_processor is not None else []
    check_processors(processors)
    criteria = stopping_criteria if stopping_criteria is not None else StoppingCriteriaList()
    max_new_tokens = _max_new_tokens(config, input_ids.shape[1])
    lsm = LayerSplitModel(model, head=head)
    if d_bar is None:
        layer = head_layer(lsm.head)
        d_bar = default_d_bar(lsm.num_layers) if layer is None else layer
    wants_dict = bool(config.return_dict_in_generate)
    choice = TransformersChoice(
        input_ids,
        processors,
        do_sample=bool(config.do_sample),
        stopping_criteria=criteria,
        streamer=streamer,
        keep_scores=wants_dict and bool(config.output_scores),
        keep_logits=wants_dict and bool(config.output_logits),
    )
    result, cache = ppd_single(
        lsm,
        input_ids,
        d_bar=d_bar,
        k=k,
        max_new_tokens=max_new_tokens,
        head=head,
        early_head=early_head,
        next_token=choice,
        return_cache=True,
    )
    if streamer is not None:
        streamer.end()
    if not wants_dict:
        return choice.ids
    fields = dict(sequences=choice.ids, scores=choice.scores, logits=choice.logits)
    fields[output_cache_field(GenerateDecoderOnlyOutput)] = cache
    return PPDGenerateOutput(**fields, matches=sum(result.m), n_runs=result.n_runs, ppd=result)


def _check_request(model, input_ids, config, assistant_model, synced_gpus) -> None:
    """ValueError naming the first generation option PPD cannot honour exactly."""
    if model.config.is_encoder_decoder:
        raise ValueError("PPD decodes decoder-only causal LMs; this model is encoder-decoder")
    if config.do_sample is True:  # the sampling settings PPD draws with: Decoding's rules
        Decoding(True, config.temperature, config.top_k, config.top_p)
    if (config.num_beams or 1) > 1:
        raise ValueError(f"num_beams={config.num_beams}: beam search is not PPD; use num_beams=1")
    if (config.num_return_sequences or 1) > 1:
        raise ValueError(
            f"num_return_sequences={config.num_return_sequences}: PPD decodes one sequence; "
            "use num_return_sequences=1"
        )
    if assistant_model is not None:
        raise ValueError("assistant_model: assisted decoding and PPD cannot run at once")
    for name in ASSISTED_OPTIONS:
        if getattr(config, name, None):
            raise ValueError(f"{name}: assisted decoding and PPD cannot run at once")
    if config.constraints is not None or config.force_words_ids is not None:
        raise ValueError("constraints / force_words_ids: constrained beam search is not PPD")
    if config.penalty_alpha and not config.do_sample and (config.top_k or 0) > 1:
        raise ValueError("penalty_alpha: contrastive search is not PPD")
    for name in ("do_sample", "return_dict_in_generate", "output_scores", "output_logits",
                 "output_attentions", "output_hidden_states"):  # fmt: skip
        if getattr(config, name, None) is not None:
            check_flag(name, getattr(config, name))
    for name in ("output_attentions", "output_hidden_states"):
        if getattr(config, name, False):
            raise ValueError(
                f"{name}: PPD splits each step between main and the candidates, so it has no "
                "per-step attentions or hidden states of one forward pass"
            )
    if synced_gpus:
        raise ValueError("synced_gpus: PPD runs one sequence on one model copy")
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(
            f"input_ids: PPD decodes one prompt (batch size 1), got shape {tuple(input_ids.shape)}"
        )
    if input_ids.shape[1] < 1:
        raise ValueError("input_ids: PPD needs a prompt of at least one token (no inputs_embeds)")


def _check_model_kwargs(model_kwargs: dict) -> None:
    """ValueError for a padded prompt or a cache that already holds tokens."""
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError("attention_mask: PPD decodes one unpadded prompt (all ones)")
    for value in model_kwargs.values():
        if hasattr(value, "get_seq_length") and value.get_seq_length() > 0:
            raise ValueError("cache: PPD starts from an empty cache (it prefills the prompt)")


def _max_new_tokens(config, prompt_tokens: int) -> int:
    """New tokens ``generate``'s max_length allows after a prompt of ``prompt_tokens``
    (``max_new_tokens``, where given, checked as ``ppd_generate`` checks it)."""
    if getattr(config, "max_new_tokens", None) is not None:
        check_max_new_tokens(config.max_new_tokens)
    if not is_int(config.max_length):
        raise ValueError(f"max_length must be an integer, got {config.max_length!r}")
    new = int(config.max_length) - prompt_tokens
    if new < 1:
        raise ValueError(
            f"max_new_tokens: max_length {config.max_length} leaves no new token after a "
            f"prompt of {prompt_tokens} tokens; pass max_new_tokens >= 1"
        )
    return new


def generate(model, *args, **kwargs):
    """``generate(model, ...)`` of the ``custom_generate/`` folder: ``model.generate`` with
    ``custom_generate=ppd_generate_hf`` (GenerationMixin's, even when the model's own
    ``generate`` was replaced by this folder at load time)."""
    kwargs.pop("custom_generate", None)
    return GenerationMixin.generate(model, *args, custom_generate=ppd_generate_hf, **kwargs)
