"""The pair probe on a running rank group (``ppd validate --interleave-probes`` with ``dist``):
the same samples as the profiler's own two ranks, from the group's first two ranks while a
third only joins the barriers, and nothing outside this package callable on a rank."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.launch import call_on_rank  # noqa: E402
from measure.decode.rank_group import RankGroup  # noqa: E402
from measure.profile.ranks import pair_samples_on  # noqa: E402
from tests.measure.decode.test_local import NEW_TOKENS, prompts  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_pair_samples_on_a_group_of_three_ranks_between_tasks():
    model = tiny_model("llama", seed=2)
    with RankGroup(model, world_size=3, timeout_s=60) as group:
        before = group.run(prompts(1, seed=3), d_bar=2, k=2, max_new_tokens=NEW_TOKENS)
        samples = pair_samples_on(group, ks=(1, 2), d_bar=2, context_tokens=8, repeats=2,
                                  warmup=1, window_s=0.005,
                                  placements=("main", "candidates"))  # fmt: skip
        again = pair_samples_on(group, ks=(2,), d_bar=2, context_tokens=8, repeats=1,
                                window_s=0.005)  # fmt: skip
        after = group.run(prompts(1, seed=3), d_bar=2, k=2, max_new_tokens=NEW_TOKENS)
    # each k at both placements: the candidates placement's names carry it after k
    names = {f"pair_{side}_{kind}_s[{k}{where}]" for side in ("main", "cand")
             for kind in ("alone", "both") for k in (1, 2)
             for where in ("", ",candidates")}  # fmt: skip
    assert set(samples) == names | {"rank_layer_s"}
    assert all(len(samples[name]) == 2 and min(samples[name]) > 0 for name in names)
    assert len(samples["rank_layer_s"]) == 2 * 2  # rank 0 alone, per k and round (once)
    assert {len(v) for v in again.values()} == {1}  # the probe kept on the ranks is reused
    assert not any("candidates" in name for name in again)  # the default: main's placement
    assert [r.tokens for r in after] == [r.tokens for r in before]  # the cache left as found


def test_pair_samples_refuse_bad_ks_a_group_without_model_and_other_calls():
    with pytest.raises(ValueError, match="ks must be candidate counts >= 1"):
        pair_samples_on(None, ks=(0,), d_bar=2, context_tokens=8, repeats=1)
    with pytest.raises(ValueError, match="needs a RankGroup made with a model"):
        pair_samples_on(None, ks=(1,), d_bar=2, context_tokens=8, repeats=1)
    with pytest.raises(ValueError, match="placements must be some of"):
        pair_samples_on(None, ks=(1,), d_bar=2, context_tokens=8, repeats=1,
                        placements=("both",))  # fmt: skip
    # only the listed functions: not a name imported into a measure module, not a private one
    for target in ("os:getcwd", "measure.profile.ranks:replace", "measure.lifeline:run_tied",
                   "measure.profile.ranks:_pair_rounds", "measurex.y:f"):  # fmt: skip
        with pytest.raises(ValueError, match="call: one of"):
            call_on_rank(None, target, {})
        with pytest.raises(ValueError, match="call: one of"):
            RankGroup.call(None, target)  # refused before anything is sent
