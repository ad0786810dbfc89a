"""Measured costs: the one clock of ``measure`` (``clock.py``) and per-layer / whole-step decode
times in the simulator's CSV schema (``timing.py``)."""
