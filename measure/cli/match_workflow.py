"""The match-rate workflow of ``ppd measure match-rate`` and ``ppd measure atlas``: its
settings checked against the model's config.json and tokenizer before any weight is read, then
one run of ``measure.match.records.run_match_rate`` (sharded under torchrun)."""

from __future__ import annotations

import os
from pathlib import Path

from measure.checks import model_facts
from measure.cli.common import (
    check_candidate_rows,
    check_prompts_fit,
    degenerate_warnings,
    read_prompts,
)
from measure.cli.match_settings import MatchOutputSettings, MatchSamplingSettings
from measure.match.config import make_config
from measure.match.records import RunResult, check_out_dir, part_path, run_match_rate
from measure.settings import GenerationSettings, ModelSettings, ProbeSettings, PromptSettings


def check_match_rate(
    model: ModelSettings, prompts: PromptSettings, probes: ProbeSettings,
    generation: GenerationSettings, sampling: MatchSamplingSettings,
    output: MatchOutputSettings, run_dir: Path,
) -> None:  # fmt: skip
    """The checks that need no weight: the prompts file read; a ``run_dir`` holding a previous
    run without --resume; and, from the model's config.json and tokenizer, --layers in
    [1, d], --ks within the vocabulary, the sampling rule, every prompt plus
    --max-new-tokens within the context."""
    selected = read_prompts(prompts)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    check_out_dir(run_dir, part_path(run_dir, rank, world), output.resume, output.records_format)

    facts = model_facts(model.model)
    make_config(facts.d, layers=_listed(probes.layers), ks=list(probes.ks),
                max_new_tokens=generation.max_new_tokens, sampling=sampling.sampling)  # fmt: skip
    check_candidate_rows("--ks", probes.ks, facts.vocab_size)
    check_prompts_fit(facts, selected, generation.max_new_tokens,
                      chat_template=prompts.chat_template)  # fmt: skip


def measure_match_rate(
    model: ModelSettings, prompts: PromptSettings, probes: ProbeSettings,
    generation: GenerationSettings, sampling: MatchSamplingSettings,
    output: MatchOutputSettings, *, command: str, run_dir: Path | None = None,
    shard: bool = True,
) -> RunResult:  # fmt: skip
    """One match-rate run into ``run_dir`` (default ``output.out``), its settings checked
    first (`check_match_rate`); with ``shard``, under torchrun (WORLD_SIZE > 1), this process
    joins the group and takes its shard, ``cuda`` meaning its own GPU. Degenerate generations
    are printed as warnings of ``ppd <command>``."""
    run_dir = Path(output.out if run_dir is None else run_dir)
    check_match_rate(model, prompts, probes, generation, sampling, output, run_dir)
    created = _init_distributed(model.device) if shard else False
    device = _rank_device(model.device) if shard else model.device
    try:
        with degenerate_warnings(command):
            return run_match_rate(
                model.model,
                prompts.prompts,
                run_dir,
                fmt=prompts.format,
                limit=prompts.limit,
                category=_listed(prompts.category),
                split=prompts.split,
                chat_template=prompts.chat_template,
                layers=_listed(probes.layers),
                ks=list(probes.ks),
                max_new_tokens=generation.max_new_tokens,
                head_dir=probes.head_dir,
                sampling=sampling.sampling,
                seed=sampling.seed,
                dtype=model.dtype,
                device=device,
                records_format=output.records_format,
                resume=output.resume,
                wait_lock=output.wait_lock,
                verify=output.verify,
                progress=output.progress,
            )
    finally:
        _destroy_distributed(created)


def _listed(values) -> list | None:
    """A tuple of settings values as the list the run records (None stays None)."""
    return None if values is None else list(values)


def _init_distributed(device: str) -> bool:
    """Join the torchrun process group (gloo on CPU, NCCL on CUDA) when WORLD_SIZE > 1."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    return True


def _rank_device(device: str) -> str:
    """Under torchrun, plain ``cuda`` means this rank's GPU ``cuda:LOCAL_RANK``."""
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{int(os.environ['LOCAL_RANK'])}"
    return device


def _destroy_distributed(created: bool) -> None:
    if created:
        import torch.distributed as dist

        dist.destroy_process_group()


__all__ = ["check_match_rate", "measure_match_rate"]
