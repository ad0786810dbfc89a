"""The one result of a judged method in ``ppd validate`` (``JudgedResult``): what every method's
``judge`` returns (PPD, HF early exit, FREE, draft-model speculative decoding), with the
prediction's error against the measured median, the speed-up over greedy, measured and
predicted, its row of the validation table and its verdict line; and an approximate method's
quality against greedy's tokens (``Quality``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from measure.eval.predict import Prediction, speedup_interval
from measure.eval.turn_speedup import TurnReading
from measure.eval.verdict import agreement, verdict_line
from measure.free.quality import rouge_l, token_agreement
from measure.profile.stats import LoadReading, Spread


@dataclass(frozen=True)
class Quality:
    """An approximate method's output against greedy's, pooled over the prompts."""

    agreement: float
    """Mean over prompts of the share of positions equal to greedy's token."""
    rouge_l: float
    """Mean over prompts of ROUGE-L (token ids) against greedy's output."""

    def describe(self) -> str:
        return f"quality vs greedy: tokens {self.agreement:.3f}, ROUGE-L {self.rouge_l:.3f}"


def quality(runs, greedy_runs) -> Quality:
    """Agreement and ROUGE-L of each run against greedy's tokens, averaged over prompts."""
    pairs = list(zip(runs, greedy_runs, strict=True))
    agree = [token_agreement(r.tokens, g.tokens) for r, g in pairs]
    rouge = [rouge_l(r.tokens, g.tokens) for r, g in pairs]
    return Quality(float(np.mean(agree)), float(np.mean(rouge)))


@dataclass(frozen=True)
class JudgedResult:
    """One judged method: its measured spread and prediction, greedy's over the same tokens,
    and what its checks found. The figures every method has are fields; a method's own extra
    is an optional field (``quality``, PPD's checks) or its ``details`` value."""

    config: object
    """The method's frozen config (with a ``label``)."""
    measured: Spread
    """The method's measured seconds, per round."""
    predicted: Prediction
    """Predicted from the profile and the runs' own traces (nothing fitted on them)."""
    greedy_measured: Spread
    """Greedy's measured seconds for the same tokens, per round."""
    greedy_predicted: Prediction
    """Greedy's predicted seconds for the same tokens."""
    exact: bool
    """True when every round reproduced greedy's tokens."""
    terms: pd.DataFrame | None = None
    """Each block of a pass, priced by the profile and timed in the runs (PPD's
    ``measure.eval.terms.term_check``)."""
    interleaved: Prediction | None = None
    """The prediction from the probes interleaved with the rounds (``--interleave-probes``)."""
    interleaved_greedy: Prediction | None = None
    """Greedy's, from the same probes."""
    turns: TurnReading | None = None
    """Measured over predicted speed-up, turn by turn (``measure.eval.turn_speedup``)."""
    passes: pd.DataFrame | None = None
    """Fresh and resumed passes timed in the runs beside the closed form's time of their kind
    (PPD's ``measure.eval.pass_check``)."""
    quality: Quality | None = None
    """An approximate method's output against greedy's (FREE); None: an exact method."""
    method_name: str = "PPD"
    """How a verdict names the method ('of PPD's time')."""
    columns: dict = field(default_factory=dict)
    """Table columns of its own beside the common ones (``exit_layer``, ``draft_tokens``...)."""
    lines: tuple[str, ...] = ()
    """What ``ppd validate`` prints of it below the table."""
    notes: tuple[str, ...] = ()
    """What its verdict line adds at the end."""
    details: object = None
    """The method's own record (FREE's settled threshold, HF early exit's measured forwards
    and bookkeeping), or None."""

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def approximate(self) -> bool:
        """True for a method whose tokens may depart from greedy's by design: inexact runs are
        then no failure."""
        return self.quality is not None

    @property
    def predicted_s(self) -> float:
        """The closed form's seconds."""
        return self.predicted.closed_form_s

    @property
    def simulated_s(self) -> float:
        """The simulator's seconds (NaN for a method without a schedule)."""
        return self.predicted.simulated_s

    @property
    def greedy_predicted_s(self) -> float:
        return self.greedy_predicted.closed_form_s

    @property
    def rel_err(self) -> float:
        """Predicted / measured median - 1."""
        return self.predicted_s / self.measured.median - 1

    @property
    def simulated_rel_err(self) -> float:
        """Simulated / measured median - 1."""
        return self.simulated_s / self.measured.median - 1

    @property
    def iid_rel_err(self) -> float:
        """The i.i.d. closed form / measured median - 1 (NaN where none is made)."""
        return self.predicted.iid_s / self.measured.median - 1

    @property
    def speedup_measured(self) -> float:
        """Greedy's measured median / the method's."""
        return self.greedy_measured.median / self.measured.median

    @property
    def speedup_predicted(self) -> float:
        """Greedy's predicted seconds / the method's."""
        return self.greedy_predicted_s / self.predicted_s

    @property
    def speedup_band(self):
        """The predicted speed-up's interval (``measure.eval.predict.speedup_interval``)."""
        return speedup_interval(self.greedy_predicted, self.predicted)

    def table_row(self, columns) -> dict:
        """Its row of ``ProfileValidation.table`` (``columns``: the table's; the others None)."""
        m, p, q = self.measured, self.predicted, self.quality
        figures = dict(
            method=self.label, backend=p.backend, tokens=p.tokens, predicted_s=self.predicted_s,
            simulated_s=self.simulated_s, iid_s=p.iid_s, measured_s=m.median, measured_q1_s=m.q1,
            measured_q3_s=m.q3, rounds=m.n, noisy=m.noisy, rel_err=self.rel_err,
            simulated_rel_err=self.simulated_rel_err, agreement=agreement(self.rel_err),
            speedup_measured=self.speedup_measured, speedup_predicted=self.speedup_predicted,
            exact=self.exact, quality_tokens=q and q.agreement, quality_rouge_l=q and q.rouge_l,
            **self.columns,
        )  # fmt: skip
        return {c: figures.get(c) for c in columns}

    def cost_terms(self) -> dict:
        """Predicted seconds per token by cost term (``measure.eval.verdict.TERM_LABELS``)."""
        return self.predicted.terms()

    def waterfall_rows(self) -> list[dict]:
        """The per-token cost terms (seconds) and the measured per-token median beside them."""
        rows = [dict(method=self.label, term=k, seconds_per_token=v)
                for k, v in self.cost_terms().items()]  # fmt: skip
        measured = self.measured.median / self.predicted.tokens
        return [*rows, dict(method=self.label, term="measured", seconds_per_token=measured)]

    def verdict(self, load: LoadReading | None = None) -> str:
        """Faster or slower than greedy, its largest cost term, whether it was predicted, and
        its notes (an approximate method's quality)."""
        line = verdict_line(
            self.label, self.greedy_measured, self.measured, tokens=self.predicted.tokens,
            terms=self.cost_terms() or None, rel_err=self.rel_err, load=load,
            method_name=self.method_name,
        )  # fmt: skip
        notes = list(self.notes)
        if self.quality is not None:
            notes.append(self.quality.describe() + " (approximate)")
        return "; ".join([line, *notes])

    def report_lines(self) -> list[str]:
        """What ``ppd validate`` prints of it below the table."""
        return list(self.lines)
