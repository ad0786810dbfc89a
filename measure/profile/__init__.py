"""Timing on this machine: per-layer times, the measured cost profile and its statistics.

The clock is ``measure.clock`` (the ground floor, shared with the decoders).
"""

from measure.profile.profile import load_profile, measure_profile, write_profile
from measure.profile.stats import Spread

__all__ = ["Spread", "load_profile", "measure_profile", "write_profile"]
