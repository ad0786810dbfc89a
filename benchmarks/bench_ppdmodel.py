"""Benchmark ppdmodel: closed form via the API vs raw numpy, and Monte Carlo tokens per second.

Run on one core:  OMP_NUM_THREADS=1 python benchmarks/bench_ppdmodel.py
Targets: the API (validation included) within 2x of the same expression in raw numpy over a
10^6-point grid, for Theorem 4.1 and for the seconds-level closed form under DecodeCosts
(both early-head placements, separate and shared device); the vectorised Monte Carlo at
>= 5e7 simulated tokens per second.
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


SECONDS_COSTS = {
    # SmolLM2-135M-like magnitudes on a CPU (issue 11): ~1 ms a layer, the LM head ~5 layers
    "separate devices": ppdmodel.DecodeCosts(
        layer_s=1e-3,
        candidate_extra_row_layer_s=2e-4,
        embedding_s=5e-5,
        early_head_s=5e-3,
        final_head_s=5e-3,
        candidate_dispatch_s=1.3e-3,
        hidden_dispatch_s=1.4e-3,
        handoff_s=1.5e-3,
        host_s=1e-3,
    ),  # fmt: skip
    "one shared device": ppdmodel.DecodeCosts(
        layer_s=1e-3,
        candidate_extra_row_layer_s=2e-4,
        early_head_s=5e-3,
        final_head_s=5e-3,
        host_s=1e-3,
        shared_device_slowdown=1.25,
    ),  # fmt: skip
}


def raw_latency_seconds(d, d_bar, ell, p, k, costs, early_head):
    """E[T] = ell B - (ell - 1) p S of ppdmodel.passes written directly in numpy, no checks."""
    c = costs
    on_main = early_head == "main"
    gap = d - d_bar
    delta = c.candidate_dispatch_s if on_main else c.hidden_dispatch_s
    work_main = gap * c.layer_s + c.final_head_s
    layer_k = c.layer_s + (k - 1) * c.candidate_extra_row_layer_s
    work_cand = c.embedding_s + (0.0 if on_main else c.early_head_s) + gap * layer_k
    overlap = np.minimum(np.maximum(work_main - delta, 0.0), work_cand)
    end_main = work_main + (c.shared_device_slowdown - 1) * overlap
    head = c.early_head_s if on_main else 0.0
    miss_only = c.embedding_s + head + d_bar * c.layer_s + end_main + c.host_s
    wait = np.maximum(delta + work_cand - work_main - c.host_s, 0.0)
    saving = c.embedding_s + gap * c.layer_s - wait - c.handoff_s
    return ell * miss_only - (ell - 1) * p * saving


def bench_seconds_closed_form(repeats: int) -> None:
    """Print expected_latency_seconds vs the same expression in raw numpy on the full grid."""
    grid = make_grids(np.random.default_rng(1))["all four arrays"]
    grid["k"] = np.random.default_rng(2).integers(1, 9, GRID_POINTS)
    for name, costs in SECONDS_COSTS.items():
        for early_head in ("main", "candidates"):
            args = dict(grid, costs=costs, early_head=early_head)
            api = ppdmodel.expected_latency_seconds(**args)
            np.testing.assert_allclose(api, raw_latency_seconds(**args), rtol=1e-12)
            t_api = best_time(lambda a=args: ppdmodel.expected_latency_seconds(**a), repeats)
            t_raw = best_time(lambda a=args: raw_latency_seconds(**a), repeats)
            print(
                f"seconds closed form [{name}, early_head={early_head}]: API "
                f"{GRID_POINTS / t_api:.3e} eval/s, raw numpy {GRID_POINTS / t_raw:.3e} eval/s, "
                f"API/raw time ratio {t_api / t_raw:.2f} (target <= 2)"
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
    bench_seconds_closed_form(args.repeats)
    bench_monte_carlo(args.repeats)


if __name__ == "__main__":
    main()
