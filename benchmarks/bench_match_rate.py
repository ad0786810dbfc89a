"""Benchmark: the p_correct pass (measure.match_rates) against plain greedy ``model.generate``.

Both decode the same prompts to exactly ``--max-new-tokens`` tokens (EOS disabled) in the same
process; the figure is the ratio of wall-clock times, match pass / generate (median of
``--repeats`` alternating rounds, after a warm-up). Targets: <= 1.3x on CPU, <= 1.15x on GPU,
probing the PPD operating point d_bar = d/2 with k = 1, 3, 5. The extra cost is one stacked
LM-head matmul per step over the probed layers, so probing many layers of a model whose LM head
is as large as a layer (vocab x hidden vs 12 hidden^2) costs about one layer per probed layer;
the script also reports the paper's probe set (15, 20, 30, 35, 37 of 40, scaled to d).

    OMP_NUM_THREADS=2 python benchmarks/bench_match_rate.py            # random llama, CPU/GPU
    python benchmarks/bench_match_rate.py --model DIR --device cuda    # a real model
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch

PAPER_LAYERS_OF_40 = (15, 20, 30, 35, 37)  # Table 2's probed layers of Vicuna-13B's 40


def build_model(args):
    """A random Llama (hidden 512, 8 layers, vocab 8k by default) or a local model directory."""
    if args.model:
        from measure.hf.loading import load_model

        model, _ = load_model(args.model, dtype=args.dtype, device=args.device)
    else:
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.for_model(
            "llama",
            hidden_size=args.hidden,
            intermediate_size=args.hidden * 3,
            num_hidden_layers=args.layers,
            num_attention_heads=8,
            num_key_value_heads=8,
            vocab_size=args.vocab,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
        )
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, args.dtype))
        model = model.to(args.device).eval()
    model.generation_config.eos_token_id = None  # both sides decode exactly ell tokens
    return model


def make_prompts(model, n: int, length: int, device) -> list[torch.Tensor]:
    vocab = model.get_output_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(1)
    return [torch.randint(3, vocab, (1, length), generator=gen).to(device) for _ in range(n)]


def run_generate(model, prompts, ell: int) -> None:
    for ids in prompts:
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=ell,
            min_new_tokens=ell,
            pad_token_id=0,
        )


def run_match(model, prompts, ell: int, layers, ks, verify: bool) -> None:
    from measure.match.rate import match_rates

    match_rates(model, prompts, layers=layers, ks=ks, max_new_tokens=ell, verify=verify)


def timed(fn, device) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def ratio(model, prompts, args, layers, verify: bool) -> tuple[float, float, float, float]:
    """(generate s, match s, ratio, best ratio) over ``--repeats`` rounds of all prompts.

    The two sides alternate prompt by prompt, so load changes on a shared machine hit both.
    Seconds and ratio use the median round; the best ratio sums each prompt's fastest time on
    each side (robust to interference from other processes).
    """
    run_generate(model, prompts[:1], 4)  # warm-up
    run_match(model, prompts[:1], 4, layers, args.ks, verify)
    ell = args.max_new_tokens
    base = [[0.0] * len(prompts) for _ in range(args.repeats)]
    match = [[0.0] * len(prompts) for _ in range(args.repeats)]
    for r in range(args.repeats):
        for i, ids in enumerate(prompts):
            base[r][i] = timed(partial(run_generate, model, [ids], ell), args.device)
            match[r][i] = timed(
                partial(run_match, model, [ids], ell, layers, args.ks, verify), args.device
            )
    b = statistics.median(sum(row) for row in base)
    m = statistics.median(sum(row) for row in match)
    best_b = sum(min(col) for col in zip(*base, strict=True))
    best_m = sum(min(col) for col in zip(*match, strict=True))
    return b, m, m / b, best_m / best_b


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="local model directory (default: a random llama)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--ks", type=int, nargs="+", default=[1, 3, 5])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = build_model(args)
    d = model.config.num_hidden_layers
    prompts = make_prompts(model, args.prompts, args.prompt_len, args.device)
    paper = sorted({max(1, min(d - 1, round(x * d / 40))) for x in PAPER_LAYERS_OF_40})
    cases = [
        (f"d_bar = d/2 = {d // 2}, verify", [d // 2], True),
        (f"d_bar = d/2 = {d // 2}, no verify", [d // 2], False),
        (f"paper layers {paper}, verify", paper, True),
    ]
    print(
        f"device {args.device}, dtype {args.dtype}, d={d}, hidden={model.config.hidden_size}, "
        f"vocab={model.config.vocab_size}, {args.prompts} prompts x {args.prompt_len} tokens, "
        f"ell={args.max_new_tokens}, ks={args.ks}, threads={torch.get_num_threads()}"
    )
    target = 1.15 if args.device.startswith("cuda") else 1.3
    for name, layers, verify in cases:
        b, m, r, best = ratio(model, prompts, args, layers, verify)
        flag = "ok" if best <= target else f"above target {target}"
        print(
            f"{name:<34} generate {b:7.3f} s  match pass {m:7.3f} s  ratio {r:5.3f}x  "
            f"best-of ratio {best:5.3f}x  {flag}"
        )


if __name__ == "__main__":
    main()
