"""Draft-model speculative decoding: exactly greedy's tokens, whatever the draft proposes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.speculative import SpecResult, self_draft, spec_generate  # noqa: E402
from tests.measure.tiny_models import ARCHS, VOCAB_SIZE, tiny_model  # noqa: E402

NEW_TOKENS = 12

pytestmark = pytest.mark.usefixtures("one_thread")


def prompts(n: int = 6, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n,), generator=gen).tolist()
    return [torch.randint(2, VOCAB_SIZE, (m,), generator=gen).tolist() for m in lengths]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("g", [1, 3])
def test_exact_against_greedy_with_any_draft(arch, g):
    target = tiny_model(arch, seed=1)
    drafts = {"random": tiny_model(arch, seed=2, num_hidden_layers=2) if arch not in ("gpt2",)
              else tiny_model(arch, seed=2, n_layer=2), "self": self_draft(target, 2)}  # fmt: skip
    for name, draft in drafts.items():
        for p in prompts():
            want = greedy_generate(target, p, max_new_tokens=NEW_TOKENS).tokens
            got = spec_generate(target, draft, p, draft_tokens_per_step=g,
                                max_new_tokens=NEW_TOKENS)  # fmt: skip
            assert got.tokens == want, (name, p)
            assert sum(x + 1 for x in got.accepted) >= len(got.tokens)
            assert all(0 <= x <= q <= g for q, x in zip(got.drafted, got.accepted, strict=True))
            assert len(got.token_times_s) == len(got.tokens) and got.wall_s > 0


def test_draft_equal_to_target_accepts_everything():
    target = tiny_model("llama", seed=1)
    for p in prompts():
        got = spec_generate(target, target, p, draft_tokens_per_step=4, max_new_tokens=NEW_TOKENS)
        assert got.tokens == greedy_generate(target, p, max_new_tokens=NEW_TOKENS).tokens
        assert got.accepted == got.drafted  # every proposal is the target's own token
        assert set(got.acceptance) <= {1}
        assert len(got.drafted) == -(-NEW_TOKENS // 5)  # g + 1 tokens a step


def test_stops_at_eos_like_greedy():
    target = tiny_model("llama", seed=1)
    p = prompts()[0]
    free = greedy_generate(target, p, max_new_tokens=NEW_TOKENS).tokens
    eos = free[5]
    want = greedy_generate(target, p, max_new_tokens=NEW_TOKENS, eos_token_id=eos).tokens
    got = spec_generate(target, self_draft(target, 2), p, draft_tokens_per_step=3,
                        max_new_tokens=NEW_TOKENS, eos_token_id=eos)  # fmt: skip
    assert got.tokens == want and got.tokens[-1] == eos


def test_acceptance_sequence_and_refusals():
    r = SpecResult([1] * 6, 1.0, [0.0] * 6, drafted=[3, 3, 1], accepted=[3, 1, 0])
    assert r.acceptance == [1, 1, 1, 1, 0, 0]
    target = tiny_model("llama", seed=1)
    with pytest.raises(ValueError, match="vocabulary"):
        spec_generate(target, tiny_model("llama", vocab_size=64), [3], draft_tokens_per_step=2,
                      max_new_tokens=2)  # fmt: skip
    with pytest.raises(ValueError, match="draft_tokens_per_step"):
        spec_generate(target, target, [3], draft_tokens_per_step=0, max_new_tokens=2)
    with pytest.raises(ValueError, match="layers"):
        self_draft(target, 4)
