"""PPD with a translator or a full head: exact (single and dist), m equal to the match records."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.checks import eos_token_ids  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.launch import ppd_dist_many  # noqa: E402
from measure.decode.local import ppd_single  # noqa: E402
from measure.match.rate import match_rates  # noqa: E402
from measure.match.tables import to_traces  # noqa: E402
from measure.train.distill import new_head  # noqa: E402
from tests.measure.decode.test_local import prompts  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
D_BAR, NEW = 3, 10


def scrambled(model, kind: str, seed: int = 0):
    """A head of ``kind`` at D_BAR with random weights (so its guesses differ from the lens)."""
    head = new_head(model, kind, D_BAR)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=gen))
    return head


@pytest.mark.parametrize("arch", ["llama", "gpt2", "opt"])
@pytest.mark.parametrize("kind", ["translator", "full"])
def test_ppd_with_head_equals_greedy_and_match_records(arch, kind):
    overrides = {"word_embed_proj_dim": 16} if arch == "opt" else {}
    model = tiny_model(arch, seed=4, **overrides)
    head = scrambled(model, kind)
    ids = prompts(6, seed=3)
    df = match_rates(model, ids, layers=[D_BAR], ks=(1, 3), max_new_tokens=NEW, heads=[head])
    name = "translator" if kind == "translator" else "trained"
    assert set(df["head"]) == {"shared", name}
    options = dict(max_new_tokens=NEW, eos_token_id=eos_token_ids(model))
    for k in (1, 3):
        traces = to_traces(df, 4, D_BAR, k, head=name)
        for prompt, trace in zip(ids, traces, strict=True):
            got = ppd_single(model, prompt, d_bar=D_BAR, k=k, head=head, **options)
            assert got.tokens == greedy_generate(model, prompt, **options).tokens
            assert got.m == trace.m and got.trace.head == name


def test_dist_backend_loads_a_translator_and_stays_exact():
    model = tiny_model("llama", seed=5)
    head = scrambled(model, "translator", seed=1)
    ids = prompts(4, seed=4)
    runs = ppd_dist_many(model, ids, d_bar=D_BAR, k=2, max_new_tokens=NEW, head=head)
    for prompt, run in zip(ids, runs, strict=True):
        single = ppd_single(model, prompt, d_bar=D_BAR, k=2, max_new_tokens=NEW, head=head)
        assert run.tokens == greedy_generate(model, prompt, max_new_tokens=NEW).tokens
        assert run.m == single.m and run.trace.head == "translator"
