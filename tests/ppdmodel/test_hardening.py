"""Issue 10: no silent wrong numbers, no crash other than ValueError, bounded time and memory."""

import numpy as np
import pandas as pd
import pytest

import ppdmodel
from ppdmodel import paper
from ppdmodel.distribution import (
    MAX_LAW_ELL,
    LatencyDistribution,
    poisson_binomial_pmf,
    poisson_binomial_pmf_exact,
)
from ppdmodel.montecarlo import MAX_DRAWS, MAX_SAMPLES
from ppdmodel.validation import MAX_EXACT_INT


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.int32, np.float16])
def test_small_dtypes_do_not_wrap_around(dtype):
    d, d_bar, ell, k = dtype(100), dtype(50), dtype(100), dtype(5)
    exact_t = 100 * 100 - 50 * 99 * 0.5
    assert ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=0.5) == exact_t  # was -27.0
    exact_c = exact_t + 5 * 50 * 100
    assert ppdmodel.expected_compute(d=d, d_bar=d_bar, ell=ell, p=0.5, k=k) == exact_c
    assert ppdmodel.latency_variance(d=d, d_bar=d_bar, ell=ell, p=0.5) == 50**2 * 99 * 0.25
    assert ppdmodel.latency_per_token(d=d, d_bar=d_bar, p=0.5) == 75.0
    assert ppdmodel.compute_per_token(d=d, d_bar=d_bar, p=0.5, k=k) == 75.0 + 250
    law = ppdmodel.latency_distribution(d=d, d_bar=d_bar, ell=ell, p=0.5)
    assert law.mean == pytest.approx(exact_t)
    samples = ppdmodel.sample_latency(d=d, d_bar=d_bar, ell=ell, p=0.5, n=10, seed=0)
    assert samples.min() >= 50 * 100 + 50


def test_small_dtype_arrays_do_not_wrap_around():
    d = np.array([100, 120], dtype=np.int8)
    out = ppdmodel.expected_compute(d=d, d_bar=d // 2 + 10, ell=np.int8(100), p=0.0, k=np.int8(9))
    np.testing.assert_array_equal(out, [100 * 100 + 9 * 40 * 100, 120 * 100 + 9 * 50 * 100])
    seconds = ppdmodel.expected_latency_seconds(
        d=40, d_bar=20, ell=np.int8(100), p=0, seconds_per_layer=1.0,
        per_token_overhead_s=np.int8(100),
    )  # fmt: skip
    assert seconds == 40 * 100 + 100 * 100


@pytest.mark.parametrize("name", ["d", "ell"])
@pytest.mark.parametrize("value", [2**63, 2**64 + 3, 10**40, 2**53 + 2, 1e308, np.uint64(2**63)])
def test_integers_beyond_float64_are_refused_naming_the_parameter(name, value):
    args = {"d": 40, "d_bar": 20, "ell": 128, "p": 0.5, name: value}
    if name == "d":
        args["d_bar"] = 2**62
    with pytest.raises(ValueError, match=rf"^{name} must be <= {MAX_EXACT_INT}"):
        ppdmodel.expected_latency(**args)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), np.inf])
def test_infinities_are_refused(value):
    for name in ("d", "ell"):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive integer"):
            ppdmodel.expected_latency(**{"d": 40, "d_bar": 20, "ell": 10, "p": 0.5, name: value})
    with pytest.raises(ValueError, match=r"^k must be a positive integer"):
        ppdmodel.expected_compute(d=40, d_bar=20, ell=10, p=0.5, k=value)
    with pytest.raises(ValueError, match=r"^d_bar must be a finite number"):
        ppdmodel.latency_per_token(d=40, d_bar=value, p=0.5)
    with pytest.raises(ValueError, match=r"^n must be a positive integer"):
        ppdmodel.sample_runs(ell=10, p=0.5, n=value)


def test_ell_1e308_is_refused_not_nan():
    with pytest.raises(ValueError, match=r"ell must be <="):
        ppdmodel.expected_latency(d=40, d_bar=20, ell=1e308, p=0.5)
    top = ppdmodel.expected_latency(d=2**20, d_bar=2**19, ell=MAX_EXACT_INT, p=0.5)
    assert np.isfinite(top)


@pytest.mark.parametrize(
    "func", [ppdmodel.expected_latency, ppdmodel.latency_variance, ppdmodel.latency_distribution]
)
@pytest.mark.parametrize("d_bar", [20.5, 39.9, np.array([20, 20.25])])
def test_non_integer_d_bar_is_refused_by_the_theorem(func, d_bar):
    with pytest.raises(ValueError, match=r"d_bar must be an integer layer"):
        func(d=40, d_bar=d_bar, ell=16, p=0.5)


def test_d_bar_of_one_layer_model_is_refused_with_a_reason():
    with pytest.raises(ValueError, match=r"d = 1 has no such layer"):
        ppdmodel.expected_latency(d=1, d_bar=0.5, ell=16, p=0.5)
    with pytest.raises(ValueError, match=r"d_bar"):
        ppdmodel.expected_latency(d=40, d_bar=True, ell=16, p=0.5)


def test_half_depth_is_allowed_only_in_the_ell_to_infinity_forms():
    # Eq. 3, 5, 6 are stated at d_bar = d/2 for any d, odd d included (the default).
    assert ppdmodel.latency_per_token(d=41, p=0.5) == pytest.approx(41 * (1 - 0.25))
    assert ppdmodel.latency_per_token(d=41, d_bar=20.5, p=0.5) == pytest.approx(41 * 0.75)
    assert ppdmodel.compute_per_time(d=41, p=0.5, k=3) == pytest.approx((3 + 2 - 0.5) / 1.5)
    np.testing.assert_allclose(
        ppdmodel.compute_per_token(d=np.array([40, 41]), p=0.5, k=1), [50.0, 51.25]
    )
    for d_bar in (25.5, np.array([20.5, 21.5])):
        with pytest.raises(ValueError, match=r"d_bar must be an integer layer .*or exactly d/2"):
            ppdmodel.latency_per_token(d=41, d_bar=d_bar, p=0.5)
    with pytest.raises(ValueError, match=r"d_bar must be an integer layer"):
        ppdmodel.expected_latency(d=41, d_bar=20.5, ell=8, p=0.5)


@pytest.mark.parametrize(("ell", "p"), [(100, 0.5), (128, 0.9), (16, 0.0), (3, 0.25), (1, 0.5)])
def test_quantile_one_is_the_top_of_the_support(ell, p):
    law = ppdmodel.latency_distribution(d=40, d_bar=20, ell=ell, p=p)
    assert law.quantile(1.0) == law.max == 40 * ell  # P(T = d*ell) = (1-p)^(ell-1) > 0
    assert law.quantile(np.array([0.0, 1.0]))[-1] == 40 * ell


def test_quantile_one_when_the_top_is_impossible_or_underflows():
    all_match = ppdmodel.latency_distribution(d=40, d_bar=20, ell=10, p=1.0)
    assert all_match.quantile(1.0) == all_match.max == 20 * 10 + 20
    p_t = np.full(2999, 0.999)  # P(N = ell) = 0.001^2999 underflows to 0, yet is > 0
    law = ppdmodel.latency_distribution(d=40, d_bar=20, ell=3000, p=p_t)
    assert law.pmf[-1] == 0.0 and law.quantile(1.0) == 40 * 3000
    p_t[:5] = 1.0  # five certain matches: N <= ell - 5
    law = ppdmodel.latency_distribution(d=40, d_bar=20, ell=3000, p=p_t)
    assert law.quantile(1.0) == 20 * 3000 + 20 * (3000 - 5)


def test_latency_distribution_checks_its_fields():
    with pytest.raises(ValueError, match="pmf must be >= 0 and sum to 1"):
        LatencyDistribution(support=np.arange(3.0), pmf=np.array([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match="support must be a non-empty"):
        LatencyDistribution(support=[1, 2], pmf=np.array([0.5, 0.5]))
    law = LatencyDistribution(support=np.arange(3.0), pmf=np.array([0.5, 0.5, 0.0]))
    assert law.quantile(1.0) == 1.0


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 65, 300, 1000])
def test_fft_poisson_binomial_equals_the_exact_convolution(n):
    rng = np.random.default_rng(n)
    q = rng.random(n)
    q[: n // 5] = rng.choice([0.0, 1.0], size=n // 5)  # certain outcomes mixed in
    fast, exact = poisson_binomial_pmf(q), poisson_binomial_pmf_exact(q)
    assert fast.shape == exact.shape == (n + 1,)
    np.testing.assert_allclose(fast, exact, rtol=0, atol=1e-13)
    assert (fast >= 0).all() and fast.sum() == pytest.approx(1.0, abs=1e-14)


def test_per_position_law_at_ell_30000_is_exact_in_its_moments():
    ell = 30_000
    p_t = 0.2 + 0.7 * np.random.default_rng(0).random(ell - 1)
    law = ppdmodel.latency_distribution(d=40, d_bar=20, ell=ell, p=p_t)  # was O(ell^2)
    assert law.pmf.sum() == pytest.approx(1.0, abs=1e-12)
    mean = ppdmodel.expected_latency(d=40, d_bar=20, ell=ell, p=p_t)
    assert law.mean == pytest.approx(mean, rel=1e-12)
    assert law.var == pytest.approx(ppdmodel.latency_variance(d=40, d_bar=20, ell=ell, p=p_t))


def test_sizes_beyond_the_limits_are_refused_naming_the_limit():
    with pytest.raises(ValueError, match=rf"^ell must be <= {MAX_LAW_ELL}"):
        ppdmodel.latency_distribution(d=40, d_bar=20, ell=10**9, p=0.5)  # was 7 GiB
    with pytest.raises(ValueError, match=rf"^n must be <= {MAX_SAMPLES}"):
        ppdmodel.sample_runs(ell=16, p=0.5, n=10**12)
    with pytest.raises(ValueError, match=rf"n \* \(ell - 1\) must be <= {MAX_DRAWS}"):
        ppdmodel.sample_runs(ell=1001, p=np.full(1000, 0.5), n=MAX_SAMPLES)


def test_non_finite_times_are_refused():
    good = dict(d=40, d_bar=20, ell=16, p=0.5, seconds_per_layer=1e-3)
    for name in ("seconds_per_layer", "per_token_overhead_s", "per_handoff_overhead_s"):
        for bad in (float("inf"), np.array([1.0, np.inf]), float("nan")):
            with pytest.raises(ValueError, match=rf"^{name} must be a finite number"):
                ppdmodel.expected_latency_seconds(**{**good, name: bad})


def test_booleans_and_mis_shaped_arrays_are_refused():
    with pytest.raises(ValueError, match=r"^p must be a real number"):
        ppdmodel.expected_latency(d=40, d_bar=20, ell=16, p=True)
    with pytest.raises(ValueError, match=r"^per_position must be True, False or None"):
        ppdmodel.expected_latency(d=40, d_bar=20, ell=16, p=0.5, per_position="yes")
    with pytest.raises(ValueError, match=r"must broadcast together.*d \(2,\).*p \(3,\)"):
        ppdmodel.expected_latency(d=[40, 40], d_bar=20, ell=16, p=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match=r"^p must be a real number"):
        ppdmodel.expected_latency(d=40, d_bar=20, ell=16, p=[[0.1], [0.2, 0.3]])


def test_tradeoff_and_paper_helpers_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"table is missing columns \['p_correct'\]"):
        ppdmodel.tradeoff_curves(table=paper.TABLE2.drop(columns="p_correct"))
    with pytest.raises(ValueError, match=r"table must be a pandas DataFrame"):
        ppdmodel.tradeoff_curves(table={"layer": [20]})
    with pytest.raises(ValueError, match=r"layer must be one of the table's layers"):
        ppdmodel.tradeoff_curves(table=paper.TABLE2.iloc[:0])
    text = paper.TABLE2.assign(p_correct="high")
    with pytest.raises(ValueError, match=r"^table column 'p_correct' must hold numbers"):
        ppdmodel.tradeoff_curves(table=text)
    with pytest.raises(ValueError, match=r"curves is missing columns"):
        ppdmodel.plot_tradeoff(pd.DataFrame({"x": [1]}))
    with pytest.raises(ValueError, match=r"curves must hold at least one row"):
        ppdmodel.plot_tradeoff(ppdmodel.tradeoff_curves().iloc[:0])
    with pytest.raises(ValueError, match=r"table column 'dataset' must hold dataset names"):
        ppdmodel.tradeoff_curves(table=paper.TABLE2.assign(dataset=np.nan))  # InvalidIndexError
    with pytest.raises(ValueError, match=r"^dataset must be one of"):
        paper.p_correct(dataset=3, k=1, trained=True, layer=20)
    with pytest.raises(ValueError, match=r"^trained must be True or False"):
        paper.p_correct(dataset="squad", k=1, trained="yes", layer=20)
    with pytest.raises(ValueError, match=r"^k must be one of 1, 3, 5"):
        paper.per_position_p(dataset="squad", k=[1], trained=True, layer=20)


@pytest.mark.parametrize(
    ("d", "match"),
    [
        (-3, r"^d must be a positive integer \(>= 1\), got -3"),  # was negative seconds
        (float("nan"), r"^d must be a positive integer \(>= 1\), got nan"),  # was NaN
        (0, r"^d must be a positive integer"),
        (np.array([30, 40, 50]), r"^d, costs must broadcast together"),
    ],
)
def test_grid_greedy_token_seconds_checks_d(d, match):
    """Issue 47: ``DecodeCostsGrid.greedy_token_seconds`` checks ``d`` as ``DecodeCosts``'s
    does."""
    grid = ppdmodel.DecodeCostsGrid(layer_s=[1e-3, 2e-3], candidate_layer_s=1.5e-3)
    with pytest.raises(ValueError, match=match):
        grid.greedy_token_seconds(d)
    assert grid.greedy_token_seconds(np.array([30, 40])) == pytest.approx([0.03, 0.08])
