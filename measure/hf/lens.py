"""The early-head interface, the logit lens, and the fingerprint of the LM head a head was
trained against.

Every early head maps the hidden state after some layer to logits (as tuned-lens's ``Lens``):
the logit lens (`LogitLens`: the model's own final norm, OPT's project_out and LM head, with the
model's logit scaling), the paper's full per-layer head (``measure.train.heads.TrainedHead``)
and the translator (``measure.train.translator.TranslatorHead``). A trained head records a
`LensFingerprint` of the LM head it was trained against, and `resolve_head` refuses it on a
model whose LM head differs (a head of the same shape on another checkpoint would otherwise
run silently with wrong guesses).
"""

from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from measure.checks import check_model
from measure.hf.arch import arch_spec, get_module

LENS_NAME = "shared"
"""The logit lens's name in match records, traces and tables (the paper's "N" rows)."""

_hashes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""LM head module -> {(dtype, weight versions): sha256}, so a model is hashed once per dtype."""


@runtime_checkable
class EarlyHead(Protocol):
    """What decoding, match rates and FREE need of an early head."""

    name: str
    """Value of the ``head`` column of match records and traces."""

    @property
    def layer(self) -> int | None:
        """Hidden state the head was trained to read (``hidden_states[layer]``); None: any."""

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., H] -> logits [..., V]."""


HASH_DTYPES = ("float32", "bfloat16", "float16")
"""Dtypes a fingerprint hashes the weights in (the CLI's ``--dtype`` choices), so a head trained
on one load of a checkpoint is accepted by a load of the same checkpoint in another."""


@dataclass(frozen=True)
class LensFingerprint:
    """Which final norm and LM head a head was trained against: sha256 of their weights."""

    dtype: str
    """Dtype of the trained-against model's LM head (e.g. ``"float32"``)."""
    sha256: dict[str, str]
    """Dtype -> sha256 over each weight's name, shape and bytes cast to that dtype
    (``LogitLens.sha256``), for ``dtype`` and every one of ``HASH_DTYPES``."""

    def to_record(self) -> dict:
        """The two keys written into a head's head_config.json."""
        return {"lm_head_dtype": self.dtype, "lm_head_sha256": dict(self.sha256)}

    @classmethod
    def from_record(cls, record: dict) -> LensFingerprint | None:
        """The fingerprint in a head_config.json record; None for a file written before."""
        if "lm_head_sha256" not in record:
            return None
        sha256 = record["lm_head_sha256"]
        dtype = record.get("lm_head_dtype")
        if not isinstance(sha256, dict) or dtype not in sha256:
            raise ValueError(
                "lm_head_sha256 must map dtypes to hashes, lm_head_dtype among them; got "
                f"{sha256!r} and {dtype!r}"
            )
        return cls(str(dtype), {str(k): str(v) for k, v in sha256.items()})


class LogitLens:
    """The model's own final norm (+ OPT's project_out) and LM head: h [B, S, H] -> [B, S, V].

    Includes the model's logit scaling and soft-capping, so on the last layer's output it equals
    the model's logits; on an earlier layer's it is the untrained early head ("logit lens").
    """

    name = LENS_NAME
    layer = None
    """The lens reads any layer."""

    def __init__(self, model) -> None:
        check_model(model)
        self.model = model
        self.spec = arch_spec(model)
        self.final_norm = get_module(model, self.spec.final_norm)
        self.project_out = get_module(model, self.spec.project_out)
        self.lm_head = get_module(model, self.spec.lm_head)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        # h: [B, S, H] -> [B, S, V]
        if self.final_norm is not None:
            h = self.final_norm(h)
        if self.project_out is not None:
            h = self.project_out(h)
        logits = self.lm_head(h)
        if self.spec.logit_scale != 1.0:
            logits = logits * self.spec.logit_scale
        if self.spec.logit_softcap is not None:
            cap = self.spec.logit_softcap
            logits = torch.tanh(logits / cap) * cap
        return logits

    @property
    def dtype(self) -> str:
        """The LM head weights' dtype, e.g. ``"float32"``."""
        return str(self.lm_head.weight.dtype).removeprefix("torch.")

    def fingerprint(self) -> LensFingerprint:
        """What a head made from this model records: the weights' hash in their own dtype and
        in each of ``HASH_DTYPES``."""
        dtypes = dict.fromkeys((self.dtype, *HASH_DTYPES))
        return LensFingerprint(self.dtype, {name: self.sha256(name) for name in dtypes})

    def sha256(self, dtype: str) -> str:
        """sha256 of the final norm, project_out and LM head weights (names, shapes, bytes)
        cast to ``dtype``; computed once per model and dtype (again if the weights change)."""
        cast = _as_dtype(dtype)
        tensors = self._tensors()
        key = (cast, tuple((t.data_ptr(), t._version) for _, t in tensors))
        cached = _hashes.setdefault(self.lm_head, {})
        if key not in cached:
            digest = hashlib.sha256()
            for name, t in tensors:
                digest.update(f"{name}{tuple(t.shape)};".encode())
                flat = t.detach().to("cpu", cast).contiguous().reshape(-1)
                digest.update(flat.view(torch.uint8).numpy().data)
            cached[key] = digest.hexdigest()
        return cached[key]

    def matches(self, recorded: LensFingerprint) -> bool:
        """Whether these weights are the ones ``recorded``: equal hashes in this model's dtype
        (the checkpoint loaded in another dtype than the head's model), or cast to the head
        model's dtype (a wider load of the same checkpoint)."""
        own = recorded.sha256.get(self.dtype)
        if own is not None and self.sha256(self.dtype) == own:
            return True
        return self.sha256(recorded.dtype) == recorded.sha256[recorded.dtype]

    def _tensors(self) -> list[tuple[str, torch.Tensor]]:
        parts = {"final_norm": self.final_norm, "project_out": self.project_out}
        parts["lm_head"] = self.lm_head
        return [(f"{part}.{key}", value)
                for part, module in parts.items() if module is not None
                for key, value in sorted(module.state_dict().items())]  # fmt: skip


def _as_dtype(dtype: str) -> torch.dtype:
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"lm_head_dtype must name a torch dtype (e.g. float32), got {dtype!r}")
    return value


def resolve_head(head, lens: LogitLens):
    """The early head to use on ``lens``'s model: ``lens`` itself for None (the logit lens),
    else ``head`` once its recorded fingerprint matches this model's LM head.

    A head without a recorded fingerprint (a file from before fingerprints, or any module
    h -> logits) is used as given. ValueError names the head's file, both hashes and the fix.
    """
    if head is None:
        return lens
    if not isinstance(head, torch.nn.Module | EarlyHead) or isinstance(head, type):
        raise ValueError(f"head must be an early head (h -> logits, such as a TrainedHead) or "
                         f"None, got {type(head).__name__}")  # fmt: skip
    recorded = getattr(head, "trained_against", None)
    if recorded is None:
        return head
    if not lens.matches(recorded):
        source = getattr(head, "source", None)
        what = f"head file {source}" if source is not None else "this head (not from a file)"
        raise ValueError(
            f"{what} was trained against an LM head with sha256 "
            f"{recorded.sha256[recorded.dtype]} ({recorded.dtype}), but this model's final norm "
            f"+ LM head hash to {lens.sha256(recorded.dtype)} (in {recorded.dtype}): head and "
            "model are of different checkpoints. Use the model it was trained on, or train a "
            "head for this one (ppd measure train-head)"
        )
    return head
