"""How far two or more validations of the same configurations may disagree by chance alone.

Issue 24 asks that a repeated validation reproduce each configuration's error within 5
percentage points and the median |error| within 2. A run's error is predicted / measured - 1,
and both sides are estimates: the measured speed-up is read from its turns
(``measure.eval.turn_speedup``), the predicted one has the interval of the profile's cost
replicates (``measure.eval.predict.speedup_interval``). Two runs of a perfectly reproducible
procedure still differ by the noise of both; if that noise alone often moves a row by more
than 5 points, a larger change says nothing about the procedure, and more rounds are the only
way to test the bound.

The measured side's noise is taken from the turns (``turn_noise``), not from the turns'
interval: repeated validations decode the same prompts, so how much prompts differ from one
another (a prompt whose prediction is 5 % off stays 5 % off) widens the interval but does not
move the estimate between runs. Each turn's log error less its prompt's mean over the rounds
leaves the noise that does; pooled over the prompts, s_w / sqrt(turns) is the standard
deviation of the run's estimate (its mean; the Hodges-Lehmann estimate the runs report is
within a few per cent of its efficiency). All rows' turns share greedy's run of the same turn,
so their noise is correlated; ``turn_noise`` also returns the rows' correlation.

``noise_allowance`` takes each row's error in every run with the measured and predicted
log-scale standard deviations and asks, by Monte Carlo, how much the rows' errors and the runs'
median |error| move when every run draws its errors about one common centre per row (the
inverse-variance mean of the row's runs): measured noise correlated across rows as the turns
say, the profile's independent per row (a simplification: rows priced from one profile share
greedy's price). It gives the ``level`` quantile of each row's change (largest minus smallest
error over the runs) and of the median's spread. ``rounds_to_hold`` scales the measured part
as 1 / sqrt(rounds) and finds the rounds per run at which a row's change falls under a bound;
the predicted part does not shrink with rounds (it is the profile's), so a row whose profile
spread alone reaches the bound gets None. Neither covers the machine's speed moving between
runs beyond what each run's turns and profile saw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
import pandas as pd

from ppdmodel.intervals import LEVEL, check_level
from ppdmodel.validation import as_int, as_real

DRAWS = 20_000
"""Monte Carlo draws of the runs under the null of one centre per row (the 95 % quantile's
relative error is then about 0.7 %)."""


def log_sd_of(low, high, coverage) -> np.ndarray:
    """The log-scale standard deviation a normal law would need to give the interval
    [low, high] of ``coverage`` (elementwise, ``coverage`` broadcast); NaN where the interval
    is missing, of no coverage or not positive and finite."""
    low, high = (np.asarray(v, dtype=float) for v in (low, high))
    if low.shape != high.shape:
        raise ValueError(f"low and high must have one shape, got {low.shape} and {high.shape}")
    coverage = np.broadcast_to(np.asarray(coverage, dtype=float), low.shape)
    ok = np.isfinite(low) & np.isfinite(high) & (low > 0) & (high >= low)
    ok &= np.isfinite(coverage) & (coverage > 0) & (coverage < 1)
    z = np.full(low.shape, np.nan)
    z[ok] = [NormalDist().inv_cdf((1 + c) / 2) for c in coverage[ok]]
    sd = np.full(low.shape, np.nan)
    sd[ok] = (np.log(high[ok]) - np.log(low[ok])) / (2 * z[ok])
    return sd


def turn_noise(table) -> tuple[pd.Series, pd.DataFrame]:
    """(sd, correlation) of one run's turn table (``turns.csv``: ``method``, ``round``,
    ``prompt``, ``seconds``, ``greedy_seconds``, ``predicted_ratio``): per method the standard
    deviation of its mean log error over the turns with each prompt's own mean removed (module
    docstring; NaN for a method with fewer turns than two per prompt), and the methods'
    correlation of those within-prompt residuals, turn by turn."""
    table = pd.DataFrame(table)
    missing = {"method", "round", "prompt", "seconds", "greedy_seconds", "predicted_ratio"}
    missing -= set(table)
    if missing:
        raise ValueError(f"table lacks the turn columns {sorted(missing)}")
    ok = (table["seconds"] > 0) & (table["greedy_seconds"] > 0) & (table["predicted_ratio"] > 0)
    table = table[ok].assign(
        err=np.log(table["greedy_seconds"] / table["seconds"] / table["predicted_ratio"])
    )
    table = table.assign(
        resid=table["err"] - table.groupby(["method", "prompt"])["err"].transform("mean")
    )
    sd = {}
    for method, rows in table.groupby("method", sort=False):
        n, prompts = len(rows), rows["prompt"].nunique()
        dof = n - prompts
        sd[method] = math.sqrt((rows["resid"] ** 2).sum() / dof / n) if dof > 0 else math.nan
    wide = table.pivot_table(index=["round", "prompt"], columns="method", values="resid",
                             aggfunc="first")  # fmt: skip
    return pd.Series(sd), wide.corr()


def correlation_of(correlation: pd.DataFrame, labels) -> np.ndarray:
    """``turn_noise``'s correlation for the rows ``labels``, in that order, as the matrix
    ``noise_allowance`` takes: a pair it could not estimate (a row missing, or no spread)
    counts as uncorrelated, every row with itself as 1."""
    if not isinstance(correlation, pd.DataFrame) or list(correlation.index) != list(
        correlation.columns
    ):
        raise ValueError(f"correlation must be a square DataFrame labelled alike on both axes "
                         f"(turn_noise's), got {type(correlation).__name__}")  # fmt: skip
    labels = list(labels)
    matrix = np.array(correlation.reindex(index=labels, columns=labels), dtype=float)
    matrix[~np.isfinite(matrix)] = 0.0
    np.fill_diagonal(matrix, 1.0)
    return matrix


@dataclass(frozen=True)
class Allowance:
    """What chance alone lets the runs differ by, in percentage points, at ``level``."""

    rows: np.ndarray
    """Per row: the change (largest minus smallest error over the runs) that chance exceeds
    with probability 1 - level."""
    median: float
    """The spread of the runs' median |error| that chance exceeds with probability
    1 - level."""
    level: float


def _checked(name: str, values, *, runs: int | None = None) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 2:
        raise ValueError(f"{name} must hold at least 2 runs (a (rows, runs) array, or one row's "
                         f"runs), got shape {np.shape(values)}")  # fmt: skip
    if runs is not None and array.shape[1] != runs:
        raise ValueError(f"{name} must hold {runs} runs, got {array.shape[1]}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite, got {array!r}")
    return array


def _sds(name: str, values, shape) -> np.ndarray:
    try:
        array = np.broadcast_to(np.asarray(values, dtype=float), shape)
    except ValueError:
        raise ValueError(f"{name} must have the shape {shape} (or broadcast to it), got "
                         f"{np.shape(values)}") from None  # fmt: skip
    if not np.all(np.isfinite(array) & (array >= 0)):
        raise ValueError(f"{name} must be finite and >= 0, got {values!r}")
    return array


def _cholesky(correlation, rows: int) -> np.ndarray:
    """A lower factor of ``correlation`` (rows x rows), nearest positive semi-definite; the
    identity for None."""
    if correlation is None:
        return np.eye(rows)
    c = np.asarray(correlation, dtype=float)
    if c.shape != (rows, rows) or not np.all(np.isfinite(c)) or not np.allclose(c, c.T):
        raise ValueError(f"correlation must be a finite symmetric {rows} x {rows} matrix, got "
                         f"{c!r}")  # fmt: skip
    values, vectors = np.linalg.eigh(c)
    factor = vectors * np.sqrt(np.clip(values, 0, None))
    scale = np.sqrt((factor**2).sum(axis=1, keepdims=True))  # unit variances again
    return np.divide(factor, scale, out=np.zeros_like(factor), where=scale > 0)


def noise_allowance(
    log_errors, measured_sds, predicted_sds=0.0, *, correlation=None,
    level: float = LEVEL, draws: int = DRAWS, seed: int = 0,
) -> Allowance:  # fmt: skip
    """The ``Allowance`` of runs whose rows' log errors (log of predicted / measured) are
    ``log_errors``, (rows, runs), with measured and predicted standard deviations of that shape
    (or broadcast to it); ``correlation``, rows x rows, the measured noise's across rows (None:
    independent). Module docstring."""
    log_errors = _checked("log_errors", log_errors)
    measured = _sds("measured_sds", measured_sds, log_errors.shape)
    predicted = _sds("predicted_sds", predicted_sds, log_errors.shape)
    level = check_level(level)
    draws = as_int("draws", draws, minimum=100)
    seed = as_int("seed", seed, minimum=0)
    rows, runs = log_errors.shape
    factor = _cholesky(correlation, rows)
    total = measured**2 + predicted**2
    weights = 1 / np.maximum(total, 1e-24)
    centre = (weights * log_errors).sum(axis=1, keepdims=True) / weights.sum(axis=1, keepdims=True)
    rng = np.random.default_rng(seed)
    shared = np.einsum("ij,drj->dir", factor, rng.standard_normal((draws, runs, rows)))
    own = rng.standard_normal((draws, rows, runs))
    points = 100 * np.expm1(centre + measured * shared + predicted * own)
    changes = points.max(axis=2) - points.min(axis=2)
    medians = np.median(np.abs(points), axis=1)
    spread = medians.max(axis=1) - medians.min(axis=1)
    return Allowance(np.quantile(changes, level, axis=0), float(np.quantile(spread, level)),
                     level)  # fmt: skip


def rounds_to_hold(
    bound: float, rounds, measured_sds, predicted_sds, *,
    level: float = LEVEL, draws: int = DRAWS, seed: int = 0,
) -> int | None:  # fmt: skip
    """Rounds per run at which one row's change allowance (``noise_allowance``) falls to
    ``bound`` points, each run's measured log-sd (``measured_sds``, taken over ``rounds``
    rounds: one count, or one per run) shrinking as 1 / sqrt(rounds) and the predicted ones
    staying; at least 1; None where the predicted spread alone reaches the bound."""
    bound = as_real("bound", bound, strict=True)
    measured = _checked("measured_sds", measured_sds)[0]
    predicted = _checked("predicted_sds", predicted_sds, runs=measured.size)[0]
    counts = np.ravel(np.asarray(rounds, dtype=object))
    if counts.size not in (1, measured.size):
        raise ValueError(f"rounds must be one count or one per run ({measured.size}), got "
                         f"{rounds!r}")  # fmt: skip
    taken = np.array([as_int("rounds", r) for r in counts], dtype=float)
    if np.any(measured < 0) or np.any(predicted < 0):
        raise ValueError(f"measured_sds and predicted_sds must be >= 0, got {measured!r} and "
                         f"{predicted!r}")  # fmt: skip

    def allowance(r: float) -> float:
        sds = measured * np.sqrt(taken / r)
        return float(noise_allowance(np.zeros((1, measured.size)), sds, predicted, level=level,
                                     draws=draws, seed=seed).rows[0])  # fmt: skip

    if allowance(math.inf) >= bound:
        return None
    low, high = 0, 1
    while allowance(high) > bound:  # ends: the allowance tends to allowance(inf) < bound
        low, high = high, 2 * high
    while high - low > 1:  # allowance(low) > bound >= allowance(high)
        mid = (low + high) // 2
        low, high = (mid, high) if allowance(mid) > bound else (low, mid)
    return high
