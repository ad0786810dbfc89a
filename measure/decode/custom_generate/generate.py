"""PPD (Predictive Pipelined Decoding) as a transformers ``custom_generate`` folder.

``model.generate(ids, custom_generate=PATH, trust_remote_code=True, d_bar=15, k=3)`` with PATH
the folder that holds this ``custom_generate/`` (``measure.custom_generate_dir()``); the method
itself is ``measure.decode.hf_generate`` (see README.md beside this file).
"""

from measure.decode.hf_generate import generate  # noqa: F401 (the name transformers loads)
