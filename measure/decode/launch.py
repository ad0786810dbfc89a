"""What each dist rank runs (spawned by ``RankGroup`` or ``torchrun``); one-shot entry points."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import time
from dataclasses import dataclass, fields
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from measure import clock as clocks
from measure.checks import check_ppd_args
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
    task_ranks,
)
from measure.decode.loop import run_main
from measure.decode.rank_group import RankGroup, check_rank_call, check_task, check_world_size
from measure.decode.results import build_result, handoff_nbytes
from measure.decode.sampling import GREEDY, Decoding, next_token_rule
from measure.decode.settings import WARMUP_TOKENS, MethodSettings, PPDRequest, RunSettings
from measure.hf.layer_split import LayerSplitModel
from measure.hf.loading import load_causal_lm
from measure.settings import ModelSettings, OutputSettings
from measure.train.head_io import head_name, load_head
from ppdmodel.costs import check_early_head
from ppdmodel.options import Settings, option
from sim.formats import write_traces


def load_rank_model(model_dir: str, job: DistJob, device: torch.device):
    """Load the model directory on this rank (local files only, no remote code)."""
    return load_causal_lm(
        model_dir,
        dtype=job.dtype,
        device=device,
        attn_implementation=job.attn_implementation,
        bars=False,
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


def _main_task(lsm, task: DistTask, comm: Comm, world: int, link, progress):
    """Rank 0 of a task on ``world`` ranks: (a warm-up, then) every prompt; its PPDResults."""
    d = lsm.num_layers
    check_ppd_args(
        d, task.d_bar, task.k, lsm.model.config.get_text_config().vocab_size, task.max_new_tokens
    )
    check_early_head(task.early_head)
    if task.warmup and task.prompts:  # untimed; greedy, so it draws nothing
        ids = torch.tensor([task.prompts[0]], dtype=torch.long)
        _send_prompt(comm, world, ids)
        rule = next_token_rule(lsm.model, ids.to(lsm.device), GREEDY, max_new_tokens=WARMUP_TOKENS)
        _run_main(lsm, task, comm, world, ids, rule, WARMUP_TOKENS)
    decoding = Decoding.from_dict(task.decoding)
    generator = _generator(task.generator_state, lsm.device)
    results = []
    for i, prompt in enumerate(task.prompts):
        ids = torch.tensor([prompt], dtype=torch.long)
        _send_prompt(comm, world, ids)
        next_token = next_token_rule(  # seeds this process's global generator (sampled)
            lsm.model,
            ids.to(lsm.device),
            decoding,
            max_new_tokens=task.max_new_tokens,
            eos=task.eos_token_id,
            seed=task.seeds[i] if task.seeds else None,
            generator=generator,
        )
        fields, cache = _run_main(lsm, task, comm, world, ids, next_token, task.max_new_tokens)
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
    comm.drain_payloads(lsm.model.dtype)
    for r in range(1, world):
        comm.send_header(r, STOP)
    return results


def _send_prompt(comm: Comm, world: int, ids: torch.Tensor) -> None:
    """PROMPT to every candidate rank of the task (they prefill while main starts)."""
    for r in range(1, world):
        comm.send_header(r, PROMPT, ids.shape[1])
        comm.send(ids.to(comm.device), r)


def _run_main(lsm, task: DistTask, comm: Comm, world: int, ids, next_token, max_new_tokens):
    """Main's loop on one prompt, the candidates on ranks 1..world-1; (fields, cache)."""
    return run_main(
        lsm,
        ids.to(lsm.device),
        d_bar=task.d_bar,
        k=task.k,
        max_new_tokens=max_new_tokens,
        next_token=next_token,
        candidates_factory=lambda c, e, rec: RemoteCandidates(
            lsm, c, e, rec, comm, world, k=task.k
        ),
        host_clock=True,
        early_head=task.early_head,
    )


def _generator(state: list[int] | None, device: torch.device) -> torch.Generator | None:
    """A generator on `device` restored from a ``get_state()`` byte list, or None."""
    if state is None:
        return None
    generator = torch.Generator(device=device)
    generator.set_state(torch.tensor(state, dtype=torch.uint8))
    return generator


def _worker_task(lsm, task: DistTask, comm: Comm, job: DistJob, rank: int, world: int) -> None:
    worker = CandidateWorker(lsm, comm, rank, task.d_bar, k=task.k, world_size=world)
    token = 0
    while True:
        kind, a, b, c, heads, dh, *cands = comm.recv_header(0)
        if kind == PROMPT:
            worker.prompt(comm.recv((1, a), torch.long, 0).to(lsm.device))
        elif kind == CANDS:
            _maybe_fail(job, rank)
            token = c
            if heads > 0:  # main's KV of the current token follows
                worker.sync(worker.payload(2 * worker.e * heads * dh, heads, dh), heads, dh)
            if b > 0:
                worker.candidates(a, cands[:b], token)
        elif kind == HIDDEN:  # early_head="candidates": main's hidden state (+ SYNC) follows
            _maybe_fail(job, rank)
            token = c
            flat = worker.payload(worker.hidden_numel(heads, dh), heads, dh)
            worker.from_hidden(a, b, token, flat, heads, dh)
        elif kind == VERDICT:
            worker.verdict(a, b, c, token)
        elif kind == END:
            worker.send_events()
        elif kind == PING:
            comm.send(comm.recv((a,), torch.float32, 0), 0)
            comm.flush()
        elif kind == STOP:
            comm.wait_posted_payload()  # main's drain_payloads
            return
        else:
            raise RuntimeError(f"rank {rank}: unknown message kind {kind}")


class RankState:
    """One rank of distributed PPD: its process group, the model and heads it loaded, the link
    samples; runs tasks as they come until ``close`` (a ``measure.lifeline.RankServer``).

    Every rank takes part in each task's barrier; ranks from ``task_ranks(k, W)`` on sit the
    task out. The model is loaded when the rank starts (``job.model_dir``) or when a task names
    another one; heads once per directory. Decode messages go through a group with the short
    ``timeout_s``; rendezvous and barriers (model loading may be slow) have ``startup_s`` more.
    """

    def __init__(self, rank: int, job: DistJob, progress=lambda i: None):
        torch.set_num_threads(job.num_threads)
        self.rank, self.job, self.progress = rank, job, progress
        cuda = job.device == "cuda"
        self.device = torch.device(f"cuda:{rank}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
        if not dist.is_initialized():
            dist.init_process_group(
                "nccl" if cuda else "gloo",
                rank=rank,
                world_size=job.world_size,
                timeout=timedelta(seconds=job.startup_s + job.timeout_s),
            )
        self.group = dist.new_group(
            list(range(job.world_size)), timeout=timedelta(seconds=job.timeout_s)
        )
        self.model_dir, self.model = None, None
        self.lsms: dict[str | None, LayerSplitModel] = {}  # per head directory (None: the lens)
        self.link: list[tuple[int, float]] = []
        self.kept: dict = {}
        """What functions called on this rank (``RankGroup.call``) keep between calls."""
        if job.model_dir is not None:
            self._load(job.model_dir)

    def _load(self, model_dir: str) -> None:
        self.model = self.lsms = None  # the previous model goes first
        self.kept = {}  # (what calls kept was built on it)
        self.model = load_rank_model(model_dir, self.job, self.device)
        self.model_dir, self.lsms = model_dir, {}

    def _split_model(self, task: DistTask) -> LayerSplitModel:
        if task.model_dir != self.model_dir:
            self._load(task.model_dir)
        mine = task.head_dir if self.rank == 0 or task.early_head == "candidates" else None
        if mine not in self.lsms:
            head = load_head(mine, self.model, device=self.device) if mine else None
            self.lsms[mine] = LayerSplitModel(self.model, head=head)
        return self.lsms[mine]

    @torch.no_grad()
    def run(self, task: DistTask) -> list | None:
        """Run ``task``; rank 0 returns its PPDResults, the other ranks None."""
        world = task_ranks(task.k, self.job.world_size)
        lsm = self._split_model(task) if self.rank < world else None
        dist.barrier()  # every rank of the task has its model (default group, long timeout)
        self.progress(-1)
        if lsm is None:
            return None
        comm = Comm(task.k, self.device, self.group)
        out = None
        if self.rank == 0:
            if self.job.link_probe and not self.link:
                self.link = probe_link(comm, world)
            out = _main_task(lsm, task, comm, world, self.link, self.progress)
        else:
            _worker_task(lsm, task, comm, self.job, self.rank, world)
        comm.close()
        return out

    def handle(self, request: dict):
        """A spawned group's request: one task (``DistTask`` as plain data), or a call of a
        function of this package on every rank (``{"call": "measure.x:f", "kwargs": {...}}``,
        ``f(self, **kwargs)``; ``RankGroup.call``)."""
        if "call" in request:
            return call_on_rank(self, request["call"], request.get("kwargs", {}))
        return self.run(DistTask(**request))

    def close(self) -> None:
        dist.destroy_process_group()


def call_on_rank(state: RankState, target: str, kwargs: dict):
    """``target(state, **kwargs)``, ``target`` one of ``rank_group.RANK_CALLS`` (a
    ``"measure.module:function"`` name; nothing else is called)."""
    check_rank_call(target)
    module, _, name = target.partition(":")
    with torch.no_grad():
        return getattr(importlib.import_module(module), name)(state, **kwargs)


def run_rank(rank: int, job: DistJob, progress=lambda i: None):
    """Run every task of `job` as `rank` (process group from the env); rank 0 returns results."""
    state = RankState(rank, job, progress)
    try:
        out = [state.run(task) for task in job.tasks]
        return out if rank == 0 else None
    finally:
        state.close()


def _group_entry(rank: int, job: dict, progress) -> RankState:
    """A spawned rank of a ``RankGroup`` (``GROUP_ENTRY``): joins the group, loads the model."""
    job = DistJob.from_dict(job)
    os.environ.update(
        MASTER_ADDR=job.master_addr,
        MASTER_PORT=str(job.master_port),
        RANK=str(rank),
        WORLD_SIZE=str(job.world_size),
    )
    return RankState(rank, job, progress)


def run_job(job: DistJob) -> list[list]:
    """Run the tasks of `job` on one spawned ``RankGroup``; rank 0's results, one list per task.

    Raises DistRunError naming the failing rank if a rank raises, dies (with its exit code or
    signal), or makes no progress for ``job.timeout_s`` (``job.startup_s`` more before the
    group has started). Ranks end with this process, however it ends (``measure.lifeline``).
    """
    for task in job.tasks:
        check_world_size(job.world_size, task.k)
    settings = {f.name: getattr(job, f.name) for f in fields(job)}
    del settings["tasks"], settings["model_dir"]
    with RankGroup(job.model_dir, **settings) as group:
        return [group.run_task(task) for task in job.tasks]


def ppd_dist_many(model, prompts, request: PPDRequest | None = None, **given):
    """Distributed PPD of several prompts on a ``RankGroup`` spawned for them; a list of
    PPDResult.

    model: a local model directory or a loaded model (saved to a temporary directory so
    every rank loads identical weights); request: the call whole (``PPDRequest``; its
    settings' ``world_size``, 2..k + 1 ranks, and ``timeout_s``), or its fields as keywords
    (as ``RankGroup.run``; ``world_size`` 2 and ``timeout_s`` 120 by default); the other
    keywords: ``DistJob`` settings (``startup_s``, ``link_probe``, ...). Everything is
    checked before any rank starts.
    """
    names = PPDRequest.field_names()
    job_kwargs = {key: value for key, value in given.items() if key not in names}
    fields = {key: value for key, value in given.items() if key in names}
    if request is None and "settings" not in fields:
        fields.setdefault("timeout_s", 120.0)
    request = PPDRequest.of(request, fields)
    settings = request.settings
    check_world_size(settings.world_size, request.k)
    check_task(model, prompts, request)
    with RankGroup(model, world_size=settings.world_size, timeout_s=settings.timeout_s,
                   **job_kwargs) as group:  # fmt: skip
        return group.run(prompts, request)


@dataclass(frozen=True, kw_only=True)
class LaunchSettings(Settings):
    """What ``python -m measure.decode.launch`` decodes beside the methods' settings."""

    GROUP = "prompts"

    prompt_ids: str = option(required=True, help="JSON file: list of token-id lists")


LAUNCH_CHANGES = {
    ModelSettings: {
        "model": {"help": "local model dir, .gguf file or name"},
        "device": {"choices": ("cpu", "cuda"), "help": "cpu | cuda (rank r: cuda:r)"},
    },
    MethodSettings: {
        "d_bar": {"nargs": None, "required": True, "help": "early layer"},
        "k": {"nargs": None, "default": 1},
        "early_head": {"nargs": None, "default": "main"},
    },
    RunSettings: {"timeout_s": {"default": 120.0, "help": "dist watchdog (default 120)"}},
    OutputSettings: {"out": {"help": "directory for traces.jsonl (rank 0)"}},
}
"""``python -m measure.decode.launch``'s options: the settings' fields, one value each."""


def launch_parser() -> argparse.ArgumentParser:
    """The options of ``python -m measure.decode.launch`` (derived from the settings)."""
    parser = argparse.ArgumentParser(prog="python -m measure.decode.launch")
    ModelSettings.add_to(parser, only=("model", "dtype", "device"),
                         changes=LAUNCH_CHANGES[ModelSettings])  # fmt: skip
    LaunchSettings.add_to(parser)
    MethodSettings.add_to(parser, only=("d_bar", "k", "max_new_tokens", "early_head"),
                          changes=LAUNCH_CHANGES[MethodSettings])  # fmt: skip
    RunSettings.add_to(parser, only=("timeout_s",), changes=LAUNCH_CHANGES[RunSettings])
    OutputSettings.add_to(parser, only=("out",), changes=LAUNCH_CHANGES[OutputSettings])
    return parser


def main(argv=None) -> int:
    """``torchrun --nproc-per-node W -m measure.decode.launch --model DIR --prompt-ids FILE``."""
    args = launch_parser().parse_args(argv)
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
