"""Timing on this machine: the one clock, per-layer times, and the measured cost profile.

``measure_profile`` / ``write_profile`` / ``load_profile`` (``measure.profile.profile``) are
imported lazily (PEP 562), so the decoder can import the clock without the profiler.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "measure_profile": "measure.profile.profile",
    "write_profile": "measure.profile.profile",
    "load_profile": "measure.profile.profile",
    "Spread": "measure.profile.stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'measure.profile' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
