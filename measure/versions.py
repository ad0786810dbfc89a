"""The releases of torch and transformers the test suite has passed on, and where a running
environment stands against them (read from package metadata: importing this needs no torch)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

TESTED = {
    "transformers": ("5.17.0", "5.24.0"),
    "torch": ("2.11.0", "2.13.0"),
}
"""Lowest and highest release of each package the suite has passed on. ``.ci/run`` runs the
model-access tests on the lowest transformers and the whole suite on the highest. pyproject bounds
transformers to this range (its internals move between minor releases; the upper bound is raised
deliberately when a newer release passes) and torch from below only, so that an install keeps a
GPU machine's newer torch; ``ppd doctor`` prints a warning line for a release outside it."""


@dataclass(frozen=True)
class VersionStatus:
    """One package's installed release against its tested range."""

    name: str
    installed: str | None
    """The installed release, None when the package is missing."""
    tested: tuple[str, str] | None
    """(lowest, highest) tested release; None for packages without a tested range."""

    @property
    def inside(self) -> bool | None:
        """True inside the tested range, False outside, None when there is no range or no
        install to compare."""
        if self.tested is None or self.installed is None:
            return None
        low, high = (release_tuple(v) for v in self.tested)
        return low <= release_tuple(self.installed) <= high

    def warning(self) -> str | None:
        """One line for a release outside the tested range (None inside it, or without a range):
        a warning, not a failure; the self-check says whether the toolkit works with it."""
        if self.inside is not False:
            return None
        low, high = self.tested
        side = "newer" if release_tuple(self.installed) > release_tuple(high) else "older"
        return (
            f"warning: {self.name} {self.installed} is outside the tested range {low} .. {high} "
            f"({side} than the suite has passed on): results may differ; report problems with "
            "this output"
        )

    def line(self) -> str:
        """``name  installed  (tested low .. high: inside | OUTSIDE)``."""
        text = f"{self.name:<13} {self.installed or 'not installed'}"
        if self.tested is not None and self.installed is not None:
            where = "inside" if self.inside else "OUTSIDE the tested range"
            text += f"  (tested {self.tested[0]} .. {self.tested[1]}: {where})"
        return text


def release_tuple(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string such as ``2.13.0+cpu`` or ``5.24.0.dev0``."""
    match = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if match is None:
        raise ValueError(f"version must start with a release number, got {text!r}")
    return tuple(int(part or 0) for part in match.groups())


def installed_version(name: str) -> str | None:
    """The installed release of a distribution, or None."""
    try:
        return version(name)
    except PackageNotFoundError:
        return None


PACKAGES = ("ppd-toolkit", "torch", "transformers", "numpy", "scipy", "simpy", "gguf")
"""Distributions ``ppd doctor`` reports."""


def environment() -> list[VersionStatus]:
    """Python's, the toolkit's and the key packages' releases against their tested ranges."""
    python = ".".join(map(str, sys.version_info[:3]))
    return [VersionStatus("python", python, None)] + [
        VersionStatus(n, installed_version(n), TESTED.get(n)) for n in PACKAGES
    ]
