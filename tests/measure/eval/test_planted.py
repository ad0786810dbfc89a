"""Planted costs: a tiny model whose layers, heads, embedding and hand-off sleep known times.

The profile must measure the planted times, and ``validate`` must predict the wrapped model's
real PPD and greedy runs within 5 % from that profile alone (nothing fitted on the runs).
The sleeps advance a clock the test controls (``VirtualClock``): the tiny model's compute and
other work on the machine take no time on it, so what is measured is the planted times and
the test holds on a busy machine. (Real sleeps on the real clock: benchmarks/planted_timing.py.)
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import measure.decode.local as local_module  # noqa: E402
import measure.profile.probes as probes_module  # noqa: E402
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from measure.hf.kv_ops import append_entries  # noqa: E402
from measure.profile.profile import figure, measure_profile  # noqa: E402
from tests.measure.tiny_models import NUM_LAYERS, planted_model  # noqa: E402
from tests.measure.virtual_clock import VirtualClock  # noqa: E402

LAYER_S = 0.020
EXTRA_ROW_S = 0.008
EMBED_S = 0.004
HEAD_S = 0.030
HANDOFF_PER_LAYER_S = 0.004
EXACT = 1e-9
"""Relative error of a prediction from the planted profile: rounding only (the clock is the
test's, so nothing but the planted sleeps takes time)."""
PROMPTS = [[5, 6, 7, 8, 9]]

pytestmark = pytest.mark.usefixtures("one_thread", "clock")


@pytest.fixture(scope="module")
def clock():
    """The clock every measurement of this module reads; only the planted sleeps move it."""
    with VirtualClock().installed() as clock:
        yield clock


@pytest.fixture(scope="module")
def planted(clock):
    """A tiny Llama whose every piece sleeps a planted time (batch rows add to layers)."""
    return planted_model(
        layer_s=LAYER_S, extra_row_s=EXTRA_ROW_S, embed_s=EMBED_S, head_s=HEAD_S,
        sleep=clock.sleep,
    )  # fmt: skip


@pytest.fixture(scope="module")
def planted_handoff(clock):
    """The in-process hand-off (KV entries appended to main's cache) sleeps per layer."""

    def slow_append(cache, layers, entries):
        clock.sleep(HANDOFF_PER_LAYER_S * len(layers))
        append_entries(cache, layers, entries)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(local_module, "append_entries", slow_append)
        patch.setattr(probes_module, "append_entries", slow_append)
        yield


@pytest.fixture(scope="module")
def profile(planted, planted_handoff):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_profile(
            planted, ks=(1, 2), context_tokens=8, repeats=5, warmup=1, calls=2, threads=1
        )
    finally:
        torch.set_num_threads(threads)


def test_profile_measures_the_planted_costs(profile):
    costs = profile.costs("single", d_bar=2)
    expected = {
        "layer_s": LAYER_S,
        "embedding_s": EMBED_S,
        "early_head_s": HEAD_S,
        "final_head_s": HEAD_S,
    }
    for name, planted_s in expected.items():
        assert getattr(costs, name) == pytest.approx(planted_s), name
    for k in (1, 2):
        planted_s = LAYER_S + (k - 1) * EXTRA_ROW_S
        assert costs.candidate_layer_seconds(k) == pytest.approx(planted_s)
    per_layer = profile.backends["single"].per_candidate_layer_s["handoff_s"]
    assert per_layer == pytest.approx(HANDOFF_PER_LAYER_S)
    assert costs.handoff_s == pytest.approx(2 * per_layer)  # e = d - d_bar = 2 layers
    assert costs.shared_device_slowdown == 2.0  # CPU single backend: one stream at a time
    assert costs.host_s == pytest.approx(0, abs=1e-12)  # nothing planted on the host
    spread = figure(profile, "single", "layer_s[0]")
    assert spread.n == 5 and spread.q1 <= spread.median <= spread.q3


def test_validate_predicts_the_planted_runs_within_5_percent(planted, planted_handoff, profile):
    assert profile.d == NUM_LAYERS
    configs = [PPDConfig(d_bar=2, k=2), PPDConfig(d_bar=3, k=1)]
    result = validate(planted, PROMPTS, profile=profile, configs=configs, max_new_tokens=8)
    table = result.table
    assert list(table["method"]) == ["greedy", *(c.label for c in configs)]
    assert table["exact"].all()
    assert (table["rounds"] == 3).all()
    # on the test's clock the runs last exactly what the planted pieces add up to: every
    # term the prediction prices is the planted one (a term missed or doubled shows in full)
    assert table["rel_err"].abs().max() < EXACT, table[["method", "rel_err"]]
    assert table["simulated_rel_err"].abs().max() < EXACT
    assert result.summary()["fitted_parameters"] == 0
    (line, _) = result.verdicts()
    assert line.startswith("ppd d_bar=2 k=2 main single: ") and "slower than greedy" in line
    assert "largest cost term: sharing one device" in line and "within 5 %" in line
    waterfalls = result.waterfalls
    first = waterfalls[waterfalls["method"] == configs[0].label]
    predicted = first[first["term"] != "measured"]["seconds_per_token"].sum()
    prediction = result.results[0].predicted
    assert predicted * prediction.tokens == pytest.approx(prediction.closed_form_s)
    assert prediction.last_pass_s > 0  # the last pass made no early prediction
    passes = result.passes  # each kind of pass at the closed form's time of its kind
    assert set(passes["priced_by"]) == {"profile"} and "fresh" in set(passes["pass"])
    assert passes["ratio"].sub(1).abs().max() < EXACT, passes


def test_validate_predicts_the_candidate_side_early_head(planted, planted_handoff, profile):
    configs = [PPDConfig(d_bar=2, k=2, early_head="candidates")]
    result = validate(planted, PROMPTS, profile=profile, configs=configs, max_new_tokens=8)
    assert result.table["exact"].all()
    assert result.table["rel_err"].abs().max() < EXACT, result.table[["method", "rel_err"]]


@pytest.fixture(scope="module")
def light_heads(clock):
    """Cheap heads and a costly batch: the k = 3 batch outlasts main's suffix (W_c > W_m)."""
    return planted_model(
        layer_s=LAYER_S, extra_row_s=LAYER_S, embed_s=EMBED_S, head_s=0.002, sleep=clock.sleep
    )


def test_validate_predicts_a_batch_that_outlasts_mains_suffix(light_heads, planted_handoff):
    profile = measure_profile(
        light_heads, ks=(1, 3), context_tokens=8, repeats=5, warmup=1, calls=2, threads=1
    )
    costs = profile.costs("single", d_bar=2)
    work_main = 2 * costs.layer_s + costs.final_head_s
    work_cand = costs.embedding_s + 2 * costs.candidate_layer_seconds(3)
    assert work_cand > 2 * work_main  # the slowdown-2 model was short by W_c - W_m per miss
    configs = [PPDConfig(d_bar=2, k=3), PPDConfig(d_bar=2, k=1)]
    result = validate(light_heads, PROMPTS, profile=profile, configs=configs, max_new_tokens=8)
    assert result.table["exact"].all()
    assert result.table["rel_err"].abs().max() < EXACT, result.table[["method", "rel_err"]]
    assert result.table["simulated_rel_err"].abs().max() < EXACT
    table = result.table  # every prediction has its interval from the profile's samples
    assert len(profile.backends["single"].replicates) == 100
    assert (table["predicted_low_s"] <= table["predicted_high_s"]).all()
    assert table["inside"].map(lambda x: isinstance(x, bool)).all()
    assert result.summary()["with_interval"] == 2
