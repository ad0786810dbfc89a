"""HF self-speculative early exit inside ``ppd validate``: exact, the steps HF runs are the
predicted ones, and a planted-cost model is predicted from its profile (its sleeps advance a
clock the test controls, ``VirtualClock``: the test holds on a busy machine)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.eval.early_exit import (  # noqa: E402
    greedy_after,
    layer_matches,
    predict_early_exit,
    steps_agree,
)
from measure.eval.hf_early_exit import (  # noqa: E402
    EarlyExitConfig,
    constant_draft,
    hf_early_exit,
    run_early_exit,
)
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from measure.profile.profile import measure_profile  # noqa: E402
from ppdmodel.early_exit import early_exit_steps  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9], [11, 12, 3]]
TOKENS = 10

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", seed=1)


def test_constant_draft_sets_and_restores_the_models_generation_config(model):
    config = model.generation_config
    before = config.num_assistant_tokens_schedule
    with constant_draft(model, 3):
        assert config.num_assistant_tokens == 3
        assert config.num_assistant_tokens_schedule == "constant"
        assert config.assistant_confidence_threshold == 0.0
    assert config.num_assistant_tokens_schedule == before


@pytest.mark.parametrize("exit_layer,g", [(1, 1), (2, 3), (3, 2)])
def test_hf_early_exit_is_exact_and_runs_the_predicted_steps(model, exit_layer, g):
    config = EarlyExitConfig(exit_layer, g)
    runs = run_early_exit(model, PROMPTS, config, max_new_tokens=TOKENS)
    greedy = [greedy_generate(model, p, max_new_tokens=TOKENS) for p in PROMPTS]
    assert [r.tokens for r in runs] == [x.tokens for x in greedy]
    matches = layer_matches(model, PROMPTS, [exit_layer], max_new_tokens=TOKENS)
    assert matches["tokens"] == [x.tokens for x in greedy]
    for run, m in zip(runs, matches[exit_layer], strict=True):
        steps = early_exit_steps(m, g=g, limit=TOKENS)
        assert tuple(run.produced) == steps.produced  # the streamer's steps
        assert tuple(run.drafted()) == steps.drafted  # the hooks' draft forwards
        assert run.decode_tokens == TOKENS - steps.produced[0]
        assert 0 < run.wall_s < run.total_s
        drafts = [f for f in run.forwards if f.draft]
        assert all(f.rows in (1, 2) for f in drafts[steps.drafted[0] :])  # after the prefill
        verify_rows = [f.rows for f in run.forwards if not f.draft][1:]
        assert verify_rows == [q + 1 for q in steps.drafted[1:]]


def test_bad_early_exit_configs_are_refused(model):
    with pytest.raises(ValueError, match="exit_layer"):
        EarlyExitConfig(0, 1)
    with pytest.raises(ValueError, match="g"):
        EarlyExitConfig(2, 0)
    with pytest.raises(ValueError, match=r"early exit layer must be in \[1, d - 1\]"):
        hf_early_exit(model, PROMPTS[0], config=EarlyExitConfig(4, 1), max_new_tokens=4)


def test_greedy_after_counts_the_tokens_after_the_first_step(model):
    run = greedy_generate(model, PROMPTS[0], max_new_tokens=4)
    assert greedy_after([run], [0]) == run.wall_s
    assert greedy_after([run], [2]) == pytest.approx(run.wall_s - run.token_times_s[1])


def test_validate_predicts_planted_early_exit(planted, clock):
    early = [EarlyExitConfig(2, 2), EarlyExitConfig(1, 1)]  # 1 < d/2: outside PPD's domain
    with clock.installed():
        profile = measure_profile(
            planted, ks=(1, 2), context_tokens=8, repeats=3, warmup=1, calls=2, threads=1
        )
        result = validate(
            planted,
            PROMPTS[:1],
            profile=profile,
            configs=[PPDConfig(d_bar=2, k=1)],
            max_new_tokens=8,
            early_exit=early,
        )
    table = result.table
    rows = table[table["exit_layer"].notna()]
    assert list(rows["method"]) == [e.label for e in early]
    assert rows["exact"].all() and rows["steps_agree"].all()
    assert (rows["rounds"] == 3).all() and (rows["draft_tokens"] == [2, 1]).all()
    assert list(rows["exit_layer"]) == [2, 1]
    # the test's clock: only the planted forwards take time; a missing or extra forward moves
    # the error by a whole forward's sleeps
    assert rows["rel_err"].abs().max() < 1e-9, rows[["method", "rel_err"]]
    assert rows["iid_s"].gt(0).all() and rows["simulated_s"].isna().all()
    book = result.bookkeeping
    assert book.runs == 10 and book.per_step_s >= 0 and book.per_draft_s >= 0
    # HF's Python between forwards takes no time on the test's clock: a forward counted in
    # the bookkeeping would add its planted sleeps
    assert book.per_step_s == pytest.approx(0, abs=1e-12)
    assert book.per_draft_s == pytest.approx(0, abs=1e-12)
    for o in result.early_exit:
        p, steps = o.predicted, o.predicted.steps
        assert p.closed_form_s == pytest.approx(steps.draft_s + steps.verify_s + steps.host_s)
        assert p.tokens == 8 - steps.first_step_tokens[0] and steps.steps >= 1
        assert o.speedup_predicted == pytest.approx(o.greedy_predicted_s / p.closed_form_s)
        assert f"{steps.draft_forwards} forwards" in o.details.breakdown(steps)
        assert o.report_lines()[1] == "    " + o.details.breakdown(steps)
        draft, verify, outside = o.details.forward_s  # the median round, split by the hooks
        assert draft > 0 and verify > 0 and outside >= 0
        assert draft + verify + outside == pytest.approx(o.measured.median)
    lines = result.verdicts()
    assert len(lines) == 3 and lines[1].startswith("early exit L=2 g=2: ")
    assert "largest cost term: verify forwards" in lines[1]
    assert "of early exit's time" in lines[1]
    assert "prediction agreed" in lines[1]
    pred, greedy_pred = predict_early_exit(
        profile,
        layer_matches(planted, PROMPTS[:1], [2], max_new_tokens=8)[2],
        early[0],
        max_new_tokens=8,
        bookkeeping=book,
    )
    assert pred == result.early_exit[0].predicted  # nothing taken from the timed runs
    assert greedy_pred == result.early_exit[0].greedy_predicted
    assert steps_agree(result.timing.early_exit[early[0]].runs, pred.steps)


def test_cli_refuses_bad_early_exit_arguments(validate_argv, refuses):
    together = "--early-exit and --draft-tokens must be given together"
    for extra, message in (
        (["--early-exit", "2"], together),
        (["--draft-tokens", "2"], together),
        (["--early-exit", "0", "--draft-tokens", "1"], "--early-exit"),
        (["--early-exit", "4", "--draft-tokens", "1"], "--early-exit: 4 is not in [1, d - 1]"),
    ):
        refuses([*validate_argv, *extra], message)
