"""Judging real runs: the Table-3-style report (``report.py``) and predict-then-measure
validation (``predict.py``, ``validate.py``): every run predicted from a cost profile measured
beforehand, nothing fitted on the runs it judges."""
