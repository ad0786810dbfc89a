"""The timing workflows of ``ppd measure timing`` (per-layer decode times, the CSV the
simulator reads) and ``ppd measure profile`` (every cost term of the latency model, a profile
JSON): settings checked against the model's config.json first, then one measurement."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from measure.checks import model_facts
from measure.cli.common import check_candidate_rows, check_prompts_fit, read_prompts
from measure.cli.timing_settings import ProfileSettings, TimingPromptSettings, TimingSettings
from measure.datasets import Prompt
from measure.hf.loading import load_causal_lm
from measure.profile.profile import (
    CostProfile,
    check_profile_path,
    measure_profile,
    write_profile,
)
from measure.profile.report import plot_layer_times
from measure.profile.timing import time_greedy, time_layers
from measure.settings import (
    DriftSettings,
    ModelSettings,
    OutputFileSettings,
    ProbeSettings,
    ThreadSettings,
)
from sim.formats import write_layer_times


@dataclass(frozen=True)
class TimingResult:
    """What ``ppd measure timing`` measured and wrote."""

    path: Path
    """The per-layer times CSV."""
    prompt_tokens: int
    layers_s: float
    """Sum of the decoder layers' times at the smallest batch, seconds."""
    greedy_step_s: float
    """Mean whole greedy step, seconds."""


@dataclass(frozen=True)
class ProfileResult:
    """What ``ppd measure profile`` measured and wrote."""

    profile: CostProfile
    path: Path
    """The profile JSON."""
    plot: Path
    """The bar chart of per-layer times with their spread."""


def measure_timing(
    model: ModelSettings, prompt: TimingPromptSettings, timing: TimingSettings,
    output: OutputFileSettings,
) -> TimingResult:  # fmt: skip
    """Per-layer and greedy-step times of the one prompt (``prompt_text`` or the first of the
    prompts file), the batch sizes and the prompt's context checked before any weight."""
    if prompt.prompt_text is not None:
        text = Prompt(id="--prompt-text", text=prompt.prompt_text)
    else:
        text = read_prompts(prompt, 1)[0]
    check_candidate_rows("--batch-sizes", timing.batch_sizes)
    facts = model_facts(model.model)  # config.json and tokenizer: checked before any weight
    check_candidate_rows("--batch-sizes", timing.batch_sizes, facts.vocab_size)
    (ids,) = check_prompts_fit(facts, [text], timing.warmup + timing.n_tokens,
                               chat_template=prompt.chat_template,
                               what="warmup + n_tokens", named=False)  # fmt: skip
    lm = load_causal_lm(model.model, dtype=model.dtype, device=model.device)
    check_candidate_rows("--batch-sizes", timing.batch_sizes, vocab_size(lm))
    input_ids = torch.tensor([ids], device=next(lm.parameters()).device)
    steps = dict(n_tokens=timing.n_tokens, warmup=timing.warmup)
    layers = time_layers(lm, input_ids, **steps, batch_sizes=tuple(timing.batch_sizes))
    greedy = time_greedy(lm, input_ids, **steps)
    path = write_layer_times(output.out, pd.concat([layers, greedy], ignore_index=True))
    one = layers[(layers["component"] == "layer") & (layers["batch"] == layers["batch"].min())]
    return TimingResult(
        path=path,
        prompt_tokens=int(input_ids.shape[1]),
        layers_s=float(one["seconds"].sum()),
        greedy_step_s=float(greedy["seconds"].mean()),
    )


def profile_machine(
    model: ModelSettings, probes: ProbeSettings, timing: TimingSettings,
    profile: ProfileSettings, threads: ThreadSettings, drift: DriftSettings,
    output: OutputFileSettings,
) -> ProfileResult:  # fmt: skip
    """The cost profile of the model on this machine (``measure.profile.measure_profile``:
    the candidate batches ``probes.ks``, ``timing.warmup`` untimed rounds first), written
    with its per-layer chart; the path, --ks and --context-tokens checked before any
    weight."""
    check_profile_path(output.out)  # before minutes of measuring
    check_candidate_rows("--ks", probes.ks)
    facts = model_facts(model.model)  # config.json: checked before any weight is read
    check_candidate_rows("--ks", probes.ks, facts.vocab_size)
    if facts.context is not None and profile.context_tokens > facts.context:
        raise ValueError(f"--context-tokens must be <= the model's context of {facts.context} "
                         f"positions, got {profile.context_tokens}")  # fmt: skip
    lm = load_causal_lm(model.model, dtype=model.dtype, device=model.device)
    check_candidate_rows("--ks", probes.ks, vocab_size(lm))
    measured = measure_profile(
        lm,
        model_dir=model.model,
        backends=list(profile.backends),
        ks=list(probes.ks),
        threads=threads.threads,
        context_tokens=profile.context_tokens,
        repeats=profile.repeats,
        warmup=timing.warmup,
        calls=profile.calls,
        rank_repeats=profile.rank_repeats,
        progress=True,
        max_spread=profile.max_spread / 100,
        drift_floor=drift.drift_floor / 100,
    )
    path = write_profile(output.out, measured)
    plot = path.with_name(f"{path.stem}-layers.png")
    plot_layer_times(measured, plot)
    return ProfileResult(profile=measured, path=path, plot=plot)


def vocab_size(model) -> int | None:
    """The model's vocabulary: the rows of its output embedding (None if it has none)."""
    head = model.get_output_embeddings()
    return None if head is None else int(head.weight.shape[0])


__all__ = ["ProfileResult", "TimingResult", "measure_timing", "profile_machine", "vocab_size"]
