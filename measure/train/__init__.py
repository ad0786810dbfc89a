"""Training: per-layer early-prediction heads (``heads.py``, paper Appendix A) and the offline
reference model with its byte-level BPE tokenizer (``reference_model.py``)."""
