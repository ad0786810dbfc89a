"""FREE's Beta-mixture threshold (section 5.3): parameter recovery, the posterior crossing,
Algorithm 1's calibration; and ROUGE-L."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from measure.free.quality import lcs_length, rouge_l, token_agreement
from measure.free.threshold import AdaptiveThreshold, BetaFit, fit_beta, fit_bmm

N = 20_000
REL_TOL = 0.05
"""Moment estimates from 20,000 samples: relative error of alpha and beta well under 5 %
(their standard error is ~1-2 % at these parameters)."""


@pytest.mark.parametrize(("alpha", "beta"), [(5.0, 1.5), (1.2, 4.0), (2.0, 2.0), (0.7, 0.9)])
def test_fit_beta_recovers_parameters(alpha, beta):
    x = stats.beta.rvs(alpha, beta, size=N, random_state=np.random.default_rng(0))
    fit = fit_beta(x)
    assert fit.alpha == pytest.approx(alpha, rel=REL_TOL)
    assert fit.beta == pytest.approx(beta, rel=REL_TOL)


def test_bmm_recovers_both_classes_and_crossing():
    """Two known Betas, labelled as agree/disagree: both recovered; the threshold is where the
    true posterior (priors 0.5) crosses zeta, to 0.01."""
    rng = np.random.default_rng(1)
    agree_true, disagree_true = BetaFit(6.0, 1.5), BetaFit(1.5, 5.0)
    c = np.concatenate([
        stats.beta.rvs(6.0, 1.5, size=N, random_state=rng),
        stats.beta.rvs(1.5, 5.0, size=N // 4, random_state=rng),  # imbalanced classes
    ])  # fmt: skip
    g = np.r_[np.ones(N, bool), np.zeros(N // 4, bool)]
    bmm = fit_bmm(c, g)
    for fit, true in ((bmm.agree, agree_true), (bmm.disagree, disagree_true)):
        assert fit.alpha == pytest.approx(true.alpha, rel=REL_TOL)
        assert fit.beta == pytest.approx(true.beta, rel=REL_TOL)
    grid = np.linspace(0.01, 0.99, 9801)
    f1, f0 = agree_true.pdf(grid), disagree_true.pdf(grid)
    true_lambda = grid[np.argmax(f1 / (f1 + f0) >= 0.4)]
    assert bmm.threshold(0.4) == pytest.approx(true_lambda, abs=0.01)
    assert bmm.threshold(0.9) > bmm.threshold(0.4)


def test_fit_undefined_cases():
    assert fit_beta([0.5]) is None
    assert fit_beta([0.3, 0.3, 0.3]) is None
    assert fit_bmm([0.9, 0.8, 0.7], [True, True, True]) is None
    with pytest.raises(ValueError, match="length"):
        fit_bmm([0.1, 0.2], [True])


def test_adaptive_threshold_algorithm_1():
    rng = np.random.default_rng(2)
    est = AdaptiveThreshold(calibration_sentences=2)
    assert est.threshold == 0.9 and est.calibrating
    for _ in range(2):
        before = est.threshold
        est.observe(stats.beta.rvs(6, 1.5, size=200, random_state=rng), [True] * 200)
        est.observe(stats.beta.rvs(1.5, 5, size=50, random_state=rng), [False] * 50)
        assert est.threshold == before  # refit="sentence": only at the end of a sentence
        est.end_sentence()
    assert not est.calibrating and len(est.history) == 2
    settled = est.threshold
    assert 0.2 < settled < 0.6
    est.observe([0.99] * 10, [False] * 10)  # calibrated: ignored
    est.end_sentence()
    assert est.threshold == settled and len(est.confidences) == 500


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        (dict(initial=1.5), "initial"),
        (dict(zeta=-1), "zeta"),
        (dict(calibration_sentences=0), "calibration_sentences"),
        (dict(refit="token"), "refit"),
    ],
)
def test_adaptive_threshold_rejects(kwargs, name):
    with pytest.raises(ValueError, match=name):
        AdaptiveThreshold(**kwargs)


def test_rouge_l():
    assert lcs_length("ABCBDAB", "BDCABA") == 4
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == 1.0
    # LCS("a b c d", "a c d e") = 3: P = R = 3/4
    assert rouge_l("a b c d", "a c d e") == pytest.approx(0.75)
    assert rouge_l("x y", "a b") == 0.0
    assert rouge_l([1, 2, 3], [1, 3]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert rouge_l("", "") == 1.0 and rouge_l("", "a") == 0.0


def test_token_agreement():
    assert token_agreement([1, 2, 3], [1, 2, 3]) == 1.0
    assert token_agreement([1, 9, 3], [1, 2, 3]) == pytest.approx(2 / 3)
    assert token_agreement([1, 2], [1, 2, 3]) == pytest.approx(2 / 3)
