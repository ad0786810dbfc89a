"""The translator head: an affine map of the hidden state before the model's own output head.

A cheap early head (the tuned lens of Belrose et al. 2023, "Eliciting latent predictions from
transformers with the tuned lens"): the hidden state h after layer ``layer`` goes through

    logits = LM_head(final_norm(h + A h + b))

with the model's *own* final norm and LM head (frozen, shared, not copied) and A = 0, b = 0 at
initialisation, so an untrained translator is exactly the logit lens. It holds hidden^2 + hidden
parameters (332k for SmolLM2-135M) against the full per-layer head's vocab x hidden (28M), and
is trained to match the final layer's distribution (KL), see ``measure.train.distill``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from measure.checks import check_model
from measure.hf.layer_split import LayerSplitModel
from measure.hf.lens import LensFingerprint, resolve_head
from measure.train.heads import CONFIG_NAME, WEIGHTS_NAME, head_record, read_fingerprint
from ppdmodel.validation import MissingPath, check_instance

KIND = "translator"
"""``kind`` written in a translator's head_config.json."""


@dataclass(frozen=True)
class TranslatorConfig:
    """Shape of a translator and where it reads (the training settings are recorded apart)."""

    layer: int
    """Hidden state read: output of decoder layer ``layer`` (1-based count of layers run)."""
    hidden_size: int
    """Width of the hidden state (A is hidden_size x hidden_size)."""
    vocab_size: int
    """Logits of the model's LM head it reads through (checked when attached to a model)."""
    model_type: str = ""
    """``config.model_type`` of the model it was made for (for the record)."""

    def __post_init__(self) -> None:
        for name, low in (("layer", 1), ("hidden_size", 1), ("vocab_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")

    @classmethod
    def for_model(cls, model, layer: int) -> TranslatorConfig:
        """The config of a translator for ``layer`` (1 <= layer < d) of ``model``."""
        lsm = LayerSplitModel(model)
        d = lsm.num_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 1 <= layer < d:
            raise ValueError(
                f"layer must be an integer in [1, {d}) for this {d}-layer model (layer {d} is "
                f"the final layer, read by the model's own head), got {layer!r}"
            )
        text = model.config.get_text_config()
        vocab = int(model.get_output_embeddings().weight.shape[0])
        return cls(layer, int(text.hidden_size), vocab, str(text.model_type))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TranslatorConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown TranslatorConfig fields {sorted(unknown)}; known: {known}")
        return cls(**data)


class TranslatorHead(nn.Module):
    """h [B, S, H] -> logits [B, S, V] = model head(h + A h + b); A, b fp32, zero-initialised.

    Only A and b are parameters (and saved); the model's final norm and LM head are used by
    reference, so the translator follows the model's device and dtype for them.
    """

    name = KIND
    """Value of the ``head`` column of match records and traces."""

    def __init__(self, config: TranslatorConfig, model) -> None:
        super().__init__()
        check_instance("config", config, TranslatorConfig)
        check_model(model)
        self.config = config
        self.translator = nn.Linear(config.hidden_size, config.hidden_size, bias=True)
        nn.init.zeros_(self.translator.weight)
        nn.init.zeros_(self.translator.bias)
        self.train_losses: list[float] = []
        """Mean loss of every optimizer step (empty for an untrained translator)."""
        self.train_record: dict = {}
        """How it was trained (data, steps, seconds, ...), saved with it."""
        self.attach(model)
        self.translator.to(self._device)
        self.trained_against: LensFingerprint | None = self._lens.fingerprint()
        """The LM head it reads through when trained (None: read from a file without one)."""
        self.source: Path | None = None
        """The directory it was loaded from (named when refused on another model)."""

    @property
    def layer(self) -> int:
        """The layer whose hidden state it reads (``config.layer``)."""
        return self.config.layer

    def attach(self, model) -> None:
        """Read through ``model``'s final norm and LM head (shapes checked against config, and
        the weights against ``trained_against`` once set)."""
        expected = TranslatorConfig.for_model(model, self.config.layer)
        for field in ("hidden_size", "vocab_size"):
            if getattr(expected, field) != getattr(self.config, field):
                raise ValueError(
                    f"translator {field}={getattr(self.config, field)} does not match the "
                    f"model ({getattr(expected, field)})"
                )
        lsm = LayerSplitModel(model)
        # not a sub-module: the model's weights are neither copied nor saved
        self.__dict__["_lens"] = lsm.lens
        self.__dict__["_device"] = lsm.device
        self.__dict__["_dtype"] = next(model.parameters()).dtype
        resolve_head(self, lsm.lens)  # a trained translator only reads its own LM head

    def translate(self, h: torch.Tensor) -> torch.Tensor:
        """h + A h + b, in the model's dtype: [..., H] -> [..., H]."""
        x = h.to(self.translator.weight.dtype)
        return (x + self.translator(x)).to(self._dtype)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # h: [..., H] -> [..., V]
        return self._lens(self.translate(h))

    def save(self, directory: str | Path) -> Path:
        """Write A and b (``head.safetensors``) and ``head_config.json`` (kind translator)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, directory / WEIGHTS_NAME)
        record = {
            "kind": KIND,
            "config": self.config.to_dict(),
            **head_record(self),
            "train": self.train_record,
            "train_losses": self.train_losses,
        }
        (directory / CONFIG_NAME).write_text(json.dumps(record, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path, model) -> TranslatorHead:
        """Read a translator written by `save` and attach it to ``model``, refused unless it
        was trained against that model's LM head (``measure.hf.lens.resolve_head``)."""
        from safetensors.torch import load_file

        directory = Path(directory)
        record = _read_record(directory)
        if record.get("kind") != KIND:
            raise ValueError(
                f"{directory} holds a {record.get('kind', 'full')!r} head, not a translator"
            )
        head = cls(TranslatorConfig.from_dict(record["config"]), model)
        try:
            head.load_state_dict(load_file(directory / WEIGHTS_NAME))
        except RuntimeError as exc:  # shapes or names other than its head_config.json's
            raise ValueError(f"{directory}: weights do not fit its {CONFIG_NAME}: {exc}") from None
        head.train_losses = list(record.get("train_losses", []))
        head.train_record = dict(record.get("train", {}))
        read_fingerprint(head, record, directory)
        resolve_head(head, head._lens)
        return head.to(head._device)


def _read_record(directory: Path) -> dict:
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (directory / name).is_file():
            raise MissingPath(f"directory {str(directory)!r}: no {name} in this head directory")
    return json.loads((directory / CONFIG_NAME).read_text())


def stacked_logits(heads: list[TranslatorHead], hs: list[torch.Tensor]) -> torch.Tensor:
    """Several translators of one model on one position each: [1, 1, H] each -> [L, V].

    The translated states go through the model's final norm and LM head as one stacked
    matrix product (one read of the LM head instead of L), as ``head(h)`` row by row would
    give.
    """
    lenses = {id(head._lens.model) for head in heads}
    if len(lenses) != 1:
        raise ValueError("heads must all be attached to the same model to be stacked")
    x = torch.cat([head.translate(h) for head, h in zip(heads, hs, strict=True)], dim=1)
    return heads[0]._lens(x)[0]  # [1, L, H] -> [L, V]
