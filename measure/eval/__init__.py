"""Judging real runs: the Table-3-style report (``report.py``), calibration of the simulator's
overhead terms (``calibrate.py``) and the three-way validation (``validate.py``)."""
