"""``ppd measure atlas``: a p_correct atlas with intervals, a figure and a provenance record."""

from __future__ import annotations

import argparse

from measure.cli.common import command_line, honours_no_progress
from measure.cli.match_settings import (
    AtlasGenerationSettings,
    AtlasSettings,
    MatchOutputSettings,
    RecordsSettings,
)
from measure.settings import (
    ModelSettings,
    ProbeSettings,
    PromptSettings,
    ThreadSettings,
)

SOURCE = ("records", "model")
"""Options of which ``ppd measure atlas`` takes exactly one: read a run, or measure one."""


def register_measure(subparsers) -> None:
    """Add ``atlas`` to the ``ppd measure`` sub-commands."""
    p = subparsers.add_parser(
        "atlas",
        help="p_correct atlas: rate, n and 95%% intervals per prompt set, head, layer and k",
        description="Measures match rates (as `ppd measure match-rate`, into OUT/match; "
        "resumable) or reads an existing run (--records), then writes atlas.csv (per prompt "
        "set, i.e. each category and 'all', head, layer and k: p_correct, n tokens, n prompts, "
        "Wilson and bootstrap-over-prompts 95% intervals), atlas_positions.csv (the same per "
        "token-position bin), atlas.png (p_correct against layer/d with bands, the paper's "
        "Vicuna-13B Table 2 overlaid at layer/40) and atlas.json (provenance). The bootstrap "
        "resamples whole prompts (stratified by category), so it respects the correlation of "
        "matches within a sequence; it is the interval to quote.",
    )
    RecordsSettings.add_to(p)
    ModelSettings.add_to(
        p, changes={"model": {"required": False}, "device": {"help": "cpu | cuda | cuda:N"}}
    )
    _one_of(p, SOURCE)
    PromptSettings.add_to(
        p, skip=("prompt",),
        changes={"prompts": {"exclusive": None, "required": False,
                             "help": "prompts file (with --model)"}},
    )  # fmt: skip
    ProbeSettings.add_to(
        p,
        changes={
            "layers": {"help": "default all 1..d-1"},
            "ks": {"help": "k values (1 3 5)"},
            "head_dir": {"help": "trained heads (a dir, or a dir of them)"},
        },
    )
    AtlasGenerationSettings.add_to(p)
    AtlasSettings.add_to(p)
    ThreadSettings.add_to(p)
    MatchOutputSettings.add_to(
        p, skip=("records_format", "no_verify"),
        changes={"resume": {"help": "continue an interrupted run"},
                 "wait_lock": {"help": "wait for another run using OUT/match"}},
    )  # fmt: skip
    p.set_defaults(func=honours_no_progress(_atlas))


def _one_of(parser: argparse.ArgumentParser, dests: tuple[str, ...]) -> None:
    """One required choice among the options ``dests``, added next to each other by two
    settings classes (``Settings.add_to`` makes a mutually exclusive group of the fields of
    one class only)."""
    group = parser.add_mutually_exclusive_group(required=True)
    group._group_actions.extend(a for a in parser._actions if a.dest in dests)


def _atlas(args) -> int:
    from measure.cli.atlas_workflow import format_atlas_report, make_atlas

    result = make_atlas(
        RecordsSettings.from_args(args),
        None if args.model is None else ModelSettings.from_args(args),
        PromptSettings.from_args(args),
        ProbeSettings.from_args(args),
        AtlasGenerationSettings.from_args(args),
        MatchOutputSettings.from_args(args),
        AtlasSettings.from_args(args),
        ThreadSettings.from_args(args),
        command=command_line(args, "measure atlas"),
    )
    print(format_atlas_report(result))
    return 0
