"""Every ``ppd`` option is a settings field (``ppdmodel.options``): no command writes an option
by hand, and every command's ``--help`` is grouped by concern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ppdmodel.cli import build_parser, iter_commands

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ppdmodel", "sim", "measure")
ADDS_OPTIONS = {
    "ppdmodel/options.py": "derives every option from a settings field",
    "ppdmodel/cli.py": "the --debug every command shares, and the command tree",
}
"""The only modules that call ``add_argument`` (why)."""
UNGROUPED = {"help", "debug"}
"""Options every command has, left in argparse's own group."""

COMMANDS = dict(iter_commands(build_parser()))


def test_options_are_added_only_from_settings_fields():
    hand_written = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            count = len(re.findall(r"\.add_argument\(", path.read_text()))
            if count and rel not in ADDS_OPTIONS:
                hand_written[rel] = count
    assert not hand_written, (
        f"options written by hand (declare them as settings fields): {hand_written}"
    )


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_is_grouped_by_concern(name):
    parser = COMMANDS[name]
    loose = [
        a.option_strings[0]
        for group in parser._action_groups
        if group.title in ("options", "optional arguments", "positional arguments")
        for a in group._group_actions
        if a.dest not in UNGROUPED
    ]
    assert not loose, f"{name}: options outside a titled group: {loose}"


@pytest.mark.parametrize(
    "argv, kind",
    [
        (["run", "--model", "m", "--prompt", "x", "--out", "o"], "ReportMethodSettings"),
        (["validate", "--model", "m", "--prompt", "x", "--out", "o"], "MethodSettings"),
        (["measure", "profile", "--model", "m", "--out", "o.json"], "ProfileProbeSettings"),
        (["measure", "atlas", "--records", ".", "--out", "o"], "AtlasGenerationSettings"),
    ],
)
def test_a_value_built_in_python_has_its_commands_defaults(argv, kind):
    """A default lives in the field, not in the parser alone: the value a script builds
    equals the one the command builds from no options."""
    import measure.cli.match_settings
    import measure.cli.timing_settings
    import measure.decode.settings

    modules = (measure.decode.settings, measure.cli.timing_settings, measure.cli.match_settings)
    cls = next(getattr(m, kind) for m in modules if hasattr(m, kind))
    parsed = cls.from_args(build_parser().parse_args(argv))
    assert parsed == cls(**{f.name: getattr(parsed, f.name) for f in cls.options()
                            if f.metadata["option"].required})  # fmt: skip
