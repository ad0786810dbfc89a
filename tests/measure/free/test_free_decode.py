"""FREE decoding on tiny random models: exactness limits, and the deep KV entries that
synchronized parallel decoding writes for stacked tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure import LayerSplitModel, free_generate, greedy_generate  # noqa: E402
from measure.free.decode import FreeResult  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

ARCHS = ("llama", "gpt2", "gemma3_text", "opt")
"""Rotary GQA, learned positions, alternating sliding windows (window 4 < the stacks below),
OPT's position offset."""
PROMPT = [[5, 6, 7, 8, 9, 10, 11, 12]]
NEW = 14
EXIT_LAYER = 2
TOL = 1e-4


@pytest.fixture(scope="module", params=ARCHS)
def lsm(request):
    return LayerSplitModel(tiny_model(request.param))


@pytest.mark.parametrize("mode", ["sync", "copy"])
def test_threshold_above_one_is_greedy(lsm, mode, one_thread):
    greedy = greedy_generate(lsm, PROMPT, max_new_tokens=NEW).tokens
    out = free_generate(
        lsm, PROMPT, exit_layer=EXIT_LAYER, threshold=1.01, max_new_tokens=NEW, mode=mode
    )
    assert isinstance(out, FreeResult)
    assert out.tokens == greedy
    assert out.exits == [0] * NEW
    assert out.deep_rows == [1] * NEW


def test_threshold_zero_always_exits(lsm, one_thread):
    out = free_generate(lsm, PROMPT, exit_layer=EXIT_LAYER, threshold=0.0, max_new_tokens=NEW)
    assert out.exits == [1] * NEW and out.deep_rows == []


def test_oracle_is_greedy_with_greedy_cache(lsm, one_thread):
    greedy, g_cache = greedy_generate(lsm, PROMPT, max_new_tokens=NEW, return_cache=True)
    out, cache = free_generate(
        lsm, PROMPT, exit_layer=EXIT_LAYER, threshold=0.5, max_new_tokens=NEW, mode="oracle",
        return_cache=True,
    )  # fmt: skip
    assert out.tokens == greedy.tokens
    assert len(out.pairs) == NEW
    assert [int(a) for _, a in out.pairs] == out.exits
    for mine, ref in zip(cache.layers, g_cache.layers, strict=True):
        torch.testing.assert_close(mine.keys, ref.keys, rtol=0, atol=TOL)
        torch.testing.assert_close(mine.values, ref.values, rtol=0, atol=TOL)


def _mixed_run(lsm, mode):
    """A sync/copy run with a deep pass over stacked rows (threshold searched)."""
    for threshold in (0.1, 0.08, 0.12, 0.15, 0.2, 0.06, 0.25, 0.3, 0.09, 0.11, 0.13):
        out, cache = free_generate(
            lsm, PROMPT, exit_layer=EXIT_LAYER, threshold=threshold, max_new_tokens=NEW,
            mode=mode, return_cache=True,
        )  # fmt: skip
        last = max((i for i, e in enumerate(out.exits) if e == 0), default=None)
        if last is not None and max(out.deep_rows) >= 3:
            return out, cache, last
    pytest.fail("no threshold gave a stacked deep pass")


def _reference_cache(lsm, ids, n):
    cache = lsm.new_cache()
    lsm.prefill(ids[:, :n], cache)
    return cache


def test_sync_deep_pass_writes_full_forward_kv(lsm, one_thread):
    """After the last deep pass, every position up to it holds, in every deep layer, the K/V
    of a full forward over the same tokens (stacked tokens included); the shallow layers hold
    them for every token fed."""
    out, cache, last = _mixed_run(lsm, "sync")
    ids = torch.tensor([PROMPT[0] + out.tokens])
    p = len(PROMPT[0])
    deep_ref = _reference_cache(lsm, ids, p + last)  # positions 0 .. p - 1 + last
    shallow_ref = _reference_cache(lsm, ids, p + len(out.tokens) - 1)
    for i, layer in enumerate(cache.layers):
        ref = (shallow_ref if i < EXIT_LAYER else deep_ref).layers[i]
        torch.testing.assert_close(layer.keys, ref.keys, rtol=0, atol=TOL)
        torch.testing.assert_close(layer.values, ref.values, rtol=0, atol=TOL)


def test_copy_mode_deep_kv_of_stacked_tokens_differ(lsm, one_thread):
    """State copying computes the stacked positions' deep K/V from h_{L_s}: not the forward's."""
    out, cache, last = _mixed_run(lsm, "copy")
    ids = torch.tensor([PROMPT[0] + out.tokens])
    ref = _reference_cache(lsm, ids, len(PROMPT[0]) + last).layers[-1]
    assert cache.layers[-1].keys.shape == ref.keys.shape
    assert (cache.layers[-1].values - ref.values).abs().max() > 10 * TOL


def test_auto_threshold_collects_pairs(one_thread):
    lsm = LayerSplitModel(tiny_model("gpt2"))
    out = free_generate(lsm, PROMPT, exit_layer=EXIT_LAYER, threshold="auto", max_new_tokens=NEW)
    assert out.thresholds[0] == pytest.approx(0.9)
    assert len(out.pairs) == NEW - sum(out.exits) + sum(r - 1 for r in out.deep_rows)
    assert all(0 <= c <= 1 for c, _ in out.pairs)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(exit_layer=0, threshold=0.5), "exit_layer"),
        (dict(exit_layer=4, threshold=0.5), "exit_layer"),
        (dict(exit_layer=2, threshold=-0.1), "threshold"),
        (dict(exit_layer=2, threshold="never"), "threshold"),
        (dict(exit_layer=2, threshold=0.5, mode="spd"), "mode"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs, name):
    lsm = LayerSplitModel(tiny_model("llama"))
    with pytest.raises(ValueError, match=name):
        free_generate(lsm, PROMPT, max_new_tokens=2, **kwargs)
