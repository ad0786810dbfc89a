"""Argument helpers shared by every ``ppd`` sub-command: one default per concept, typed options.

Sub-command modules in ``ppdmodel``, ``sim`` and ``measure`` import these; nothing here knows
which sub-commands exist (they are found through the ``ppd.commands`` entry-point group).
"""

from __future__ import annotations

import argparse
import math

DEFAULT_D = 40
"""Decoder layers when none are given: Vicuna-13B, the model behind the paper's tables."""


def default_d_bar(d: int) -> int:
    """The early-prediction layer when none is given: the smallest integer layer >= d/2.

    d/2 is the paper's setting (Eq. 3, 5, 6); for odd d it is not a layer, so every command
    rounds it up, the nearest layer inside Theorem 4.1's domain d/2 <= d_bar < d.
    """
    return (int(d) + 1) // 2


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def usage(parser: argparse.ArgumentParser) -> int:
    """Print a command group's help and return the usage-error exit code (2)."""
    parser.print_help()
    return 2
