"""Exact law of T (binomial / Poisson-binomial) and the seeded Monte Carlo vs the closed form."""

import itertools

import numpy as np
import pytest

import ppdmodel
from ppdmodel.distribution import poisson_binomial_pmf


@pytest.mark.parametrize(
    ("d", "d_bar", "ell", "p"),
    [(40, 20, 128, 0.5), (40, 30, 16, 0.7415), (7, 4, 1, 0.3), (12, 11, 50, 0.0), (12, 6, 50, 1)],
)
def test_iid_law_matches_closed_form(d, d_bar, ell, p):
    law = ppdmodel.latency_distribution(d=d, d_bar=d_bar, ell=ell, p=p)
    assert law.pmf.sum() == pytest.approx(1.0)
    assert law.support[0] == d_bar * ell + (d - d_bar) and law.support[-1] == d * ell
    assert law.mean == pytest.approx(ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p))
    var = ppdmodel.latency_variance(d=d, d_bar=d_bar, ell=ell, p=p)
    assert law.var == pytest.approx(var, abs=1e-6)
    assert law.std == pytest.approx(np.sqrt(var), abs=1e-6)
    assert law.cdf[-1] == pytest.approx(1.0)
    assert law.p50 <= law.p99


def test_quantiles_by_hand():
    # ell=3, p=0.5: N-1 ~ Bin(2, 0.5) -> T in {d_bar*3 + (d-d_bar)*n} with pmf 1/4, 1/2, 1/4
    law = ppdmodel.latency_distribution(d=10, d_bar=6, ell=3, p=0.5)
    np.testing.assert_array_equal(law.support, [22, 26, 30])
    np.testing.assert_allclose(law.pmf, [0.25, 0.5, 0.25])
    assert law.quantile(0.25) == 22 and law.quantile(0.26) == 26
    assert law.p50 == 26 and law.p99 == 30 and law.quantile(0.0) == 22
    np.testing.assert_array_equal(law.quantile([0.1, 0.75, 1.0]), [22, 26, 30])


def test_per_position_reduces_to_binomial_when_constant():
    iid = ppdmodel.latency_distribution(d=40, d_bar=25, ell=64, p=0.37)
    per_pos = ppdmodel.latency_distribution(d=40, d_bar=25, ell=64, p=np.full(63, 0.37))
    np.testing.assert_allclose(per_pos.pmf, iid.pmf, atol=1e-12)
    np.testing.assert_array_equal(per_pos.support, iid.support)


def test_per_position_law_matches_closed_form():
    p_t = ppdmodel.paper.per_position_p(dataset="WMT", k=3, trained=True, layer=20)
    law = ppdmodel.latency_distribution(d=40, d_bar=20, ell=128, p=p_t)
    assert law.pmf.sum() == pytest.approx(1.0)
    assert law.mean == pytest.approx(ppdmodel.expected_latency(d=40, d_bar=20, ell=128, p=p_t))
    var = ppdmodel.latency_variance(d=40, d_bar=20, ell=128, p=p_t)
    assert law.var == pytest.approx(var)


def test_poisson_binomial_small_case_by_hand():
    # two Bernoullis 0.2 and 0.5: P(0)=0.4, P(1)=0.5, P(2)=0.1
    np.testing.assert_allclose(poisson_binomial_pmf([0.2, 0.5]), [0.4, 0.5, 0.1])


GRID = list(itertools.product([8, 40], [0.5, 0.75], [1, 2, 16, 128], [0.0, 0.05, 0.5, 0.93, 1.0]))


@pytest.mark.parametrize(("d", "frac", "ell", "p"), GRID)
def test_monte_carlo_iid_within_4_sigma(d, frac, ell, p):
    d_bar = d * frac
    n = 20_000
    t = ppdmodel.sample_latency(d=d, d_bar=d_bar, ell=ell, p=p, n=n, seed=1234)
    mean = ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p)
    sigma = np.sqrt(ppdmodel.latency_variance(d=d, d_bar=d_bar, ell=ell, p=p) / n)
    assert abs(t.mean() - mean) <= 4 * sigma + 1e-9
    assert t.min() >= d_bar * ell + (d - d_bar) and t.max() <= d * ell


@pytest.mark.parametrize("ell", [2, 16, 128])
@pytest.mark.parametrize("seed", [0, 1])
def test_monte_carlo_per_position_within_4_sigma(ell, seed):
    p_t = np.random.default_rng(seed).random(ell - 1)
    p_t[0] = 0.0  # a sure miss and (below) a sure hit are covered too
    if ell > 2:
        p_t[1] = 1.0
    n = 20_000
    t = ppdmodel.sample_latency(d=40, d_bar=30, ell=ell, p=p_t, n=n, seed=seed)
    mean = ppdmodel.expected_latency(d=40, d_bar=30, ell=ell, p=p_t)
    sigma = np.sqrt(ppdmodel.latency_variance(d=40, d_bar=30, ell=ell, p=p_t) / n)
    assert abs(t.mean() - mean) <= 4 * sigma
    law = ppdmodel.latency_distribution(d=40, d_bar=30, ell=ell, p=p_t)
    assert t.var() == pytest.approx(law.var, rel=0.1)


def test_monte_carlo_is_seeded():
    a = ppdmodel.sample_latency(d=40, d_bar=20, ell=128, p=0.5, n=100, seed=7)
    b = ppdmodel.sample_latency(d=40, d_bar=20, ell=128, p=0.5, n=100, seed=7)
    np.testing.assert_array_equal(a, b)
    p_t = np.full(127, 0.5)
    c = ppdmodel.sample_latency(d=40, d_bar=20, ell=128, p=p_t, n=100, seed=7)
    d = ppdmodel.sample_latency(d=40, d_bar=20, ell=128, p=p_t, n=100, seed=7)
    np.testing.assert_array_equal(c, d)


def test_repr_is_a_short_summary():
    text = repr(ppdmodel.latency_distribution(d=40, d_bar=20, ell=128, p=0.6837))
    assert text.startswith("LatencyDistribution(128 values in [2580, 5120], mean=3383.4")
    assert "array" not in text and len(text) < 150
