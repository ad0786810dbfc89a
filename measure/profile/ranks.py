"""Two gloo ranks on this machine: the link by message size, and two decode streams at once.

The ``dist`` backend's costs beyond the layers: ``probe_ranks`` spawns two processes (one
torch thread each, as ``DistJob``'s default) joined by a gloo process group, and in
interleaved rounds (warm-up rounds excluded)

- times ping-pong messages of each size between the ranks (one-way = round trip / 2), the
  samples ``link_s[<bytes>]``;
- when given a model directory, times greedy decode steps (``DecodeProbe.step``: embedding,
  layers, final head) on each rank alone and on both ranks at once, the samples
  ``stream_alone_s`` and ``stream_both_s``: their median ratio is the slowdown of two decode
  streams sharing this machine's cores and memory bandwidth;
- when given ``pair_ks`` and ``d_bar``, times the pair a ``dist`` run overlaps: main's suffix
  and final head (``DecodeProbe.suffix``) on rank 0, the k-row candidate batch
  (``DecodeProbe.batch``) on rank 1, each alone and both at once, every call repeated for
  ``pair_window_s`` so both sides compute throughout (the rates of fluid sharing): the samples
  ``pair_main_alone_s[k]``, ``pair_main_both_s[k]``, ``pair_cand_alone_s[k]``,
  ``pair_cand_both_s[k]`` (seconds per call), and ``rank_layer_s`` (rank 0's greedy layers,
  per layer, in the alone phase: a rank's price of a layer beside the one-process profile's);
  with the early head on the candidate side (``pair_placements`` holding ``"candidates"``,
  the default) the candidate rank's call runs the early head (LM head on one row, top-k) and
  then the batch, as such a run does, beside the same main side: the samples
  ``pair_main_alone_s[k,candidates]``, ``pair_main_both_s[k,candidates]``,
  ``pair_cand_alone_s[k,candidates]``, ``pair_cand_both_s[k,candidates]``.

``pair_samples_on`` runs the same pair rounds on the first two ranks of a running
``measure.decode.rank_group.RankGroup`` (``RankGroup.call``; ranks above 1 join the
barriers), so ``ppd validate --interleave-probes`` re-measures the pair factors between its
rounds on the ranks that decode, without new processes.
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
    pair_ks: tuple[int, ...] = ()
    """Candidate counts of the pair probe (empty: no pair probe)."""
    d_bar: int | None = None
    """Main's split layer in the pair probe."""
    pair_window_s: float = 0.25
    """Seconds each side repeats its call per phase and round of the pair probe."""
    pair_placements: tuple[str, ...] = ("main", "candidates")
    """The early head's placements the pair probe times (``pair_rounds``)."""
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
            if job.model_dir is not None and job.pair_ks:
                samples.update(_pair_rounds(rank, job))
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
    model = load_causal_lm(job.model_dir, dtype=job.dtype, bars=False)
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


def _repeat_for(fn, window_s: float) -> float:
    """Call ``fn`` (it returns its timed seconds) until ``window_s`` seconds have passed; the
    mean of its seconds."""
    calls, total, start = 0, 0.0, clocks.host_clock()
    while True:
        total += fn()
        calls += 1
        if clocks.host_clock() - start >= window_s:
            return total / calls


def _pair_rounds(rank: int, job: RankProbe) -> dict[str, list[float]]:
    model = load_causal_lm(job.model_dir, dtype=job.dtype, bars=False)
    probe = DecodeProbe(model, context_tokens=job.context_tokens)
    return pair_rounds(rank, probe, ks=job.pair_ks, d_bar=job.d_bar, repeats=job.repeats,
                       warmup=job.warmup, window_s=job.pair_window_s,
                       placements=job.pair_placements)  # fmt: skip


def pair_rounds(rank, probe, *, ks, d_bar, repeats, warmup, window_s,
                placements=("main",)) -> dict[str, list[float]]:  # fmt: skip
    """The pair probe's rounds (module doc) on this rank of the default process group: rank 0
    runs main's side, rank 1 the candidate batch; a rank above 1 (``probe`` None) only joins
    the barriers. For each k, each placement of the early head in ``placements`` ("main":
    the candidate side runs the batch only; "candidates": the early head, then the batch).
    Its samples by name (empty above rank 1)."""
    placements = _placements(placements)
    side = "main" if rank == 0 else "cand"
    samples: dict[str, list[float]] = {"rank_layer_s": []} if rank == 0 else {}
    for r in range(warmup + repeats):
        for k in _rotated(ks, r):
            for placement in placements:
                early = placement == "candidates"
                call = (lambda: probe.suffix(d_bar)) if rank == 0 else (
                    lambda k=k, early=early: probe.batch(k, d_bar, early_head=early))  # fmt: skip
                key = f"{k}" if placement == "main" else f"{k},{placement}"
                for phase in _rotated(PHASES, r):
                    dist.barrier()
                    if probe is not None and phase in ("both", f"alone{rank}"):
                        seconds = _repeat_for(call, window_s)
                        if r >= warmup:
                            kind = "both" if phase == "both" else "alone"
                            samples.setdefault(f"pair_{side}_{kind}_s[{key}]", []).append(seconds)
                    first = placement == placements[0]
                    if phase == "alone0" and rank == 0 and r >= warmup and first:
                        samples["rank_layer_s"].append(probe.step()["layers_s"] / probe.d)
                    dist.barrier()
    return samples


PAIR_PLACEMENTS = ("main", "candidates")
"""The early head's placements the pair probe can time (``PPDConfig.early_head``)."""


def _placements(placements) -> tuple[str, ...]:
    placements = tuple(dict.fromkeys(str(p) for p in placements))
    if not placements or any(p not in PAIR_PLACEMENTS for p in placements):
        raise ValueError(f"placements must be some of {PAIR_PLACEMENTS}, got {placements}")
    return placements


PAIR_ON_GROUP = "measure.profile.ranks:pair_rounds_on_rank"
"""What ``pair_samples_on`` has every rank of a ``RankGroup`` run."""


def pair_rounds_on_rank(state, *, context_tokens, **rounds) -> dict[str, list[float]]:
    """``pair_rounds`` on a rank of a ``RankGroup`` (``RankGroup.call``), on the model the rank
    loaded, with a ``DecodeProbe`` kept on the rank between calls (one per context length)."""
    probe = None
    if state.rank < 2:
        if state.model is None:
            raise ValueError("the pair probe needs a group made with a model")
        key = ("pair probe", context_tokens)
        if key not in state.kept:
            state.kept[key] = DecodeProbe(state.model, context_tokens=context_tokens)
        probe = state.kept[key]
    return pair_rounds(state.rank, probe, **rounds)


def pair_samples_on(group, *, ks, d_bar, context_tokens, repeats, warmup=0,
                    window_s=RankProbe.pair_window_s,
                    placements=("main",)) -> dict[str, list[float]]:  # fmt: skip
    """The pair probe on the first two ranks of a running ``measure.decode.rank_group.RankGroup``
    (``ppd validate --interleave-probes`` between its rounds: no new processes, no reload);
    the samples of both ranks, merged by name, as ``probe_ranks`` names them."""
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be candidate counts >= 1, got {ks}")
    placements = _placements(placements)
    if getattr(group, "model", None) is None:  # refused here: an error on a rank ends the group
        raise ValueError("group: the pair probe needs a RankGroup made with a model")
    merged: dict[str, list[float]] = {}
    answers = group.call(
        PAIR_ON_GROUP, ks=ks, d_bar=int(d_bar), context_tokens=int(context_tokens),
        repeats=int(repeats), warmup=int(warmup), window_s=float(window_s),
        placements=placements,
    )  # fmt: skip
    for samples in answers:
        for name, values in samples.items():
            merged.setdefault(name, []).extend(values)
    return merged


def probe_ranks(job: RankProbe) -> dict[str, list[float]]:
    """Run ``job`` on two spawned gloo ranks tied to this process (``measure.lifeline``); the
    samples of both ranks, merged by name.

    Raises DistRunError (a RuntimeError) naming the rank if a rank fails or the job exceeds
    ``timeout_s``.
    """
    sizes = tuple(int(n) for n in job.sizes)
    if not sizes or any(n < 4 or n % 4 for n in sizes):
        raise ValueError(f"sizes must be message sizes in bytes, multiples of 4, got {sizes}")
    if job.pair_ks and (job.d_bar is None or job.model_dir is None):
        raise ValueError("pair_ks needs d_bar and model_dir (the pair probe runs the model)")
    if job.pair_ks:
        job = replace(job, pair_placements=_placements(job.pair_placements))
    job = replace(job, sizes=sizes, master_port=job.master_port or free_port())
    merged: dict[str, list[float]] = {}
    for samples in run_ranks(
        RANK_ENTRY, (asdict(job),), world_size=2, timeout_s=job.timeout_s, what="rank probe"
    ):
        for name, values in samples.items():
            merged.setdefault(name, []).extend(values)
    return merged
