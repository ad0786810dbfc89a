"""Invalid input raises ValueError naming the parameter and the allowed range."""

import numpy as np
import pytest

import ppdmodel

GOOD = {"d": 40, "d_bar": 20, "ell": 128, "p": 0.5}


def _call(func, **override):
    kwargs = {**GOOD, **override}
    if func in (ppdmodel.expected_compute,):
        kwargs.setdefault("k", 3)
    return func(**kwargs)


THEOREM_FUNCS = [
    ppdmodel.expected_latency,
    ppdmodel.expected_compute,
    ppdmodel.latency_variance,
    ppdmodel.latency_distribution,
]


@pytest.mark.parametrize("func", THEOREM_FUNCS)
@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"p": 1.5}, r"p must be a probability in \[0, 1\]"),
        ({"p": -0.1}, r"p must be a probability in \[0, 1\]"),
        ({"p": float("nan")}, r"p must be a probability in \[0, 1\], got nan"),
        ({"p": np.array([0.2, np.nan, 0.3])}, r"p must be a probability .*NaN"),
        ({"d": 0}, r"d must be a positive integer \(>= 1\)"),
        ({"d": -40}, r"d must be a positive integer"),
        ({"d": 40.5, "d_bar": 21}, r"d must be a positive integer"),
        ({"ell": 0}, r"ell must be a positive integer"),
        ({"ell": 2.5}, r"ell must be a positive integer"),
        ({"ell": float("inf")}, r"ell must be a positive integer"),
        ({"d_bar": 19}, r"outside Theorem 4.1's domain"),
        ({"d_bar": 10}, r"d_bar=10 is below d/2"),
        ({"d_bar": 40}, r"d_bar must satisfy d/2 <= d_bar < d"),
        ({"d_bar": np.array([20, 45])}, r"d_bar must satisfy d/2 <= d_bar < d"),
        ({"d_bar": np.array([20, 5])}, r"outside Theorem 4.1's domain"),
        ({"d_bar": float("nan")}, r"d_bar must be a finite number"),
        ({"p": "half"}, r"p must be a real number"),
    ],
)
def test_theorem_functions_reject(func, override, match):
    with pytest.raises(ValueError, match=match):
        _call(func, **override)


@pytest.mark.parametrize("k", [0, -1, 2.5, np.array([1, 0])])
def test_k_must_be_positive_integer(k):
    with pytest.raises(ValueError, match=r"k must be a positive integer"):
        ppdmodel.expected_compute(**GOOD, k=k)
    with pytest.raises(ValueError, match=r"k must be a positive integer"):
        ppdmodel.compute_per_time(d=40, p=0.5, k=k)
    with pytest.raises(ValueError, match=r"k must be a positive integer"):
        ppdmodel.compute_per_token(d=40, p=0.5, k=k)


@pytest.mark.parametrize(
    "func", [ppdmodel.latency_per_token, ppdmodel.compute_per_time, ppdmodel.compute_per_token]
)
def test_asymptotic_functions_reject(func):
    extra = {} if func is ppdmodel.latency_per_token else {"k": 1}
    with pytest.raises(ValueError, match=r"p must be a probability"):
        func(d=40, p=2.0, **extra)
    with pytest.raises(ValueError, match=r"outside Theorem 4.1's domain"):
        func(d=40, d_bar=15, p=0.5, **extra)
    with pytest.raises(ValueError, match=r"d must be a positive integer"):
        func(d=0, p=0.5, **extra)


def test_seconds_reject_bad_times():
    with pytest.raises(ValueError, match=r"seconds_per_layer must be a finite number > 0"):
        ppdmodel.expected_latency_seconds(**GOOD, seconds_per_layer=0.0)
    with pytest.raises(ValueError, match=r"per_token_overhead_s must be a finite number >= 0"):
        ppdmodel.expected_latency_seconds(**GOOD, seconds_per_layer=1e-3, per_token_overhead_s=-1)
    with pytest.raises(ValueError, match=r"per_handoff_overhead_s must be a finite number >= 0"):
        ppdmodel.expected_latency_seconds(
            **GOOD, seconds_per_layer=1e-3, per_handoff_overhead_s=float("nan")
        )


def test_integer_valued_floats_and_arrays_are_accepted():
    assert ppdmodel.expected_latency(d=40.0, d_bar=20.0, ell=128.0, p=0.5) == 3850.0
    out = ppdmodel.expected_latency(d=np.array([40, 80]), d_bar=np.array([20, 40]), ell=16, p=0)
    np.testing.assert_array_equal(out, [640, 1280])


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"ell": 0}, r"ell must be a positive integer"),
        ({"ell": 2.5}, r"ell must be a positive integer"),
        ({"ell": float("nan")}, r"ell must be a positive integer"),
        ({"p": 1.5}, r"p must be a probability in \[0, 1\]"),
        ({"p": float("nan")}, r"p must be a probability in \[0, 1\]"),
        ({"p": "half"}, r"p must be a real number"),
        ({"n": 0}, r"n must be a positive integer"),
    ],
)
def test_sample_runs_rejects(override, match):
    with pytest.raises(ValueError, match=match):
        ppdmodel.sample_runs(**{"ell": 16, "p": 0.5, "n": 10, "seed": 0, **override})


def test_quantile_rejects_bad_q():
    law = ppdmodel.latency_distribution(**GOOD)
    with pytest.raises(ValueError, match=r"q must be a probability"):
        law.quantile(1.2)
