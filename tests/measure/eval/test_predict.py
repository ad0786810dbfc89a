"""Predictions from a profile, verdict lines, repeated timing, the printed and drawn report."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import ppdmodel  # noqa: E402
from measure.decode.settings import RunSettings  # noqa: E402
from measure.eval.judged import JudgedResult  # noqa: E402
from measure.eval.plots import (  # noqa: E402
    BREAKDOWN_PARTS,
    latency_breakdown,
    plot_latency_breakdown,
    plot_predicted_vs_measured,
    plot_waterfalls,
)
from measure.eval.predict import (  # noqa: E402
    Prediction,
    last_pass_excess_s,
    modelled_placement,
    predict_greedy,
    predict_ppd,
    predicted_ratios,
    speedup_interval,
)
from measure.eval.repeat import PPDConfig, time_repeated  # noqa: E402
from measure.eval.text import format_table, format_waterfall  # noqa: E402
from measure.eval.validate import ProfileValidation, check_configs  # noqa: E402
from measure.eval.verdict import agreement, largest_term, verdict_line  # noqa: E402
from measure.profile.stats import LoadReading, Spread  # noqa: E402
from ppdmodel.cost_profile import parse_cost_profile  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402
from tests.ppdmodel.profiles import minimal_profile  # noqa: E402

PROFILE = parse_cost_profile(minimal_profile(d=30, serial=True))  # a CPU single backend
RUNS = [
    SimpleNamespace(m=[1, 0, 1, 1, 0, 0, 1], tokens=list(range(8))),
    SimpleNamespace(m=[0, 0, 1], tokens=list(range(4))),  # stopped at an end-of-sequence token
]


def test_ppd_prediction_is_the_closed_form_per_trace_and_the_simulator_agrees():
    config = PPDConfig(d_bar=15, k=3)
    pred = predict_ppd(PROFILE, RUNS, config, max_new_tokens=8)
    costs = PROFILE.costs("single", d_bar=15)
    per_trace = [ppdmodel.trace_latency_seconds(d=30, d_bar=15, m=r.m, k=3, costs=costs)
                 for r in RUNS]  # fmt: skip
    end = last_pass_excess_s(costs, d=30, config=config)
    work_main = 15 * costs.layer_s + costs.final_head_s
    work_cand = costs.embedding_s + 15 * costs.candidate_layer_seconds(3)
    assert work_cand > work_main  # the batch outlasts main's suffix: serial is still exact
    assert end == pytest.approx(costs.early_head_s + work_cand)  # the whole batch, serial
    assert pred.closed_form_s == pytest.approx(sum(per_trace) - end)  # only run 1 hit the limit
    assert pred.simulated_s == pytest.approx(pred.closed_form_s, rel=1e-9)
    assert (pred.tokens, pred.matches, pred.runs) == (12, 5, 2)
    assert pred.p_hat == pytest.approx(5 / 10)
    assert sum(pred.terms().values()) * pred.tokens == pytest.approx(pred.closed_form_s)
    no_limit = predict_ppd(PROFILE, RUNS, config)
    assert no_limit.closed_form_s == pytest.approx(sum(per_trace)) and no_limit.last_pass_s == 0
    assert pred.per_run_s == pytest.approx((per_trace[0] - end, per_trace[1]))  # each prompt's


def test_a_predicted_speedup_takes_its_ratio_within_each_replicate():
    greedy = Prediction(3.0, 3.0, 3, 0, None, replicate_s=(2.0, 3.0, 4.0, 5.0))
    ppd = Prediction(4.0, 4.0, 3, 1, None, replicate_s=(2.5, 3.75, 5.0, 6.25))
    band = speedup_interval(greedy, ppd)  # a drift shared by both sides cancels: 0.8 each
    assert (band.low, band.high) == pytest.approx((0.8, 0.8))
    assert speedup_interval(greedy, Prediction(4.0, 4.0, 3, 1, None)) is None  # no replicates
    other = Prediction(4.0, 4.0, 3, 1, None, backend="dist", replicate_s=ppd.replicate_s)
    assert speedup_interval(greedy, other) is None  # another backend's replicates


def test_predicted_ratios_are_each_prompts_speedup():
    config = PPDConfig(d_bar=15, k=3)
    greedy, ppd = predict_greedy(PROFILE, RUNS), predict_ppd(PROFILE, RUNS, config)
    ratios = predicted_ratios(greedy, ppd)
    pairs = zip(greedy.per_run_s, ppd.per_run_s, strict=True)
    assert ratios == pytest.approx([g / m for g, m in pairs])
    assert sum(greedy.per_run_s) == pytest.approx(greedy.closed_form_s)
    with pytest.raises(ValueError, match="greedy and method must predict the same runs, got 2"):
        predicted_ratios(greedy, predict_ppd(PROFILE, RUNS[:1], config))


def test_single_cpu_predicts_both_placements_with_the_main_schedule():
    main = predict_ppd(PROFILE, RUNS, PPDConfig(15, 3), max_new_tokens=8)
    cand = predict_ppd(PROFILE, RUNS, PPDConfig(15, 3, early_head="candidates"), max_new_tokens=8)
    assert cand.closed_form_s == main.closed_form_s  # one stream at a time: same passes
    gpu = parse_cost_profile(minimal_profile(d=30))  # not serial: two CUDA streams
    assert modelled_placement(PPDConfig(15, 3, early_head="candidates"), gpu) == "candidates"
    assert modelled_placement(PPDConfig(15, 3, early_head="candidates"), PROFILE) == "main"
    dist = PPDConfig(15, 3, early_head="candidates", backend="dist")
    with pytest.raises(KeyError):
        modelled_placement(dist, PROFILE)  # a backend the profile lacks (checked earlier)


def test_greedy_prediction_is_ell_times_g():
    pred = predict_greedy(PROFILE, RUNS)
    costs = PROFILE.costs("single", d_bar=15)
    assert pred.closed_form_s == pytest.approx(12 * costs.greedy_token_seconds(30))
    assert pred.simulated_s == pytest.approx(pred.closed_form_s)


def test_configs_are_checked_against_the_profile():
    assert check_configs(PROFILE, [PPDConfig(15, 3), PPDConfig(15, 3)]) == [PPDConfig(15, 3)]
    with pytest.raises(ValueError, match="no costs for backend 'dist'"):
        check_configs(PROFILE, [PPDConfig(15, 1, backend="dist")])
    with pytest.raises(ValueError, match="k = 2 was not measured"):
        check_configs(PROFILE, [PPDConfig(15, 2)])
    with pytest.raises(ValueError, match="outside Theorem 4.1's domain"):
        check_configs(PROFILE, [PPDConfig(10, 1)])
    with pytest.raises(ValueError, match="early_head must be one of"):
        PPDConfig(15, 1, early_head="side")
    with pytest.raises(ValueError, match="backend must be 'single' or 'dist'"):
        PPDConfig(15, 1, backend="gpu")


@pytest.mark.parametrize(
    ("err", "band"), [(0.0, "within 5 %"), (-0.05, "within 5 %"), (0.1, "5-15 %"),
                      (-0.2, "poor"), (float("nan"), "poor")]
)  # fmt: skip
def test_agreement_bands(err, band):
    assert agreement(err) == band


def test_verdict_line_says_faster_or_slower_why_and_how_well_predicted():
    greedy, ppd = Spread(2.0, 1.95, 2.05, 3), Spread(2.5, 2.4, 2.6, 3)
    terms = {"ideal_s": 0.02, "early_head_s": 0.01, "sharing_s": 0.004, "last_pass_s": -0.001}
    line = verdict_line("ppd x", greedy, ppd, tokens=100, terms=terms, rel_err=-0.03)
    assert line.startswith("ppd x: 1.25x slower than greedy (median 2.5 s vs 2 s over 3")
    assert "largest cost term: early head, 10 ms/token (30 % of PPD's time)" in line
    assert line.endswith("prediction agreed within 5 % (-3.0 %)")
    fast = verdict_line("ppd y", ppd, greedy, tokens=10, load=LoadReading(3, 3, 2))
    assert fast.startswith("ppd y: 1.25x faster than greedy")
    assert "unknown (no profile" in fast and "prediction: none" in fast
    assert fast.endswith("machine LOADED")
    noisy = verdict_line("z", greedy, Spread(2.0, 1.0, 3.0, 3), tokens=1)
    assert "NOISY: PPD IQR/median 100 %" in noisy
    costs = PROFILE.costs("single", d_bar=15)
    split = ppdmodel.latency_waterfall(d=30, d_bar=15, p=0.3, costs=costs)
    assert largest_term(split)[0] == "sharing_s"


CALLS: list = []
"""The hooks' calls in ``timing``'s run, in order."""


@pytest.fixture(scope="module")
def timing():
    torch.set_num_threads(1)
    model = tiny_model("llama", seed=4)
    configs = [PPDConfig(2, 1), PPDConfig(3, 2)]
    settings = RunSettings(repeats=2)
    CALLS.clear()
    return time_repeated(
        model, [[5, 6, 7], [9, 8]], configs, max_new_tokens=4, settings=settings,
        between_rounds=lambda ranks: CALLS.append(("round", ranks)),
        before_run=lambda config: CALLS.append(("run", config)),
        before_prompt=lambda config, i: CALLS.append(("prompt", config, i)),
    )  # fmt: skip


def test_hooks_run_before_every_round_every_run_and_every_prompt(timing):
    """Turning by prompt (the default): prompt 0 with every method, then prompt 1; each
    method's ``before_run`` at the turn of its place in the rotation (places 0, 1, 2 of 3
    over 2 prompts: turns 0, 0, 1)."""
    g, a, b = None, PPDConfig(2, 1), PPDConfig(3, 2)

    def turns(x, y, z):
        return [("run", x), ("prompt", x, 0), ("run", y), ("prompt", y, 0), ("prompt", z, 0),
                ("prompt", x, 1), ("prompt", y, 1), ("run", z), ("prompt", z, 1)]  # fmt: skip

    assert CALLS == [("round", None), *turns(g, a, b), ("round", None), *turns(a, b, g)]


@pytest.mark.parametrize("count", [3, 2])
def test_whole_runs_and_probes_spread_over_the_prompt_turns(count):
    """Turning by prompt, a method that cannot be split (``others``: FREE, early exit) runs
    whole, and every method's ``before_run`` comes, at the turn of its place p of M in the
    rotation: turn p * count // M (3 methods: turns 0, 1, 2 with 3 prompts; 0, 0, 1 with 2)."""
    torch.set_num_threads(1)
    model = tiny_model("llama", seed=4)
    prompts = [[5, 6, 7], [9, 8], [4, 4]][:count]
    a, other, calls = PPDConfig(2, 1), namedtuple("Other", "label")("other"), []

    def whole():
        calls.append(("whole", other))
        return [SimpleNamespace(tokens=[1], wall_s=0.5) for _ in prompts]

    timing = time_repeated(
        model, prompts, [a], others=[(other, whole)], max_new_tokens=3,
        settings=RunSettings(repeats=1),
        before_run=lambda config: calls.append(("run", config)),
        before_prompt=lambda config, i: calls.append(("prompt", config, i)),
    )  # fmt: skip
    g = None
    turns = [
        [("run", g), ("prompt", g, 0), ("prompt", a, 0)],
        [("prompt", g, 1), ("run", a), ("prompt", a, 1)],
        [("prompt", g, 2), ("prompt", a, 2), ("run", other), ("whole", other)],
    ]
    if count == 2:
        turns = [
            [("run", g), ("prompt", g, 0), ("run", a), ("prompt", a, 0)],
            [("prompt", g, 1), ("prompt", a, 1), ("run", other), ("whole", other)],
        ]
    assert calls == [c for turn in turns for c in turn]
    assert [len(m.results[0]) for m in (timing.greedy, timing.ppd[a])] == [count, count]
    assert timing.others[other].totals_s == [0.5 * count] and timing.exact[a]


def test_turning_by_runs_keeps_each_methods_prompts_together():
    torch.set_num_threads(1)
    model = tiny_model("llama", seed=4)
    configs, calls = [PPDConfig(2, 1)], []
    timing = time_repeated(
        model, [[5, 6, 7], [9, 8]], configs, max_new_tokens=3,
        settings=RunSettings(repeats=1, turns="runs"),
        before_run=lambda config: calls.append(("run", config)),
        before_prompt=lambda config, i: calls.append(("prompt", config, i)),
    )  # fmt: skip
    c = configs[0]
    assert calls == [("run", None), ("prompt", None, 0), ("prompt", None, 1),
                     ("run", c), ("prompt", c, 0), ("prompt", c, 1)]  # fmt: skip
    assert all(timing.exact.values()) and len(timing.ppd[c].results[0]) == 2
    with pytest.raises(ValueError, match="turns must be one of prompts, runs, got 'x'"):
        RunSettings(turns="x")


def test_time_repeated_rounds_every_method_and_checks_exactness(timing):
    assert [len(m.results) for m in (timing.greedy, *timing.ppd.values())] == [2, 2, 2]
    assert all(timing.exact.values())
    assert timing.greedy.tokens == 8 and timing.greedy.spread.n == 2
    assert len(timing.greedy.totals_s) == 2 and min(timing.greedy.totals_s) > 0
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        time_repeated(None, [[1]], [], max_new_tokens=1, settings=RunSettings(repeats=0))
    with pytest.raises(ValueError, match="prompts must not be empty"):
        time_repeated(None, [], [], max_new_tokens=1)
    with pytest.raises(ValueError, match=r"names must hold one name per prompt \(1\), got 2"):
        time_repeated(None, [[1]], [], max_new_tokens=1, names=["a", "b"])


def _validation(timing):
    """(greedy prediction, per-configuration results, ProfileValidation) of ``timing`` under
    a minimal profile."""
    profile = parse_cost_profile(minimal_profile(d=4))
    greedy_pred = predict_greedy(profile, timing.greedy.runs)
    results = [
        JudgedResult(c, m.spread, predict_ppd(profile, m.runs, c, max_new_tokens=4),
                     timing.greedy.spread, greedy_pred, timing.exact[c])
        for c, m in timing.ppd.items()
    ]  # fmt: skip
    return greedy_pred, results, ProfileValidation(results, timing, profile)


def test_report_text_and_figures(timing, tmp_path):
    _, results, validation = _validation(timing)
    table = format_table(validation)
    assert table.splitlines()[1].startswith("greedy") and "ppd d_bar=3 k=2" in table
    line = format_waterfall(results[0])
    assert line.startswith("ppd d_bar=2 k=1 main single: layers (Theorem 4.1) ")
    assert "= predicted" in line and "| measured" in line
    plot_waterfalls(validation, tmp_path / "w.png")
    plot_predicted_vs_measured(validation, tmp_path / "p.png")
    for name in ("w.png", "p.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    summary = validation.summary()
    assert summary["configurations"] == 2 and summary["fitted_parameters"] == 0
    assert set(validation.waterfalls["term"]) >= {"ideal_s", "last_pass_s", "measured"}


def test_latency_breakdown_parts_sum_to_the_predictions(timing, tmp_path):
    greedy_pred, results, validation = _validation(timing)
    table = latency_breakdown(validation)
    assert list(table.index) == ["greedy", *(r.config.label for r in results)]
    parts = table[list(BREAKDOWN_PARTS)].sum(axis=1)
    assert parts["greedy"] == pytest.approx(greedy_pred.closed_form_s / greedy_pred.tokens)
    for r in results:
        assert parts[r.config.label] == pytest.approx(
            r.predicted.closed_form_s / r.predicted.tokens
        )
        assert table.loc[r.config.label, "saved_s"] > 0  # some predictions were accepted
    assert table.loc["greedy", "measured_s"] == pytest.approx(
        timing.greedy.spread.median / timing.greedy.tokens
    )
    fig = plot_latency_breakdown(validation)
    fig.savefig(tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_prompt_by_prompt_decodes_the_same_tokens_as_all_at_once():
    """Turning by prompt decodes greedy's and PPD's runs one call per prompt: sampled with
    per-prompt seeds, the tokens and the sequences' names are those of one call for all."""
    from measure.decode.sampling import Decoding

    torch.set_num_threads(1)
    model = tiny_model("llama", seed=4)
    decoding = Decoding(do_sample=True, temperature=0.9)
    kwargs = dict(max_new_tokens=4, seeds=[11, 12], names=["a", "b"])
    prompts, configs = [[5, 6, 7], [9, 8]], [PPDConfig(2, 1)]
    whole = time_repeated(
        model,
        prompts,
        configs,
        **kwargs,
        settings=RunSettings(repeats=1, decoding=decoding, turns="runs"),
    )
    calls = []
    split = time_repeated(model, prompts, configs, **kwargs,
                          settings=RunSettings(repeats=1, decoding=decoding),
                          before_prompt=lambda c, i: calls.append((c, i)))  # fmt: skip
    assert calls == [(None, 0), (configs[0], 0), (None, 1), (configs[0], 1)]
    for a, b in ((whole.greedy, split.greedy), (whole.ppd[configs[0]], split.ppd[configs[0]])):
        assert [r.tokens for r in a.runs] == [r.tokens for r in b.runs]
    names = [r.trace.sequence for r in split.ppd[configs[0]].runs]
    assert names == [r.trace.sequence for r in whole.ppd[configs[0]].runs] == ["a-k1", "b-k1"]
    assert all(split.exact.values()) and all(whole.exact.values())


def test_a_method_the_interleaved_probes_do_not_price_reads_as_dashes():
    """Speculative decoding's draft is not probed between the rounds: its interleaved columns
    say '-', never 'nan +nan%'."""
    from measure.eval.text import _interleaved

    nan = float("nan")
    row = {"interleaved_predicted_s": nan, "interleaved_rel_err": nan, "paired_rel_err": None}
    assert "nan" not in _interleaved(row) and _interleaved(row).split() == [
        "|",
        "-",
        "-",
        "-",
        "|",
        "-",
        "/",
        "-",
    ]
    row.update(interleaved_predicted_s=7.281, interleaved_rel_err=-0.056)
    assert "7.281    -5.6%" in _interleaved(row)
