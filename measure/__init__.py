"""Real Hugging Face models: early-prediction match rates, per-layer times, real PPD decoding.

Needs the ``measure`` extra (torch, transformers). Names are imported lazily so that
``import measure`` itself works without torch.
"""
