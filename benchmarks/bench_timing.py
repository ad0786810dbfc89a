"""Benchmark: per-layer timed decode (layer-split path) against whole-step greedy decode.

Prints, for one small random Llama-style model, the mean whole greedy step (``time_greedy``),
the sum of per-component means (``time_layers``: embed + layers + head) and their ratio, which
is the overhead of splitting a step into separately timed layers. Also prints the batch-k
per-layer cost relative to batch 1. Usage::

    OMP_NUM_THREADS=2 python benchmarks/bench_timing.py [--tokens 32] [--layers 8]
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from measure.profile.timing import time_greedy, time_layers


def _model(layers: int, hidden: int):
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        vocab_size=4096,
        max_position_embeddings=1024,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--prompt", type=int, default=64)
    args = parser.parse_args()
    model = _model(args.layers, args.hidden)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(device)
    prompt = torch.randint(0, 4096, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    kw = dict(n_tokens=args.tokens, warmup=4)
    greedy = time_greedy(model, prompt, **kw)
    layers = time_layers(model, prompt, batch_sizes=(1, 3, 5), **kw)
    step = float(greedy["seconds"].iloc[0])
    print(f"device {device}, d={args.layers}, hidden={args.hidden}, {args.tokens} timed tokens")
    print(f"whole greedy step (time_greedy):          {step * 1e3:8.3f} ms")
    for batch, rows in layers.groupby("batch"):
        total = rows["seconds"].sum()
        per_layer = rows.loc[rows["component"] == "layer", "seconds"].mean()
        line = f"batch {batch}: sum of components {total * 1e3:8.3f} ms, "
        line += f"ratio to greedy step {total / step:5.2f}, mean layer {per_layer * 1e3:.3f} ms"
        print(line)


if __name__ == "__main__":
    main()
