"""Two gloo ranks on this machine: the link by message size, and two decode streams at once.

The ``dist`` backend's costs beyond the layers: ``probe_ranks`` spawns two processes (one
torch thread each, as ``DistJob``'s default) joined by a gloo process group, and in
interleaved rounds (warm-up rounds excluded)

- times ping-pong messages of each size between the ranks (one-way = round trip / 2), the
  samples ``link_s[<bytes>]``;
- when given a model directory, times greedy decode steps (``DecodeProbe.step``: embedding,
  layers, final head) on each rank alone and on both ranks at once, the samples
  ``stream_alone_s`` and ``stream_both_s``: their median ratio is the slowdown of two decode
  streams sharing this machine's cores and memory bandwidth.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from datetime import timedelta

import torch
import torch.distributed as dist

from measure import clock as clocks
from measure.decode.dist import free_port
from measure.hf.loading import load_causal_lm
from measure.lifeline import run_ranks
from measure.profile.probes import DecodeProbe

PHASES = ("alone0", "alone1", "both")
"""Rounds of the stream probe: rank 0 alone, rank 1 alone, both ranks at once."""


@dataclass(frozen=True)
class RankProbe:
    """What the two ranks measure (see the module docstring)."""

    sizes: tuple[int, ...]
    """Message sizes in bytes (multiples of 4: float32 messages)."""
    repeats: int = 8
    """Timed rounds (each: every size once, every stream phase once)."""
    warmup: int = 1
    """Untimed rounds first."""
    model_dir: str | None = None
    """Local model directory for the stream probe (None: link only)."""
    dtype: str = "float32"
    context_tokens: int = 128
    steps: int = 2
    """Decode steps per stream phase and round."""
    threads: int = 1
    """torch threads per rank."""
    timeout_s: float = 600.0
    """Seconds before the ranks are killed and a RuntimeError raised."""
    master_port: int = 0


RANK_ENTRY = "measure.profile.ranks:_rank_entry"
"""What a spawned rank runs once ``measure.lifeline`` has tied it to this process."""


def _rank_entry(rank: int, job: dict, progress) -> dict[str, list[float]]:
    job = RankProbe(**job)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job.master_port), RANK=str(rank), WORLD_SIZE="2"
    )
    torch.set_num_threads(job.threads)
    dist.init_process_group(
        "gloo", rank=rank, world_size=2, timeout=timedelta(seconds=job.timeout_s)
    )
    try:
        with torch.no_grad():
            samples = _link_rounds(rank, job)
            if job.model_dir is not None:
                samples.update(_stream_rounds(rank, job))
    finally:
        dist.destroy_process_group()
    return samples


def _rotated(items, r: int) -> list:
    start = r % len(items)
    return list(items[start:]) + list(items[:start])


def _link_rounds(rank: int, job: RankProbe) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    buffers = {n: torch.zeros(max(1, n // 4), dtype=torch.float32) for n in job.sizes}
    for r in range(job.warmup + job.repeats):
        for n in _rotated(job.sizes, r):
            buf = buffers[n]
            dist.barrier()
            if rank == 0:
                start = clocks.host_clock()
                dist.send(buf, 1)
                dist.recv(buf, 1)
                one_way = (clocks.host_clock() - start) / 2
                if r >= job.warmup:
                    samples.setdefault(f"link_s[{n}]", []).append(one_way)
            else:
                dist.recv(buf, 0)
                dist.send(buf, 0)
    return samples


def _stream_rounds(rank: int, job: RankProbe) -> dict[str, list[float]]:
    model = load_causal_lm(job.model_dir, dtype=job.dtype)
    probe = DecodeProbe(model, context_tokens=job.context_tokens)
    samples: dict[str, list[float]] = {"stream_alone_s": [], "stream_both_s": []}
    for r in range(job.warmup + job.repeats):
        for phase in _rotated(PHASES, r):
            dist.barrier()
            if phase in ("both", f"alone{rank}"):
                for _ in range(job.steps):
                    laps = probe.step()
                    device = laps["embedding_s"] + laps["layers_s"] + laps["final_head_s"]
                    if r >= job.warmup:
                        key = "stream_both_s" if phase == "both" else "stream_alone_s"
                        samples[key].append(device)
            dist.barrier()
    return samples


def probe_ranks(job: RankProbe) -> dict[str, list[float]]:
    """Run ``job`` on two spawned gloo ranks tied to this process (``measure.lifeline``); the
    samples of both ranks, merged by name.

    Raises DistRunError (a RuntimeError) naming the rank if a rank fails or the job exceeds
    ``timeout_s``.
    """
    sizes = tuple(int(n) for n in job.sizes)
    if not sizes or any(n < 4 or n % 4 for n in sizes):
        raise ValueError(f"sizes must be message sizes in bytes, multiples of 4, got {sizes}")
    job = replace(job, sizes=sizes, master_port=job.master_port or free_port())
    merged: dict[str, list[float]] = {}
    for samples in run_ranks(
        RANK_ENTRY, (asdict(job),), world_size=2, timeout_s=job.timeout_s, what="rank probe"
    ):
        for name, values in samples.items():
            merged.setdefault(name, []).extend(values)
    return merged
