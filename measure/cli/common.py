"""Options shared by the ``measure`` sub-commands: the model, its prompts, and how to read them."""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass

from measure.chat import encode_prompts
from measure.datasets import Prompt, load_prompts
from measure.degenerate import DegenerateGenerationWarning
from measure.settings import (
    DRIFT_FLOOR_HELP,
    MODEL_HELP,  # noqa: F401 (re-exported)
    PROMPT_FORMATS,  # noqa: F401 (re-exported)
    DriftSettings,
    ModelSettings,
    PromptSettings,
)
from ppdmodel.cli_args import reading

MAX_CANDIDATE_ROWS = 4096
"""The most rows a candidate batch may have (``--ks``, ``--batch-sizes``): PPD's k is a handful
of top-k candidates, and at most the vocabulary; a larger batch only exhausts memory."""


def add_drift_floor(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--drift-floor PCT``: the machine's drift over minutes (``measure.profile.drift``)."""
    DriftSettings.add_to(p, changes={"drift_floor": {"help": DRIFT_FLOOR_HELP.format(when=when)}})


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model`` (a local directory, .gguf file or known name), ``--dtype`` and ``--device``."""
    ModelSettings.add_to(p)


def add_prompt_format_args(p: argparse.ArgumentParser, *, limit: bool = True) -> None:
    """``--format``, ``--category``, ``--split`` and ``--limit`` of a prompts file, and
    ``--no-chat-template``."""
    source = ("prompt", "prompts")
    PromptSettings.add_to(p, skip=source if limit else (*source, "limit"))


def prompt_selection(args: argparse.Namespace, limit: int | None = None) -> dict:
    """``load_prompts`` keyword arguments from the options of `add_prompt_format_args`
    (``limit`` overrides ``--limit``)."""
    return dict(
        limit=limit or getattr(args, "limit", None),
        category=getattr(args, "category", None),
        split=getattr(args, "split", "all"),
    )


def read_prompts(args: argparse.Namespace, limit: int | None = None) -> list[Prompt]:
    """The prompts of ``--prompts`` (``--format``, ``--category``, ``--split``, ``--limit`` or
    ``limit``), read before any model is loaded; a malformed file is a ValueError naming it."""
    with reading("--prompts", args.prompts):
        return load_prompts(args.prompts, args.format, **prompt_selection(args, limit))


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
        from measure.checks import context_length

        return context_length(self.config)

    def encode(self, texts, *, chat_template: bool, what: str = "the prompts") -> list[list[int]]:
        """Token ids of ``texts`` (``measure.chat.encode_prompts``); ValueError if the model
        has no tokenizer."""
        if self.tokenizer is None:
            raise ValueError(f"--model {self.model} has no tokenizer to encode {what}")
        return encode_prompts(self.tokenizer, texts, chat_template=chat_template)


def model_facts(model: str) -> ModelFacts:
    """The ``ModelFacts`` of ``--model``, read without its weights (config.json, tokenizer)."""
    from measure.hf.loading import load_config, load_tokenizer

    return ModelFacts(model, load_config(model), load_tokenizer(model))


def check_prompts_fit(
    facts: ModelFacts, prompts, new_tokens: int, *, chat_template: bool,
    what: str = "max_new_tokens", named: bool = True,
) -> list[list[int]]:  # fmt: skip
    """Token ids of ``prompts`` (``Prompt`` objects), each checked to fit ``new_tokens`` more
    positions in the model's context (``measure.checks.check_context``; ``named``: the error
    names the prompt's id), before any weight is read."""
    from measure.checks import check_context

    ids = facts.encode([p.text for p in prompts], chat_template=chat_template)
    names = [p.id for p in prompts] if named else None
    check_context(facts.config, [len(x) for x in ids], new_tokens, names=names, what=what)
    return ids


def check_match_rate_options(args, prompts, out_dir) -> None:
    """The checks of ``ppd measure match-rate`` / ``atlas`` options that need no weight: an
    ``out_dir`` holding a previous run without --resume; and, from the model's config.json
    and tokenizer, --layers in [1, d], --ks within the vocabulary, the sampling rule, every
    prompt plus --max-new-tokens within the context."""
    from measure.match.config import make_config
    from measure.match.records import check_out_dir, part_path

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    records_format = getattr(args, "records_format", "csv")
    check_out_dir(out_dir, part_path(out_dir, rank, world), args.resume, records_format)

    facts = model_facts(args.model)
    make_config(facts.d, layers=args.layers, ks=args.ks, max_new_tokens=args.max_new_tokens,
                sampling=getattr(args, "sampling", None))  # fmt: skip
    check_candidate_rows("--ks", args.ks, facts.vocab_size)
    check_prompts_fit(facts, prompts, args.max_new_tokens, chat_template=not args.no_chat_template)


def check_candidate_rows(option: str, values, vocab_size: int | None = None) -> None:
    """Refuse a candidate batch size above ``MAX_CANDIDATE_ROWS`` (checked before the model
    loads) or, given the model's ``vocab_size``, above the vocabulary: a ValueError naming
    `option` and the allowed range."""
    limit, why = MAX_CANDIDATE_ROWS, "the toolkit's cap on a candidate batch"
    if vocab_size is not None and vocab_size < limit:
        limit, why = int(vocab_size), "the model's vocabulary size"
    for value in values:
        if value > limit:
            raise ValueError(f"{option} must be between 1 and {limit} ({why}), got {value}")


def honours_no_progress(handler):
    """A handler with ``--no-progress`` that also silences the progress bars transformers
    prints while it loads a model (``measure.hf.loading.loading_bars``)."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        from measure.hf.loading import loading_bars

        with loading_bars(not getattr(args, "no_progress", False)):
            return handler(args)

    return run


@contextmanager
def degenerate_warnings(command: str):
    """Print DegenerateGenerationWarnings as ``ppd <command>: warning: ...`` on stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DegenerateGenerationWarning)
        try:
            yield
        finally:
            _report(command, caught, DegenerateGenerationWarning)


def _report(command: str, caught, category) -> None:
    for w in caught:
        if issubclass(w.category, category):
            print(f"ppd {command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def command_line(args: argparse.Namespace, command: str) -> str:
    """``ppd <command>`` with every option the parsed ``args`` hold (defaults included), for
    provenance records."""
    parts = ["ppd", *command.split()]
    internal = ("func", "command", "measure_command", "command_parser", "debug")
    for key, value in vars(args).items():
        if key in internal or value is None or value is False:
            continue
        parts.append("--" + key.replace("_", "-"))
        if value is not True:
            parts += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return " ".join(shlex.quote(p) for p in parts)
