"""What every judged method reports beside its seconds: the prediction's error against the
measured median, its speed-up over greedy, measured and predicted, its row of the validation
table and its verdict line; ``MethodOutcome``, the result a new method returns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from measure.eval.verdict import agreement, verdict_line
from measure.profile.stats import LoadReading, Spread


class JudgedResult:
    """The derived figures of one judged method (PPD, FREE, HF early exit, ...) in ``ppd
    validate``.

    A subclass (a dataclass) supplies ``config`` (with a ``label``), the measured spreads and
    three predicted seconds, all over the same tokens as the measurement.
    """

    config: object
    """The method's frozen config."""
    measured: Spread
    """The method's measured seconds, per round."""
    greedy_measured: Spread
    """Greedy's measured seconds for the same prompts, per round."""
    predicted_s: float
    """The closed-form prediction."""
    simulated_s: float
    """The simulator's prediction (NaN where none is made)."""
    greedy_predicted_s: float
    """Greedy's predicted seconds."""
    exact: bool
    """True when every round reproduced greedy's tokens."""
    approximate: bool = False
    """True for a method whose tokens may depart from greedy's by design (FREE): inexact runs
    are then no failure."""
    method_name: str = "PPD"
    """How a verdict names the method ('of PPD's time')."""

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def rel_err(self) -> float:
        """Predicted / measured median - 1."""
        return self.predicted_s / self.measured.median - 1

    @property
    def simulated_rel_err(self) -> float:
        """Simulated / measured median - 1."""
        return self.simulated_s / self.measured.median - 1

    @property
    def speedup_measured(self) -> float:
        """Greedy's measured median / the method's."""
        return self.greedy_measured.median / self.measured.median

    @property
    def speedup_predicted(self) -> float:
        """Greedy's predicted seconds / the method's."""
        return self.greedy_predicted_s / self.predicted_s

    def common_row(self, columns) -> dict:
        """The table columns every judged method fills (the others None)."""
        m = self.measured
        figures = dict(
            method=self.label, predicted_s=self.predicted_s, simulated_s=self.simulated_s,
            measured_s=m.median, measured_q1_s=m.q1, measured_q3_s=m.q3, rounds=m.n,
            noisy=m.noisy, rel_err=self.rel_err, simulated_rel_err=self.simulated_rel_err,
            agreement=agreement(self.rel_err), speedup_measured=self.speedup_measured,
            speedup_predicted=self.speedup_predicted, exact=self.exact,
        )  # fmt: skip
        return {c: figures.get(c) for c in columns}

    def table_row(self, columns) -> dict:
        """Its row of ``ProfileValidation.table`` (``columns``: the table's)."""
        return self.common_row(columns)

    def cost_terms(self) -> dict:
        """Predicted seconds per token by cost term (``measure.eval.verdict.TERM_LABELS``)."""
        return {}

    def covered_tokens(self) -> int:
        """Tokens the prediction and the measurement cover."""
        return self.predicted.tokens

    def verdict(self, load: LoadReading | None = None) -> str:
        """Faster or slower than greedy, its largest cost term, whether it was predicted."""
        return verdict_line(
            self.label, self.greedy_measured, self.measured, tokens=self.covered_tokens(),
            terms=self.cost_terms() or None, rel_err=self.rel_err, load=load,
            method_name=self.method_name,
        )  # fmt: skip

    def report_lines(self) -> list[str]:
        """What ``ppd validate`` prints of it below the table (none by default)."""
        return []


@dataclass(frozen=True)
class MethodOutcome(JudgedResult):
    """A judged method's result as plain figures: what a method added through
    ``measure.eval.methods`` returns (draft-model speculative decoding)."""

    config: object
    measured: Spread
    greedy_measured: Spread
    predicted_s: float
    """Exact on the runs' own traces, priced by the profile."""
    greedy_predicted_s: float
    exact: bool
    tokens: int
    simulated_s: float = math.nan
    columns: dict = field(default_factory=dict)
    """Further table columns it fills (``iid_s``, ``p_hat``, ``draft_tokens``...)."""
    term_seconds: dict = field(default_factory=dict)
    """Predicted seconds per token by term."""
    lines: tuple[str, ...] = ()
    """What ``ppd validate`` prints of it below the table."""
    method_name: str = "PPD"

    def table_row(self, columns) -> dict:
        row = self.common_row(columns)
        row.update({k: v for k, v in {**self.columns, "tokens": self.tokens}.items() if k in row})
        return row

    def cost_terms(self) -> dict:
        return dict(self.term_seconds)

    def covered_tokens(self) -> int:
        return self.tokens

    def report_lines(self) -> list[str]:
        return list(self.lines)
