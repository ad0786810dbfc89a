"""The decoding methods ``ppd validate`` times, predicts and judges, behind one interface
(``base.Method``: a frozen config, ``check``, its simulator ``schedule`` and planner rows
(``plan_rows``), ``bind`` -> ``decode``, ``closed_form`` and ``judge``, which returns the one
result type ``measure.eval.judged.JudgedResult``).

- ``greedy.py``: the baseline (greedy, or the sampler PPD is checked against);
- ``ppd.py``: PPD (``PPDConfig``), either backend;
- ``hf_early_exit.py``: HF self-speculative early exit (``EarlyExitConfig``);
- ``free.py``: FREE (``FreeConfig``), approximate;
- ``speculative.py``: draft-model speculative decoding (``SpecConfig``).

A new method is a module here and one line in ``REGISTERED``: ``validate`` and
``time_repeated`` time, bind and judge every method through this interface; only the report's
tables read a kind of method apart, by its config's type (``RepeatedTiming.ppd``,
``ProfileValidation.free``).
"""

from __future__ import annotations

from measure.eval.free_eval import FreeConfig
from measure.eval.hf_early_exit import EarlyExitConfig
from measure.eval.methods.base import (
    Bound,
    JudgeInputs,
    Method,
    RunInputs,
    TimedMethod,
    plan_rows,
)
from measure.eval.methods.free import Free
from measure.eval.methods.greedy import Greedy
from measure.eval.methods.hf_early_exit import HFEarlyExit
from measure.eval.methods.ppd import PPD
from measure.eval.methods.speculative import SpecConfig, Speculative
from measure.eval.ppd_config import PPDConfig

REGISTERED = {
    PPDConfig: PPD,
    EarlyExitConfig: HFEarlyExit,
    FreeConfig: Free,
    SpecConfig: Speculative,
}
"""Each method's config type and the method that runs it (greedy, the baseline, has none)."""


def method_of(config) -> Method:
    """The registered method that runs ``config``."""
    kind = REGISTERED.get(type(config))
    if kind is None:
        names = ", ".join(t.__name__ for t in REGISTERED)
        raise ValueError(f"no method is registered for {config!r} (configs: {names})")
    return kind(config)


__all__ = ["REGISTERED", "Bound", "Greedy", "JudgeInputs", "Method", "RunInputs", "TimedMethod",
           "method_of", "plan_rows"]  # fmt: skip
