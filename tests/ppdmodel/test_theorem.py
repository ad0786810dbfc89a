"""Theorem 4.1 and the ell -> infinity forms: exact values, limits, monotonicity and bounds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ppdmodel


@st.composite
def models(draw):
    """(d, d_bar, ell) inside Theorem 4.1's domain d/2 <= d_bar < d."""
    d = draw(st.integers(min_value=2, max_value=200))  # d = 1 has no layer d_bar in [d/2, d)
    d_bar = draw(st.integers(min_value=(d + 1) // 2, max_value=d - 1))
    ell = draw(st.integers(min_value=1, max_value=10_000))
    return d, d_bar, ell


probabilities = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=200, deadline=None)
@given(models())
def test_limits_p0_and_p1(model):
    d, d_bar, ell = model
    assert ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=0.0) == d * ell
    expected = d_bar * ell + (d - d_bar)
    assert ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=1.0) == pytest.approx(expected)


@settings(max_examples=200, deadline=None)
@given(models(), probabilities, probabilities)
def test_latency_decreases_in_p(model, p1, p2):
    d, d_bar, ell = model
    lo, hi = sorted((p1, p2))
    t_lo = ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=lo)
    t_hi = ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=hi)
    assert t_hi <= t_lo + 1e-9 * t_lo
    if ell > 1 and hi - lo > 1e-6:
        assert t_hi < t_lo


@settings(max_examples=200, deadline=None)
@given(models(), probabilities, st.integers(min_value=1, max_value=16))
def test_bounds_and_compute_at_least_latency(model, p, k):
    d, d_bar, ell = model
    t = ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p)
    c = ppdmodel.expected_compute(d=d, d_bar=d_bar, ell=ell, p=p, k=k)
    tol = 1e-9 * d * ell
    assert d_bar * ell + (d - d_bar) - tol <= t <= d * ell + tol
    assert c >= t
    assert c == pytest.approx(t + k * (d - d_bar) * ell)


def test_exact_values_by_hand():
    # d=40, d_bar=20, ell=128, p=0.5: 40*128 - 20*127*0.5 = 5120 - 1270 = 3850
    assert ppdmodel.expected_latency(d=40, d_bar=20, ell=128, p=0.5) == 3850.0
    # + k (d - d_bar) ell = 3 * 20 * 128 = 7680
    assert ppdmodel.expected_compute(d=40, d_bar=20, ell=128, p=0.5, k=3) == 3850.0 + 7680.0
    # d_bar = 30: 40*16 - 10*15*0.2 = 640 - 30
    assert ppdmodel.expected_latency(d=40, d_bar=30, ell=16, p=0.2) == pytest.approx(610.0)
    # Var[T] = (d - d_bar)^2 (ell - 1) p (1 - p) = 400 * 127 * 0.25
    assert ppdmodel.latency_variance(d=40, d_bar=20, ell=128, p=0.5) == 12700.0
    assert ppdmodel.expected_latency(d=40, d_bar=20, ell=1, p=0.9) == 40.0


def test_broadcasting_over_arrays():
    p = np.linspace(0, 1, 11)
    ell = np.array([[1], [16], [128]])
    out = ppdmodel.expected_latency(d=40, d_bar=20, ell=ell, p=p)
    assert out.shape == (3, 11)
    np.testing.assert_allclose(out, 40 * ell - 20 * (ell - 1) * p)
    k = np.array([1, 3, 5])
    c = ppdmodel.expected_compute(d=40, d_bar=np.array([20, 30, 39]), ell=128, p=0.5, k=k)
    t = 40 * 128 - (40 - np.array([20, 30, 39])) * 127 * 0.5
    np.testing.assert_allclose(c, t + k * (40 - np.array([20, 30, 39])) * 128)
    assert isinstance(ppdmodel.expected_latency(d=40, d_bar=20, ell=16, p=0.3), float)


def test_per_position_p():
    rng = np.random.default_rng(0)
    p_t = rng.random(15)
    got = ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=p_t)
    assert got == pytest.approx(40 * 16 - 15 * p_t.sum())
    constant = ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=np.full(15, 0.3))
    assert constant == pytest.approx(ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=0.3))
    batch = ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=np.stack([p_t, p_t / 2]))
    assert batch.shape == (2,)
    c = ppdmodel.expected_compute(d=40, d_bar=25, ell=16, p=p_t, k=2)
    assert c == pytest.approx(got + 2 * 15 * 16)
    var = ppdmodel.latency_variance(d=40, d_bar=25, ell=16, p=p_t)
    assert var == pytest.approx(225 * np.sum(p_t * (1 - p_t)))
    # forcing the grid reading of the same array broadcasts instead of summing
    grid = ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=p_t, per_position=False)
    assert grid.shape == (15,)
    with pytest.raises(ValueError, match="p must have ell - 1 = 15"):
        ppdmodel.expected_latency(d=40, d_bar=25, ell=16, p=p_t[:10], per_position=True)


def test_asymptotic_equals_paper_equations_at_half_depth():
    p = np.linspace(0, 1, 21)
    for d in (2, 40, 80):
        for k in (1, 3, 5):
            np.testing.assert_allclose(ppdmodel.latency_per_token(d=d, p=p), d * (1 - p / 2))
            np.testing.assert_allclose(
                ppdmodel.compute_per_time(d=d, p=p, k=k), (k + 2 - p) / (2 - p)
            )
            np.testing.assert_allclose(
                ppdmodel.compute_per_token(d=d, p=p, k=k), d * (2 + k - p) / 2
            )


@pytest.mark.parametrize("d_bar", [20, 25, 30, 39])
def test_asymptotic_is_the_limit_of_the_theorem(d_bar):
    d, k, p, ell = 40, 3, 0.37, 10**9
    t = ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p)
    c = ppdmodel.expected_compute(d=d, d_bar=d_bar, ell=ell, p=p, k=k)
    assert ppdmodel.latency_per_token(d=d, d_bar=d_bar, p=p) == pytest.approx(t / ell)
    assert ppdmodel.compute_per_token(d=d, d_bar=d_bar, p=p, k=k) == pytest.approx(c / ell)
    assert ppdmodel.compute_per_time(d=d, d_bar=d_bar, p=p, k=k) == pytest.approx(c / t)


def test_seconds_extension():
    base = ppdmodel.expected_latency(d=40, d_bar=20, ell=128, p=0.5)
    plain = ppdmodel.expected_latency_seconds(
        d=40, d_bar=20, ell=128, p=0.5, seconds_per_layer=0.002
    )
    assert plain == pytest.approx(0.002 * base)
    with_overheads = ppdmodel.expected_latency_seconds(
        d=40,
        d_bar=20,
        ell=128,
        p=0.5,
        seconds_per_layer=0.002,
        per_token_overhead_s=0.01,
        per_handoff_overhead_s=0.03,
    )
    # 128 tokens * 0.01 s + 127 * 0.5 expected hand-offs * 0.03 s
    assert with_overheads == pytest.approx(plain + 1.28 + 63.5 * 0.03)
    greedy = ppdmodel.greedy_latency_seconds(
        d=40, ell=128, seconds_per_layer=0.002, per_token_overhead_s=0.01
    )
    assert greedy == pytest.approx(128 * (0.08 + 0.01))
    p_t = np.full(127, 0.5)
    per_pos = ppdmodel.expected_latency_seconds(
        d=40,
        d_bar=20,
        ell=128,
        p=p_t,
        seconds_per_layer=0.002,
        per_token_overhead_s=0.01,
        per_handoff_overhead_s=0.03,
    )
    assert per_pos == pytest.approx(with_overheads)
