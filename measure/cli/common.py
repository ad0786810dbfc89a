"""Options shared by the ``measure`` sub-commands: the model, its prompts, and how to read them."""

from __future__ import annotations

import argparse

from measure.datasets import FORMATS, Prompt, load_prompts
from ppdmodel.cli_args import positive_int, reading

MODEL_HELP = (
    "local Hugging Face model dir, a .gguf file (converted once to a cached safetensors dir), "
    "or a known name: smollm2 (needs the smollm2 extra)"
)
"""Help of every ``--model`` option (measure.hf.loading.resolve_model_dir reads the value)."""

PROMPT_FORMATS = ("auto", *FORMATS)
"""``--format`` choices: a file format of ``measure.datasets``, or detect it from the file."""


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model`` (a local directory, .gguf file or known name), ``--dtype`` and ``--device``."""
    p.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    p.add_argument(
        "--device", default="cpu", help="cpu | cuda | cuda:N (torchrun: cuda:LOCAL_RANK)"
    )


def add_prompt_format_args(p: argparse.ArgumentParser, *, limit: bool = True) -> None:
    """``--format`` of a prompts file, and ``--limit`` to its first N prompts."""
    p.add_argument("--format", default="auto", choices=PROMPT_FORMATS, help="prompts format")
    if limit:
        p.add_argument(
            "--limit", type=positive_int, default=None, help="use only the first N prompts"
        )


def read_prompts(args: argparse.Namespace, limit: int | None = None) -> list[Prompt]:
    """The prompts of ``--prompts`` (``--format``, ``--limit`` or ``limit``), read before any
    model is loaded; a malformed file is a ValueError naming it."""
    limit = limit or getattr(args, "limit", None)
    with reading("--prompts", args.prompts):
        return load_prompts(args.prompts, args.format, limit=limit)
