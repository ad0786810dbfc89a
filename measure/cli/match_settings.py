"""Settings of ``ppd measure match-rate`` and ``ppd measure atlas`` (``ppdmodel.options``):
where a match-rate run writes, its sampling spec, and the atlas's intervals. Torch-free, so
``ppd --help`` builds these options with the core install alone."""

from __future__ import annotations

from dataclasses import dataclass

from measure.match.config import Sampling
from measure.settings import GenerationSettings, OutputSettings, SamplingSettings
from ppdmodel.cli_args import existing_dir, nonnegative_int, positive_int
from ppdmodel.options import Settings, like, option

RECORDS_FORMATS = ("csv", "parquet")
"""``--records-format`` choices (``measure.match.records.RECORD_FORMATS``, which needs pandas)."""


@dataclass(frozen=True, kw_only=True)
class MatchOutputSettings(OutputSettings):
    """Where a match-rate run writes its records, whether it continues an interrupted run in
    the same folder, and whether each prompt is checked against the model's own forward."""

    records_format: str = option(
        "csv", choices=RECORDS_FORMATS, help="records file format (default csv)"
    )
    resume: bool = option(False, action="store_true", help="continue an interrupted run in --out")
    wait_lock: bool = option(
        False, action="store_true",
        help="if another process is using --out, wait for it (default: fail at once)",
    )  # fmt: skip
    no_verify: bool = option(
        False, action="store_true",
        help="skip the per-prompt check against the model's own forward pass",
    )  # fmt: skip

    @property
    def verify(self) -> bool:
        """Check each prompt against the model's own forward pass."""
        return not self.no_verify


@dataclass(frozen=True, kw_only=True)
class MatchSamplingSettings(SamplingSettings):
    """Main's token rule in a match-rate run, given as one spec (``top_k=50``, ``top_p=0.9``;
    None: greedy) and seeded per prompt by ``seed`` as ``SamplingSettings`` seeds it.
    ``ppd measure match-rate`` offers ``sampling`` and ``seed`` only."""

    sampling: str | None = option(None, help="top_k=50 | top_p=0.9 (default greedy)")

    def check(self) -> None:
        """The spec must parse (``measure.match.config.Sampling.parse``)."""
        super().check()
        Sampling.parse(self.sampling)


@dataclass(frozen=True, kw_only=True)
class RecordsSettings(Settings):
    """A finished match-rate run an atlas reads instead of measuring (``--model``'s
    alternative)."""

    GROUP = "records"

    records: str | None = option(
        None, type=existing_dir, metavar="RUN_DIR",
        help="an existing `ppd measure match-rate` output dir",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AtlasGenerationSettings(GenerationSettings):
    """The tokens the atlas generates per prompt: 64 by default (positions to bin)."""

    max_new_tokens: int = like(
        GenerationSettings, "max_new_tokens", 64, help="ell per prompt (default 64)"
    )


@dataclass(frozen=True, kw_only=True)
class AtlasSettings(Settings):
    """The atlas's intervals (bootstrap over whole prompts), position bins and printed
    layers."""

    GROUP = "atlas"

    n_boot: int = option(1000, type=positive_int, help="bootstrap resamples (1000)")
    bin_width: int = option(8, type=positive_int, help="tokens per position bin (8)")
    seed: int = option(0, type=nonnegative_int, help="bootstrap seed (0)")
    show_layers: tuple[int, ...] | None = option(
        None, type=positive_int, nargs="+", help="layers printed"
    )


__all__ = ["AtlasSettings", "MatchOutputSettings", "MatchSamplingSettings", "RecordsSettings"]
