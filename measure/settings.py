"""The settings every ``measure`` command shares, declared once (``ppdmodel.options``): the model
it loads and the prompts it reads. Torch-free, so ``ppd --help`` builds its options with the
core install alone.

Each is one frozen value: its fields carry their default, help and check; the commands derive
their options from them (``Settings.add_to``) and build the value from the parsed options
(``Settings.from_args``).
"""

from __future__ import annotations

from dataclasses import dataclass

from measure.datasets import FORMATS, SPLITS
from ppdmodel.cli_args import existing_file, percent_below_100, positive_int
from ppdmodel.options import Settings, option

MODEL_HELP = (
    "local Hugging Face model dir, a .gguf file (converted once to a cached safetensors dir), "
    "or a known name: smollm2 (needs the smollm2 extra)"
)
"""Help of every ``--model`` option (measure.hf.loading.resolve_model_dir reads the value)."""

PROMPT_FORMATS = ("auto", *FORMATS)
"""``--format`` choices: a file format of ``measure.datasets``, or detect it from the file."""


@dataclass(frozen=True, kw_only=True)
class ModelSettings(Settings):
    """The model a command loads, its dtype and device (the dtype and device names are checked
    when the model loads: ``measure.hf.loading``)."""

    GROUP = "model"

    model: str = option(metavar="MODEL", required=True, help=MODEL_HELP)
    dtype: str = option("float32", help="float32 | bfloat16 | float16")
    device: str = option("cpu", help="cpu | cuda | cuda:N (torchrun: cuda:LOCAL_RANK)")


@dataclass(frozen=True, kw_only=True)
class PromptSettings(Settings):
    """The prompts a command decodes: given inline (``prompt``) or read from a file
    (``prompts``), selected by category, split and count, and how they are encoded."""

    GROUP = "prompts"

    prompt: tuple[str, ...] | None = option(
        None, action="append", metavar="TEXT", exclusive="source", required=True,
        help="a prompt (repeatable)",
    )  # fmt: skip
    prompts: str | None = option(
        None, type=existing_file, metavar="FILE", exclusive="source", required=True,
        help="prompts file (measure.datasets formats)",
    )  # fmt: skip
    format: str = option("auto", choices=PROMPT_FORMATS, help="prompts format")
    category: tuple[str, ...] | None = option(
        None, nargs="+", metavar="CAT",
        help="only prompts of these categories (spec-bench: translation, summarization, qa, ...)",
    )  # fmt: skip
    split: str = option(
        "all", choices=SPLITS,
        help="all prompts (default), or the train / held-out side of the split that holds out "
        "every 4th prompt of each category",
    )  # fmt: skip
    limit: int | None = option(None, type=positive_int, help="use only the first N prompts")
    no_chat_template: bool = option(
        False, action="store_true",
        help="encode prompts as bare text (default: as the user turn of the tokenizer's chat "
        "template, when it has one)",
    )  # fmt: skip

    @property
    def chat_template(self) -> bool:
        """Encode prompts as the user turn of the tokenizer's chat template."""
        return not self.no_chat_template


DRIFT_FLOOR_HELP = (
    "the machine's drift over minutes, a log-sd in %% (experiments/machine_drift.py prints it): "
    "the profile's intervals in seconds carry at least it, however quiet the profile's own "
    "minutes were{when} (default 0: its own windows only)"
)


@dataclass(frozen=True, kw_only=True)
class DriftSettings(Settings):
    """The machine's drift over minutes a measured profile's intervals carry at least
    (``measure.profile.drift``)."""

    GROUP = "drift"

    drift_floor: float = option(
        0.0, type=percent_below_100, metavar="PCT", help=DRIFT_FLOOR_HELP.format(when="")
    )


__all__ = ["DriftSettings", "ModelSettings", "PromptSettings"]
