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
from ppdmodel.cli_args import (
    existing_dir,
    existing_file,
    nonnegative_int,
    output_dir,
    output_file,
    percent_below_100,
    positive_float,
    positive_int,
    probability,
)
from ppdmodel.options import Settings, flag_of, option

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


SEED_HELP = (
    "prompt i is seeded with measure.decode.sampling.prompt_seed(SEED, its id), as "
    "`ppd measure match-rate --seed` seeds it (default 0)"
)


@dataclass(frozen=True, kw_only=True)
class SamplingSettings(Settings):
    """Sampled decoding (paper Appendix B): main samples its token as ``model.generate``
    does; without ``do_sample`` the other fields must stay unset."""

    GROUP = "sampling (paper Appendix B)"
    ABOUT = (
        "main samples its token exactly as model.generate(do_sample=True, ...) does (the "
        "model's generation config and transformers' defaults apply, e.g. top_k 50); a match is "
        "the sampled token among the k candidates; the baseline samples with the same draws"
    )

    do_sample: bool = option(False, action="store_true", help="sample instead of greedy")
    temperature: float | None = option(None, type=positive_float, help="temperature > 0")
    top_k: int | None = option(None, type=nonnegative_int, help="top-k sampling")
    top_p: float | None = option(None, type=probability, help="top-p in (0, 1]")
    seed: int = option(0, type=nonnegative_int, help=SEED_HELP)

    def check(self) -> None:
        """A sampling option without ``do_sample`` would be ignored: refused."""
        given = [flag_of(n) for n in ("temperature", "top_k", "top_p")
                 if getattr(self, n) is not None]  # fmt: skip
        if given and not self.do_sample:
            raise ValueError(f"{', '.join(given)}: sampling options need --do-sample")


@dataclass(frozen=True, kw_only=True)
class OutputSettings(Settings):
    """Where a command writes and whether it reports progress."""

    GROUP = "output"

    out: str = option(type=output_dir, metavar="DIR", required=True, help="output directory")
    no_progress: bool = option(False, action="store_true", help="no progress bar")

    @property
    def progress(self) -> bool:
        return not self.no_progress


@dataclass(frozen=True, kw_only=True)
class ProbeSettings(Settings):
    """The candidate grid a command measures: the early layers probed, the top-k candidate
    counts (the rows of a candidate batch) and the trained early heads read there."""

    GROUP = "probes"

    layers: tuple[int, ...] | None = option(
        None, type=positive_int, nargs="+", help="1-based layers to probe (default: all 1..d-1)"
    )
    ks: tuple[int, ...] = option(
        [1, 3, 5], type=positive_int, nargs="+", help="k values (default 1 3 5)"
    )
    head_dir: str | None = option(
        None, type=existing_dir, help="trained head dir (or a dir of them)"
    )


@dataclass(frozen=True, kw_only=True)
class GenerationSettings(Settings):
    """How many tokens each prompt generates: ell, the paper's generation length."""

    GROUP = "generation"

    max_new_tokens: int = option(16, type=positive_int, help="ell per prompt (default 16)")


@dataclass(frozen=True, kw_only=True)
class ThreadSettings(Settings):
    """The torch CPU threads of this process (None: torch's own choice)."""

    GROUP = "threads"

    threads: int | None = option(None, type=positive_int, help="torch CPU threads")


@dataclass(frozen=True, kw_only=True)
class OutputFileSettings(Settings):
    """The one file a command writes (a table or a profile)."""

    GROUP = "output"

    out: str = option(type=output_file, metavar="FILE", required=True, help="file to write")


__all__ = [
    "DriftSettings",
    "GenerationSettings",
    "ModelSettings",
    "OutputFileSettings",
    "OutputSettings",
    "ProbeSettings",
    "PromptSettings",
    "SamplingSettings",
    "ThreadSettings",
]
