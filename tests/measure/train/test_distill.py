"""Heads fitted on the model's own greedy continuations from cached hidden states."""

from __future__ import annotations

import pytest
import torch

from measure.decode.greedy import greedy_generate
from measure.hf.layer_split import LayerSplitModel
from measure.train.distill import (
    DistillConfig,
    _batches,
    collect_states,
    fit_head,
    mean_kl,
    new_head,
)
from measure.train.heads import TrainedHead
from measure.train.translator import TranslatorHead
from tests.measure.tiny_models import tiny_model

torch.set_num_threads(1)
PROMPTS = [[5, 6, 7, 8, 9], [9, 10], [40, 41, 42]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_states_are_the_generation_passes(arch):
    model = tiny_model(arch, seed=3)
    states = collect_states(model, PROMPTS, [1, 2], max_new_tokens=5, eos_token_id=[], batch_size=2)
    assert states.n_sequences == 3 and states.n_generated == 15
    assert states.n_positions == 15 and bool(states.generated.all())
    row = 0
    for prompt, tokens in zip(PROMPTS, states.sequences, strict=True):
        assert tokens == greedy_generate(model, prompt, max_new_tokens=5).tokens
        ids = torch.tensor([prompt + tokens[:-1]])  # the passes: x_0 .. x_{ell-1}
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
        own = slice(len(prompt) - 1, ids.shape[1])
        for layer in (1, 2):
            torch.testing.assert_close(
                states.hidden[layer][row : row + 5],
                out.hidden_states[layer][0, own],
                atol=1e-4,
                rtol=1e-4,
            )
        final = LayerSplitModel(model).logits(states.final[row : row + 5])
        assert final.argmax(-1).tolist() == tokens  # the final states give the greedy tokens
        row += 5


def test_prompt_positions_and_eos():
    model = tiny_model("llama", seed=3)
    eos = greedy_generate(model, PROMPTS[0], max_new_tokens=3).tokens[2]
    states = collect_states(
        model, PROMPTS[:1], [2], max_new_tokens=8, eos_token_id=eos, prompt_positions=2
    )
    assert states.sequences[0][-1] == eos and len(states.sequences[0]) <= 3
    ell = len(states.sequences[0])
    assert states.generated.tolist() == [False, False] + [True] * ell
    with pytest.raises(ValueError, match=r"layers must hold integers in \[1, 4\)"):
        collect_states(model, PROMPTS, [4])
    with pytest.raises(ValueError, match="prompt_positions must be an integer >= 0"):
        collect_states(model, PROMPTS, [1], prompt_positions=-1)
    with pytest.raises(ValueError, match="non-empty token-id lists"):
        collect_states(model, [[]], [1])


def test_batches_bound_padding():
    assert _batches([5, 100, 3, 50, 7, 4000], 2, 120) == [[2, 0], [4, 3], [1], [5]]
    assert _batches([3, 3, 3], 8, 10**6) == [[0, 1, 2]]


def _top1(head, model, states, layer):
    with torch.no_grad():
        target = LayerSplitModel(model).logits(states.final).argmax(-1)
        return (head(states.hidden[layer]).argmax(-1) == target).float().mean().item()


@pytest.mark.parametrize("kind", ["translator", "full"])
def test_fitted_heads_beat_the_logit_lens_on_held_out_continuations(trained_tiny_llama, kind):
    model, train_data, test_data = trained_tiny_llama
    before = [p.clone() for p in model.parameters()]
    options = dict(max_new_tokens=12, eos_token_id=[])
    train = collect_states(model, train_data[:, :4].tolist(), [1], **options)
    test = collect_states(model, test_data[:, :4].tolist(), [1], **options)
    head = new_head(model, kind, 1)
    assert isinstance(head, TranslatorHead if kind == "translator" else TrainedHead)
    lens_kl, lens_top1 = mean_kl(head, model, test), _top1(head, model, test, 1)
    config = DistillConfig(lr=1e-2, epochs=10, batch_tokens=64)
    record = fit_head(head, model, train, config)
    assert record["steps"] == 10 * 12 and record["stopped_by"] == "epochs"  # 768 positions
    assert record["last_loss"] < 0.5 * record["first_loss"]
    assert mean_kl(head, model, test) < 0.8 * lens_kl
    assert _top1(head, model, test, 1) > lens_top1 + 0.1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.requires_grad for p in model.parameters())  # unfrozen again
    if kind == "full":
        assert head.config.loss == "kl" and head.config.lr == config.lr


def test_fit_head_checks():
    model = tiny_model("llama")
    states = collect_states(model, PROMPTS, [2], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"states hold layers \[2\], not the head's 1"):
        fit_head(new_head(model, "translator", 1), model, states)
    with pytest.raises(ValueError, match="kind must be 'full' or 'translator'"):
        new_head(model, "lens", 1)
    with pytest.raises(ValueError, match="batch_tokens must be an integer >= 1"):
        DistillConfig(batch_tokens=0)
    record = fit_head(
        new_head(model, "translator", 2), model, states, DistillConfig(max_seconds=1e-9)
    )
    assert record["stopped_by"] == "max_seconds" and record["steps"] == 1
