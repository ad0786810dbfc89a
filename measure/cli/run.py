"""``ppd run`` (real, exact PPD with a Table-3-like report) and ``ppd validate`` (three-way):
their options, derived from the settings they build (``measure.decode.settings.RunRequest``).

Torch-free, so ``ppd --help`` and the closed-form commands build this parser without the
``measure`` extra; the work is ``measure.eval.workflow``, called by
``measure.cli.run_commands`` when a command runs.
"""

from __future__ import annotations

from measure.cli.common import add_drift_floor, honours_no_progress
from measure.decode.settings import (
    CostProfileSettings,
    MethodSettings,
    ReportMethodSettings,
    RunSettings,
    if_stale_help,
)
from measure.settings import (
    ModelSettings,
    OutputSettings,
    PromptSettings,
    SamplingSettings,
)
from ppdmodel.cli import deferred

RUN_METHODS = ("d_bar", "k", "early_head", "backend", "head_dir", "max_new_tokens", "no_assistant")
"""``ppd run``'s methods: one PPD configuration per k, and the HF early-exit rows."""
RUN_METHOD_CHANGES = MethodSettings.ONE
"""``ppd run``'s methods: one d_bar, backend and early head."""
RUN_PROFILE_OPTIONS = ("profile", "check_seconds", "if_stale")
RUN_PROFILE = {
    "profile": {
        "help": "cost profile (ppd measure profile): the verdict then names the largest cost "
        "term and says how well the profile predicted the run"
    },
    "if_stale": {"choices": ("warn", "refuse"), "help": if_stale_help(("warn", "refuse"))},
}
"""``ppd run``'s profile options: a given profile only, checked, never remeasured."""


def register(subparsers) -> None:
    """Add ``run`` and ``validate``."""
    run = subparsers.add_parser(
        "run",
        help="real PPD decoding (exact greedy output) with a Table-3-like report",
        description="Decode the prompts with greedy, PPD at each k and HF assistant_early_exit; "
        "check every method against greedy; print tokens/s, latency for 128 tokens and the "
        "measured p-hat; write report.csv and traces.jsonl (the simulator's replay format).",
    )
    ModelSettings.add_to(run)
    PromptSettings.add_to(run)
    ReportMethodSettings.add_to(run, only=RUN_METHODS, changes=RUN_METHOD_CHANGES)
    SamplingSettings.add_to(run)
    RunSettings.add_to(run, changes=RunSettings.CHANGES)
    CostProfileSettings.add_to(run, only=RUN_PROFILE_OPTIONS, changes=RUN_PROFILE)
    OutputSettings.add_to(run)
    run.set_defaults(func=honours_no_progress(deferred("measure.cli.run_commands:run_command")))
    validate = subparsers.add_parser(
        "validate",
        help="predict greedy and PPD latency from a cost profile, then measure them",
        description="Predict, then measure. With a cost profile measured beforehand "
        "(--profile, from `ppd measure profile`; without it one is measured first and saved "
        "as OUT/profile.json), time greedy and every PPD configuration (each --d-bar x --k x "
        "--early-head x --backend) over --repeats interleaved rounds, predict each from the "
        "profile and the runs' own match outcomes (closed form and simulator; nothing is "
        "fitted on the judged runs), and report predicted vs measured median (IQR), the "
        "relative error, a waterfall from Theorem 4.1 to the prediction and a verdict per "
        "configuration, which block of a pass departs most from the profile in the runs, and "
        "how the runs' fresh and resumed passes compare with the closed form's. "
        "Writes validation.csv, waterfalls.csv, terms.csv, passes.csv, traces.jsonl, "
        "waterfall.png, "
        "predicted_vs_measured.png and layer_times.png (each block's time in the runs beside "
        "the profile's price). --early-exit L --draft-tokens G adds "
        "HF self-speculative early exit (constant draft length g, no confidence stop) to the "
        "rounds, predicted from the profile and the layer-L match sequences. --free L_S "
        "--threshold X|auto adds FREE (approximate: quality against greedy is reported), "
        "predicted from the profile and each run's exit sequence.",
    )
    ModelSettings.add_to(validate)
    PromptSettings.add_to(validate)
    MethodSettings.add_to(validate, skip=("no_assistant",))
    SamplingSettings.add_to(validate)
    RunSettings.add_to(validate, changes=RunSettings.CHANGES)
    CostProfileSettings.add_to(validate)
    add_drift_floor(validate, " (only the profile ppd validate measures itself)")
    OutputSettings.add_to(validate)
    validate.set_defaults(
        func=honours_no_progress(deferred("measure.cli.run_commands:validate_command"))
    )
