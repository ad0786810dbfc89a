"""The sympy derivation simplifies to the printed theorem and agrees with the numeric code."""

import itertools

import numpy as np
import pytest
import sympy as sp

import ppdmodel
from ppdmodel import symbolic as S


@pytest.mark.parametrize(
    ("derived", "printed"),
    [
        (S.EXPECTED_LATENCY, S.THEOREM_LATENCY),
        (S.EXPECTED_COMPUTE, S.THEOREM_COMPUTE),
        (S.LATENCY_VARIANCE, S.PRINTED_VARIANCE),
    ],
)
def test_derivation_simplifies_to_printed_theorem(derived, printed):
    assert sp.simplify(derived - printed) == 0


@pytest.mark.parametrize(
    ("derived", "printed"),
    [(S.LATENCY_PER_TOKEN, S.EQ3), (S.COMPUTE_PER_TIME, S.EQ5), (S.COMPUTE_PER_TOKEN, S.EQ6)],
)
def test_limits_at_half_depth_are_the_papers_equations(derived, printed):
    assert sp.simplify(S.at_half_depth(derived) - printed) == 0


def _grid():
    d, frac, ell, p, k = zip(
        *itertools.product([2, 40, 80], [0.5, 0.75, 0.95], [1, 16, 128], [0, 0.3, 1], [1, 3]),
        strict=True,
    )
    d = np.array(d)
    d_bar = np.floor(d * np.array(frac))  # an integer layer in [d/2, d): 1.5 is not a layer
    return d, d_bar, np.array(ell), np.array(p, dtype=float), np.array(k)


def test_lambdified_equals_numeric_on_grid():
    d, d_bar, ell, p, k = _grid()
    args = (d, d_bar, ell, p, k)
    np.testing.assert_allclose(
        S.lambdified(S.EXPECTED_LATENCY)(*args),
        ppdmodel.expected_latency(d=d, d_bar=d_bar, ell=ell, p=p),
    )
    np.testing.assert_allclose(
        S.lambdified(S.EXPECTED_COMPUTE)(*args),
        ppdmodel.expected_compute(d=d, d_bar=d_bar, ell=ell, p=p, k=k),
    )
    np.testing.assert_allclose(
        S.lambdified(S.LATENCY_VARIANCE)(*args),
        ppdmodel.latency_variance(d=d, d_bar=d_bar, ell=ell, p=p),
        atol=1e-9,
    )
    np.testing.assert_allclose(
        S.lambdified(S.LATENCY_PER_TOKEN)(*args),
        ppdmodel.latency_per_token(d=d, d_bar=d_bar, p=p),
    )
    np.testing.assert_allclose(
        S.lambdified(S.COMPUTE_PER_TIME)(*args),
        ppdmodel.compute_per_time(d=d, d_bar=d_bar, p=p, k=k),
    )
    np.testing.assert_allclose(
        S.lambdified(S.COMPUTE_PER_TOKEN)(*args),
        ppdmodel.compute_per_token(d=d, d_bar=d_bar, p=p, k=k),
    )
