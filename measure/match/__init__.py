"""Early-prediction match rates (p_correct): run settings (``config.py``), the measurement loop
(``rate.py``), resumable and sharded runs on disk (``records.py``), and the paper's table shapes
and replay traces (``tables.py``)."""
