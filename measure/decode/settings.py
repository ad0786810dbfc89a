"""The settings of real runs, declared once (``ppdmodel.options``): one frozen value per concern
that travels whole from ``ppd run`` / ``ppd validate`` through evaluation to the decoder.

``RunSettings`` holds what every run of one invocation shares: the timing and distributed
options (``--repeats``, ``--turns``, ``--threads``, ``--world-size``, ``--timeout-s``), and
what the command adds once the model is known (stop tokens, the decoding rule, the model
directory the ``dist`` ranks load, progress). ``MethodSettings`` is the grid of methods a
command runs, ``CostProfileSettings`` the cost profile it predicts from and how it is checked,
``RunRequest`` one invocation with every concern's value, checked across them. ``PPDRequest``
is one ``ppd_many`` call: a configuration and its prompts' names and seeds, with the run
settings. Torch-free: the ``ppd`` parser derives its options from these fields.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from measure.decode.decoding import GREEDY, Decoding
from measure.settings import (
    DriftSettings,
    GenerationSettings,
    ModelSettings,
    OutputSettings,
    ProbeSettings,
    PromptSettings,
    SamplingSettings,
    ThreadSettings,
)
from ppdmodel.cli_args import (
    existing_file,
    int_at_least,
    nonnegative_float,
    positive_float,
    positive_int,
)
from ppdmodel.cli_costs import CostSettings
from ppdmodel.cli_settings import ModelParameters
from ppdmodel.options import Command, Settings, like, option, part
from ppdmodel.validation import as_int_tuple

TURNS = ("prompts", "runs")
"""How methods take turns within a timing round (``RunSettings.turns``)."""
BACKENDS = ("single", "dist")
"""``single``: one process (sequential on CPU, two CUDA streams on a GPU); ``dist``: ranks."""
WARMUP_TOKENS = 2
"""Tokens of the untimed greedy warm-up decode before timed PPD runs (``ppd_many``, both
backends)."""
CHECK_SECONDS = 2.0
"""Seconds the profile check of ``ppd validate`` / ``ppd run`` keeps stepping (every backend in
each round), after a warm-up round (``measure.eval.profile_check``)."""
CHECK_ROUNDS = 4
"""Rounds a profile check runs at least, however long they take."""
IF_STALE = ("warn", "remeasure", "refuse")
"""What ``ppd validate`` does when the check before the runs finds the profile stale."""
PROBE_ROUNDS = 2
"""Probe rounds in each gap before a judged round of the interleaved probes, by default (the
first gap adds one warm-up round; ``measure.eval.interleaved``)."""


@dataclass(frozen=True, kw_only=True)
class RunSettings(ThreadSettings):
    """Timing and distributed settings of real runs, with the stop tokens and decoding rule
    every run of an invocation shares (validated on construction). ``threads`` (torch threads
    this process decodes with, for the load reading; None: torch's current) is
    ``ThreadSettings``'."""

    GROUP = "timing"
    CHANGES = {"threads": {"help": "torch threads in this process"}}
    """``changes`` of every command that times real runs (``ppd run``, ``ppd validate``)."""

    repeats: int = option(3, type=positive_int, help="interleaved rounds (default 3)")
    """Interleaved timing rounds per method (``measure.eval.repeat``), >= 1."""
    turns: str = option(
        "prompts", choices=TURNS,
        help="within a round, the methods take turns prompt by prompt (prompts, the default: "
        "each method's round spans the whole round) or decode all prompts in one turn (runs)",
    )  # fmt: skip
    """Within a timing round: ``"prompts"``, the methods take turns prompt by prompt (each
    method's round spans the whole round); ``"runs"``, each method decodes every prompt in one
    turn (``measure.eval.repeat``)."""
    world_size: int = option(2, type=int_at_least(2), help="dist ranks (default 2)")
    """``dist`` ranks: main + world_size - 1 candidate ranks (at most k + 1 are used), >= 2."""
    timeout_s: float = option(600.0, type=positive_float, help="dist watchdog (default 600)")
    """``dist`` watchdog: seconds a run may go without progress, > 0 and finite."""
    eos_token_id: tuple[int, ...] | None = None
    """Token ids that end a sequence (an int or a list is kept as a tuple; None: none)."""
    decoding: Decoding = GREEDY
    """Main's token rule: greedy or sampled (``measure.decode.decoding``)."""
    model_dir: str | None = None
    """Local directory the ``dist`` ranks load the model from (None: a temporary copy)."""
    progress: bool = False
    """Report progress (a bar on a terminal, else a line per finished run with its ETA)."""

    def __post_init__(self) -> None:
        _integer("world_size", self.world_size, 2)
        _integer("repeats", self.repeats, 1)
        if self.threads is not None:
            _integer("threads", self.threads, 1)
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < math.inf:
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {t!r}")
        if self.turns not in TURNS:
            raise ValueError(f"turns must be one of {', '.join(TURNS)}, got {self.turns!r}")
        super().__post_init__()  # the options' own types (integers up to 2**53)

    def check(self) -> None:
        if self.eos_token_id is not None:
            eos = as_int_tuple("eos_token_id", self.eos_token_id, what="a token id")
            object.__setattr__(self, "eos_token_id", eos)
        if not isinstance(self.decoding, Decoding):
            raise ValueError(f"decoding must be a Decoding, got {self.decoding!r}")
        if self.model_dir is not None:
            if not isinstance(self.model_dir, str | Path):
                raise ValueError(
                    f"model_dir must be a directory path or None, got {self.model_dir!r}"
                )
            object.__setattr__(self, "model_dir", str(self.model_dir))
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress must be True or False, got {self.progress!r}")

    def to_dict(self) -> dict:
        """Plain data (for a results file)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunSettings:
        """From ``to_dict``'s data (a record without ``turns`` was timed run by run)."""
        decoding = Decoding.from_dict(data.get("decoding"))
        return cls(**{"turns": "runs", **data, "decoding": decoding})


def _integer(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


DEFAULT_SETTINGS = RunSettings()
"""Every setting at its default (the default argument of the functions that take settings)."""


def draft_model(text: str) -> str:
    """A --spec-draft value: not blank (a path, a known name or self:N, read when the method is
    built: ``measure.eval.methods.speculative.SpecConfig``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a model folder, .gguf file, known name or "
                                         "self:N, got an empty value")  # fmt: skip
    return text


def free_threshold(text: str):
    """A --threshold value: "auto" or a number >= 0."""
    if text == "auto":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or auto, got {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0 or auto, got {text!r}")
    return value


EARLY_HEAD_HELP = (
    "where PPD runs the early head: on main's critical path (main, the paper's Algorithm 2) or "
    "on the candidate side, from main's layer-d_bar hidden state (candidates); default main"
)
"""``ppd run --early-head``'s help (one placement)."""


@dataclass(frozen=True, kw_only=True)
class MethodSettings(GenerationSettings):
    """The methods a command times beside greedy: PPD's grid (each d_bar x k x early head x
    backend, with a trained head or the logit lens), and HF early exit, draft-model speculative
    decoding and FREE, with the token budget they share (``max_new_tokens``:
    ``GenerationSettings``', 128 by default here). The grid's fields hold tuples
    (``ppd run`` offers one value of ``d_bar``, ``backend`` and ``early_head``: ``ONE``)."""

    GROUP = "methods"

    max_new_tokens: int = like(GenerationSettings, "max_new_tokens", 128, help="ell (default 128)")
    d_bar: tuple[int, ...] | None = like(
        ModelParameters, "d_bar", nargs="+",
        help="early layer (default: the head's layer, else the smallest layer >= d/2)",
    )  # fmt: skip
    k: tuple[int, ...] = like(ModelParameters, "k", (1,), nargs="+", help="candidates (default 1)")
    early_head: tuple[str, ...] = like(
        CostSettings, "early_head", ("main",), help="where the early head runs (default main)"
    )
    backend: tuple[str, ...] = option(("single",), nargs="+", choices=BACKENDS, help=None)
    head_dir: str | None = like(
        ProbeSettings, "head_dir", metavar="DIR",
        help="a trained early head (ppd measure train-head: full or translator) used at d_bar",
    )  # fmt: skip
    no_assistant: bool = option(False, action="store_true", help="skip the HF early-exit rows")
    early_exit: tuple[int, ...] = option(
        (), type=positive_int, nargs="+", metavar="L",
        help="also time HF self-speculative early exit (generate(assistant_early_exit=L)) "
        "with each exit layer L in [1, d - 1], a constant draft length from --draft-tokens "
        "and no confidence stop, in the same rounds; predicted from the profile and the "
        "layer-L match sequence of the same prompts (default: none)",
    )  # fmt: skip
    draft_tokens: tuple[int, ...] = option(
        (), type=positive_int, nargs="+", metavar="G",
        help="draft lengths g of --early-exit and --spec-draft (each L or draft x each g; "
        "required with either)",
    )  # fmt: skip
    spec_draft: tuple[str, ...] = option(
        (), type=draft_model, nargs="+", metavar="MODEL",
        help="also time draft-model speculative decoding (the draft proposes g tokens greedily, "
        "the model verifies them in one pass, exact) with each draft: a model folder, .gguf "
        "file or known name sharing the model's tokenizer, or self:N (the model's first N "
        "layers with its final norm and LM head), at each --draft-tokens g, in the same rounds; "
        "predicted from the profile, the draft's own profile (measured first, untimed) and "
        "each run's steps (default: none)",
    )  # fmt: skip
    free: tuple[int, ...] = option(
        (), type=positive_int, nargs="+", metavar="L_S",
        help="also time FREE (measure.free: shallow-deep early exit, synchronized parallel "
        "decoding) with each shallow depth L_S in [1, d - 1] and each --threshold, in the same "
        "rounds; predicted from the profile and each run's exit sequence (default: none)",
    )  # fmt: skip
    threshold: tuple = option(
        (), type=free_threshold, nargs="+", metavar="X|auto",
        help="FREE's exit thresholds (required with --free): a number (above 1: never exit) or "
        "auto (Algorithm 1's Beta mixture, calibrated first on --calibration-sentences prompts)",
    )  # fmt: skip
    calibration_sentences: int = option(
        1, type=positive_int,
        help="prompts --threshold auto calibrates on, untimed, before the rounds (default 1)",
    )  # fmt: skip

    ONE = {"d_bar": {"nargs": None}, "backend": {"nargs": None, "default": "single"},
           "early_head": {"nargs": None, "default": "main", "help": EARLY_HEAD_HELP}}  # fmt: skip
    """``changes`` of a command that offers one d_bar, backend and early head (``ppd run``)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, **given):
        """The value from parsed options; a field offered with one value holds it as a
        one-element tuple."""
        for f in cls.options():
            value = getattr(args, f.name, None)
            if f.metadata["option"].many and value is not None and not isinstance(value, list):
                given.setdefault(f.name, (value,))
        return super().from_args(args, **given)

    def check(self) -> None:
        """The methods that need a second option have it (messages name the options)."""
        if bool(self.early_exit) != bool(self.draft_tokens) and not self.spec_draft:
            raise ValueError("--early-exit and --draft-tokens must be given together")
        if self.early_exit and not self.draft_tokens:
            raise ValueError("--early-exit and --draft-tokens must be given together")
        if self.spec_draft and not self.draft_tokens:
            raise ValueError("--spec-draft and --draft-tokens must be given together")
        if bool(self.free) != bool(self.threshold):
            raise ValueError("--free and --threshold must be given together")


@dataclass(frozen=True, kw_only=True)
class ReportMethodSettings(MethodSettings):
    """``ppd run``'s methods: PPD at k 1 and 3 by default, beside greedy and HF early exit."""

    k: tuple[int, ...] = like(MethodSettings, "k", (1, 3), help="candidates (default 1 3)")


def if_stale_help(choices) -> str:
    """``--if-stale``'s help for these ``choices``."""
    return (
        "when the check before the runs finds a given --profile stale (its price of a greedy "
        "token outside its 95 %% interval, or other work busier by half a CPU or more): warn "
        "and go on (the default)"
        + (", remeasure (a new profile, saved in --out)" if "remeasure" in choices else "")
        + " or refuse (exit 2 before the runs)"
    )


@dataclass(frozen=True, kw_only=True)
class CostProfileSettings(Settings):
    """The cost profile a command predicts from (given, or measured first), the probes that
    re-measure it between the judged rounds, and the check that it is still this machine's
    (``measure.eval.profile_check``)."""

    GROUP = "cost profile"

    profile: str | None = option(
        None, type=existing_file, metavar="FILE",
        help="cost profile measured beforehand (ppd measure profile); default: measure one first",
    )  # fmt: skip
    profile_repeats: int = option(
        20, type=positive_int,
        help="rounds of the profile measured when --profile is not given (default 20)",
    )  # fmt: skip
    accept_wide_prices: bool = like(
        CostSettings, "accept_wide_prices",
        help="predict from a profile whose prices are marked too wide (each prediction says so)",
    )  # fmt: skip
    interleave_probes: bool | None = option(
        None, action=argparse.BooleanOptionalAction,
        help="run the profile's cost probes (the same pieces ppd measure profile times) "
        "between the judged rounds, never derived from the judged runs, build a second profile "
        "from them and predict every configuration from both profiles. On by default: the "
        "interleaved prediction is the one of record, as it saw the runs' machine (a profile "
        "taken beforehand follows the machine's drift since); --no-interleave-probes: the "
        "profile's prediction alone, about a quarter less time",
    )  # fmt: skip
    probe_rounds: int | None = option(
        None, type=positive_int,
        help="probe rounds before every judged round of the interleaved probes (default 2)",
    )  # fmt: skip
    check_seconds: float = option(
        CHECK_SECONDS, type=nonnegative_float,
        help=f"seconds of greedy steps (at least {CHECK_ROUNDS} per backend) that re-time the "
        "profile's price of a greedy token, and read other work's CPUs, before the runs (a given "
        "--profile) and after them: is the profile still this machine's? (0: no check; "
        f"default {CHECK_SECONDS:g})",
    )  # fmt: skip
    if_stale: str = option("warn", choices=IF_STALE, help=if_stale_help(IF_STALE))

    def check(self) -> None:
        if self.probe_rounds is not None and self.interleave_probes is False:
            raise ValueError("--probe-rounds sets the interleaved probes' rounds, which "
                             "--no-interleave-probes turns off: give one of the two")  # fmt: skip

    @property
    def rounds(self) -> int:
        """Probe rounds per gap of the interleaved probes (0 with --no-interleave-probes)."""
        if self.interleave_probes is False:
            return 0
        return PROBE_ROUNDS if self.probe_rounds is None else self.probe_rounds


@dataclass(frozen=True, kw_only=True)
class RunRequest(Command):
    """One ``ppd run`` / ``ppd validate``: every concern's value, and the rules between
    them that need no model (checked on construction)."""

    model: ModelSettings
    prompts: PromptSettings
    methods: MethodSettings
    sampling: SamplingSettings = part(SamplingSettings)
    timing: RunSettings = DEFAULT_SETTINGS
    profile: CostProfileSettings = part(CostProfileSettings)
    output: OutputSettings
    drift: DriftSettings = part(DriftSettings)

    def check(self) -> None:
        m, s, timing = self.methods, self.sampling, self.timing
        if self.profile.profile is not None and self.drift.drift_floor:
            raise ValueError("--drift-floor applies to the profile ppd validate measures itself; "
                             "a given --profile keeps the floor it was measured with (ppd "
                             "measure profile --drift-floor)")  # fmt: skip
        if s.do_sample and m.early_exit:
            raise ValueError("--do-sample: --early-exit times greedy decoding only")
        if s.do_sample and m.spec_draft:
            raise ValueError("--do-sample: --spec-draft times greedy decoding only")
        rows = max(m.draft_tokens, default=0) + 1  # the verify's positions, a k-row batch
        if m.spec_draft and self.profile.profile is None and rows > max(m.k):
            raise ValueError(f"--spec-draft verifies up to {rows} positions at once: add --k "
                             f"{rows} so the profile measured now prices that batch")  # fmt: skip
        if "dist" in m.backend and timing.world_size > max(m.k) + 1:
            raise ValueError(f"--world-size {timing.world_size} is above k + 1 = {max(m.k) + 1} "
                             "(a dist run has one rank for main and at most one per "
                             "candidate)")  # fmt: skip

    def run_settings(self, *, eos_token_id=None) -> RunSettings:
        """The ``RunSettings`` every run shares once the model's stop tokens are known: the
        decoding rule, the model directory the ``dist`` ranks load, progress."""
        s = self.sampling
        decoding = Decoding(True, s.temperature, s.top_k, s.top_p) if s.do_sample else GREEDY
        return replace(self.timing, eos_token_id=eos_token_id, decoding=decoding,
                       model_dir=self.model.model, progress=self.output.progress)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ReportRequest(RunRequest):
    """One ``ppd run``: ``RunRequest`` with ``ppd run``'s methods (``ReportMethodSettings``)."""

    methods: ReportMethodSettings


@dataclass(frozen=True)
class PPDRequest:
    """One ``ppd_many`` call, whole: the configuration (``d_bar``, ``k``, ``backend``,
    ``early_head``, ``head``), the token budget, the prompts' names and seeds, the warm-up and
    the run settings (stop tokens, decoding rule, ``dist``'s ranks and watchdog). It travels
    unchanged to ``measure.decode.local`` or to the ``RankGroup`` that runs it."""

    d_bar: int
    k: int
    max_new_tokens: int
    backend: str = "single"
    early_head: str = "main"
    head: object = None
    """A trained early head, or None (the logit lens)."""
    sequences: list | None = None
    """Each prompt's name (None: "0", "1", ...)."""
    seeds: list | None = None
    """One seed per prompt (sampled decoding), or None."""
    generator: object = None
    """A torch.Generator giving every draw (sampled decoding), or None."""
    warmup: bool = False
    """Decode ``WARMUP_TOKENS`` of the first prompt, untimed, first."""
    settings: RunSettings = DEFAULT_SETTINGS

    MOVED = ("eos_token_id", "decoding", "world_size", "timeout_s")
    """Settings a caller may give beside the request's fields (they go into ``settings``)."""

    @classmethod
    def of(cls, request: PPDRequest | None, given: dict) -> PPDRequest:
        """``request``, or one built from its fields ``given`` as keywords (the form of a
        script); a TypeError for both or neither."""
        if request is not None:
            if given:
                raise TypeError(f"give a PPDRequest or its fields, not both: {sorted(given)}")
            if not isinstance(request, PPDRequest):
                raise ValueError(f"request must be a PPDRequest, got {type(request).__name__}")
            return request
        given = dict(given)
        moved = {k: given.pop(k) for k in cls.MOVED if k in given}
        settings = given.pop("settings", DEFAULT_SETTINGS)
        if moved and isinstance(settings, RunSettings):
            settings = replace(settings, **moved)
        return cls(settings=settings, **given)

    @classmethod
    def field_names(cls) -> frozenset[str]:
        """Its fields' names and ``MOVED``: what ``of`` takes."""
        return frozenset(f.name for f in fields(cls)) | set(cls.MOVED)


__all__ = [
    "CHECK_ROUNDS",
    "CHECK_SECONDS",
    "DEFAULT_SETTINGS",
    "IF_STALE",
    "TURNS",
    "MethodSettings",
    "PPDRequest",
    "CostProfileSettings",
    "ReportMethodSettings",
    "ReportRequest",
    "RunRequest",
    "RunSettings",
]
