"""``ppd measure train-head`` and ``ppd measure reference-model`` (torch imported in handlers)."""

from __future__ import annotations

import argparse

from measure.cli.common import command_line, honours_no_progress
from measure.cli.train_settings import (
    GreedyDataSettings,
    HeadSettings,
    HeadTrainingSettings,
    ReferenceCorpusSettings,
    ReferenceShapeSettings,
    ReferenceTrainingSettings,
    TrainPromptSettings,
)
from measure.settings import ModelSettings, OutputSettings, ThreadSettings


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
    ModelSettings.add_to(
        p,
        changes={
            "dtype": {"help": "model dtype: float32 | bfloat16 | float16"},
            "device": {"help": "cpu | cuda | cuda:N"},
        },
    )
    HeadSettings.add_to(p)
    TrainPromptSettings.add_to(
        p, skip=("prompt",), changes={"prompts": {"help": "dataset/prompts file (+ references)"}}
    )
    HeadTrainingSettings.add_to(p)
    GreedyDataSettings.add_to(p)
    ThreadSettings.add_to(p)
    OutputSettings.add_to(p, changes={"out": {"help": "output head directory"}})
    p.set_defaults(func=honours_no_progress(_train_head))


def _add_reference_model(subparsers) -> None:
    p = subparsers.add_parser(
        "reference-model",
        help="train the offline reference model (small Llama + byte-level BPE on local text)",
        description="Trains a byte-level BPE tokenizer and a small Llama from scratch on a "
        "local corpus (default: this Python's standard library source), deterministically, "
        "and saves an ordinary Hugging Face directory plus reference_model.json. The default "
        "run takes about 4 minutes on 2 otherwise idle CPU cores (239 s measured).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    OutputSettings.add_to(p, changes={"out": {"help": "output model directory"}})
    ReferenceCorpusSettings.add_to(p)
    ReferenceShapeSettings.add_to(p)
    ReferenceTrainingSettings.add_to(p)
    ThreadSettings.add_to(p)
    p.set_defaults(func=honours_no_progress(_reference_model))


def _train_head(args: argparse.Namespace) -> int:
    from measure.cli.train_workflow import train_heads

    train_heads(
        ModelSettings.from_args(args),
        HeadSettings.from_args(args),
        TrainPromptSettings.from_args(args),
        HeadTrainingSettings.from_args(args),
        GreedyDataSettings.from_args(args),
        ThreadSettings.from_args(args),
        OutputSettings.from_args(args),
        command=command_line(args, "measure train-head"),
        report=print,
    )
    return 0


def _reference_model(args: argparse.Namespace) -> int:
    from measure.cli.train_workflow import train_reference

    result = train_reference(
        ReferenceCorpusSettings.from_args(args),
        ReferenceShapeSettings.from_args(args),
        ReferenceTrainingSettings.from_args(args),
        ThreadSettings.from_args(args),
        OutputSettings.from_args(args),
    )
    record = result.record
    print(
        f"saved {result.out}: {record['parameters']} parameters, {record['steps']} steps "
        f"({record['stopped_by']}), loss {record['initial_loss']:.3f} -> "
        f"{record['final_loss']:.3f}, holdout {record['holdout_loss']:.3f}, "
        f"{record['seconds']:.0f} s"
    )
    return 0
