"""How real runs are carried out: one frozen value from the CLI through evaluation to the decoder.

``RunSettings`` holds what every run of one invocation shares (stop tokens, the decoding rule)
and the timing and distributed settings, which every hop used to take as loose keyword
arguments (``ppd run``/``ppd validate`` -> ``measure.eval.validate`` / ``report`` ->
``measure.eval.repeat`` -> ``measure.decode.backends``), each with its one default here.
What differs between runs or is the model's (d_bar, k, backend, max_new_tokens, the early
head, prompts with their names and seeds) stays with each call.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from measure.decode.decoding import GREEDY, Decoding
from ppdmodel.validation import as_int_tuple

TURNS = ("prompts", "runs")
"""How methods take turns within a timing round (``RunSettings.turns``)."""


@dataclass(frozen=True)
class RunSettings:
    """Stop tokens, decoding rule, timing and distributed settings of real runs (validated on
    construction)."""

    eos_token_id: tuple[int, ...] | None = None
    """Token ids that end a sequence (an int or a list is kept as a tuple; None: none)."""
    decoding: Decoding = GREEDY
    """Main's token rule: greedy or sampled (``measure.decode.decoding``)."""
    world_size: int = 2
    """``dist`` ranks: main + world_size - 1 candidate ranks (at most k + 1 are used), >= 2."""
    timeout_s: float = 600.0
    """``dist`` watchdog: seconds a run may go without progress, > 0 and finite."""
    model_dir: str | None = None
    """Local directory the ``dist`` ranks load the model from (None: a temporary copy)."""
    repeats: int = 3
    """Interleaved timing rounds per method (``measure.eval.repeat``), >= 1."""
    turns: str = "prompts"
    """Within a timing round: ``"prompts"``, the methods take turns prompt by prompt (each
    method's round spans the whole round); ``"runs"``, each method decodes every prompt in one
    turn (``measure.eval.repeat``)."""
    threads: int | None = None
    """torch threads this process decodes with, for the load reading (None: torch's current)."""
    progress: bool = False
    """Report progress (a bar on a terminal, else a line per finished run with its ETA)."""

    def __post_init__(self) -> None:
        if self.eos_token_id is not None:
            eos = as_int_tuple("eos_token_id", self.eos_token_id, what="a token id")
            object.__setattr__(self, "eos_token_id", eos)
        if not isinstance(self.decoding, Decoding):
            raise ValueError(f"decoding must be a Decoding, got {self.decoding!r}")
        _integer("world_size", self.world_size, 2)
        _integer("repeats", self.repeats, 1)
        if self.turns not in TURNS:
            raise ValueError(f"turns must be one of {', '.join(TURNS)}, got {self.turns!r}")
        if self.threads is not None:
            _integer("threads", self.threads, 1)
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 < t < math.inf:
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {t!r}")
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


WARMUP_TOKENS = 2
"""Tokens of the untimed greedy warm-up decode before timed PPD runs (``ppd_many``, both
backends)."""

DEFAULT_SETTINGS = RunSettings()
"""Every setting at its default (the default argument of the functions that take settings)."""

CHECK_SECONDS = 2.0
"""Seconds the profile check of ``ppd validate`` / ``ppd run`` keeps stepping (every backend in
each round), after a warm-up round (``measure.eval.profile_check``)."""
CHECK_ROUNDS = 4
"""Rounds a profile check runs at least, however long they take."""
IF_STALE = ("warn", "remeasure", "refuse")
"""What ``ppd validate`` does when the check before the runs finds the profile stale."""
