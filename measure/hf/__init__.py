"""Hugging Face models by their common layout: local loading, architecture access, layer-split
decoding (``layer_split.py``) and the KV-cache row helpers PPD's hand-off needs (``kv_ops.py``)."""
