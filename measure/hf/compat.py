"""The transformers internals the toolkit reaches into, each found the way the model uses it.

transformers renames internals between minor releases (5.24 renamed the decoder layers' and the
models' ``past_key_values`` to ``cache``, and the outputs' ``past_key_values`` field to
``cache``). Nothing here guesses names from a list: the cache parameter of a forward is the one
annotated with the ``Cache`` type, the cache of an output is the field holding a ``Cache``, and
every other internal the toolkit uses is named once in ``INTERNALS`` and checked by
``check_internals`` (run by ``ppd doctor`` and the tests). Where nothing fits, the error names
the transformers version and the signature it read.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing

import transformers
from transformers import Cache, DynamicCache, GenerationConfig

from measure.versions import TESTED

TESTED_TRANSFORMERS = TESTED["transformers"]
"""Lowest and highest transformers releases the test suite has passed on."""

GENERATION_FIELDS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
    "assistant_early_exit",
    "eos_token_id",
)
"""``GenerationConfig`` fields the toolkit reads or sets (HF early exit, EOS)."""
GENERATION_METHODS = (
    "_prepare_generation_config",
    "_prepare_special_tokens",
    "_get_logits_processor",
)
"""``GenerationMixin`` methods sampled PPD builds ``generate``'s logits processors with
(``measure.decode.sampling``), so that it samples exactly as ``generate`` does."""
CACHE_LAYER_ATTRS = ("keys", "values", "is_initialized", "update", "crop", "get_seq_length")
"""Attributes of a ``DynamicCache`` layer (``cache.layers[i]``) the KV helpers use."""
CACHE_ATTRS = ("layers", "get_seq_length", "crop", "batch_repeat_interleave")
"""Attributes of a ``DynamicCache`` the decoder, the match loop and the hand-off use."""

_CACHE_NAME = re.compile(r"\b\w*Cache\b")


def transformers_version() -> str:
    """The installed transformers release."""
    return str(transformers.__version__)


def _mentions_cache(annotation) -> bool:
    """True if a (possibly string or Optional/Union) annotation names a ``Cache`` type."""
    if annotation is inspect.Parameter.empty:
        return False
    if isinstance(annotation, str):
        return bool(_CACHE_NAME.search(annotation))
    if isinstance(annotation, type):
        return issubclass(annotation, Cache)
    return any(_mentions_cache(arg) for arg in typing.get_args(annotation))


def cache_keyword(fn, what: str) -> str:
    """The keyword under which `fn` (a model's or a decoder layer's forward) takes the KV cache.

    Found by type: the one parameter annotated with transformers' ``Cache``. ValueError naming
    the transformers version and the signature where none (or more than one) is.
    """
    signature = inspect.signature(fn)
    names = [n for n, p in signature.parameters.items() if _mentions_cache(p.annotation)]
    if len(names) == 1:
        return names[0]
    found = "no parameter" if not names else f"{len(names)} parameters ({', '.join(names)})"
    raise ValueError(
        f"{what}: {found} typed as a transformers Cache in its forward{signature} "
        f"(transformers {transformers_version()}; tested {' to '.join(TESTED_TRANSFORMERS)})"
    )


def model_cache_keyword(model) -> str:
    """The keyword under which ``model(...)`` (a *ForCausalLM) takes its KV cache."""
    return cache_keyword(model.forward, f"{type(model).__name__}.forward")


def output_cache(output) -> Cache:
    """The KV cache a model's forward returned (the output field holding a ``Cache``)."""
    for value in output.values():
        if isinstance(value, Cache):
            return value
    raise ValueError(
        f"{type(output).__name__} holds no transformers Cache (fields {list(output.keys())}; "
        f"transformers {transformers_version()}): call the model with use_cache=True"
    )


def output_cache_field(output_cls) -> str:
    """The field of a ``ModelOutput`` class (e.g. ``GenerateDecoderOnlyOutput``) typed as a
    ``Cache`` (``cache`` in 5.24, ``past_key_values`` before)."""
    hints = typing.get_type_hints(output_cls)
    names = [f.name for f in dataclasses.fields(output_cls) if _mentions_cache(hints[f.name])]
    if len(names) != 1:
        raise ValueError(
            f"{output_cls.__name__}: {len(names)} fields typed as a transformers Cache "
            f"(transformers {transformers_version()})"
        )
    return names[0]


GENERATE_FRAMES = 8
"""Frames ``generate_call_locals`` walks up to find ``GenerationMixin.generate``."""


def generate_call_locals() -> dict:
    """The local variables of the ``GenerationMixin.generate`` call running the caller, or {}.

    transformers 5.24 calls a callable ``custom_generate`` with generate's prepared inputs but
    without the ``streamer`` and ``assistant_model`` it was given (it keeps only the callable's
    own extra keywords, ``GenerationMixin._extract_generation_mode_kwargs``), although it has
    put the prompt into the streamer. ``measure.decode.hf_generate`` reads them here: the frame
    is found by identity of generate's code object, never by name.
    """
    from transformers.generation.utils import GenerationMixin

    code = inspect.unwrap(GenerationMixin.generate).__code__
    frame = sys._getframe(1)
    for _ in range(GENERATE_FRAMES):
        if frame is None:
            break
        if frame.f_code is code:
            return dict(frame.f_locals)
        frame = frame.f_back
    return {}


def check_internals() -> list[str]:
    """Check every transformers internal the toolkit uses; the problems found (empty if none).

    Covers the cache classes (``DynamicCache(config=)``, its layers' keys/values/update/crop),
    the ``GenerationConfig`` fields of the early-exit comparison, and the GGUF loading keyword.
    Decoder layers and forwards are checked per model by ``cache_keyword``.
    """
    problems = []
    for name in GENERATION_FIELDS:
        if not hasattr(GenerationConfig(), name):
            problems.append(f"GenerationConfig has no field {name!r}")
    from transformers.generation.utils import GenerationMixin

    for name in GENERATION_METHODS:
        if not callable(getattr(GenerationMixin, name, None)):
            problems.append(f"GenerationMixin has no method {name!r}")
    cache = DynamicCache()
    for name in CACHE_ATTRS:
        if not hasattr(cache, name):
            problems.append(f"DynamicCache has no attribute {name!r}")
    if "config" not in inspect.signature(DynamicCache.__init__).parameters:
        problems.append("DynamicCache() takes no config= (needed for sliding-window layers)")
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    for name in CACHE_LAYER_ATTRS:
        if not hasattr(layer, name):
            problems.append(f"DynamicLayer has no attribute {name!r}")
    from_pretrained = inspect.signature(transformers.PreTrainedModel.from_pretrained).parameters
    if "gguf_file" not in from_pretrained and not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in from_pretrained.values()
    ):
        problems.append("PreTrainedModel.from_pretrained takes no gguf_file")
    return [f"{p} (transformers {transformers_version()})" for p in problems]
