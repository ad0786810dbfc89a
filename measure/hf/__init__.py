"""Hugging Face models by their common layout: local loading (directories, GGUF files converted
once to a cached safetensors directory by ``gguf.py``, known names such as ``smollm2``), model
surgery (``arch.py``), the early-head interface and the logit lens (``lens.py``), layer-split
decoding (``layer_split.py``) and the KV-cache row helpers PPD's hand-off needs (``kv_ops.py``)."""
