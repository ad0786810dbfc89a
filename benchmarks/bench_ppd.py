"""Benchmark: measured PPD/greedy latency against the prediction of a measured cost profile.

CPU: a cost profile of the model (``measure.profile.measure_profile``, single and dist
backends) is measured first; then greedy (this process, 1 thread) and PPD (k = 1, the
``single`` backend and 2 gloo ranks of 1 thread each) decode the same prompts over
``--repeats`` interleaved rounds (``measure.eval.validate``). Printed per method: the
predicted seconds (closed form, simulator; nothing fitted on these runs), the measured median
with its quartiles, the relative error, and a NOISY flag when IQR/median > 10 %; the load
average before and after. GPU (when CUDA exists): greedy vs single-process PPD on two CUDA
streams, interleaved over the same rounds.

    python benchmarks/bench_ppd.py [--model DIR] [--prompts 8] [--max-new-tokens 64]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from ppdmodel.defaults import default_d_bar


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


def bench_cpu(model, model_dir, prompts, args) -> None:
    from measure.decode.settings import RunSettings
    from measure.eval.repeat import PPDConfig
    from measure.eval.text import format_table, format_waterfall
    from measure.eval.validate import validate
    from measure.profile.profile import measure_profile

    torch.set_num_threads(1)
    d = model.config.num_hidden_layers
    d_bar = args.d_bar or default_d_bar(d)
    context = round(np.mean([len(p) for p in prompts]) + args.max_new_tokens / 2)
    start = time.perf_counter()
    profile = measure_profile(
        model, model_dir=model_dir, backends=("single", "dist"), ks=(1,), context_tokens=context
    )
    profile_s = time.perf_counter() - start
    configs = [PPDConfig(d_bar=d_bar, k=1, backend=b) for b in ("single", "dist")]
    result = validate(
        model,
        prompts,
        profile=profile,
        configs=configs,
        max_new_tokens=args.max_new_tokens,
        settings=RunSettings(repeats=args.repeats, model_dir=model_dir),
    )
    summary = result.summary()
    print(
        f"CPU  d={d} d_bar={d_bar} k=1, {len(prompts)} prompts x {args.max_new_tokens} tokens, "
        f"{args.repeats} interleaved rounds; profile measured in {profile_s:.1f} s "
        f"({len(profile.warnings)} warnings)"
    )
    print("     " + format_table(result).replace("\n", "\n     "))
    for r in result.results:
        print("     " + format_waterfall(r))
    print(
        f"     median |error| {100 * summary['median_abs_rel_err']:.1f} %, worst "
        f"{100 * summary['worst_abs_rel_err']:.1f} %, greedy "
        f"{100 * summary['greedy_rel_err']:+.1f} %; {result.timing.load.describe()}"
    )


def bench_gpu(model, prompts, args) -> None:
    from measure.decode.greedy import greedy_generate
    from measure.decode.local import ppd_single
    from measure.profile.stats import Spread

    model = model.to("cuda")
    d = model.config.num_hidden_layers
    d_bar = args.d_bar or default_d_bar(d)
    greedy_generate(model, prompts[0], max_new_tokens=4)
    ppd_single(model, prompts[0], d_bar=d_bar, k=1, max_new_tokens=4)
    g_s, r_s, exact, ms = [], [], True, []
    for _ in range(args.repeats):  # greedy and PPD interleaved, round by round
        g = [greedy_generate(model, p, max_new_tokens=args.max_new_tokens) for p in prompts]
        r = [ppd_single(model, p, d_bar=d_bar, k=1, max_new_tokens=args.max_new_tokens)
             for p in prompts]  # fmt: skip
        exact &= [x.tokens for x in r] == [x.tokens for x in g]
        g_s.append(sum(x.wall_s for x in g))
        r_s.append(sum(x.wall_s for x in r))
        ms = [x for res in r for x in res.m]
    greedy, ppd = Spread.of(g_s), Spread.of(r_s)
    print(
        f"GPU  {torch.cuda.get_device_name()}: greedy {greedy.describe('s', 1)}, PPD (2 streams) "
        f"{ppd.describe('s', 1)}, ratio {ppd.median / greedy.median:.3f}, p-hat "
        f"{np.mean(ms):.3f}, exact={exact}"
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
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (3)")
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
