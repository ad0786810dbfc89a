"""A tiny random Llama and byte-level BPE tokenizer saved as an HF model directory."""

from __future__ import annotations

from pathlib import Path

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Question: what is the capital of France? Answer: Paris.",
    "Translate English to French: the house is blue. La maison est bleue.",
    "Summarize the article: the model predicts the next token early.",
    "def add(a, b):\n    return a + b\n",
]
"""A few lines to train the tokenizer on; enough for merges, small enough to be instant."""


def tiny_tokenizer(vocab_size: int = 320):
    """A byte-level BPE PreTrainedTokenizerFast trained in memory on CORPUS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<eos>"],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", bos_token="<eos>")


def build_tiny_model_dir(path: Path, *, num_layers: int = 4, seed: int = 0) -> Path:
    """Save a random fp32 Llama (hidden 32, `num_layers` layers) and its tokenizer under `path`."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
