"""The ``ppd`` command: one argparse tree assembled from the sub-commands packages declare.

Each package declares a ``register(subparsers)`` function in the ``ppd.commands`` entry-point
group (``pyproject.toml``); it adds its sub-commands and sets ``func(args) -> int`` on each.
This module knows none of them, so the math package does not depend on the layers above it.
Handlers import heavy dependencies (torch) lazily, so ``ppd --help`` works with the core alone.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points

COMMAND_GROUP = "ppd.commands"
"""Entry-point group of the sub-command registrars; entries are added in name order."""


def build_parser() -> argparse.ArgumentParser:
    """The ``ppd`` parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="ppd",
        description="Predictive Pipelined Decoding: closed form, simulator and measurement.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    found = sorted(entry_points(group=COMMAND_GROUP), key=lambda ep: ep.name)
    if not found:
        parser.epilog = "no sub-commands are registered: install the toolkit (pip install -e .)"
    for ep in found:
        module = ep.value.partition(":")[0]
        try:
            register = ep.load()
        except ModuleNotFoundError as exc:  # a part of the toolkit not present in this build
            if exc.name != module:
                raise
            continue
        register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ValueError as exc:
        parser.exit(2, f"ppd {args.command}: error: {exc}\n")
    except FileNotFoundError as exc:
        parser.exit(2, f"ppd {args.command}: error: {exc}\n")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
