"""An offline reference model: a small Llama and a byte-level BPE trained on local text.

So that measured match rates mean something without downloads, this trains a real (small)
language model from scratch on a corpus that every machine has: by default the Python
standard library's own source. Training is deterministic (seeded, sorted files, deterministic
kernels, fixed step count) and the result is an ordinary Hugging Face directory that
`measure.hf.loading.load_model` and ``AutoModelForCausalLM.from_pretrained`` read.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import math
import os
import sysconfig
import time
from dataclasses import dataclass
from numbers import Real
from pathlib import Path

from ppdmodel.validation import (
    MissingPath,
    as_int,
    as_path,
    as_real,
    check_flag,
    check_instance,
    check_names,
    check_output_dir,
)

METADATA_NAME = "reference_model.json"
EOS_TOKEN = "<|endoftext|>"
DEFAULT_EXCLUDE = (
    "site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__",
    "encodings", "pydoc_data",
)  # fmt: skip
"""Third-party code, test suites, and generated tables (codec maps, pydoc topics)."""


@dataclass(frozen=True)
class ReferenceModelConfig:
    """Corpus, tokenizer, model shape and training schedule of the reference model."""

    corpus_dir: str | None = None
    """Directory of training text; None: the stdlib (``sysconfig.get_paths()["stdlib"]``)."""
    corpus_glob: str = "*.py"
    """File-name pattern of the files to read, anywhere under ``corpus_dir`` (fnmatch)."""
    corpus_max_bytes: int = 4_000_000
    """Cap on corpus bytes: every n-th file in sorted order, n = ceil(total / cap), so the
    sample spans the whole tree; reading stops at the cap (the last file is cut)."""
    exclude_dirs: tuple[str, ...] = DEFAULT_EXCLUDE
    """Directory names skipped anywhere under ``corpus_dir`` (see `DEFAULT_EXCLUDE`)."""
    holdout_fraction: float = 0.02
    """Tail fraction of the token stream kept out of training for the validation loss."""
    vocab_size: int = 2048
    """BPE vocabulary size, including the 256 byte symbols and the end-of-text token."""
    hidden_size: int = 128
    """Model width."""
    num_layers: int = 8
    """Decoder layers (8 so that early predictions at d/2 = 4 have something to show)."""
    num_heads: int = 4
    """Attention heads (no grouped-query attention)."""
    intermediate_size: int = 384
    """SwiGLU MLP width."""
    seq_len: int = 256
    """Training window length in tokens."""
    max_position_embeddings: int = 2048
    """Context length written into the model config (RoPE; longer than the training window)."""
    batch_size: int = 16
    """Windows per optimizer step."""
    steps: int = 400
    """Optimizer steps. The default run measured 412 CPU-seconds on one core of a shared
    2-core machine (~7 min; holdout loss 4.6 nats/token, layer-4 logit-lens top-5 match 62 %)."""
    lr: float = 3e-3
    """Peak AdamW learning rate (linear warm-up, cosine decay to 10 %)."""
    warmup_steps: int = 20
    """Linear warm-up steps."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    seed: int = 0
    """Seed for initialisation and window sampling."""
    max_minutes: float | None = None
    """Optional wall-clock cap on the training loop (stops early, records ``stopped_by:
    "time"``, and the result then depends on machine speed); None: run all ``steps``."""

    def __post_init__(self) -> None:
        """Check every field (ValueError naming it); integral floats are stored as ints."""
        ints = {"corpus_max_bytes": 1, "hidden_size": 1, "num_layers": 1, "num_heads": 1,
                "intermediate_size": 1, "seq_len": 1, "batch_size": 1, "steps": 1,
                "max_position_embeddings": 1, "vocab_size": 0, "warmup_steps": 0,
                "seed": 0}  # fmt: skip
        for name, low in ints.items():
            value = getattr(self, name)
            if low == 1 and _is_real(value) and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")
            object.__setattr__(self, name, as_int(name, value, minimum=low))
        as_real("lr", self.lr, strict=True)
        as_real("weight_decay", self.weight_decay)
        as_real("holdout_fraction", self.holdout_fraction)
        if self.max_minutes is not None:
            as_real("max_minutes", self.max_minutes, strict=True)
        if self.corpus_dir is not None:
            as_path("corpus_dir", self.corpus_dir)
        check_instance("corpus_glob", self.corpus_glob, str)
        check_names("exclude_dirs", self.exclude_dirs)
        if self.seq_len > self.max_position_embeddings:
            raise ValueError(f"seq_len must be <= max_position_embeddings "
                             f"({self.max_position_embeddings}), got {self.seq_len}")  # fmt: skip
        if self.vocab_size < 258:
            raise ValueError(f"vocab_size must be >= 258 (256 bytes + 2), got {self.vocab_size}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_heads "
                f"({self.num_heads})"
            )
        if not 0 < self.holdout_fraction < 0.5:
            raise ValueError(f"holdout_fraction must be in (0, 0.5), got {self.holdout_fraction}")
        if self.warmup_steps < 0 or self.weight_decay < 0:
            raise ValueError("warmup_steps and weight_decay must be >= 0")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ValueError(f"max_minutes must be > 0 or None, got {self.max_minutes}")

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["exclude_dirs"] = list(self.exclude_dirs)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ReferenceModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown ReferenceModelConfig fields {sorted(unknown)}")
        data = dict(data)
        if "exclude_dirs" in data:
            data["exclude_dirs"] = tuple(data["exclude_dirs"])
        return cls(**data)


@dataclass(frozen=True)
class Corpus:
    """The training documents and a digest of exactly what was read."""

    root: Path
    documents: list[str]
    n_bytes: int
    sha256: str
    stride: int
    """Every ``stride``-th matching file (sorted) was read."""


def default_corpus_dir() -> Path:
    """The Python standard library's source directory on this machine."""
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path, pattern: str, exclude_dirs: tuple[str, ...]) -> list[Path]:
    """Files under ``root`` matching ``pattern``, sorted by relative path, pruning excluded dirs."""
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in exclude_dirs]
        found.extend(Path(directory, f) for f in files if fnmatch.fnmatch(f, pattern))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def read_corpus(config: ReferenceModelConfig) -> Corpus:
    """Read every n-th corpus file (sorted) up to ``corpus_max_bytes``, hashing what was read."""
    root = Path(config.corpus_dir) if config.corpus_dir else default_corpus_dir()
    if not root.is_dir():
        raise MissingPath(f"corpus_dir {str(root)!r}: corpus directory not found")
    paths = corpus_files(root, config.corpus_glob, config.exclude_dirs)
    total = sum(path.stat().st_size for path in paths)
    stride = max(1, math.ceil(total / config.corpus_max_bytes))
    digest, documents, n_bytes = hashlib.sha256(), [], 0
    for path in paths[::stride]:
        data = path.read_bytes()[: config.corpus_max_bytes - n_bytes]
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + data + b"\0")
        documents.append(data.decode("utf-8", errors="replace"))
        n_bytes += len(data)
        if n_bytes >= config.corpus_max_bytes:
            break
    if n_bytes == 0:
        raise ValueError(f"corpus_dir {root} has no non-empty {config.corpus_glob!r} files")
    return Corpus(root, documents, n_bytes, digest.hexdigest(), stride)


def train_tokenizer(documents: list[str], vocab_size: int):
    """A byte-level BPE (GPT-2 style) as a ``PreTrainedTokenizerFast``; EOS separates docs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS_TOKEN, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN
    )


def tokenize_corpus(tokenizer, documents: list[str]):
    """One token stream: each document's ids followed by EOS. -> ids [N]"""
    import torch

    ids: list[int] = []
    for encoding in tokenizer(documents, add_special_tokens=False)["input_ids"]:
        ids.extend(encoding)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def build_model(config: ReferenceModelConfig, vocab_size: int, eos_id: int):
    """A randomly initialised LlamaForCausalLM of the configured shape (seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model_config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    torch.manual_seed(config.seed)
    return LlamaForCausalLM(model_config)


def _lr_factor(step: int, config: ReferenceModelConfig) -> float:
    """Linear warm-up, then cosine decay from 1 to 0.1 over the remaining steps."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def _windows(stream, starts, seq_len: int):
    """Windows of ``seq_len`` tokens starting at ``starts`` [B] -> ids [B, seq_len]."""
    import torch

    return torch.stack([stream[s : s + seq_len] for s in starts.tolist()])


def evaluate_loss(model, stream, seq_len: int, max_windows: int = 16) -> float:
    """Mean next-token loss over consecutive non-overlapping windows of ``stream``."""
    import torch

    n = min(max_windows, (stream.numel() - 1) // seq_len)
    if n == 0:
        return float("nan")
    ids = stream[: n * seq_len].reshape(n, seq_len)
    with torch.no_grad():
        return float(model(input_ids=ids, labels=ids).loss)


def train_loop(model, stream, config: ReferenceModelConfig, progress: bool = False) -> dict:
    """AdamW on random windows of ``stream`` (seeded); returns the loss record of the run."""
    import torch
    from tqdm.auto import tqdm

    if stream.numel() <= config.seq_len + 1:
        raise ValueError(
            f"corpus gives {stream.numel()} training tokens; need more than seq_len + 1 = "
            f"{config.seq_len + 1} (raise corpus_max_bytes or lower seq_len)"
        )
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.95)
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: _lr_factor(s, config))
    deadline = None if config.max_minutes is None else time.monotonic() + 60 * config.max_minutes
    losses: list[float] = []
    model.train()
    for _step in tqdm(range(config.steps), desc="reference model", disable=not progress):
        starts = torch.randint(
            0, stream.numel() - config.seq_len, (config.batch_size,), generator=generator
        )
        ids = _windows(stream, starts, config.seq_len)  # ids: [B, S]
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if deadline is not None and time.monotonic() > deadline:
            break
    model.eval()
    return {"losses": losses, "stopped_by": "steps" if len(losses) == config.steps else "time"}


def train_reference_model(
    out_dir: str | Path, config: ReferenceModelConfig | None = None, *, progress: bool = False
) -> Path:
    """Train tokenizer + model on the corpus and save them as a Hugging Face directory.

    Writes ``config.json``, ``model.safetensors``, the tokenizer files and
    ``reference_model.json`` (config, corpus hash, steps, losses, seconds, versions).
    """
    import torch
    import transformers

    out_dir = check_output_dir("out_dir", out_dir)
    if config is not None:
        check_instance("config", config, ReferenceModelConfig)
    check_flag("progress", progress)
    config = config or ReferenceModelConfig()
    start, cpu_start = time.perf_counter(), time.process_time()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        corpus = read_corpus(config)
        tokenizer = train_tokenizer(corpus.documents, config.vocab_size)
        stream = tokenize_corpus(tokenizer, corpus.documents)
        n_holdout = max(config.seq_len + 1, int(stream.numel() * config.holdout_fraction))
        train_stream, holdout = stream[:-n_holdout], stream[-n_holdout:]
        model = build_model(config, len(tokenizer), tokenizer.eos_token_id)
        prepared = time.perf_counter()
        record = train_loop(model, train_stream, config, progress)
        trained = time.perf_counter()
        holdout_loss = evaluate_loss(model, holdout, config.seq_len)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    losses = record["losses"]
    metadata = {
        "config": config.to_dict(),
        "corpus": {
            "root": str(corpus.root),
            "files": len(corpus.documents),
            "bytes": corpus.n_bytes,
            "sha256": corpus.sha256,
            "stride": corpus.stride,
            "tokens": int(stream.numel()),
            "holdout_tokens": int(holdout.numel()),
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": len(losses),
        "stopped_by": record["stopped_by"],
        "initial_loss": losses[0],
        "final_loss": sum(losses[-10:]) / len(losses[-10:]),
        "holdout_loss": holdout_loss,
        "losses": losses,
        "seconds": time.perf_counter() - start,
        "seconds_prepare": prepared - start,
        "seconds_train": trained - prepared,
        "cpu_seconds": time.process_time() - cpu_start,
        "torch_threads": torch.get_num_threads(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (out_dir / METADATA_NAME).write_text(json.dumps(metadata, indent=2) + "\n")
    return out_dir


def _is_real(value) -> bool:
    """A real number, not a boolean."""
    return isinstance(value, Real) and not isinstance(value, bool)
