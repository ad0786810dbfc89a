"""The ``ppd`` command: one argparse tree assembled from the sub-commands packages declare.

Each package declares a ``register(subparsers)`` function in the ``ppd.commands`` entry-point
group (``pyproject.toml``); it adds its sub-commands and sets ``func(args) -> int`` on each.
This module knows none of them, so the math package does not depend on the layers above it.
A registrar imports no heavy dependency (torch): a command that needs one sets
``func=deferred("package.module:function")``, which imports its module when the command runs,
so ``ppd --help`` and every closed-form command work with the core install alone.

Errors: a user error (a bad value, a malformed or missing file, an unwritable path) ends as
``ppd <command>: error: ...`` with exit status 2, as does a command that needs an optional
dependency this install lacks (the line names the extra that brings it); a ``ReportedFailure``
(a ``dist`` rank killed by a signal) prints its one line, exit status 1; anything else prints one
line and a hint to rerun with ``--debug``, which shows the traceback (exit status 1).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from importlib.metadata import PackageNotFoundError, entry_points, requires

COMMAND_GROUP = "ppd.commands"
"""Entry-point group of the sub-command registrars; entries are added in name order."""

USER_ERRORS = (ValueError, OSError, OverflowError, MemoryError)
"""Exceptions a handler raises for bad input: a value out of range, a malformed, missing or
unwritable file, a size too large to represent or to hold in memory."""

EXIT_USAGE, EXIT_FAILURE, EXIT_INTERRUPTED = 2, 1, 130
DISTRIBUTION = "ppd-toolkit"
"""The distribution whose extras (``pyproject.toml``) say which install brings a dependency."""


class ReportedFailure(RuntimeError):
    """A failure that is neither the user's nor a bug, whose message says in one line what
    happened (a ``dist`` rank killed by a signal): ``ppd`` prints that line alone, exit 1."""


def deferred(target: str) -> Callable[[argparse.Namespace], int]:
    """A handler that imports ``target`` (``"package.module:function"``) when its command runs
    and calls it with the parsed arguments: the registrar's module stays free of the work's
    dependencies (torch), so building the parser never imports them."""
    module, sep, name = target.partition(":")
    if not (module and sep and name):
        raise ValueError(f"target must be 'package.module:function', got {target!r}")

    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    run.__qualname__ = run.__name__ = name
    run.__doc__ = f"``{target}``, imported when the command runs."
    return run


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The extra of ``DISTRIBUTION`` that installs the top-level module ``exc`` did not find
    (``torch``: ``measure``), or None when no extra lists it (a bug, not a missing install)."""
    top = exc.name or ""
    if not top or "." in top:  # a module missing inside an installed package: not an extra
        return None
    try:
        requirements = requires(DISTRIBUTION) or []
    except PackageNotFoundError:
        return None
    for requirement in requirements:
        found = re.match(r"\s*([A-Za-z0-9._-]+).*;.*\bextra\s*==\s*[\"']([^\"']+)", requirement)
        if found and _canonical(found[1]) == _canonical(top):
            return found[2]
    return None


def _canonical(name: str) -> str:
    """A distribution or module name compared as pip does (case, ``-``, ``_`` and ``.`` alike)."""
    return re.sub(r"[-_.]+", "_", name).lower()


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block only where it is the answer (a missing
    required option; ``--help`` prints it in full). Sub-command parsers are of this class."""

    def error(self, message: str):
        if message.startswith("the following arguments are required"):
            super().error(message)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``ppd`` parser with every registered sub-command (each accepts ``--debug``)."""
    parser = Parser(
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
    debug = "show the Python traceback of an error (for bug reports)"
    parser.add_argument("--debug", action="store_true", help=debug)
    for _, sub in iter_parsers(parser):
        if sub is not parser:  # after the command too; SUPPRESS keeps a --debug given before
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug)
            sub.set_defaults(command_parser=sub)
    return parser


def iter_parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of ``parser`` and every sub-command below it, depth first, once each."""
    seen: set[int] = set()
    stack = [parser]
    while stack:
        current = stack.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current.prog, current
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                stack[:0] = list(action.choices.values())


def iter_commands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(prog, parser) of every leaf sub-command, e.g. ``("ppd measure timing", parser)``."""
    for prog, sub in iter_parsers(parser):
        if not any(isinstance(a, argparse._SubParsersAction) for a in sub._actions):
            yield prog, sub


def main(argv: list[str] | None = None) -> int:
    """Run ``ppd``; user errors and a missing extra exit 2 (``SystemExit``), other failures 1,
    Ctrl-C 130."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    command = getattr(args, "command_parser", parser)
    if unknown:  # reported by the sub-command that was given them, with its usage
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    prog = command.prog
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe (`ppd ... | head`) fails here, not at shutdown
        return code
    except BrokenPipeError:
        _silence_stdout()
        parser.exit(EXIT_USAGE)  # the reader stopped early: nothing left to say
    except KeyboardInterrupt:
        parser.exit(EXIT_INTERRUPTED, f"{prog}: interrupted\n")
    except Exception as exc:
        if args.debug:
            raise
        if isinstance(exc, USER_ERRORS):
            parser.exit(EXIT_USAGE, f"{prog}: error: {describe(exc)}\n")
        extra = missing_extra(exc) if isinstance(exc, ModuleNotFoundError) else None
        if extra is not None:
            parser.exit(EXIT_USAGE, f"{prog}: error: this command needs {exc.name}, which is not "
                        f"installed: pip install -e \".[{extra}]\"\n")  # fmt: skip
        if isinstance(exc, ReportedFailure):
            parser.exit(EXIT_FAILURE, f"{prog}: error: {describe(exc)}\n")
        first = (describe(exc).splitlines() or [""])[0]
        parser.exit(
            EXIT_FAILURE,
            f"{prog}: error: {type(exc).__name__}: {first}\n"
            f"{prog}: unexpected failure; rerun with --debug to see the traceback\n",
        )


def describe(exc: BaseException) -> str:
    """An exception as a user reads it: OS errors with their file, memory errors explained."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {exc.filename}"
    if isinstance(exc, MemoryError):
        return f"out of memory{': ' + str(exc) if str(exc) else ''}; use smaller sizes"
    return str(exc) or type(exc).__name__


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
