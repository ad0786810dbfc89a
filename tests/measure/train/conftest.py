"""Fixtures of the head-training tests: a tiny Llama that has learned a synthetic rule."""

from __future__ import annotations

import pytest
import torch

from tests.measure.tiny_models import tiny_model


def _synthetic_corpus(n_blocks: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """Sequences where token t = (token t-1 + token t-2) mod vocab: needs a few layers."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n_blocks, length, dtype=torch.long)
    x[:, :2] = torch.randint(0, vocab, (n_blocks, 2), generator=g)
    for t in range(2, length):
        x[:, t] = (x[:, t - 1] + x[:, t - 2]) % vocab
    return x


@pytest.fixture(scope="module")
def trained_tiny_llama():
    """A 4-layer llama trained (~2 s) to predict the synthetic corpus, and held-out data."""
    torch.manual_seed(0)
    model = tiny_model("llama", vocab_size=16, hidden_size=64, intermediate_size=128)
    model.train()
    data = _synthetic_corpus(64, 24, 16, seed=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(150):
        batch = data[(step * 16) % 64 :][:16]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert loss.item() < 0.5, loss.item()  # the model has learned the rule
    return model, data, _synthetic_corpus(32, 24, 16, seed=2)
