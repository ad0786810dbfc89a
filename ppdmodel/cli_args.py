"""Argument helpers shared by every ``ppd`` sub-command: one default per concept, typed options.

Sub-command modules in ``ppdmodel``, ``sim`` and ``measure`` import these; nothing here knows
which sub-commands exist (they are found through the ``ppd.commands`` entry-point group).
Every numeric or path option uses one of the types below, so a bad value is refused by argparse
(``ppd <command>: error: argument --x: ...``, exit 2) before any work starts.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ppdmodel.defaults import DEFAULT_D, default_d_bar  # noqa: F401 (re-exported for the CLI modules)

MAX_INT = 2**53
"""Largest integer an option takes: every integer up to it is exact in float64, so the closed
form, the simulator and numpy's int64 arrays all hold it without overflow."""


def _int_in(text: str, low: int) -> int:
    allowed = f"must be an integer in [{low}, 2**53], got {text!r}"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(allowed) from None
    if not low <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(allowed)
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer in [1, 2**53]."""
    return _int_in(text, 1)


def nonnegative_int(text: str) -> int:
    """argparse type: an integer in [0, 2**53] (a seed, a count that may be zero)."""
    return _int_in(text, 0)


def int_at_least(low: int) -> Callable[[str], int]:
    """argparse type factory: an integer in [low, 2**53] (e.g. ``int_at_least(2)`` ranks)."""

    def parse(text: str) -> int:
        return _int_in(text, low)

    parse.__name__ = f"int_at_least_{low}"
    return parse


def _finite(text: str, allowed: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    allowed = "a finite number >= 0"
    value = _finite(text, allowed)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def percent_below_100(text: str) -> float:
    """argparse type: a percentage in [0, 100) (a log-sd, a share)."""
    allowed = "a number in [0, 100)"
    value = _finite(text, allowed)
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a time limit, a rate, an efficiency)."""
    allowed = "a finite number > 0"
    value = _finite(text, allowed)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def probability(text: str) -> float:
    """argparse type: a number in [0, 1] (a match rate p, a ratio)."""
    allowed = "a number in [0, 1]"
    value = _finite(text, allowed)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
    return value


def existing_file(text: str) -> str:
    """argparse type: a readable file that exists (a directory is refused)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, expected a file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"file not found: {text}")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"file not readable: {text}")
    return text


def existing_dir(text: str) -> str:
    """argparse type: a folder that exists."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, expected a folder")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"folder not found: {text}")
    return text


def existing_path(text: str) -> str:
    """argparse type: a file or folder that exists (a model: a folder or a single file)."""
    if not Path(text).expanduser().exists():
        raise argparse.ArgumentTypeError(f"not found: {text}")
    return text


def _creatable(path: Path, text: str) -> None:
    """ArgumentTypeError unless ``path`` (absent) can be created: its nearest existing
    ancestor is a folder this process may write into."""
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"cannot create {text}: {ancestor} is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot create {text}: {ancestor} is not writable")


def output_file(text: str) -> str:
    """argparse type: a file to write (new, or an existing writable file; not a folder)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, expected a file to write")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise argparse.ArgumentTypeError(f"file not writable: {text}")
    else:
        _creatable(path, text)
    return text


def output_dir(text: str) -> str:
    """argparse type: a folder to write into (new, or an existing writable folder)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"must be a folder (new or existing), got the file {text}")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"folder not writable: {text}")
    else:
        _creatable(path, text)
    return text


def usage(parser: argparse.ArgumentParser) -> int:
    """Print a command group's help and return the usage-error exit code (2)."""
    parser.print_help()
    return 2


MALFORMED_FILE_ERRORS = (KeyError, TypeError, IndexError)
"""What a reader may raise on a file whose structure it did not expect (a missing column or
key, text where a number belongs); ``reading`` turns them into ValueError."""


@contextmanager
def reading(option: str, path) -> Iterator[None]:
    """Report a malformed input file as a ValueError naming the option and the file.

    Readers refuse bad files with ValueError; this catches the structural errors that slip
    through (``MALFORMED_FILE_ERRORS``), so the command ends with a message, not a traceback.
    """
    try:
        yield
    except MALFORMED_FILE_ERRORS as exc:
        raise ValueError(f"{option} {path}: malformed file ({type(exc).__name__}: {exc})") from exc
    except ValueError as exc:  # a reader's own message: say which option gave the file
        if option in str(exc):
            raise
        raise ValueError(f"{option}: {exc}") from exc
