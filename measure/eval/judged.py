"""What every judged method reports beside its seconds: the prediction's error against the
measured median, and its speed-up over greedy, measured and predicted."""

from __future__ import annotations

from measure.profile.stats import Spread


class JudgedResult:
    """The derived figures of one judged method (PPD, FREE, HF early exit) in ``ppd validate``.

    A subclass (a dataclass) supplies the measured spreads and three predicted seconds, all
    over the same tokens as the measurement.
    """

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
