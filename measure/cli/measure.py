"""``ppd measure``: match rates and per-layer times of real models (plus train-head etc.)."""

from __future__ import annotations

import sys

from measure.cli.atlas import register_measure as register_atlas
from measure.cli.common import honours_no_progress
from measure.cli.match_settings import MatchOutputSettings, MatchSamplingSettings
from measure.cli.timing_settings import (
    ProfileProbeSettings,
    ProfileSettings,
    TimingPromptSettings,
    TimingSettings,
)
from measure.cli.train import register_measure as register_train
from measure.settings import (
    DriftSettings,
    GenerationSettings,
    ModelSettings,
    OutputFileSettings,
    ProbeSettings,
    PromptSettings,
    ThreadSettings,
)
from ppdmodel.cli_args import usage

SAMPLING_ABOUT = "main's token rule (default greedy), each prompt's draws seeded from --seed"
"""The description of match-rate's sampling group."""


def register(subparsers) -> None:
    """Add ``measure`` with sub-commands match-rate, timing, profile, train-head,
    reference-model, atlas."""
    parser = subparsers.add_parser(
        "measure",
        help="measure real Hugging Face models: match rates, per-layer times, heads",
        description="Measure a local Hugging Face causal LM (nothing is downloaded).",
    )
    parser.set_defaults(func=lambda args: usage(parser))
    measure_subparsers = parser.add_subparsers(dest="measure_command", metavar="SUBCOMMAND")
    _add_match_rate(measure_subparsers)
    _add_timing(measure_subparsers)
    _add_profile(measure_subparsers)
    register_train(measure_subparsers)
    register_atlas(measure_subparsers)


def _add_match_rate(subparsers) -> None:
    p = subparsers.add_parser(
        "match-rate",
        help="p_correct: is the final token among the early top-k? (paper Table 2)",
        description="One generation per prompt records, for every probed layer and k, whether "
        "the generated token was among the early head's top-k (positions 1..ell). Writes "
        "records (CSV/Parquet), a run.json sidecar and traces.jsonl for `ppd simulate --trace`. "
        "Resumable (--resume); under torchrun each rank takes every WORLD_SIZE-th prompt.",
    )
    ModelSettings.add_to(p)
    PromptSettings.add_to(
        p, skip=("prompt",), changes={"prompts": {"exclusive": None, "help": "prompts file"}}
    )
    ProbeSettings.add_to(p)
    GenerationSettings.add_to(p)
    MatchSamplingSettings.add_to(
        p, only=("sampling", "seed"), title="sampling", about=SAMPLING_ABOUT,
        changes={"seed": {"help": "sampling seed (default 0)"}},
    )  # fmt: skip
    MatchOutputSettings.add_to(p)
    p.set_defaults(func=honours_no_progress(_match_rate))


def _add_timing(subparsers) -> None:
    p = subparsers.add_parser(
        "timing",
        help="per-layer decode times and greedy latency, as the CSV the simulator reads",
        description="Times embedding, every decoder layer and the head per decode step (CUDA "
        "events on GPU, perf_counter on CPU; warm-up excluded), plus whole greedy steps.",
    )
    ModelSettings.add_to(p)
    TimingPromptSettings.add_to(
        p, skip=("prompt", "limit"),
        changes={"prompts": {"help": "prompts file (its first prompt)"}},
    )  # fmt: skip
    TimingSettings.add_to(p)
    OutputFileSettings.add_to(
        p, changes={"out": {"metavar": "CSV", "help": "per-layer times CSV to write"}}
    )
    p.set_defaults(func=_timing)


def _add_profile(subparsers) -> None:
    p = subparsers.add_parser(
        "profile",
        help="measure every cost term of the latency model on this machine (profile JSON)",
        description="Times, in interleaved rounds with warm-up excluded, the per-layer time at "
        "batch 1 and of the k-row candidate batch, the embedding, the early and final heads, "
        "the hand-off copy, host time per token and, for --backends dist, the link between two "
        "gloo ranks by message size and the slowdown of two decode streams at once. Writes one "
        "JSON profile (median and IQR of every figure, provenance, warnings) that `ppd latency "
        "--costs`, `ppd validate --profile` and measure.profile.load_profile read, and a bar "
        "chart of the per-layer times with their spread (FILE-layers.png).",
    )
    ModelSettings.add_to(p)
    OutputFileSettings.add_to(
        p, changes={"out": {"metavar": "FILE.json", "help": "profile file to write"}}
    )
    ProfileProbeSettings.add_to(p, only=("ks",))
    ThreadSettings.add_to(p, changes={"threads": {"help": "torch threads (single backend)"}})
    TimingSettings.add_to(
        p, only=("warmup",), changes={"warmup": {"help": "untimed rounds first (default 2)"}}
    )
    ProfileSettings.add_to(p)
    DriftSettings.add_to(p)
    p.set_defaults(func=_profile)


def _profile(args) -> int:
    from measure.cli.timing_workflow import profile_machine
    from measure.profile.report import format_profile

    result = profile_machine(
        ModelSettings.from_args(args),
        ProfileProbeSettings.from_args(args),
        TimingSettings.from_args(args),
        ProfileSettings.from_args(args),
        ThreadSettings.from_args(args),
        DriftSettings.from_args(args),
        OutputFileSettings.from_args(args),
    )
    print(format_profile(result.profile))
    print(f"wrote {result.path} and {result.plot}")
    return 0


def _match_rate(args) -> int:
    from measure.cli.match_workflow import measure_match_rate
    from measure.match.rate import MeasureOOMError
    from measure.match.records import read_records
    from measure.match.tables import format_table2

    settings = (
        ModelSettings.from_args(args),
        PromptSettings.from_args(args),
        ProbeSettings.from_args(args),
        GenerationSettings.from_args(args),
        MatchSamplingSettings.from_args(args),
        MatchOutputSettings.from_args(args),
    )
    try:
        result = measure_match_rate(*settings, command="measure match-rate")
    except MeasureOOMError as exc:
        print(f"ppd measure match-rate: error: {exc}", file=sys.stderr)
        return 3
    if result.records is None:
        when = "by rank 0" if result.n_done == result.n_prompts else "once every shard is done"
        print(f"{result.n_done}/{result.n_prompts} prompts done; {result.out_dir} is merged {when}")
        return 0
    print("p_correct by layer (n = generated tokens behind each rate):")
    print(format_table2(read_records(result.records)))
    print(f"records: {result.records}\ntraces: {result.traces}\nmetadata: {result.sidecar}")
    return 0


def _timing(args) -> int:
    from measure.cli.timing_workflow import measure_timing

    result = measure_timing(
        ModelSettings.from_args(args),
        TimingPromptSettings.from_args(args),
        TimingSettings.from_args(args),
        OutputFileSettings.from_args(args),
    )
    print(
        f"prompt tokens: {result.prompt_tokens}; sum of layer times {result.layers_s:.6g} s, "
        f"greedy step {result.greedy_step_s:.6g} s; wrote {result.path}"
    )
    return 0
