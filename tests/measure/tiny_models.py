"""Tiny random causal LMs of every supported architecture, built from configs, for the tests.

The one model factory of the test suite: in memory (``tiny_model``) or saved with a tokenizer
as a Hugging Face directory (``save_tiny_model_dir``, for the CLI, notebooks and README tests).
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ARCHS = ("llama", "mistral", "qwen2", "gpt2", "opt")
"""The core architectures every measure test runs over (kept short: the suite has a budget)."""
MORE_ARCHS = ("qwen3", "gemma2", "gemma3_text", "phi3")
"""Further layouts found by model surgery (QK norms, embedding scaling, logit soft-capping,
alternating sliding windows, per-layer-type rotary, fused QKV); the layer-split, PPD and
architecture tests run over ALL_ARCHS."""
ALL_ARCHS = ARCHS + MORE_ARCHS
"""Every architecture with a tiny config here."""
SLIDING_WINDOW = 4
"""Sliding window of the Gemma configs: short enough that 8-token prompts and 12 new tokens
run past it, so the windowed cache and masks are exercised."""

VOCAB_SIZE = 128
NUM_LAYERS = 4
HIDDEN_SIZE = 32
NUM_HEADS = 4
INIT_STD = 0.2
"""Weight init std, 10x the HF default, so logits are far from flat and a wrong position or a
missing cache entry moves them by far more than the 1e-4 test tolerance."""
ATTN_IMPLEMENTATION = "eager"
"""Attention kernel used by default (layer-split tests also run "sdpa")."""

_ROPE_GQA = dict(  # the Llama-family fields shared by llama, mistral and qwen2
    hidden_size=HIDDEN_SIZE,
    intermediate_size=64,
    num_hidden_layers=NUM_LAYERS,
    num_attention_heads=NUM_HEADS,
    num_key_value_heads=2,
    max_position_embeddings=512,
    vocab_size=VOCAB_SIZE,
)

_BASE = {
    "llama": dict(_ROPE_GQA, tie_word_embeddings=False),
    "mistral": dict(_ROPE_GQA, sliding_window=None, tie_word_embeddings=False),
    "qwen2": dict(_ROPE_GQA, use_sliding_window=False, tie_word_embeddings=True),
    "qwen3": dict(_ROPE_GQA, head_dim=HIDDEN_SIZE // NUM_HEADS, tie_word_embeddings=True),
    "gemma2": dict(  # alternating sliding/full layers, final logit soft-capping at 30
        _ROPE_GQA,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        sliding_window=SLIDING_WINDOW,
        final_logit_softcapping=5.0,
        query_pre_attn_scalar=HIDDEN_SIZE // NUM_HEADS,
    ),
    "gemma3_text": dict(  # local (sliding) and global layers with their own rotary bases
        _ROPE_GQA,
        head_dim=HIDDEN_SIZE // NUM_HEADS,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"] * (NUM_LAYERS // 2),
        query_pre_attn_scalar=HIDDEN_SIZE // NUM_HEADS,
    ),
    "phi3": dict(  # fused qkv and gate_up projections
        _ROPE_GQA,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    ),
    "gpt2": dict(
        n_embd=HIDDEN_SIZE,
        n_layer=NUM_LAYERS,
        n_head=NUM_HEADS,
        n_inner=64,
        n_positions=512,
        vocab_size=VOCAB_SIZE,
        bos_token_id=0,
        eos_token_id=0,
    ),
    "opt": dict(
        hidden_size=HIDDEN_SIZE,
        ffn_dim=64,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        max_position_embeddings=512,
        vocab_size=VOCAB_SIZE,
        word_embed_proj_dim=HIDDEN_SIZE,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=1,
    ),
}


def tiny_config(arch: str, **overrides):
    """A tiny fp32 config of `arch` (one of ALL_ARCHS); keyword overrides replace the defaults.

    ``tiny_config("opt", word_embed_proj_dim=16)`` exercises OPT's project_in/project_out.
    """
    if arch not in _BASE:
        raise ValueError(f"arch must be one of {ALL_ARCHS}, got {arch!r}")
    kwargs = {**_BASE[arch], **overrides}
    kwargs.setdefault("attn_implementation", ATTN_IMPLEMENTATION)
    kwargs.setdefault("init_std" if arch == "opt" else "initializer_range", INIT_STD)
    return AutoConfig.for_model(arch, dtype="float32", **kwargs)


def tiny_model(arch: str, seed: int = 0, **overrides):
    """An eval-mode fp32 random model of `arch` built with from_config under manual_seed(seed)."""
    config = tiny_config(arch, **overrides)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Question: what is the capital of France? Answer: Paris.",
    "Translate English to French: the house is blue. La maison est bleue.",
    "Summarize the article: the model predicts the next token early.",
    "def add(a, b):\n    return a + b\n",
]
"""A few lines to train the BPE tokenizer on; enough for merges, small enough to be instant."""


def char_tokenizer():
    """A character-level fast tokenizer (ids < 128, so it fits VOCAB_SIZE), built offline."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [chr(i) for i in range(32, 127)] + ["\n", "\t"]
    vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


def tiny_tokenizer(vocab_size: int = 320):
    """A byte-level BPE trained in memory on CORPUS (the reference model's trainer)."""
    from measure.train.reference_model import train_tokenizer

    return train_tokenizer(CORPUS * 4, vocab_size)


def save_tiny_model_dir(path: Path, *, arch: str = "llama", num_layers: int = NUM_LAYERS, seed=0):
    """Save a random fp32 model of `arch` and a BPE tokenizer (vocabularies match) under `path`."""
    tokenizer = tiny_tokenizer()
    model = tiny_model(
        arch,
        seed=seed,
        vocab_size=len(tokenizer),
        num_hidden_layers=num_layers,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def planted_model(
    *, layer_s, extra_row_s, embed_s, head_s, count_positions=False, seed=1, sleep=None
):
    """A tiny Llama whose pieces sleep planted times (``plant_sleeps``)."""
    return plant_sleeps(
        tiny_model("llama", seed=seed), layer_s=layer_s, extra_row_s=extra_row_s,
        embed_s=embed_s, head_s=head_s, count_positions=count_positions, sleep=sleep,
    )  # fmt: skip


def plant_sleeps(
    model, *, layer_s, extra_row_s, embed_s, head_s, count_positions=False, sleep=None
):
    """``model`` with its pieces sleeping planted times (seconds): each decoder layer layer_s
    plus extra_row_s per row beyond the first, the embedding embed_s, the LM head head_s. Rows
    are the batch rows, or batch rows x positions with ``count_positions`` (verified drafts).

    ``sleep``: how a piece sleeps; the tests pass a ``VirtualClock``'s (tests/measure/
    virtual_clock.py), which advances the clock the measurement reads instead of waiting, so
    the measured times are the planted ones on any machine; None: ``time.sleep`` (real
    sleeps, for the measurements in benchmarks/)."""
    import time

    from measure.hf.arch import arch_spec, get_module

    sleep = time.sleep if sleep is None else sleep

    def sleep_hook(seconds_of_rows):
        def hook(module, args, kwargs, output):
            h = args[0] if args else next(iter(kwargs.values()))
            rows = h.shape[0] * h.shape[1] if count_positions else h.shape[0]
            sleep(seconds_of_rows(rows))

        return hook

    spec = arch_spec(model)
    for layer in get_module(model, spec.layers):
        layer.register_forward_hook(
            sleep_hook(lambda rows: layer_s + (rows - 1) * extra_row_s), with_kwargs=True
        )
    get_module(model, spec.embed_tokens).register_forward_hook(
        sleep_hook(lambda rows: embed_s), with_kwargs=True
    )
    get_module(model, spec.lm_head).register_forward_hook(
        sleep_hook(lambda rows: head_s), with_kwargs=True
    )
    return model


def save_tiny_gguf(path: Path, *, seed: int = 0) -> Path:
    """Write a tiny random Llama GGUF file (2 layers, a BPE tokenizer) as llama.cpp lays it out.

    Weights use llama.cpp tensor names; the attention and MLP matrices are Q8_0-quantized so
    loading it exercises dequantization. Needs the ``gguf`` package.
    """
    import json

    import gguf
    import numpy as np

    tokenizer = tiny_tokenizer()
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    tokens = [""] * len(spec["model"]["vocab"])
    for token, i in spec["model"]["vocab"].items():
        tokens[i] = token
    special = {added["id"] for added in spec["added_tokens"]}
    hidden, ffn, heads, kv_heads, layers = HIDDEN_SIZE, 64, NUM_HEADS, 2, 2
    kv = kv_heads * hidden // heads
    path = Path(path)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(512)
    writer.add_block_count(layers)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges(
        [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    )
    writer.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    rng = np.random.default_rng(seed)

    def add(name, shape, quantize=False):
        data = (rng.standard_normal(shape) * INIT_STD).astype(np.float32)
        if quantize:
            kind = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
        else:
            writer.add_tensor(name, data)

    add("token_embd.weight", (len(tokens), hidden))
    add("output_norm.weight", (hidden,))
    add("output.weight", (len(tokens), hidden))
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", (hidden,))
        add(f"blk.{i}.ffn_norm.weight", (hidden,))
        for name, shape in [("attn_q", (hidden, hidden)), ("attn_k", (kv, hidden))]:
            add(f"blk.{i}.{name}.weight", shape, quantize=True)
        for name, shape in [("attn_v", (kv, hidden)), ("attn_output", (hidden, hidden))]:
            add(f"blk.{i}.{name}.weight", shape, quantize=True)
        for name, shape in [("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden))]:
            add(f"blk.{i}.{name}.weight", shape, quantize=True)
        add(f"blk.{i}.ffn_down.weight", (hidden, ffn), quantize=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
