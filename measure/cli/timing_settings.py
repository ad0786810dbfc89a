"""Settings of ``ppd measure timing`` and ``ppd measure profile`` (``ppdmodel.options``): the
prompt timed, the decode steps and warm-up, and the rounds of a cost profile. Torch-free, so
``ppd --help`` builds these options with the core install alone."""

from __future__ import annotations

from dataclasses import dataclass

from measure.decode.settings import BACKENDS
from measure.profile.stats import RANK_REPEATS, REMEASURE_ROUNDS, WIDE_REL_IQR
from measure.settings import ProbeSettings, PromptSettings
from ppdmodel.cli_args import nonnegative_int, positive_float, positive_int
from ppdmodel.options import Settings, like, option


@dataclass(frozen=True, kw_only=True)
class TimingPromptSettings(PromptSettings):
    """The one prompt ``ppd measure timing`` decodes: the first of a prompts file, or the
    text itself (``prompt_text``)."""

    prompt_text: str | None = option(
        None, exclusive="source", required=True, help="the prompt text itself"
    )


@dataclass(frozen=True, kw_only=True)
class ProfileProbeSettings(ProbeSettings):
    """The candidate batch sizes a cost profile times: 1 and 3 by default."""

    GROUP = "candidates"

    ks: tuple[int, ...] = like(ProbeSettings, "ks", (1, 3), help="batch sizes k")


@dataclass(frozen=True, kw_only=True)
class TimingSettings(Settings):
    """How per-layer decode times are taken: untimed warm-up steps first, then timed steps
    at each batch size."""

    GROUP = "timing"

    n_tokens: int = option(16, type=positive_int, help="timed decode steps (default 16)")
    warmup: int = option(2, type=nonnegative_int, help="untimed warm-up steps (default 2)")
    batch_sizes: tuple[int, ...] = option([1], type=positive_int, nargs="+", help="rows per step")


@dataclass(frozen=True, kw_only=True)
class ProfileSettings(Settings):
    """The rounds of a cost profile: backends, cached context, repeats and how wide a price
    may be before it is re-measured (the warm-up is ``TimingSettings.warmup``)."""

    GROUP = "profile"

    backends: tuple[str, ...] = option(
        ["single"], nargs="+", choices=BACKENDS,
        help="backends to profile (default single; dist also runs two gloo ranks)",
    )  # fmt: skip
    context_tokens: int = option(
        128, type=positive_int,
        help="cached positions while timing (default 128: about a prompt plus half the new tokens)",
    )  # fmt: skip
    repeats: int = option(20, type=positive_int, help="timed rounds (default 20)")
    calls: int = option(
        3, type=positive_int, help="back-to-back calls a sample averages (default 3)"
    )
    rank_repeats: int = option(
        RANK_REPEATS, type=positive_int, help=f"two-rank rounds (default {RANK_REPEATS})"
    )
    max_spread: float = option(
        100 * WIDE_REL_IQR, type=positive_float, metavar="PCT",
        help=f"a price whose IQR/median exceeds PCT %% is re-measured (up to "
        f"{REMEASURE_ROUNDS} times), then marked too wide to predict from "
        f"(default {100 * WIDE_REL_IQR:g})",
    )  # fmt: skip


__all__ = ["BACKENDS", "ProfileSettings", "TimingPromptSettings", "TimingSettings"]
