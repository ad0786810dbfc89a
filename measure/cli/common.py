"""What the ``measure`` sub-commands share beside their settings (``measure.settings``): reading
the prompts, checking them against the model before its weights load, and reporting."""

from __future__ import annotations

import argparse
import functools
import shlex
import sys
import warnings
from contextlib import contextmanager
from typing import TYPE_CHECKING

from measure.datasets import Prompt, load_prompts
from measure.degenerate import DegenerateGenerationWarning
from measure.settings import DRIFT_FLOOR_HELP, DriftSettings
from ppdmodel.cli_args import reading

if TYPE_CHECKING:  # measure.checks imports torch: the parser imports this module
    from measure.checks import ModelFacts

MAX_CANDIDATE_ROWS = 4096
"""The most rows a candidate batch may have (``--ks``, ``--batch-sizes``): PPD's k is a handful
of top-k candidates, and at most the vocabulary; a larger batch only exhausts memory."""


def add_drift_floor(p: argparse.ArgumentParser, when: str = "") -> None:
    """``--drift-floor PCT``: the machine's drift over minutes (``measure.profile.drift``)."""
    DriftSettings.add_to(p, changes={"drift_floor": {"help": DRIFT_FLOOR_HELP.format(when=when)}})


def prompt_selection(args: argparse.Namespace, limit: int | None = None) -> dict:
    """``load_prompts`` keyword arguments from ``PromptSettings``
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
