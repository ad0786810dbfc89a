"""FREE's adaptive threshold (Bae et al., EMNLP 2023, section 5.3, Eq. 2-4, Algorithm 1).

Synchronized parallel decoding yields, as a by-product of every deep pass, pairs
(c_i, gamma_i): the exit head's top probability c_i of a token at the shallow layer L_s and
gamma_i = I(shallow prediction == deep prediction). The two classes k = 1 (agree) and k = 0
(disagree) are each modelled by a Beta distribution fitted by moments (Eq. 2, 3):

    alpha_k = c_k (c_k (1 - c_k) / s_k^2 - 1),   beta_k = alpha_k (1 - c_k) / c_k

with c_k, s_k^2 the mean and variance of the confidences of class k. With priors
p(k = 1) = p(k = 0) = 0.5 the posterior of agreement at confidence lambda is (Eq. 4)

    p(k = 1 | lambda) = f_1(lambda) / (f_1(lambda) + f_0(lambda)),

and the threshold is where the posterior reaches zeta (0.4 in the paper): the smallest
lambda on a grid over (0, 1) from which the posterior stays >= zeta up to 1. (The paper's
argmin over all lambda with posterior >= zeta; the two agree whenever the posterior rises
monotonically, and ours ignores a spurious low-confidence region where a U-shaped Beta fit
exceeds zeta near 0.) Numpy and scipy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Real

import numpy as np
from scipy import stats

from ppdmodel.validation import check_choice, is_finite

INITIAL_THRESHOLD = 0.9
"""lambda_c^0 of Algorithm 1 (the paper's appendix: 0.9)."""
ZETA = 0.4
"""Posterior condition zeta (the paper: 0.4 with balanced priors)."""
PRIOR_AGREE = 0.5
"""p(k = 1), fixed to 0.5 for balance (section 5.3)."""
CLIP = 1e-6
"""Confidences are clipped to [CLIP, 1 - CLIP] before fitting (a softmax can saturate to 1)."""
GRID = np.linspace(1e-4, 1 - 1e-4, 9999)
"""Candidate thresholds searched for the posterior crossing."""
MIN_SAMPLES = 2
"""Samples each class needs before a fit (a variance needs two)."""


@dataclass(frozen=True)
class BetaFit:
    """A Beta(alpha, beta) distribution fitted by moments (Eq. 2)."""

    alpha: float
    beta: float

    def pdf(self, x) -> np.ndarray:
        """Density at x in (0, 1)."""
        return stats.beta.pdf(x, self.alpha, self.beta)


def fit_beta(samples) -> BetaFit | None:
    """Moment fit of Eq. 2-3 to samples in [0, 1]; None when it is undefined (fewer than
    MIN_SAMPLES, zero variance, or a variance no Beta can have)."""
    x = np.clip(np.asarray(samples, dtype=float).ravel(), CLIP, 1 - CLIP)
    if x.size < MIN_SAMPLES:
        return None
    mean, var = float(x.mean()), float(x.var())
    if not (var > 0 and var < mean * (1 - mean)):
        return None
    alpha = mean * (mean * (1 - mean) / var - 1)
    return BetaFit(alpha=alpha, beta=alpha * (1 - mean) / mean)


@dataclass(frozen=True)
class BetaMixture:
    """The two-class Beta mixture of section 5.3: agree (k = 1) and disagree (k = 0)."""

    agree: BetaFit
    disagree: BetaFit
    prior_agree: float = PRIOR_AGREE

    def posterior_agree(self, x) -> np.ndarray:
        """p(k = 1 | x) of Eq. 4."""
        f1 = self.prior_agree * self.agree.pdf(x)
        f0 = (1 - self.prior_agree) * self.disagree.pdf(x)
        with np.errstate(invalid="ignore", divide="ignore"):
            post = f1 / (f1 + f0)
        return np.where(np.isfinite(post), post, 0.5)

    def threshold(self, zeta: float = ZETA) -> float:
        """Smallest grid lambda from which p(k = 1 | lambda) >= zeta up to 1 (module
        docstring); 1.0 (never exit) when the posterior is below zeta at the top."""
        ok = self.posterior_agree(GRID) >= zeta
        if not ok[-1]:
            return 1.0
        below = np.flatnonzero(~ok)
        first = 0 if below.size == 0 else int(below[-1]) + 1
        return float(GRID[first])


def fit_bmm(confidences, agree) -> BetaMixture | None:
    """Fit both classes from pairs (c_i, gamma_i); None if either class cannot be fitted."""
    c = np.asarray(confidences, dtype=float).ravel()
    g = np.asarray(agree, dtype=bool).ravel()
    if c.shape != g.shape:
        raise ValueError(f"confidences and agree differ in length: {c.size} != {g.size}")
    one, zero = fit_beta(c[g]), fit_beta(c[~g])
    if one is None or zero is None:
        return None
    return BetaMixture(agree=one, disagree=zero)


REFITS = ("sentence", "pass")


@dataclass
class AdaptiveThreshold:
    """Algorithm 1: a threshold refitted from the pairs of the first sentences, then frozen.

    Pass one instance to successive ``free_generate(..., threshold="auto", estimator=...)``
    calls: sentences t = 1..T (``calibration_sentences``) add their pairs to D_c and refit,
    after each sentence (``refit="sentence"``, the paper) or after each deep pass
    (``refit="pass"``, so that a single call adapts); later sentences use the settled value.
    """

    initial: float = INITIAL_THRESHOLD
    """lambda_c^0."""
    zeta: float = ZETA
    """Posterior condition."""
    calibration_sentences: int = 1
    """T: sentences whose pairs calibrate (the paper: 3 % of the data set)."""
    refit: str = "sentence"
    """When to refit while calibrating: after each "sentence" or each deep "pass"."""
    threshold: float = field(init=False)
    """The current lambda_c."""
    confidences: list[float] = field(default_factory=list, init=False)
    agree: list[bool] = field(default_factory=list, init=False)
    sentences: int = field(default=0, init=False)
    """Sentences observed so far."""
    history: list[float] = field(default_factory=list, init=False)
    """Threshold after each calibration sentence."""
    mixture: BetaMixture | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        for name in ("initial", "zeta"):
            value = getattr(self, name)
            if not (_is_real(value) and 0 <= value <= 1):
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        n = self.calibration_sentences
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
            raise ValueError(f"calibration_sentences must be an integer >= 1, got {n!r}")
        check_choice("refit", self.refit, REFITS)
        self.threshold = float(self.initial)

    @property
    def calibrating(self) -> bool:
        """True while sentences t <= T are being generated (their pairs are collected)."""
        return self.sentences < self.calibration_sentences

    def observe(self, confidences, agree) -> None:
        """Add pairs of one deep pass to D_c (ignored once calibrated); refit per pass."""
        if not self.calibrating:
            return
        self.confidences.extend(float(c) for c in confidences)
        self.agree.extend(bool(a) for a in agree)
        if self.refit == "pass":
            self._refit()

    def end_sentence(self) -> None:
        """A sentence ended: refit (Algorithm 1, lines 6-7) and count it."""
        if not self.calibrating:
            return
        self._refit()
        self.sentences += 1
        self.history.append(self.threshold)

    def _refit(self) -> None:
        mixture = fit_bmm(self.confidences, self.agree)
        if mixture is not None:
            self.mixture = mixture
            self.threshold = mixture.threshold(self.zeta)


def _is_real(value) -> bool:
    """A real number (numpy scalars included), not a boolean."""
    return isinstance(value, Real) and not isinstance(value, bool)


def check_threshold(threshold) -> float | str:
    """A number in [0, inf) (above 1: never exit) or "auto"; else ValueError naming it."""
    if isinstance(threshold, str) and threshold == "auto":
        return threshold
    if not (_is_real(threshold) and is_finite(threshold) and threshold >= 0):
        raise ValueError(
            f"threshold must be a number >= 0 (above 1: never exit) or 'auto', got {threshold!r}"
        )
    return float(threshold)
