"""Seeded, vectorised Monte Carlo of the PPD run model, for checking the closed form.

The number of runs N is drawn directly: for an i.i.d. match rate N - 1 ~ Bin(ell - 1, 1 - p)
(one binomial draw per generation); for per-position p_t every token t = 2..ell gets its own
Bernoulli draw, in row chunks so memory stays bounded. Latency T = d_bar*ell + (d - d_bar)*N.
Sizes are limited (``MAX_SAMPLES`` generations, ``MAX_DRAWS`` per-position draws) so that a
call ends within seconds and its output fits in memory.
"""

from __future__ import annotations

import numpy as np

from ppdmodel.theorem import _is_per_position, validate_theorem_args
from ppdmodel.validation import check_limit, check_positive_int, check_probability, check_seed

CHUNK_DRAWS = 1 << 22
"""Bernoulli draws per chunk for per-position p (about 16 MiB of float32 uniforms)."""
MAX_SAMPLES = 10**7
"""Largest n: 10^7 generations are 80 MB of int64 and take about a second."""
MAX_DRAWS = 10**9
"""Largest n * (ell - 1) for per-position p: about 3 s of float32 uniforms in chunks."""


def _per_position_failures(p_t: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Failed early predictions per generation, one Bernoulli(1 - p_t) per token t."""
    p_t = p_t.astype(np.float32)
    rows = max(1, CHUNK_DRAWS // max(1, p_t.size))
    out = np.empty(n, dtype=np.int64)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        u = rng.random((stop - start, p_t.size), dtype=np.float32)
        out[start:stop] = np.count_nonzero(u >= p_t, axis=1)  # u >= p_t: a miss
    return out


def sample_runs(*, ell, p, n, seed=None, per_position: bool | None = None) -> np.ndarray:
    """Draw n values of N (runs per generation of ell tokens), seeded; int64 array of shape (n,).

    ``p`` is an i.i.d. match rate (scalar) or per-position p_t for t = 2..ell.
    """
    n = check_positive_int("n", n, limit=MAX_SAMPLES)
    ell = check_positive_int("ell", ell)
    p = check_probability("p", p)
    if np.ndim(ell) != 0 or np.ndim(n) != 0:
        raise ValueError("ell and n must be scalars for sample_runs")
    rng = np.random.default_rng(check_seed("seed", seed))
    if _is_per_position(ell, p, per_position):
        if np.ndim(p) != 1:
            raise ValueError("p must be one-dimensional (t = 2..ell) for sample_runs")
        draws = n * (ell - 1)
        check_limit("n * (ell - 1)", draws, MAX_DRAWS, "per-position Bernoulli draws")
        return 1 + _per_position_failures(np.asarray(p, dtype=float), int(n), rng)
    if np.ndim(p) != 0:
        raise ValueError("p must be a scalar (or per-position, ell - 1 values) for sample_runs")
    return 1 + rng.binomial(int(ell) - 1, 1.0 - float(p), size=int(n))


def sample_latency(*, d, d_bar, ell, p, n, seed=None, per_position: bool | None = None):
    """Draw n latencies T = d_bar*ell + (d - d_bar)*N in time units, seeded.

    Scalar d, d_bar, ell; ``p`` scalar (i.i.d.) or per-position (ell - 1 values). float64.
    """
    d, d_bar, ell, p = validate_theorem_args(d, d_bar, ell, p, per_position)
    if np.ndim(d) != 0 or np.ndim(d_bar) != 0:
        raise ValueError("d and d_bar must be scalars for sample_latency")
    runs = sample_runs(ell=ell, p=p, n=n, seed=seed, per_position=per_position)
    return d_bar * ell + (d - d_bar) * runs
