"""Timing on this machine: per-layer times, the measured cost profile and its statistics.

The clock is ``measure.clock`` (the ground floor, shared with the decoders). Public names are
imported when first used (PEP 562, as ``measure`` does), so the torch-free modules here
(``stats``, ``cpu_share``) load without torch and without the profiler.
"""

from __future__ import annotations

import importlib

# public name -> defining module
_EXPORTS = {
    "Spread": "measure.profile.stats",
    "load_profile": "measure.profile.profile",
    "measure_profile": "measure.profile.profile",
    "write_profile": "measure.profile.profile",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
