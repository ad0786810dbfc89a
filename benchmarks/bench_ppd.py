"""Benchmark: measured PPD/greedy latency ratio against the simulator's prediction, one run.

CPU: greedy in this process (1 thread) vs PPD with 2 gloo ranks (1 thread each, k = 1) on
the same prompts; per-layer times from ``measure.profile.timing.time_layers``; overheads calibrated
on half of the prompts, predictions compared on the other half. GPU (when CUDA exists):
greedy vs single-process PPD on two CUDA streams, one device.

    python benchmarks/bench_ppd.py [--model DIR] [--prompts 8] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch


def random_llama(layers: int, hidden: int, vocab: int, seed: int = 0):
    """A random Llama of about the offline reference model's depth (fp32, eval)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "llama",
        hidden_size=hidden,
        intermediate_size=int(2.75 * hidden),
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=vocab,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        dtype="float32",
    )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def make_prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=gen).tolist() for _ in range(n)]


def text_prompts(model_dir, n: int, length: int) -> list[list[int]] | None:
    """The shipped sample prompts (code first), tokenized and cut to their last `length` ids."""
    from measure.datasets import load_prompts, sample_path
    from measure.hf.loading import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    if tokenizer is None:
        return None
    texts = [
        p.text for fmt in ("jsonl", "squad", "cnndm", "wmt") for p in load_prompts(sample_path(fmt))
    ]
    return [tokenizer(t)["input_ids"][-length:] for t in texts[:n]]


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def bench_cpu(model, model_dir, prompts, args) -> None:
    import sim
    from measure.decode.backends import ppd_many
    from measure.eval.report import run_greedy
    from measure.eval.validate import model_shape, validate_results
    from measure.profile.timing import time_layers

    torch.set_num_threads(1)
    d = model.config.num_hidden_layers
    d_bar = args.d_bar or (d + 1) // 2
    layer_times = time_layers(model, prompts[0], n_tokens=16, warmup=4)
    greedy = run_greedy(model, prompts, max_new_tokens=args.max_new_tokens)
    start = time.perf_counter()
    ppd = ppd_many(
        model,
        prompts,
        d_bar=d_bar,
        k=1,
        max_new_tokens=args.max_new_tokens,
        backend="dist",
        world_size=2,
        model_dir=model_dir,
        timeout_s=600,
    )
    job_s = time.perf_counter() - start
    exact = [r.tokens for r in ppd] == [g.tokens for g in greedy]
    shape = model_shape(model.config, len(prompts[0]) + args.max_new_tokens)
    report = validate_results(ppd, greedy, layer_times, shape, n_gpus=2)
    s = report.summary.set_index("method")
    g, p = s.loc["greedy"], s.loc["ppd k=1"]
    cost = sim.MeasuredCost(layer_times)
    ms = [x for r in ppd for x in r.m]
    print(
        f"CPU  d={d} d_bar={d_bar} k=1, {len(prompts)} prompts x {args.max_new_tokens} "
        f"tokens, p-hat={np.mean(ms):.3f}, exact={exact}, dist job {job_s:.1f} s"
    )
    print(
        f"     mean layer time {1e3 * cost.unit_seconds():.3f} ms; calibration {report.calibration}"
    )
    print(
        f"     evaluated on {'held-out' if report.held_out else 'the same'} prompts "
        f"({int(p['runs'])} runs)"
    )
    print("     latency (s)        measured  closed-form  simulator")
    print(
        f"     greedy           {g['measured_s']:9.4f}  {g['closed_form_s']:11.4f}  "
        f"{g['simulated_s']:9.4f}"
    )
    print(
        f"     ppd k=1          {p['measured_s']:9.4f}  {p['closed_form_s']:11.4f}  "
        f"{p['simulated_s']:9.4f}"
    )
    measured = ratio(p["measured_s"], g["measured_s"])
    simulated = ratio(p["simulated_s"], g["simulated_s"])
    closed = ratio(p["closed_form_s"], g["closed_form_s"])
    print(
        f"     PPD/greedy ratio: measured {measured:.3f}, simulator {simulated:.3f} "
        f"({simulated / measured - 1:+.1%}), closed form {closed:.3f} "
        f"({closed / measured - 1:+.1%})"
    )
    print(
        f"     simulator vs measured PPD latency: {p['simulated_rel_err']:+.1%} (sum), "
        f"mean |run error| {p['simulated_mean_abs_run_err']:.1%}"
    )


def bench_gpu(model, prompts, args) -> None:
    from measure.decode.greedy import greedy_generate
    from measure.decode.local import ppd_single

    model = model.to("cuda")
    d = model.config.num_hidden_layers
    d_bar = args.d_bar or (d + 1) // 2
    greedy_generate(model, prompts[0], max_new_tokens=4)
    ppd_single(model, prompts[0], d_bar=d_bar, k=1, max_new_tokens=4)
    g = [greedy_generate(model, p, max_new_tokens=args.max_new_tokens) for p in prompts]
    r = [
        ppd_single(model, p, d_bar=d_bar, k=1, max_new_tokens=args.max_new_tokens) for p in prompts
    ]
    exact = [x.tokens for x in r] == [x.tokens for x in g]
    g_s, r_s = sum(x.wall_s for x in g), sum(x.wall_s for x in r)
    ms = [x for res in r for x in res.m]
    print(
        f"GPU  {torch.cuda.get_device_name()}: greedy {g_s:.4f} s, PPD (2 streams) "
        f"{r_s:.4f} s, ratio {r_s / g_s:.3f}, p-hat {np.mean(ms):.3f}, exact={exact}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="local model dir (default: random llama)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--d-bar", type=int, default=None)
    args = parser.parse_args()
    import tempfile

    from measure.hf.loading import load_model

    with tempfile.TemporaryDirectory(prefix="bench-ppd-") as tmp:
        if args.model:
            model, _ = load_model(args.model)
            model_dir = args.model
        else:
            model = random_llama(args.layers, args.hidden, args.vocab)
            model.save_pretrained(tmp)
            model_dir = tmp
        vocab = model.config.vocab_size
        prompts = text_prompts(model_dir, args.prompts, args.prompt_len) if args.model else None
        prompts = prompts or make_prompts(args.prompts, args.prompt_len, vocab)
        bench_cpu(model, model_dir, prompts, args)
        if torch.cuda.is_available():
            bench_gpu(model, prompts, args)
        else:
            print("GPU  skipped: CUDA not available")


if __name__ == "__main__":
    main()
