"""Any early head from disk, and the names heads carry in match records and traces.

Two kinds share one directory layout (``head.safetensors`` + ``head_config.json``): the paper's
full per-layer head (``measure.train.heads.TrainedHead``, kind "full", records head "trained")
and the translator (``measure.train.translator.TranslatorHead``, kind and head "translator").
A head_config.json without a ``kind`` is a full head (written before translators existed); one
without ``lm_head_sha256`` (written before heads recorded the LM head they were trained
against, ``measure.hf.lens.LensFingerprint``) loads with a warning. Beside them, the logit lens
(``measure.hf.lens.LogitLens``, head "shared") needs no file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from torch import nn

from measure.checks import check_model
from measure.hf.lens import LENS_NAME, EarlyHead, LogitLens, resolve_head
from measure.hf.loading import resolve_device
from measure.train.heads import CONFIG_NAME, TrainedHead
from measure.train.translator import KIND as TRANSLATOR
from measure.train.translator import TranslatorHead
from ppdmodel.validation import MissingPath, check_input_dir, items_of, reading

KINDS = ("full", TRANSLATOR)
"""Head kinds: ``full`` (the paper's Appendix A head) and ``translator``."""
SHARED = LENS_NAME
"""Head name of the logit lens (``LogitLens.name``: the model's own final norm + LM head)."""


def head_kind(directory: str | Path) -> str:
    """The kind of the head saved in ``directory`` ("full" or "translator")."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise MissingPath(f"directory {str(directory)!r}: no {CONFIG_NAME} in this head directory")
    kind = json.loads(path.read_text()).get("kind", "full")
    if kind not in KINDS:
        raise ValueError(f"{path}: kind must be one of {KINDS}, got {kind!r}")
    return kind


def saved_head_layer(directory: str | Path) -> int:
    """The layer the head saved in ``directory`` was trained for, from its head_config.json
    (no weight is read: what a command checks its --d-bar against before loading)."""
    head_kind(directory)  # a head_config.json of a known kind
    path = Path(directory) / CONFIG_NAME
    layer = json.loads(path.read_text()).get("config", {}).get("layer")
    if isinstance(layer, bool) or not isinstance(layer, int):
        raise ValueError(f"{path}: config.layer must be an integer, got {layer!r}")
    return layer


def load_head(directory: str | Path, model=None, *, device="cpu") -> nn.Module:
    """The head saved in ``directory``, in eval mode; a translator is attached to ``model``.

    A full head holds its own weights and goes to ``device``; a translator reads through
    ``model``'s own final norm and LM head and lives on the model's device. With ``model``,
    a head trained against another LM head is refused (``measure.hf.lens.resolve_head``).
    """
    directory = check_input_dir("directory", directory)
    if model is not None:
        check_model(model)
    device = resolve_device(device)
    with reading("directory", directory):
        kind = head_kind(directory)
        if kind == TRANSLATOR and model is None:
            raise ValueError(f"model is required to load the translator head in {directory}")
        if kind == TRANSLATOR:
            return TranslatorHead.load(directory, model).eval()
        head = TrainedHead.load(directory, device=device)
    if model is not None:  # (outside: a head of another model is the model's refusal)
        resolve_head(head, LogitLens(model))
    return head.eval()


def head_name(head: EarlyHead | nn.Module | None) -> str:
    """Name in records and traces: "shared" (None or the `LogitLens`), else the head's
    ``name`` ("trained" for a full head or a module without one, "translator")."""
    return getattr(head if head is not None else LogitLens, "name", "trained")


def head_layer(head: EarlyHead | nn.Module | None) -> int | None:
    """The layer a head was trained to read; None for the logit lens (it reads any layer)."""
    if head is None:
        return LogitLens.layer
    return getattr(head, "layer", getattr(getattr(head, "config", None), "layer", None))


def group_heads(heads: Mapping[int, nn.Module] | Iterable[nn.Module] | None):
    """{name: {layer: head}} from ``{layer: head}`` or an iterable of heads (``config.layer``).

    A mapping's key must equal the layer a head was trained for (else its matches are
    silently wrong); an iterable may hold several kinds of head for one layer.
    """
    if heads is None:
        return {}
    if not isinstance(heads, Mapping) and items_of(heads) is None:
        raise ValueError(f"heads must be a dict {{layer: head}} or a list of heads, got "
                         f"{type(heads).__name__}")  # fmt: skip
    pairs = heads.items() if isinstance(heads, Mapping) else [(None, h) for h in heads]
    groups: dict[str, dict[int, nn.Module]] = {}
    for key, head in pairs:
        if not isinstance(head, nn.Module | EarlyHead) or isinstance(head, type):
            raise ValueError(f"heads must hold early heads (h -> logits), got "
                             f"{type(head).__name__}")  # fmt: skip
        trained_for = getattr(getattr(head, "config", None), "layer", key)
        if trained_for is None:
            raise ValueError(f"heads: a list of heads must hold trained heads (with config.layer), "
                             f"got {type(head).__name__}")  # fmt: skip
        if key is not None and trained_for != key:
            raise ValueError(
                f"heads[{key}] was trained for layer {trained_for}; use it as heads[{trained_for}]"
            )
        name = head_name(head)
        if name == SHARED:
            raise ValueError(f"a trained head cannot be named {SHARED!r}")
        by_layer = groups.setdefault(name, {})
        if trained_for in by_layer:
            raise ValueError(f"heads: two {name!r} heads for layer {trained_for}")
        by_layer[int(trained_for)] = head
    return {name: dict(sorted(groups[name].items())) for name in sorted(groups)}
