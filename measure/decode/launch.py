"""Start, run and watch the ranks of distributed PPD (spawned here, or by ``torchrun``)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig

from measure import clock as clocks
from measure.checks import (
    as_prompt_ids,
    check_context,
    check_head_layer,
    check_ppd_args,
    check_prompt_ids,
    eos_set,
)
from measure.decode.dist import (
    CANDS,
    END,
    HIDDEN,
    LINK_PROBE_BYTES,
    LINK_PROBE_REPEATS,
    PING,
    PROMPT,
    STOP,
    VERDICT,
    CandidateWorker,
    Comm,
    DistJob,
    DistTask,
    RemoteCandidates,
    free_port,
)
from measure.decode.loop import run_main
from measure.decode.results import build_result, handoff_nbytes
from measure.decode.sampling import GREEDY, Decoding, next_token_rule
from measure.hf.layer_split import LayerSplitModel
from measure.hf.lens import LogitLens, resolve_head
from measure.hf.loading import load_causal_lm, resolve_model_dir
from measure.lifeline import run_ranks, tied_temp_dir
from measure.train.head_io import head_name, load_head
from ppdmodel.costs import EARLY_HEAD_PLACEMENTS, check_early_head
from sim.formats import write_traces


def load_rank_model(model_dir: str, job: DistJob, device: torch.device):
    """Load the model directory on this rank (local files only, no remote code)."""
    return load_causal_lm(
        model_dir, dtype=job.dtype, device=device, attn_implementation=job.attn_implementation
    )


def _maybe_fail(job: DistJob, rank: int) -> None:
    if job.fail is None or rank != job.fail_rank:
        return
    if job.fail == "crash":
        raise RuntimeError(f"injected failure on rank {rank} (DistJob.fail='crash')")
    if job.fail == "hang":
        time.sleep(10**6)
    if job.fail == "kill":  # as the OOM killer does
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"fail must be 'crash', 'hang', 'kill' or None, got {job.fail!r}")


def probe_link(comm: Comm, world_size: int) -> list[tuple[int, float]]:
    """Rank 0: ping-pong float32 messages with rank 1; (bytes, one-way seconds) samples."""
    samples = []
    for nbytes in LINK_PROBE_BYTES:
        n = nbytes // 4
        payload = torch.zeros(n, dtype=torch.float32, device=comm.device)
        for _ in range(LINK_PROBE_REPEATS + 1):
            start = clocks.host_clock()
            comm.send_header(1, PING, n)
            comm.send(payload, 1)
            comm.recv((n,), torch.float32, 1)
            comm.flush()
            samples.append((nbytes, (clocks.host_clock() - start) / 2))
        samples.pop(-LINK_PROBE_REPEATS - 1)  # the first of each size warms up
    return samples


def _main_task(lsm, task: DistTask, comm: Comm, job: DistJob, link, progress):
    d = lsm.num_layers
    check_ppd_args(
        d, task.d_bar, task.k, lsm.model.config.get_text_config().vocab_size, task.max_new_tokens
    )
    check_early_head(task.early_head)
    decoding = Decoding.from_dict(task.decoding)
    generator = _generator(task.generator_state, lsm.device)
    results = []
    for i, prompt in enumerate(task.prompts):
        ids = torch.tensor([prompt], dtype=torch.long)
        for r in range(1, job.world_size):
            comm.send_header(r, PROMPT, ids.shape[1])
            comm.send(ids.to(comm.device), r)
        next_token = next_token_rule(  # seeds this process's global generator (sampled)
            lsm.model,
            ids.to(lsm.device),
            decoding,
            max_new_tokens=task.max_new_tokens,
            eos=task.eos_token_id,
            seed=task.seeds[i] if task.seeds else None,
            generator=generator,
        )
        fields, cache = run_main(
            lsm,
            ids.to(lsm.device),
            d_bar=task.d_bar,
            k=task.k,
            max_new_tokens=task.max_new_tokens,
            next_token=next_token,
            candidates_factory=lambda c, e, rec: RemoteCandidates(
                lsm, c, e, rec, comm, job.world_size, k=task.k
            ),
            host_clock=True,
            early_head=task.early_head,
        )
        name = task.sequences[i] if task.sequences else str(i)
        results.append(
            build_result(
                fields,
                d=d,
                d_bar=task.d_bar,
                k=task.k,
                sequence=name,
                backend="dist",
                head_name=head_name(lsm.head),
                nbytes=handoff_nbytes(lsm, cache, d - task.d_bar),
                link=link,
                decoding=decoding.label,
            )
        )
        progress(i)
    for r in range(1, job.world_size):
        comm.send_header(r, STOP)
    comm.flush()
    return results


def _generator(state: list[int] | None, device: torch.device) -> torch.Generator | None:
    """A generator on `device` restored from a ``get_state()`` byte list, or None."""
    if state is None:
        return None
    generator = torch.Generator(device=device)
    generator.set_state(torch.tensor(state, dtype=torch.uint8))
    return generator


def _worker_task(lsm, task: DistTask, comm: Comm, job: DistJob, rank: int) -> None:
    worker = CandidateWorker(lsm, comm, rank, task.d_bar, k=task.k, world_size=job.world_size)
    token = 0
    while True:
        kind, a, b, c, heads, dh, *cands = comm.recv_header(0)
        if kind == PROMPT:
            worker.prompt(comm.recv((1, a), torch.long, 0).to(lsm.device))
        elif kind == CANDS:
            _maybe_fail(job, rank)
            token = c
            if heads > 0:  # main's KV of the current token follows
                n = 2 * worker.e * heads * dh
                worker.sync(comm.recv((n,), lsm.model.dtype, 0), heads, dh)
            if b > 0:
                worker.candidates(a, cands[:b], token)
        elif kind == HIDDEN:  # early_head="candidates": main's hidden state (+ SYNC) follows
            _maybe_fail(job, rank)
            token = c
            flat = comm.recv((worker.hidden_numel(heads, dh),), lsm.model.dtype, 0)
            worker.from_hidden(a, b, token, flat, heads, dh)
        elif kind == VERDICT:
            worker.verdict(a, b, c, token)
        elif kind == END:
            worker.send_events()
        elif kind == PING:
            comm.send(comm.recv((a,), torch.float32, 0), 0)
            comm.flush()
        elif kind == STOP:
            comm.flush()
            return
        else:
            raise RuntimeError(f"rank {rank}: unknown message kind {kind}")


def run_rank(rank: int, job: DistJob, progress=lambda i: None):
    """Run every task of `job` as `rank` (process group from the env); rank 0 returns results."""
    torch.set_num_threads(job.num_threads)
    cuda = job.device == "cuda"
    device = torch.device(f"cuda:{rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(  # rendezvous and model loading may be slow: startup_s more
            "nccl" if cuda else "gloo",
            rank=rank,
            world_size=job.world_size,
            timeout=timedelta(seconds=job.startup_s + job.timeout_s),
        )
    try:  # decode messages go through a group with the short timeout
        group = dist.new_group(
            list(range(job.world_size)), timeout=timedelta(seconds=job.timeout_s)
        )
        out, link, loaded = [], [], {}
        for task in job.tasks:
            if task.model_dir not in loaded:
                loaded = {task.model_dir: load_rank_model(task.model_dir, job, device)}
            head = None
            if task.head_dir and (rank == 0 or task.early_head == "candidates"):
                head = load_head(task.head_dir, loaded[task.model_dir], device=device)
            lsm = LayerSplitModel(loaded[task.model_dir], head=head)
            comm = Comm(task.k, device, group)
            dist.barrier()  # every rank has loaded the model (default group, long timeout)
            progress(-1)
            if rank == 0:
                if job.link_probe and not link:
                    link = probe_link(comm, job.world_size)
                out.append(_main_task(lsm, task, comm, job, link, progress))
            else:
                _worker_task(lsm, task, comm, job, rank)
        return out if rank == 0 else None
    finally:
        dist.destroy_process_group()


RANK_ENTRY = "measure.decode.launch:_spawn_entry"
"""What a spawned rank runs once ``measure.lifeline`` has tied it to this process."""


def _spawn_entry(rank: int, job: dict, progress) -> list | None:
    job = DistJob.from_dict(job)
    os.environ.update(
        MASTER_ADDR=job.master_addr,
        MASTER_PORT=str(job.master_port),
        RANK=str(rank),
        WORLD_SIZE=str(job.world_size),
    )
    with torch.no_grad():
        return run_rank(rank, job, progress=progress)


def run_job(job: DistJob) -> list[list]:
    """Spawn the ranks of `job`, watch them, return rank 0's results (one list per task).

    Raises DistRunError naming the failing rank if a rank raises, dies (with its exit code or
    signal), or makes no progress for ``job.timeout_s`` (``job.startup_s`` more before the
    first progress). Ranks end with this process, however it ends (``measure.lifeline``).
    """
    if job.world_size < 2:
        raise ValueError(f"world_size must be >= 2, got {job.world_size}")
    for task in job.tasks:
        if job.world_size > task.k + 1:
            raise ValueError(
                f"world_size must be in [2, k + 1 = {task.k + 1}], got {job.world_size}"
            )
    if job.master_port == 0:
        job = replace(job, master_port=free_port())
    out = run_ranks(
        RANK_ENTRY,
        (job.to_dict(),),
        world_size=job.world_size,
        timeout_s=job.timeout_s,
        startup_s=job.startup_s,
    )
    return out[0]


def ppd_dist_many(
    model,
    prompts,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos_token_id=None,
    world_size=2,
    timeout_s=120.0,
    head=None,
    sequences=None,
    early_head="main",
    decoding: Decoding = GREEDY,
    seeds=None,
    generator=None,
    **job_kwargs,
):
    """Distributed PPD of several prompts in one spawned job; a list of PPDResult.

    model: a local model directory or a loaded model (saved to a temporary directory so
    every rank loads identical weights); early_head: ``main`` or ``candidates`` (the
    candidate ranks run the early head on main's layer-d_bar hidden state); decoding,
    seeds (one per prompt, or None), generator: main's rule and draws (``ppd_many``); rank 0
    starts from ``generator``'s state (the caller's generator is not advanced).
    """
    check_early_head(early_head)
    config = _config(model)
    check_ppd_args(config.num_hidden_layers, d_bar, k, config.vocab_size, max_new_tokens)
    check_head_layer(head, d_bar)
    if not isinstance(model, str | Path):  # refused here, before any rank starts
        resolve_head(head, LogitLens(model))
    ids = [as_prompt_ids(p, "cpu") for p in prompts]
    for one in ids:
        check_prompt_ids(one, config.vocab_size)
    check_context(config, [one.shape[1] for one in ids], max_new_tokens, names=sequences)
    with tied_temp_dir("ppd-dist-") as tmp:  # removed even if this process is killed
        task = DistTask(
            model_dir=_model_dir(model, tmp),
            prompts=[one[0].tolist() for one in ids],
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            eos_token_id=sorted(eos_set(eos_token_id)),
            sequences=sequences,
            head_dir=_head_dir(head, tmp),
            early_head=early_head,
            decoding=decoding.to_dict() if decoding.do_sample else None,
            seeds=None if seeds is None or all(x is None for x in seeds) else list(seeds),
            generator_state=None if generator is None else generator.get_state().tolist(),
        )
        job = DistJob(
            tasks=[task],
            world_size=world_size,
            timeout_s=timeout_s,
            **_model_job_kwargs(model),
            **job_kwargs,
        )
        return run_job(job)[0]


def _config(model):
    """The text config of a loaded model or of a local model (dir, .gguf, known name)."""
    if not isinstance(model, str | Path):
        return model.config.get_text_config()
    config = AutoConfig.from_pretrained(
        resolve_model_dir(model), local_files_only=True, trust_remote_code=False
    )
    return config.get_text_config()


def _model_dir(model, tmp: str) -> str:
    if isinstance(model, str | Path):
        return str(resolve_model_dir(model))
    path = Path(tmp) / "model"
    model.save_pretrained(path)
    return str(path)


def _head_dir(head, tmp: str) -> str | None:
    """Where the ranks load ``head`` from; None for the logit lens (each rank has its own)."""
    if head is None or isinstance(head, LogitLens):
        return None
    if not hasattr(head, "save"):
        raise ValueError(
            "head must be a TrainedHead or a TranslatorHead (with .save) for backend='dist'"
        )
    path = Path(tmp) / "head"
    head.save(path)
    return str(path)


def _model_job_kwargs(model) -> dict:
    if isinstance(model, str | Path):
        return {}
    return dict(
        dtype=str(model.dtype).removeprefix("torch."),
        device="cuda" if model.device.type == "cuda" else "cpu",
        attn_implementation=model.config._attn_implementation,
    )


def main(argv=None) -> int:
    """``torchrun --nproc-per-node W -m measure.decode.launch --model DIR --prompt-ids FILE``."""
    parser = argparse.ArgumentParser(prog="python -m measure.decode.launch")
    parser.add_argument("--model", required=True, help="local model dir, .gguf file or name")
    parser.add_argument("--prompt-ids", required=True, help="JSON file: list of token-id lists")
    parser.add_argument("--d-bar", type=int, required=True)
    parser.add_argument("--k", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--early-head", default="main", choices=EARLY_HEAD_PLACEMENTS)
    parser.add_argument("--out", required=True, help="directory for traces.jsonl (rank 0)")
    args = parser.parse_args(argv)
    prompts = json.loads(Path(args.prompt_ids).read_text(encoding="utf-8"))
    task = DistTask(
        args.model, prompts, args.d_bar, args.k, args.max_new_tokens, early_head=args.early_head
    )
    job = DistJob(
        [task],
        world_size=int(os.environ["WORLD_SIZE"]),
        dtype=args.dtype,
        device=args.device,
        timeout_s=args.timeout_s,
    )
    out = run_rank(int(os.environ["RANK"]), job)
    if out is not None:
        write_traces(Path(args.out) / "traces.jsonl", [r.trace for r in out[0]])
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
