"""Batch-1 greedy decoding speed of Hugging Face ``generate`` (eager) on this GPU, for published
model shapes with random weights: rows in the columns of ``ppdmodel/data/published_decode.csv``
(so ``sim.published.compare_published`` judges the engine presets against them), plus the
spread. Random weights decode at the same speed as trained ones: the work per token depends on
the shape, the context and the number of tokens, all fixed here (``min_new_tokens``).

    python experiments/gpu_greedy.py --shapes smollm2-135m llama2-7b --out rows.csv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).parent))  # the sibling builder, run as a script
from random_model import SHAPES, random_llama  # noqa: E402


def time_generate(model, prompt_tokens: int, new_tokens: int, repeats: int) -> np.ndarray:
    """Seconds per generated token of each timed ``generate`` call (one untimed first)."""
    ids = torch.randint(100, 1000, (1, prompt_tokens), device=model.device)
    out = []
    for i in range(repeats + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(
            ids, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
            pad_token_id=0,
        )  # fmt: skip
        torch.cuda.synchronize()
        if i:
            out.append((time.perf_counter() - t0) / new_tokens)
    return np.asarray(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shapes",
        nargs="+",
        choices=sorted(SHAPES),
        default=[s for s in sorted(SHAPES) if not s.startswith("heldout-")],
    )
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    gpu = torch.cuda.get_device_name()
    rows = []
    for shape in args.shapes:
        model = random_llama(shape, device="cuda", dtype="bfloat16")
        s = time_generate(model, args.prompt_tokens, args.new_tokens, args.repeats)
        q1, med, q3 = np.percentile(s, [25, 50, 75])
        rows.append(dict(
            source="this toolkit, experiments/gpu_greedy.py", url="", model=f"random {shape}",
            shape_preset=shape, gpu=gpu, gpu_preset="", link_preset="", power_cap_w="",
            engine=f"Hugging Face generate, eager, transformers (torch {torch.__version__})",
            engine_preset="hf-eager", dtype="bf16", tp=1,
            context_tokens=args.prompt_tokens + args.new_tokens // 2,
            tokens_per_s=round(1 / med, 2), role="judge", trust="high",
            note=f"median of {args.repeats} calls, ms/token q1 {1e3 * q1:.2f} median "
            f"{1e3 * med:.2f} q3 {1e3 * q3:.2f}; {args.prompt_tokens}-token prompt, "
            f"{args.new_tokens} new tokens",
        ))  # fmt: skip
        print(f"{shape}: {1e3 * med:.2f} ms/token [{1e3 * q1:.2f}, {1e3 * q3:.2f}]", flush=True)
        del model
        torch.cuda.empty_cache()
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
