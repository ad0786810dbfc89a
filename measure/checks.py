"""Argument checks of every generating function (PPD, greedy, FREE, match rates, timing):
ValueError naming the argument; and the EOS ids that stop generation.

The ground floor of ``measure``: every layer above (decode, match, profile, eval) uses these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ppdmodel.validation import _show, as_int, as_int_tuple, check_positive_int, items_of


def is_int(x) -> bool:
    """True for integers (Python or numpy, or integral floats), False for bools (Python or
    numpy), NaN, None, str."""
    try:
        return not isinstance(x, bool | np.bool_ | str) and int(x) == x
    except (TypeError, ValueError, OverflowError):
        return False


def int_list(name: str, values, *, low: int = 1, high: int | None = None) -> tuple[int, ...]:
    """``values`` (an iterable of integers in [low, high]) as a tuple of ints, in order;
    ValueError naming ``name`` (and the item) otherwise."""
    items = items_of(values)
    if items is None:
        raise ValueError(f"{name} must be a list of integers, got {_show(values)}")
    limit = high if high is not None else 2**62
    return tuple(as_int(f"{name}[{i}]", v, minimum=low, limit=limit) for i, v in enumerate(items))


def check_model(model, name: str = "model") -> None:
    """ValueError unless ``model`` is a Hugging Face model: a torch module with a config."""
    config = getattr(model, "config", None)
    if not isinstance(model, torch.nn.Module) or not hasattr(config, "get_text_config"):
        raise ValueError(
            f"{name} must be a Hugging Face causal LM (a transformers model), got "
            f"{type(model).__name__} {_show(model)}"
        )


def check_max_new_tokens(max_new_tokens) -> int:
    """``max_new_tokens`` as a Python int; ValueError unless it is an integer >= 1."""
    if max_new_tokens is None or isinstance(max_new_tokens, str):
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    check_positive_int("max_new_tokens", max_new_tokens)
    if not is_int(max_new_tokens):  # arrays pass check_positive_int
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    return int(max_new_tokens)


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")
"""Config fields that give a model's context (positions it can attend to), first found wins."""


def context_length(config) -> int | None:
    """Positions the model can use (``CONTEXT_KEYS`` of its text config), or None if unbounded.

    config: a transformers config, or a model (its ``.config``).
    """
    config = getattr(config, "config", config)
    if hasattr(config, "get_text_config"):
        config = config.get_text_config()
    for key in CONTEXT_KEYS:
        value = getattr(config, key, None)
        if is_int(value) and value > 0:
            return int(value)
    return None


def check_context(
    config, prompt_tokens, max_new_tokens, *, names=None, what="max_new_tokens", argument=None
):
    """ValueError unless every prompt plus ``max_new_tokens`` fits the model's context.

    prompt_tokens: one prompt length or several (``names`` labels them in the message; the
    message starts by naming ``argument``, the prompts' argument, where given). A
    prompt of P tokens decoding ell new ones needs P + ell positions (as transformers'
    ``generate`` counts them); beyond the context, learned position embeddings index out of
    range and rotary ones extrapolate silently. Models without a context field are not checked.
    """
    if not is_int(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {max_new_tokens!r}")
    context = context_length(config)
    if context is None:
        return
    lengths = [prompt_tokens] if is_int(prompt_tokens) else [int(n) for n in prompt_tokens]
    if not lengths:
        return
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    total = lengths[longest] + int(max_new_tokens)
    if total > context:
        label = "the prompt" if len(lengths) == 1 else f"prompt {longest}"
        if names is not None:
            label = f"prompt {list(names)[longest]!r}"
        room = context - lengths[longest]
        fix = f"{what} <= {room}" if room >= 1 else f"prompts of fewer than {context} tokens"
        prefix = "" if argument is None else f"{argument}: "
        raise ValueError(
            f"{prefix}{label} has {lengths[longest]} tokens + {what} {max_new_tokens} = {total} "
            f"positions, more than the model's context of {context}: use {fix}"
        )


def check_ppd_args(d: int, d_bar: int, k: int, vocab_size: int, max_new_tokens: int) -> None:
    """Validate PPD parameters; ValueError names the bad one and its allowed range."""
    if not is_int(d_bar) or not d / 2 <= d_bar < d:
        raise ValueError(f"d_bar must be an integer with d/2 <= d_bar < d = {d}, got {d_bar!r}")
    if not is_int(k) or not 1 <= k <= vocab_size:
        raise ValueError(f"k must be an integer in [1, vocab_size = {vocab_size}], got {k!r}")
    check_max_new_tokens(max_new_tokens)


def check_prompt_ids(ids: torch.Tensor, vocab_size: int, name: str = "input_ids") -> None:
    """ValueError (naming ``name``) unless every prompt token id is in [0, vocab_size)."""
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} must be token ids in [0, {vocab_size}), got {bad}")


def check_head_layer(head, d_bar: int, name: str = "d_bar") -> None:
    """ValueError if a trained head was trained for another layer than d_bar (the argument
    ``name``: FREE's is ``exit_layer``)."""
    check_trained_layer(getattr(getattr(head, "config", None), "layer", None), d_bar, name)


def check_trained_layer(layer: int | None, d_bar: int, name: str = "d_bar") -> None:
    """ValueError if a head trained for ``layer`` (None: any layer, the logit lens) is used at
    another d_bar (the check ``check_head_layer`` makes, given the layer alone)."""
    if layer is not None and layer != d_bar:
        raise ValueError(f"head is trained for layer {layer}; {name} must equal it, got {d_bar}")


def as_prompt_ids(input_ids, device, name: str = "input_ids") -> torch.Tensor:
    """A prompt as a [1, P] int64 tensor on `device` (accepts a list, [P] or [1, P] of
    integers; floats such as 0.5 or NaN, booleans and strings are no token ids); ValueError
    naming ``name`` otherwise."""
    try:
        ids = torch.as_tensor(input_ids)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise ValueError(f"{name} must hold integer token ids, got {_show(input_ids)}") from None
    if ids.numel() == 0:
        raise ValueError(f"{name} must hold one non-empty prompt, got shape {tuple(ids.shape)}")
    if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise ValueError(f"{name} must hold integer token ids, got {_show(input_ids)}")
    ids = ids.to(torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        raise ValueError(f"{name} must hold one non-empty prompt, got shape {tuple(ids.shape)}")
    return ids.to(device)


def checked_prompt(lsm, input_ids, max_new_tokens) -> torch.Tensor:
    """One prompt as ids [1, P] on ``lsm``'s device (a ``LayerSplitModel``), checked: every id
    in the vocabulary, and P + max_new_tokens within the model's context."""
    ids = as_prompt_ids(input_ids, lsm.device)
    check_prompt_ids(ids, lsm.model.config.get_text_config().vocab_size)
    check_context(lsm.model.config, ids.shape[1], max_new_tokens, argument="input_ids")
    return ids


def eos_set(eos_token_id) -> set[int]:
    """EOS ids as a set (None -> empty; an int or a list of ints, each >= 0); ValueError
    naming ``eos_token_id`` otherwise."""
    if eos_token_id is None:
        return set()
    if isinstance(eos_token_id, torch.Tensor):
        eos_token_id = eos_token_id.tolist()
    return set(as_int_tuple("eos_token_id", eos_token_id, what="a token id"))


def eos_token_ids(model) -> list[int]:
    """EOS ids that stop generation, as ``model.generate`` uses them."""
    config = getattr(model, "generation_config", None) or model.config
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


@dataclass(frozen=True)
class ModelFacts:
    """What a command checks its options against before any weight is read: the model's
    config.json (depth, vocabulary, context) and its tokenizer (``model_facts``)."""

    model: str
    """The ``--model`` value."""
    config: object
    """Its transformers config (``measure.hf.loading.load_config``)."""
    tokenizer: object | None
    """Its tokenizer (None: the model ships none)."""

    @property
    def d(self) -> int:
        """Decoder layers."""
        return int(self.config.get_text_config().num_hidden_layers)

    @property
    def vocab_size(self) -> int:
        return int(self.config.get_text_config().vocab_size)

    @property
    def context(self) -> int | None:
        """Positions the model can attend to (None: not bounded by its config)."""
        return context_length(self.config)

    def encode(self, texts, *, chat_template: bool, what: str = "the prompts") -> list[list[int]]:
        """Token ids of ``texts`` (``measure.chat.encode_prompts``); ValueError if the model
        has no tokenizer."""
        if self.tokenizer is None:
            raise ValueError(f"--model {self.model} has no tokenizer to encode {what}")
        from measure.chat import encode_prompts

        return encode_prompts(self.tokenizer, texts, chat_template=chat_template)


def model_facts(model: str) -> ModelFacts:
    """The ``ModelFacts`` of ``--model``, read without its weights (config.json, tokenizer)."""
    from measure.hf.loading import load_config, load_tokenizer  # transformers: when called

    return ModelFacts(model, load_config(model), load_tokenizer(model))
