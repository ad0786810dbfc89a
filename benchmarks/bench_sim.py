"""Benchmark of the simulator against SimPy's own bare event loop, timed in the same run.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_sim.py``. Prints:

* layer events/s with ``per_layer_events`` (one SimPy timeout per layer; the k identical
  sub-processes on their own GPUs share one lockstep SimPy process, so 100 logged layer
  events per token cost 60 timeouts), as a ratio of a bare SimPy loop of timeouts in one
  trivial process (target >= 50%);
* sequences/s for d=40, d_bar=20, k=3, ell=128, p=0.5, one GPU per process, default
  (block) engine, event log on and off (target >= 500/s), and on one shared GPU.
"""

from __future__ import annotations

import time

import simpy

import sim


def best_of(fn, repeat: int = 3) -> float:
    """Shortest wall-clock time of ``repeat`` calls, seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bare_simpy_events_per_s(n: int = 200_000) -> float:
    def ticker(env):
        for _ in range(n):
            yield env.timeout(1)

    def run():
        env = simpy.Environment()
        env.process(ticker(env))
        env.run()

    return n / best_of(run)


def layer_events(result: sim.SimResult) -> int:
    """Layer executions on GPUs (a block of j layers counts j; a batched block counts once)."""
    return sum(r[4] - r[3] + 1 for r in result.records if r[1] >= 0 and r[7] != "head")


def simulator_layer_events_per_s(config: sim.SimConfig, n_seq: int = 20) -> float:
    count = layer_events(sim.simulate(config, seed=0))
    seconds = best_of(lambda: [sim.simulate(config, seed=i) for i in range(n_seq)])
    return count * n_seq / seconds


def sequences_per_s(config: sim.SimConfig, n: int, record_events: bool) -> float:
    seconds = best_of(lambda: [sim.simulate(config, seed=i, record_events=record_events)
                               for i in range(n)])  # fmt: skip
    return n / seconds


def main() -> None:
    base = dict(d=40, d_bar=20, k=3, ell=128, matches=sim.Bernoulli(0.5))
    bare = bare_simpy_events_per_s()
    fine = sim.SimConfig(**base, per_layer_events=True)
    fine_rate = simulator_layer_events_per_s(fine)
    print(f"bare SimPy loop (timeouts, one process)   {bare:12,.0f} events/s")
    print(
        f"simulator, per-layer events, k+1 GPUs     {fine_rate:12,.0f} layer events/s"
        f"  = {fine_rate / bare:.0%} of bare (target >= 50%)"
    )
    shared = sim.SimConfig(**base, per_layer_events=True, n_gpus=1)
    shared_rate = simulator_layer_events_per_s(shared, n_seq=5)
    print(
        f"simulator, per-layer events, 1 shared GPU {shared_rate:12,.0f} layer events/s"
        f"  = {shared_rate / bare:.0%} of bare (GPU requests are SimPy events too)"
    )
    block = sim.SimConfig(**base)
    print(
        f"simulator, block engine, k+1 GPUs         "
        f"{simulator_layer_events_per_s(block, 200):12,.0f} layer events/s (blocks of layers)"
    )
    for label, config, n in [
        ("k+1 GPUs, block engine, no event log", block, 2000),
        ("k+1 GPUs, block engine, event log", block, 1000),
        ("1 shared GPU (per-block resources), no log", sim.SimConfig(**base, n_gpus=1), 100),
    ]:
        rate = sequences_per_s(config, n, record_events="no event log" not in label)
        print(f"sequences/s, d=40 d_bar=20 k=3 ell=128, {label:42s} {rate:10,.0f}")
    mc = best_of(lambda: sim.monte_carlo(block, n=2000, seed=0), repeat=1)
    print(
        f"sim.monte_carlo(n=2000), k+1 GPUs                                 "
        f"{2000 / mc:10,.0f} sequences/s (target >= 500)"
    )


if __name__ == "__main__":
    main()
