"""Speculative decoding, self-speculative early exit, tensor parallelism and FREE in closed form."""

import math

import numpy as np
import pytest
import sympy as sp

from ppdmodel import (
    DecodeCosts,
    free_expected_compute_seconds,
    free_expected_latency_seconds,
    symbolic,
)
from ppdmodel.alternatives import (
    EXACT_QUALITY,
    draft_model_step_seconds,
    early_exit_seconds_per_token,
    early_exit_step_seconds,
    forward_seconds,
    free_compute_per_token,
    free_seconds_per_token,
    ring_allreduce_seconds,
    sample_speculative_steps,
    speculative_seconds_per_token,
    speculative_speedup,
    speculative_tokens_per_step,
)


def test_tokens_per_step_limits_and_sum():
    g = np.arange(1, 9)
    assert np.all(speculative_tokens_per_step(a=0.0, g=g) == 1.0)  # a -> 0: one token per step
    assert np.all(speculative_tokens_per_step(a=1.0, g=g) == g + 1)  # a -> 1: every draft kept
    near = speculative_tokens_per_step(a=1 - 1e-12, g=g)
    np.testing.assert_allclose(near, g + 1, rtol=1e-9)  # continuous at a = 1
    for a in (0.1, 0.5, 0.9):
        for gg in (1, 3, 7):
            assert speculative_tokens_per_step(a=a, g=gg) == pytest.approx(
                sum(a**i for i in range(gg + 1)), rel=1e-12
            )


def test_tokens_per_step_increase_with_a_and_g():
    a = np.linspace(0, 1, 21)
    tokens = speculative_tokens_per_step(a=a[:, None], g=np.arange(1, 6)[None, :])
    assert np.all(np.diff(tokens, axis=0) >= 0) and np.all(np.diff(tokens, axis=1) >= 0)


def test_sympy_derivation_equals_leviathan_and_numeric():
    derived = symbolic.SPECULATIVE_TOKENS_PER_STEP
    a, g = symbolic.a_accept, symbolic.g_draft
    generic = derived.args[-1][0]  # the a != 1 branch
    assert sp.simplify(generic - symbolic.LEVIATHAN_TOKENS) == 0
    assert derived.subs(a, 1) == g + 1
    for a_val in (0.2, 0.7):
        for g_val in (1, 4):
            value = float(derived.subs({a: a_val, g: g_val}))
            assert value == pytest.approx(speculative_tokens_per_step(a=a_val, g=g_val))


@pytest.mark.parametrize("a,g", [(0.0, 3), (0.3, 1), (0.6, 4), (0.9, 8), (1.0, 2)])
def test_monte_carlo_of_the_verify_rule_agrees(a, g):
    tokens = sample_speculative_steps(a=a, g=g, n_steps=40_000, seed=1)
    mean, se = tokens.mean(), tokens.std(ddof=1) / math.sqrt(tokens.size)
    assert abs(mean - speculative_tokens_per_step(a=a, g=g)) <= 4 * se + 1e-12


def _decode_literally(a, g, draft_s, verify_s, ell, rng):
    """Token by token: draft until a rejection or g drafts, verify, count time."""
    tokens, seconds = 0, 0.0
    while tokens < ell:
        accepted = 0
        while accepted < g and rng.random() < a:
            accepted += 1
        seconds += g * draft_s + verify_s
        tokens += accepted + 1
    return seconds / tokens


def test_seconds_per_token_agrees_with_a_literal_simulation():
    rng = np.random.default_rng(7)
    a, g, draft_s, verify_s = 0.55, 3, 0.2, 1.3
    runs = np.array([_decode_literally(a, g, draft_s, verify_s, 400, rng) for _ in range(400)])
    closed = speculative_seconds_per_token(a=a, g=g, draft_s=draft_s, verify_s=verify_s)
    se = runs.std(ddof=1) / math.sqrt(runs.size)
    assert abs(runs.mean() - closed) <= 4 * se + 0.002 * closed  # renewal bias O(1/ell)


def test_leviathan_speedup_is_greedy_over_speculative_time():
    target, c = 2.0, 0.1
    for a in (0.0, 0.4, 0.8, 1.0):
        spec = speculative_seconds_per_token(a=a, g=4, draft_s=c * target, verify_s=target)
        assert speculative_speedup(a=a, g=4, c=c) == pytest.approx(target / spec)
    assert speculative_speedup(a=0.0, g=2, c=0.5) == pytest.approx(1 / 2)  # nothing accepted


def _costs():
    return DecodeCosts(
        layer_s=1.0,
        candidate_layer_s_by_k={1: 1.0, 5: 2.0},
        embedding_s=0.5,
        early_head_s=3.0,
        final_head_s=4.0,
        host_s=0.25,
    )


def test_early_exit_step_seconds_by_hand():
    costs = _costs()  # batch of g + 1 = 3 rows: per-layer 1.5 (interpolated between 1 and 5)
    draft, verify = early_exit_step_seconds(d=10, exit_layer=4, g=2, costs=costs)
    assert draft == 0.5 + 4 * 1.0 + 3.0 + 0.25
    assert verify == 0.5 + 10 * 1.5 + 4.0 + 0.25
    draft_r, verify_r = early_exit_step_seconds(
        d=10, exit_layer=4, g=2, costs=costs, reuse_draft_layers=True
    )
    assert draft_r == draft
    assert verify_r == 0.5 + 6 * 1.5 + 4 * 1.0 + 4.0 + 0.25


def test_early_exit_limits():
    costs = _costs()
    draft, verify = early_exit_step_seconds(d=10, exit_layer=4, g=3, costs=costs)
    never = early_exit_seconds_per_token(d=10, exit_layer=4, g=3, a=0.0, costs=costs)
    always = early_exit_seconds_per_token(d=10, exit_layer=4, g=3, a=1.0, costs=costs)
    assert never == pytest.approx(3 * draft + verify)
    assert always == pytest.approx((3 * draft + verify) / 4)


def test_draft_model_step_seconds_by_hand():
    costs = _costs()  # greedy device time per token: 0.5 + 10 * 1.0 + 4.0 = 14.5
    assert forward_seconds(d=10, costs=costs, rows=3) == 0.5 + 10 * 1.5 + 4.0 + 0.25
    assert forward_seconds(d=10, costs=costs) == costs.greedy_token_seconds(10)
    draft, verify = draft_model_step_seconds(d=10, g=2, c=0.1, costs=costs)
    assert draft == pytest.approx(0.1 * 14.5 + 0.25)
    assert verify == forward_seconds(d=10, costs=costs, rows=3)
    free, _ = draft_model_step_seconds(d=10, g=2, c=0.0, costs=costs)
    assert free == costs.host_s  # a free draft still pays its host time
    drafts, verifies = draft_model_step_seconds(d=10, g=np.array([1, 2]), c=0.1, costs=costs)
    assert drafts == draft  # a draft token's cost does not depend on g (as early exit's)
    assert verifies[1] == verify


def test_ring_allreduce():
    assert ring_allreduce_seconds(n=1, nbytes=1e6, latency_s=1e-5, bandwidth_bytes_per_s=1e9) == 0
    two = ring_allreduce_seconds(n=2, nbytes=1e6, latency_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert two == pytest.approx(2 * 1e-5 + 1e6 / 1e9)
    eight = ring_allreduce_seconds(n=8, nbytes=8e6, latency_s=0.0, bandwidth_bytes_per_s=1e9)
    assert eight == pytest.approx(2 * 7 / 8 * 8e6 / 1e9)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: speculative_tokens_per_step(a=1.5, g=2), "a"),
        (lambda: speculative_tokens_per_step(a=0.5, g=0), "g"),
        (lambda: speculative_seconds_per_token(a=0.5, g=2, draft_s=-1, verify_s=1), "draft_s"),
        (lambda: speculative_speedup(a=0.5, g=2, c=float("nan")), "c"),
        (lambda: early_exit_step_seconds(d=10, exit_layer=10, g=1, costs=_costs()), "exit_layer"),
        (
            lambda: ring_allreduce_seconds(n=2, nbytes=1, latency_s=0, bandwidth_bytes_per_s=0),
            "bandwidth_bytes_per_s",
        ),
        (lambda: sample_speculative_steps(a=0.5, g=2, n_steps=0), "n_steps"),
        (lambda: forward_seconds(d=10, costs=_costs(), rows=0), "rows"),
        (lambda: forward_seconds(d=10, costs="x"), "costs"),
        (lambda: draft_model_step_seconds(d=10, g=2, c=-0.1, costs=_costs()), "c"),
        (lambda: draft_model_step_seconds(d=10, g=0, c=0.1, costs=_costs()), "g"),
        (lambda: draft_model_step_seconds(d=10, g=2, c=1e308, costs=_costs()), "c"),
    ],
)
def test_bad_inputs_name_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


FREE_COSTS = DecodeCosts(
    layer_s=1e-3, candidate_layer_s_by_k={2: 1.1e-3, 8: 1.6e-3}, embedding_s=1e-4,
    early_head_s=4e-3, final_head_s=4e-3, host_s=2e-4,
)  # fmt: skip


def test_free_on_the_alternatives_axes_is_ppdmodel_free_on_a_grid():
    """One definition: FREE's seconds and compute per token are ppdmodel.free's E[T] / ell."""
    d, ell = 30, 48
    layers, qs = np.meshgrid([1, 12, 24, 29], [0.0, 0.3, 0.83, 1.0], indexing="ij")
    lat = free_seconds_per_token(d=d, exit_layer=layers, q=qs, ell=ell, costs=FREE_COSTS)
    comp = free_compute_per_token(d=d, exit_layer=layers, q=qs, ell=ell, costs=FREE_COSTS)
    assert lat.shape == comp.shape == layers.shape
    for i in np.ndindex(layers.shape):
        kw = dict(d=d, exit_layer=int(layers[i]), ell=ell, q=float(qs[i]), costs=FREE_COSTS)
        assert lat[i] == pytest.approx(free_expected_latency_seconds(**kw) / ell, rel=1e-12)
        assert comp[i] == pytest.approx(free_expected_compute_seconds(**kw) / ell, rel=1e-12)
        assert comp[i] == pytest.approx(lat[i] - FREE_COSTS.host_s, rel=1e-12)


def test_free_never_exiting_pays_greedy_plus_the_exit_head_and_quality_is_defined():
    lat = free_seconds_per_token(d=30, exit_layer=20, q=0.0, ell=16, costs=FREE_COSTS)
    greedy = FREE_COSTS.greedy_token_seconds(30)
    assert isinstance(lat, float) and lat == pytest.approx(greedy + FREE_COSTS.early_head_s)
    assert EXACT_QUALITY == 1.0


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(q=1.5), "q"),
        (dict(exit_layer=30), "exit_layer"),
        (dict(ell=0), "ell"),
        (dict(ell=[4, 8]), "ell"),
        (dict(q=[0.1, 0.2], exit_layer=[1, 2, 3]), "broadcast"),
        (dict(q=np.full(10**4 + 1, 0.5)), "broadcast to"),
    ],
)
def test_free_per_token_refuses_bad_inputs_naming_them(kw, name):
    args = dict(d=30, exit_layer=10, q=0.5, ell=16, costs=FREE_COSTS) | kw
    with pytest.raises(ValueError, match=name):
        free_seconds_per_token(**args)
