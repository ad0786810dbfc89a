"""Hand-made cost profiles (the JSON layout of ``ppdmodel.cost_profile``) for the tests."""

from __future__ import annotations

import copy

from ppdmodel.cost_profile import PROFILE_FORMAT, PROFILE_VERSION

COSTS = {
    "layer_s": 0.002,
    "candidate_extra_row_layer_s": 0.0005,
    "candidate_layer_s_by_k": {"1": 0.0021, "3": 0.003},
    "embedding_s": 0.0001,
    "early_head_s": 0.01,
    "final_head_s": 0.011,
    "candidate_dispatch_s": 0.0,
    "hidden_dispatch_s": 0.0,
    "handoff_s": 0.0,
    "host_s": 0.0002,
    "shared_device_slowdown": 2.0,
}
"""A single-backend CPU-like profile: the early head costs about five layers."""


def minimal_profile(d: int = 30, *, serial: bool | None = None, **costs) -> dict:
    """A valid profile of a d-layer model with one backend (``single``); ``costs`` override
    entries of COSTS. The hand-off grows by 0.1 ms per candidate layer. ``serial``: mark the
    backend as running main and candidates one after the other (left out when None)."""
    return {
        "format": PROFILE_FORMAT,
        "version": PROFILE_VERSION,
        "model": {"name": "planted", "d": d},
        "backends": {
            "single": {
                "costs": {**copy.deepcopy(COSTS), **costs},
                "per_candidate_layer_s": {"handoff_s": 0.0001},
                **({} if serial is None else {"serial": serial}),
            }
        },
        "figures": {},
        "provenance": {},
        "warnings": [],
    }
