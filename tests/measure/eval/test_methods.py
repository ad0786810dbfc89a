"""Every registered decoding method runs through ``validate``'s one loop on a tiny model, and
draft-model speculative decoding is exact and predicted from planted costs within PPD's
tolerance (the planted sleeps advance a clock the test controls, ``VirtualClock``)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from measure.eval.free_eval import FreeConfig  # noqa: E402
from measure.eval.hf_early_exit import EarlyExitConfig  # noqa: E402
from measure.eval.judged import JudgedResult  # noqa: E402
from measure.eval.methods import REGISTERED, Greedy, Method, method_of, plan_rows  # noqa: E402
from measure.eval.methods.speculative import SpecConfig, Speculative  # noqa: E402
from measure.eval.ppd_config import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from measure.profile.profile import measure_profile  # noqa: E402
from ppdmodel.cli import main  # noqa: E402
from sim.plan_grid import METHODS  # noqa: E402

LAYER_S = 0.020
EXTRA_ROW_S = 0.008
EMBED_S = 0.004
HEAD_S = 0.030
PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 3]]
TOKENS = 8
TOLERANCE = 0.05
"""PPD's planted tolerance (tests/measure/eval/test_planted.py: within 5 %)."""
EXAMPLES = {
    PPDConfig: PPDConfig(d_bar=2, k=1),
    EarlyExitConfig: EarlyExitConfig(exit_layer=2, g=2),
    FreeConfig: FreeConfig(exit_layer=2, threshold=0.5),
    SpecConfig: SpecConfig(draft="self:2", g=2, profile_repeats=3),
}
"""One configuration of every registered method."""

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def planted_costs() -> dict:
    """Larger than the shared ones: a k-row batch or q + 1 verified positions add
    EXTRA_ROW_S per layer each."""
    return dict(layer_s=LAYER_S, extra_row_s=EXTRA_ROW_S, embed_s=EMBED_S, head_s=HEAD_S)


@pytest.fixture(scope="module")
def profile(planted, clock):
    with clock.installed():
        return measure_profile(planted, ks=(1, 2, 3), context_tokens=8, repeats=3, warmup=1,
                               calls=2, threads=1)  # fmt: skip


@pytest.fixture(scope="module")
def result(planted, profile, clock):
    assert set(EXAMPLES) == set(REGISTERED)  # a new method needs its example here
    methods = [method_of(c) for c in EXAMPLES.values() if not isinstance(c, PPDConfig)]
    with clock.installed():
        return validate(planted, PROMPTS, profile=profile, configs=[EXAMPLES[PPDConfig]],
                        methods=methods, max_new_tokens=TOKENS)  # fmt: skip


def test_every_registered_method_runs_through_one_loop(result):
    table = result.table
    labels = [c.label for c in EXAMPLES.values()]
    assert list(table["method"]) == ["greedy", *labels]
    assert (table["rounds"] == 3).all()
    exact = table[table["method"] != EXAMPLES[FreeConfig].label]
    assert exact["exact"].all()  # FREE is approximate; every other method is greedy's tokens
    assert len(result.verdicts()) == len(labels)
    assert [o.label for o in result.others] == labels[1:]
    for config in EXAMPLES.values():
        assert isinstance(method_of(config), Method)
        assert result.timing.methods[config].results


def test_every_method_declares_its_models(result, profile):
    """Each method's judged result is its bound ``closed_form`` of its runs, simulated where it
    names a schedule, and it picks its own rows of a planner table."""
    judged = {o.config: o for o in [*result.results, *result.others]}
    rows = []
    for method in [Greedy(), *map(method_of, EXAMPLES.values())]:
        assert isinstance(method, Method) and method.plan_method in METHODS
        rows.append(dict(method=method.plan_method, **method.plan_keys))
    table = pd.DataFrame(rows)  # one planner row per method, the others' keys empty
    for i, method in enumerate(map(method_of, EXAMPLES.values()), start=1):
        o = judged[method.config]
        assert isinstance(o, JudgedResult) and o.label == method.label
        runs = result.timing.methods[method.config].runs
        predicted = result.timing.bound[method.label].closed_form(profile, runs)
        assert predicted == o.predicted  # judge sets its own closed form beside the runs
        assert math.isnan(o.simulated_s) == (method.schedule is None)
        assert list(plan_rows(method, table).index) == [i]


def test_speculative_decoding_is_greedy_token_for_token(result):
    greedy = [r.tokens for r in result.timing.greedy.runs]
    for runs in result.timing.methods[EXAMPLES[SpecConfig]].results:  # every round
        assert [r.tokens for r in runs] == greedy


def test_speculative_predicted_within_ppds_tolerance(result):
    (spec,) = [o for o in result.others if o.config == EXAMPLES[SpecConfig]]
    assert spec.exact and 0 <= spec.columns["p_hat"] <= 1
    assert abs(spec.rel_err) < TOLERANCE, spec.rel_err  # planted: exact but for rounding
    assert spec.predicted.iid_s > 0 and spec.predicted.tokens == TOKENS * len(PROMPTS)
    (line,) = spec.report_lines()
    assert "--draft-acceptance" in line and "--draft-cost-ratio" in line
    assert spec.verdict().startswith(f"{spec.label}: ")


def test_speculative_refusals(profile):
    with pytest.raises(ValueError, match="self:N"):
        SpecConfig(draft="self:x", g=1)
    with pytest.raises(ValueError, match="g must"):
        SpecConfig(draft="self:1", g=0)
    with pytest.raises(ValueError, match="fewer than"):
        Speculative(SpecConfig(draft="self:4", g=1)).check(4, profile)
    with pytest.raises(ValueError, match="--k 4"):
        Speculative(SpecConfig(draft="self:1", g=3)).check(4, profile)
    with pytest.raises(ValueError, match="no method is registered"):
        method_of("ppd")


def test_cli_validate_times_speculative_decoding(validate_argv, refuses, tmp_path, capsys):
    base = validate_argv
    for extra, message in (
        (["--spec-draft", "self:2"], "--spec-draft and --draft-tokens must be given together"),
        (["--spec-draft", "self:2", "--draft-tokens", "2"], "add --k 3"),
        (["--spec-draft", "self:4", "--draft-tokens", "1", "--k", "2"], "fewer than"),
    ):
        refuses([*base, *extra], message)
    argv = [*base, "--max-new-tokens", "6", "--d-bar", "2", "--k", "1", "2", "--repeats", "1",
            "--profile-repeats", "2", "--no-interleave-probes", "--spec-draft", "self:2",
            "--draft-tokens", "1"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "speculative decoding spec draft=self:2 g=1: draft of 2 layers, acceptance" in out
    assert "verdict: spec draft=self:2 g=1: " in out
    table = pd.read_csv(tmp_path / "validation.csv")
    row = table[table["method"] == "spec draft=self:2 g=1"].iloc[0]
    assert row["exact"] and row["draft_tokens"] == 1 and 0 <= row["p_hat"] <= 1
