"""FREE inside ``ppd validate``: a planted-cost model is predicted from its profile and each
run's exit sequence, at fixed and adaptive thresholds, with its quality. The planted sleeps
advance a clock the test controls (``VirtualClock``), so the test holds on a busy machine."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.eval.free_eval import FreeConfig, free_costs, free_table, predict_free  # noqa: E402
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from measure.profile.profile import measure_profile  # noqa: E402
from sim.formats import validate_free_table  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 3]]
TOKENS = 10

pytestmark = pytest.mark.usefixtures("one_thread")


def test_validate_predicts_planted_free(planted, clock):
    free = [FreeConfig(2, 2.0), FreeConfig(2, 0.1), FreeConfig(1, "auto")]
    with clock.installed():
        profile = measure_profile(
            planted, ks=(1, 2, 4), context_tokens=8, repeats=3, warmup=1, calls=2, threads=1
        )
        result = validate(
            planted, PROMPTS, profile=profile, configs=[PPDConfig(d_bar=2, k=1)],
            max_new_tokens=TOKENS, free=free,
        )  # fmt: skip
    table = result.table
    rows = table[table["threshold"].notna()]
    assert list(rows["method"]) == [f.label for f in free]
    # the test's clock: only the planted sleeps take time, so each run is priced exactly (a
    # deep pass or an exit priced wrong shows in full)
    assert rows["rel_err"].abs().max() < 1e-9, rows[["method", "rel_err"]]
    assert (rows["predicted_s"] - rows["simulated_s"]).abs().max() < 1e-9
    never = result.free[0]
    assert never.exact and never.quality.agreement == 1.0 and never.quality.rouge_l == 1.0
    assert never.predicted.p_hat == 0.0
    assert 0 <= result.free[1].predicted.p_hat <= 1
    assert 0 <= result.free[2].details.threshold <= 1  # settled by Algorithm 1 before the rounds
    for o in result.free:
        runs = result.timing.others[o.config].runs
        assert o.predicted == predict_free(
            free_costs(profile), runs, d=profile.d, exit_layer=o.config.exit_layer
        )
        assert sum(o.predicted.terms().values()) * o.predicted.tokens == pytest.approx(
            o.predicted.closed_form_s
        )
    table = free_table(result.free)  # the planner's FREE table, read back as ppd plan does
    back = validate_free_table(table)
    assert list(back.threshold) == [2.0, 0.1, result.free[2].details.threshold]
    assert list(back.quality) == [o.quality.rouge_l for o in result.free]
    assert list(back.exit_rate) == [o.predicted.p_hat for o in result.free]
    lines = result.verdicts()
    assert len(lines) == 4 and lines[1].startswith("free L_s=2 threshold=2.0 sync: ")
    assert "quality vs greedy" in lines[1] and "prediction agreed" in lines[1]


def test_cli_refuses_bad_free_arguments(validate_argv, refuses):
    together = "--free and --threshold must be given together"
    for extra, message in (
        (["--free", "2"], together),
        (["--threshold", "0.5"], together),
        (["--free", "2", "--threshold", "x"], "--threshold"),
        (["--free", "4", "--threshold", "0.5"], "--free: 4 is not in [1, d - 1]"),
    ):
        refuses([*validate_argv, *extra], message)
