"""``ppd measure train-head`` and ``ppd measure reference-model`` (torch imported in handlers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from measure.cli.common import MODEL_HELP, add_prompt_format_args, read_prompts
from measure.train.reference_model import METADATA_NAME, ReferenceModelConfig
from ppdmodel.cli_args import (
    existing_dir,
    existing_file,
    nonnegative_float,
    nonnegative_int,
    output_dir,
    positive_float,
    positive_int,
    probability,
)


def register_measure(subparsers) -> None:
    """Add ``train-head`` and ``reference-model`` to the ``ppd measure`` sub-commands."""
    _add_train_head(subparsers)
    _add_reference_model(subparsers)


def _add_train_head(subparsers) -> None:
    p = subparsers.add_parser(
        "train-head",
        help="train a per-layer LM head with the model frozen (paper's 'Y' rows)",
        description="Fine-tunes a copy of the model's final norm + LM head to read the hidden "
        "state after decoder layer L (paper Table 4 defaults: AdamW, lr 2e-5, warm-up 0.04, "
        "3 epochs, cross-entropy, batch 128, 2048-token blocks). The training text (prompts "
        "with their references, or a plain text file) is packed into blocks. Writes "
        "head.safetensors + head_config.json to --out (one layer) or --out/layer_L (several); "
        "pass that to `ppd measure match-rate --head-dir`.",
    )
    p.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    p.add_argument(
        "--layer", required=True, type=positive_int, nargs="+", help="layer(s) L, 0 < L < d"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--prompts", type=existing_file, metavar="FILE", help="dataset/prompts file (+ references)"
    )
    source.add_argument(
        "--text", type=existing_file, metavar="FILE", help="plain UTF-8 text file to train on"
    )
    add_prompt_format_args(p)
    p.add_argument("--loss", default="ce", choices=("ce", "kl"), help="ce (default) or kl")
    p.add_argument("--epochs", type=positive_int, default=None, help="default 3 (Table 4)")
    p.add_argument(
        "--lr", type=positive_float, default=None, help="peak learning rate (default 2e-5)"
    )
    p.add_argument("--warmup-ratio", type=probability, default=None, help="default 0.04")
    p.add_argument("--weight-decay", type=nonnegative_float, default=None, help="default 0.0")
    p.add_argument(
        "--batch-size", type=positive_int, default=None, help="blocks per step (default 128)"
    )
    p.add_argument(
        "--micro-batch-size", type=positive_int, default=None, help="blocks per forward (8)"
    )
    p.add_argument(
        "--max-seq-len", type=positive_int, default=None, help="block length (default 2048)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=None, help="shuffle seed (default 0)")
    p.add_argument("--dtype", default="float32", help="model dtype: float32 | bfloat16 | float16")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--out", required=True, type=output_dir, metavar="DIR", help="output head directory"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_train_head)


def _add_reference_model(subparsers) -> None:
    d = ReferenceModelConfig()
    p = subparsers.add_parser(
        "reference-model",
        help="train the offline reference model (small Llama + byte-level BPE on local text)",
        description="Trains a byte-level BPE tokenizer and a small Llama from scratch on a "
        "local corpus (default: this Python's standard library source), deterministically, "
        "and saves an ordinary Hugging Face directory plus reference_model.json. The default "
        "run takes about 4 minutes on 2 otherwise idle CPU cores (239 s measured).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--out", required=True, type=output_dir, metavar="DIR", help="output model directory"
    )
    p.add_argument(
        "--corpus", type=existing_dir, default=None, metavar="DIR", help="corpus dir (None: stdlib)"
    )
    p.add_argument("--glob", default=d.corpus_glob, help="file-name pattern of corpus files")
    p.add_argument(
        "--corpus-max-bytes", type=positive_int, default=d.corpus_max_bytes, help="bytes read"
    )
    p.add_argument("--vocab-size", type=positive_int, default=d.vocab_size, help="BPE vocabulary")
    p.add_argument("--hidden-size", type=positive_int, default=d.hidden_size, help="model width")
    p.add_argument("--layers", type=positive_int, default=d.num_layers, help="decoder layers")
    p.add_argument("--heads", type=positive_int, default=d.num_heads, help="attention heads")
    p.add_argument(
        "--intermediate-size", type=positive_int, default=d.intermediate_size, help="MLP"
    )
    p.add_argument("--seq-len", type=positive_int, default=d.seq_len, help="training window")
    p.add_argument("--batch-size", type=positive_int, default=d.batch_size, help="windows per step")
    p.add_argument("--steps", type=positive_int, default=d.steps, help="optimizer steps")
    p.add_argument("--lr", type=positive_float, default=d.lr, help="peak AdamW learning rate")
    p.add_argument(
        "--warmup-steps",
        type=nonnegative_int,
        default=None,
        help=f"linear warm-up steps (None: min({d.warmup_steps}, steps/10))",
    )
    p.add_argument("--seed", type=nonnegative_int, default=d.seed, help="init and sampling seed")
    p.add_argument(
        "--max-minutes",
        type=nonnegative_float,
        default=d.max_minutes,
        help="wall-clock cap on the training loop (breaks determinism if hit)",
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_reference_model)


def _training_texts(args) -> list[str]:
    if args.text is not None:
        path = Path(args.text)
        if not path.is_file():
            raise FileNotFoundError(f"text file not found: {path}")
        return [path.read_text(encoding="utf-8")]
    prompts = read_prompts(args)
    return [p.text if p.reference is None else f"{p.text} {p.reference}" for p in prompts]


def _head_overrides(args) -> dict:
    names = ("epochs", "lr", "warmup_ratio", "weight_decay", "batch_size", "micro_batch_size")
    names += ("max_seq_len", "seed")
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    return {"loss": args.loss, **overrides}


def _train_head(args: argparse.Namespace) -> int:
    from measure.hf.loading import load_model
    from measure.train.heads import HeadConfig, encode_texts, train_head

    texts = _training_texts(args)
    model, tokenizer = load_model(args.model, dtype=args.dtype, device=args.device)
    if tokenizer is None:
        raise ValueError(f"model directory {args.model} has no tokenizer to encode the text")
    ids = encode_texts(texts, tokenizer)
    out = Path(args.out)
    for layer in args.layer:
        config = HeadConfig.for_model(model, layer, **_head_overrides(args))
        head = train_head(model, layer, ids, config, progress=not args.no_progress)
        target = head.save(out if len(args.layer) == 1 else out / f"layer_{layer}")
        losses = head.train_losses
        print(
            f"layer {layer}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
            f"saved {target}"
        )
    return 0


def _warmup_steps(args) -> int:
    if args.warmup_steps is not None:
        return args.warmup_steps
    return min(ReferenceModelConfig().warmup_steps, max(1, args.steps // 10))


def _reference_model(args: argparse.Namespace) -> int:
    import torch

    from measure.train.reference_model import train_reference_model

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    config = ReferenceModelConfig(
        corpus_dir=args.corpus,
        corpus_glob=args.glob,
        corpus_max_bytes=args.corpus_max_bytes,
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=args.heads,
        intermediate_size=args.intermediate_size,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        steps=args.steps,
        warmup_steps=_warmup_steps(args),
        lr=args.lr,
        seed=args.seed,
        max_minutes=args.max_minutes or None,
    )
    out = train_reference_model(args.out, config, progress=not args.no_progress)
    record = json.loads((out / METADATA_NAME).read_text())
    print(
        f"saved {out}: {record['parameters']} parameters, {record['steps']} steps "
        f"({record['stopped_by']}), loss {record['initial_loss']:.3f} -> "
        f"{record['final_loss']:.3f}, holdout {record['holdout_loss']:.3f}, "
        f"{record['seconds']:.0f} s"
    )
    return 0
