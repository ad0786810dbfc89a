"""The ``ppd`` command: one argparse tree whose sub-commands live next to the code they run.

Each package contributes a module with ``register(subparsers)``, which adds its sub-commands
and sets ``func(args) -> int`` on each. Those modules import heavy dependencies (torch)
only inside the handlers, so ``ppd --help`` works with the core install alone.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Modules that add sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "ppdmodel.cli_model",  # ppd latency | compute | tradeoff
    "sim.cli",  # ppd simulate
    "measure.cli",  # ppd measure match-rate | timing | train-head | reference-model
    "measure.cli_ppd",  # ppd run | validate
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ppd",
        description="Predictive Pipelined Decoding: closed form, simulator and measurement.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a part of the toolkit not present in this build
            if exc.name != name:
                raise
            continue
        module.register(subparsers)
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
