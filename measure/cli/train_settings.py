"""Settings of ``ppd measure train-head`` and ``ppd measure reference-model``
(``ppdmodel.options``): which heads are trained on what data and how, and the reference
model's corpus, shape and schedule. Torch-free, so ``ppd --help`` builds these options with
the core install alone."""

from __future__ import annotations

from dataclasses import dataclass

from measure.settings import PromptSettings
from measure.train.reference_model import ReferenceModelConfig
from ppdmodel.cli_args import (
    existing_dir,
    existing_file,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    probability,
)
from ppdmodel.options import Settings, option

KINDS = ("full", "translator")
"""``--kind`` choices (``measure.train.head_io.KINDS``, which needs torch)."""
DATA = ("text", "greedy")
"""``--data`` choices: the text as it is, or the model's own greedy continuations."""
REFERENCE = ReferenceModelConfig()
"""The reference model's defaults (``ReferenceModelConfig``): its options' defaults."""


@dataclass(frozen=True, kw_only=True)
class HeadSettings(Settings):
    """Which heads are trained: their layers, their kinds and the data they learn from."""

    GROUP = "heads"

    layer: tuple[int, ...] = option(
        type=positive_int, nargs="+", required=True, help="layer(s) L, 0 < L < d"
    )
    kind: tuple[str, ...] = option(
        ["full"], nargs="+", choices=KINDS,
        help="head kind(s): full (default) and/or translator; one generation serves all",
    )  # fmt: skip
    data: str | None = option(
        None, choices=DATA,
        help="text: the prompts + references (or --text) as they are (full heads only); "
        "greedy: the model's greedy continuations of the prompts (default with a translator)",
    )  # fmt: skip

    def check(self) -> None:
        """A translator learns from the model's own continuations only."""
        if self.source == "text" and self.kinds != ["full"]:
            raise ValueError(
                "--kind translator needs --data greedy (the model's own continuations)"
            )

    @property
    def kinds(self) -> list[str]:
        """The head kinds, each once, in the order given."""
        return list(dict.fromkeys(self.kind))

    @property
    def source(self) -> str:
        """The data the heads learn from: ``data``, else greedy with a translator, else text."""
        return self.data or ("greedy" if "translator" in self.kind else "text")


@dataclass(frozen=True, kw_only=True)
class TrainPromptSettings(PromptSettings):
    """What heads are trained on: a prompts file (with its references) or a plain text
    file (``text``)."""

    text: str | None = option(
        None, type=existing_file, metavar="FILE", exclusive="source", required=True,
        help="plain UTF-8 text file to train on",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class HeadTrainingSettings(Settings):
    """The optimiser of a head fit; None keeps the default of the data (text: the paper's
    Table 4; greedy: ``measure.train.distill``)."""

    GROUP = "training"

    loss: str = option("ce", choices=("ce", "kl"), help="text data: ce or kl")
    epochs: int | None = option(
        None, type=positive_int, help="default 3 (text); greedy: 4 translator, 2 full"
    )
    lr: float | None = option(
        None, type=positive_float, help="peak learning rate (2e-5 text; 3e-3 greedy)"
    )
    warmup_ratio: float | None = option(None, type=probability, help="default 0.04 / 0.05")
    weight_decay: float | None = option(None, type=nonnegative_float, help="default 0.0")
    batch_size: int | None = option(None, type=positive_int, help="text: blocks per step (128)")
    micro_batch_size: int | None = option(None, type=positive_int, help="text: blocks/forward (8)")
    max_seq_len: int | None = option(None, type=positive_int, help="text: block length (2048)")
    seed: int | None = option(None, type=nonnegative_int, help="shuffle seed (default 0)")

    def text_overrides(self) -> dict:
        """``HeadConfig.for_model`` keyword arguments of a fit on text (unset ones left out)."""
        names = ("epochs", "lr", "warmup_ratio", "weight_decay", "batch_size")
        names += ("micro_batch_size", "max_seq_len", "seed")
        given = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        return {"loss": self.loss, **given}


@dataclass(frozen=True, kw_only=True)
class GreedyDataSettings(Settings):
    """The model's greedy continuations heads are fitted on (``--data greedy``)."""

    GROUP = "greedy data"

    new_tokens: int = option(64, type=positive_int, help="greedy: tokens generated per prompt (64)")
    prompt_positions: int = option(
        0, type=nonnegative_int,
        help="greedy: also fit on this many prompt positions before each generation (0)",
    )  # fmt: skip
    batch_tokens: int | None = option(
        None, type=positive_int, help="greedy: positions per step (128)"
    )
    gen_batch_size: int = option(16, type=positive_int, help="greedy: prompts per batch")
    max_minutes: float | None = option(None, type=positive_float, help="greedy: cap per head fit")


@dataclass(frozen=True, kw_only=True)
class ReferenceCorpusSettings(Settings):
    """The reference model's training text and its byte-level BPE vocabulary."""

    GROUP = "corpus"

    corpus: str | None = option(
        None, type=existing_dir, metavar="DIR", help="corpus dir (None: stdlib)"
    )
    glob: str = option(REFERENCE.corpus_glob, help="file-name pattern of corpus files")
    corpus_max_bytes: int = option(REFERENCE.corpus_max_bytes, type=positive_int, help="bytes read")
    vocab_size: int = option(REFERENCE.vocab_size, type=positive_int, help="BPE vocabulary")


@dataclass(frozen=True, kw_only=True)
class ReferenceShapeSettings(Settings):
    """The reference model's shape (a small Llama)."""

    GROUP = "model shape"

    hidden_size: int = option(REFERENCE.hidden_size, type=positive_int, help="model width")
    layers: int = option(REFERENCE.num_layers, type=positive_int, help="decoder layers")
    heads: int = option(REFERENCE.num_heads, type=positive_int, help="attention heads")
    intermediate_size: int = option(REFERENCE.intermediate_size, type=positive_int, help="MLP")


@dataclass(frozen=True, kw_only=True)
class ReferenceTrainingSettings(Settings):
    """The reference model's training schedule."""

    GROUP = "training"

    seq_len: int = option(REFERENCE.seq_len, type=positive_int, help="training window")
    batch_size: int = option(REFERENCE.batch_size, type=positive_int, help="windows per step")
    steps: int = option(REFERENCE.steps, type=positive_int, help="optimizer steps")
    lr: float = option(REFERENCE.lr, type=positive_float, help="peak AdamW learning rate")
    warmup_steps: int | None = option(
        None, type=nonnegative_int,
        help=f"linear warm-up steps (None: min({REFERENCE.warmup_steps}, steps/10))",
    )  # fmt: skip
    seed: int = option(REFERENCE.seed, type=nonnegative_int, help="init and sampling seed")
    max_minutes: float = option(
        REFERENCE.max_minutes, type=nonnegative_float,
        help="wall-clock cap on the training loop (breaks determinism if hit)",
    )  # fmt: skip

    @property
    def warmup(self) -> int:
        """The warm-up steps: ``warmup_steps``, else min(the default, a tenth of the steps)."""
        if self.warmup_steps is not None:
            return self.warmup_steps
        return min(REFERENCE.warmup_steps, max(1, self.steps // 10))


def reference_config(
    corpus: ReferenceCorpusSettings, shape: ReferenceShapeSettings,
    training: ReferenceTrainingSettings,
) -> ReferenceModelConfig:  # fmt: skip
    """The ``ReferenceModelConfig`` of the three settings (a cap of 0 minutes: none)."""
    return ReferenceModelConfig(
        corpus_dir=corpus.corpus,
        corpus_glob=corpus.glob,
        corpus_max_bytes=corpus.corpus_max_bytes,
        vocab_size=corpus.vocab_size,
        hidden_size=shape.hidden_size,
        num_layers=shape.layers,
        num_heads=shape.heads,
        intermediate_size=shape.intermediate_size,
        seq_len=training.seq_len,
        batch_size=training.batch_size,
        steps=training.steps,
        warmup_steps=training.warmup,
        lr=training.lr,
        seed=training.seed,
        max_minutes=training.max_minutes or None,
    )


__all__ = [
    "GreedyDataSettings",
    "HeadSettings",
    "HeadTrainingSettings",
    "ReferenceCorpusSettings",
    "ReferenceShapeSettings",
    "ReferenceTrainingSettings",
    "TrainPromptSettings",
    "reference_config",
]
