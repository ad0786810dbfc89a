"""``ppd measure train-head`` and ``ppd measure reference-model`` (torch imported in handlers)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from measure.cli.common import (
    MODEL_HELP,
    add_prompt_format_args,
    check_prompts_fit,
    command_line,
    honours_no_progress,
    model_facts,
    prompt_selection,
    read_prompts,
)
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

KINDS = ("full", "translator")
"""``--kind`` choices (``measure.train.head_io.KINDS``)."""


def register_measure(subparsers) -> None:
    """Add ``train-head`` and ``reference-model`` to the ``ppd measure`` sub-commands."""
    _add_train_head(subparsers)
    _add_reference_model(subparsers)


def _add_train_head(subparsers) -> None:
    p = subparsers.add_parser(
        "train-head",
        help="train early heads with the model frozen: the paper's full head or a translator",
        description="Trains early-prediction heads for layer(s) L with the model frozen. "
        "--kind full: a copy of the model's final norm + LM head (the paper's 'Y' rows); "
        "with --data text it follows the paper's Table 4 (AdamW, lr 2e-5, warm-up 0.04, "
        "3 epochs, cross-entropy, batch 128, 2048-token blocks) on the prompts with their "
        "references or a plain text file. --kind translator: an affine map h -> h + A h + b "
        "(A = 0, b = 0 at first: the logit lens) before the model's own final norm and LM "
        "head, a tuned lens. --data greedy (the default with a translator): the model's own "
        "greedy continuations of the prompts, generated once, and every head fitted to the "
        "final layer's distribution (KL) from the cached hidden states. Writes "
        "head.safetensors + head_config.json to --out (one head), --out/layer_L (one kind, "
        "several layers) or --out/KIND_layer_L (several kinds); pass that to "
        "`ppd measure match-rate/atlas --head-dir` or `ppd run --head-dir`.",
    )
    p.add_argument("--model", required=True, metavar="MODEL", help=MODEL_HELP)
    p.add_argument(
        "--layer", required=True, type=positive_int, nargs="+", help="layer(s) L, 0 < L < d"
    )
    p.add_argument(
        "--kind",
        nargs="+",
        default=["full"],
        choices=KINDS,
        help="head kind(s): full (default) and/or translator; one generation serves all",
    )
    p.add_argument(
        "--data",
        default=None,
        choices=("text", "greedy"),
        help="text: the prompts + references (or --text) as they are (full heads only); "
        "greedy: the model's greedy continuations of the prompts (default with a translator)",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--prompts", type=existing_file, metavar="FILE", help="dataset/prompts file (+ references)"
    )
    source.add_argument(
        "--text", type=existing_file, metavar="FILE", help="plain UTF-8 text file to train on"
    )
    add_prompt_format_args(p)
    p.add_argument("--loss", default="ce", choices=("ce", "kl"), help="text data: ce or kl")
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        help="default 3 (text); greedy: 4 translator, 2 full",
    )
    p.add_argument(
        "--lr",
        type=positive_float,
        default=None,
        help="peak learning rate (2e-5 text; 3e-3 greedy)",
    )
    p.add_argument("--warmup-ratio", type=probability, default=None, help="default 0.04 / 0.05")
    p.add_argument("--weight-decay", type=nonnegative_float, default=None, help="default 0.0")
    p.add_argument(
        "--batch-size", type=positive_int, default=None, help="text: blocks per step (128)"
    )
    p.add_argument(
        "--micro-batch-size", type=positive_int, default=None, help="text: blocks/forward (8)"
    )
    p.add_argument(
        "--max-seq-len", type=positive_int, default=None, help="text: block length (2048)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=None, help="shuffle seed (default 0)")
    p.add_argument(
        "--new-tokens",
        type=positive_int,
        default=64,
        help="greedy: tokens generated per prompt (64)",
    )
    p.add_argument(
        "--prompt-positions",
        type=nonnegative_int,
        default=0,
        help="greedy: also fit on this many prompt positions before each generation (0)",
    )
    p.add_argument(
        "--batch-tokens", type=positive_int, default=None, help="greedy: positions per step (128)"
    )
    p.add_argument(
        "--gen-batch-size", type=positive_int, default=16, help="greedy: prompts per batch"
    )
    p.add_argument(
        "--max-minutes", type=positive_float, default=None, help="greedy: cap per head fit"
    )
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    p.add_argument("--dtype", default="float32", help="model dtype: float32 | bfloat16 | float16")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument(
        "--out", required=True, type=output_dir, metavar="DIR", help="output head directory"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=honours_no_progress(_train_head))


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
    p.set_defaults(func=honours_no_progress(_reference_model))


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
    import torch

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    kinds = list(dict.fromkeys(args.kind))
    data = args.data or ("greedy" if "translator" in kinds else "text")
    if data == "text" and kinds != ["full"]:
        raise ValueError("--kind translator needs --data greedy (the model's own continuations)")
    if data == "greedy" and args.prompts is None:
        raise ValueError("--data greedy needs --prompts (the continuations start from them)")
    out = Path(args.out)
    if data == "text":
        return _train_full_on_text(args, out)
    return _train_on_greedy(args, kinds, out)


def _head_path(out: Path, kinds: list[str], layers: list[int], kind: str, layer: int) -> Path:
    if len(kinds) > 1:
        return out / f"{kind}_layer_{layer}"
    return out if len(layers) == 1 else out / f"layer_{layer}"


def _check_layers(layers, d: int, *, low: int) -> None:
    """Refuse a --layer outside [low, d) (layer d is the final layer, read by the model's own
    head) before any weight is read."""
    for layer in layers:
        if not low <= layer < d:
            raise ValueError(f"--layer must be in [{low}, {d}) for this {d}-layer model (layer "
                             f"{d} is the final layer, whose head is the model's own), got "
                             f"{layer}")  # fmt: skip


def _train_full_on_text(args, out: Path) -> int:
    from measure.hf.loading import load_causal_lm
    from measure.train.heads import HeadConfig, encode_texts, train_head

    texts = _training_texts(args)
    facts = model_facts(args.model)  # config.json and tokenizer: checked before any weight
    _check_layers(args.layer, facts.d, low=0)
    if facts.tokenizer is None:
        raise ValueError(f"model directory {args.model} has no tokenizer to encode the text")
    ids = encode_texts(texts, facts.tokenizer)
    model = load_causal_lm(args.model, dtype=args.dtype, device=args.device)
    for layer in args.layer:
        config = HeadConfig.for_model(model, layer, **_head_overrides(args))
        head = train_head(model, layer, ids, config, progress=not args.no_progress)
        target = head.save(_head_path(out, ["full"], args.layer, "full", layer))
        losses = head.train_losses
        print(
            f"layer {layer}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
            f"saved {target}"
        )
    return 0


def _distill_config(args, kind: str):
    from measure.train.distill import DEFAULT_EPOCHS, DEFAULT_LR, DistillConfig

    options = {
        "lr": args.lr if args.lr is not None else DEFAULT_LR[kind],
        "epochs": args.epochs if args.epochs is not None else DEFAULT_EPOCHS[kind],
        "batch_tokens": args.batch_tokens,
        "weight_decay": args.weight_decay,
        "warmup_ratio": args.warmup_ratio,
        "seed": args.seed,
        "max_seconds": None if args.max_minutes is None else 60 * args.max_minutes,
    }
    return DistillConfig(**{k: v for k, v in options.items() if v is not None})


def _train_on_greedy(args, kinds: list[str], out: Path) -> int:
    from measure.hf.loading import load_causal_lm
    from measure.train.distill import collect_states, fit_head, new_head

    prompts = read_prompts(args)  # a malformed prompts file fails before the model loads
    if not prompts:
        raise ValueError(f"--prompts {args.prompts}: no prompts selected")
    facts = model_facts(args.model)  # config.json and tokenizer: checked before any weight
    _check_layers(args.layer, facts.d, low=1)
    template = not args.no_chat_template
    ids = check_prompts_fit(facts, prompts, args.new_tokens, chat_template=template,
                            what="--new-tokens")  # fmt: skip
    model = load_causal_lm(args.model, dtype=args.dtype, device=args.device)
    states = collect_states(
        model,
        ids,
        args.layer,
        max_new_tokens=args.new_tokens,
        batch_size=args.gen_batch_size,
        prompt_positions=args.prompt_positions,
    )
    data = {
        "command": command_line(args, "measure train-head"),
        "prompts": str(args.prompts),
        "selection": {"format": args.format, **prompt_selection(args)},
        "chat_template": not args.no_chat_template,
        "new_tokens": args.new_tokens,
        "prompt_positions": args.prompt_positions,
        "generation_seconds": states.seconds,
    }
    print(
        f"greedy continuations of {states.n_sequences} prompts: {states.n_generated} tokens, "
        f"{states.n_positions} training positions, {states.seconds:.0f} s"
    )
    for kind in kinds:
        for layer in args.layer:
            head = new_head(model, kind, layer)
            record = fit_head(head, model, states, _distill_config(args, kind))
            head.train_record = {**record, "data": data}
            target = head.save(_head_path(out, kinds, args.layer, kind, layer))
            print(
                f"{kind} head @ layer {layer}: {record['steps']} steps, KL "
                f"{record['first_loss']:.4f} -> {record['last_loss']:.4f}, "
                f"{record['seconds']:.0f} s; saved {target}"
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
