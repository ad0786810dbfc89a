"""Benchmark ppdmodel: closed form via the API vs raw numpy, and Monte Carlo tokens per second.

Run on one core:  OMP_NUM_THREADS=1 python benchmarks/bench_ppdmodel.py
Targets: the API (validation included) within 2x of the same expression in raw numpy over a
10^6-point grid; the vectorised Monte Carlo at >= 5e7 simulated tokens per second.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ppdmodel

GRID_POINTS = 10**6


def best_time(func, repeats: int) -> float:
    """Best wall time of ``repeats`` calls after one warm-up call, in seconds."""
    func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def make_grids(rng: np.random.Generator) -> dict:
    """Two 10^6-point grids: every parameter varying, and p varying at fixed d, d_bar, ell."""
    d = rng.integers(2, 129, GRID_POINTS)
    flat = {
        "d": d,
        "d_bar": d - rng.integers(1, d // 2 + 1),  # d/2 <= d_bar < d
        "ell": rng.integers(1, 4097, GRID_POINTS),
        "p": rng.random(GRID_POINTS),
    }
    p_only = {"d": 40, "d_bar": 20, "ell": 128, "p": rng.random(GRID_POINTS)}
    return {"all four arrays": flat, "p array, scalar d/d_bar/ell": p_only}


def raw_latency(d, d_bar, ell, p):
    """Theorem 4.1 written directly in numpy, no checks (the baseline)."""
    return d * ell - (d - d_bar) * (ell - 1) * p


def bench_closed_form(repeats: int) -> None:
    """Print evaluations per second of expected_latency vs raw numpy on each grid."""
    for name, grid in make_grids(np.random.default_rng(0)).items():
        np.testing.assert_allclose(ppdmodel.expected_latency(**grid), raw_latency(**grid))
        t_api = best_time(lambda g=grid: ppdmodel.expected_latency(**g), repeats)
        t_raw = best_time(lambda g=grid: raw_latency(**g), repeats)
        print(
            f"closed form [{name}]: API {GRID_POINTS / t_api:.3e} eval/s, "
            f"raw numpy {GRID_POINTS / t_raw:.3e} eval/s, API/raw time ratio {t_api / t_raw:.2f} "
            f"(target <= 2)"
        )


def bench_monte_carlo(repeats: int) -> None:
    """Print simulated tokens per second of sample_latency, i.i.d. and per-position p."""
    ell, n = 128, 200_000
    cases = {
        "i.i.d. p (binomial N)": 0.5,
        "per-position p_t (Bernoulli per token)": np.linspace(0.2, 0.8, ell - 1),
    }
    for name, p in cases.items():
        n_case = n if np.ndim(p) == 0 else n // 4
        t = best_time(
            lambda p=p, m=n_case: ppdmodel.sample_latency(
                d=40, d_bar=20, ell=ell, p=p, n=m, seed=0
            ),
            repeats,
        )
        print(
            f"Monte Carlo [{name}]: {n_case * ell / t:.3e} simulated tokens/s "
            f"({n_case} generations x {ell} tokens in {t * 1e3:.1f} ms; target >= 5e7)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats (best is kept)")
    args = parser.parse_args()
    bench_closed_form(args.repeats)
    bench_monte_carlo(args.repeats)


if __name__ == "__main__":
    main()
