"""Why blocks in ``dist`` runs cost what they cost: each side's slowdown where the two overlap.

A ``dist`` run overlaps main's suffix and final head (rank 0) with the k-row candidate batch
(rank 1). This times, on two gloo ranks at one thread each (``measure.profile.ranks`` pair
probe), (i) main's suffix + final head alone, (ii) the candidate batch alone, (iii) both at
once, each side repeated for a window so both compute throughout, and reports each side's own
slowdown beside the profile's single figure (two whole greedy streams at once,
``stream_both_s / stream_alone_s``). It also times main's layers in this process and in a
rank (the profile prices the layers in one process). Medians and IQR/median over interleaved
rounds, with the load average before and after (the machine may be shared); this process is
timed before and after the ranks (they cannot interleave with it). Findings:
``experiments/dist_prices.md``. Usage::

    python experiments/dist_prices.py --tiny-vocab 262144          # random Llama, big vocab
    python experiments/dist_prices.py --model smollm2 --ks 1 3
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch

from measure.hf.loading import load_causal_lm, resolve_model_dir
from measure.profile.probes import DecodeProbe
from measure.profile.ranks import RankProbe, probe_ranks
from measure.profile.stats import Spread, run_interleaved, spreads
from ppdmodel.defaults import default_d_bar


def tiny_big_vocab(out: Path, vocab: int, hidden: int, layers: int) -> Path:
    """A random Llama with a large vocabulary (its LM head costs many layers), saved to out."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden,
                         num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=1024, tie_word_embeddings=False)  # fmt: skip
    LlamaForCausalLM(config).eval().save_pretrained(out)
    return out


def parent_figures(model_dir, d_bar, ks, context, repeats) -> dict[str, Spread]:
    """This process at one thread: layer price (as the profile), suffix and batch per k."""
    torch.set_num_threads(1)
    probe = DecodeProbe(load_causal_lm(model_dir), context_tokens=context)
    tasks = {"step": probe.step, "suffix": lambda: {"main_s": probe.suffix(d_bar)}}
    for k in ks:
        tasks[f"batch{k}"] = lambda k=k: {f"cand_s[{k}]": probe.batch(k, d_bar)}
    samples = run_interleaved(tasks, repeats=repeats, warmup=1, calls=3)
    samples["layer_s"] = [s / probe.d for s in samples["layers_s"]]
    return spreads({k: v for k, v in samples.items() if not k.startswith("layer_s[")})


def _fmt(s: Spread) -> str:
    return f"{s.median * 1e3:8.3f} ms (IQR/med {100 * s.rel_iqr:4.1f} %)"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model directory or known name (smollm2)")
    src.add_argument("--tiny-vocab", type=int, help="build a random Llama with this vocabulary")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-bar", type=int, default=None, help="default: default_d_bar(d)")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--window", type=float, default=0.25, help="seconds per side per phase")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny_vocab:
            model_dir = tiny_big_vocab(Path(tmp) / "m", args.tiny_vocab, args.hidden, args.layers)
        else:
            model_dir = resolve_model_dir(args.model)
        d = load_causal_lm(model_dir).config.get_text_config().num_hidden_layers
        d_bar = args.d_bar or default_d_bar(d)
        load = [os.getloadavg()[0]]
        before = parent_figures(model_dir, d_bar, args.ks, args.context, args.repeats)
        ranks = spreads(probe_ranks(RankProbe(
            sizes=(4096,), repeats=args.repeats, model_dir=str(model_dir),
            context_tokens=args.context, pair_ks=tuple(args.ks), d_bar=d_bar,
            pair_window_s=args.window)))  # fmt: skip
        after = parent_figures(model_dir, d_bar, args.ks, args.context, args.repeats)
        load.append(os.getloadavg()[0])
    print(f"d = {d}, d_bar = {d_bar}, ks {args.ks}, 1 thread per rank; "
          f"load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} CPUs")  # fmt: skip
    stream = ranks["stream_both_s"].median / ranks["stream_alone_s"].median
    print(f"profile's slowdown (two greedy streams): {stream:.3f}")
    out = {"d": d, "d_bar": d_bar, "load": load, "stream_slowdown": stream, "by_k": {}}
    for k in args.ks:
        ma, mb = ranks[f"pair_main_alone_s[{k}]"], ranks[f"pair_main_both_s[{k}]"]
        ca, cb = ranks[f"pair_cand_alone_s[{k}]"], ranks[f"pair_cand_both_s[{k}]"]
        main_x, cand_x = mb.mean / ma.mean, cb.mean / ca.mean  # as the profile: means
        out["by_k"][k] = {"main_slowdown": main_x, "candidate_slowdown": cand_x,
                          "main_alone_s": ma.median, "cand_alone_s": ca.median}  # fmt: skip
        print(f"k={k}: main suffix+head alone {_fmt(ma)}, both {_fmt(mb)} -> x{main_x:.3f}")
        print(f"     candidate batch   alone {_fmt(ca)}, both {_fmt(cb)} -> x{cand_x:.3f}")
        print(f"     this process: suffix {_fmt(before['main_s'])}, "
              f"batch {_fmt(before[f'cand_s[{k}]'])}")  # fmt: skip
    rank_layer = ranks["rank_layer_s"]
    parent_layer = Spread.of(before["layer_s"].samples + after["layer_s"].samples)
    ratio = rank_layer.median / parent_layer.median
    out["rank_over_parent_layer"] = ratio
    print(
        f"layer price: this process before {_fmt(before['layer_s'])}, after "
        f"{_fmt(after['layer_s'])}; a rank {_fmt(rank_layer)} -> rank/process {ratio:.3f}"
    )
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
