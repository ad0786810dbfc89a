"""``ppd validate`` spawns its dist ranks once: one group for every configuration and round.

Issue 24: each (configuration, round) spawned its own ranks, which loaded the model again (49
loads in one run of 17 configurations).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from measure.decode.settings import RunSettings  # noqa: E402
from measure.eval.repeat import PPDConfig  # noqa: E402
from measure.eval.validate import validate  # noqa: E402
from tests.measure.decode.counting_ranks import count_ranks, counted  # noqa: E402
from tests.measure.eval.fake_validation import fake_profile  # noqa: E402
from tests.measure.tiny_models import tiny_model  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_validate_spawns_ranks_and_loads_the_model_once_per_rank(monkeypatch, tmp_path):
    """2 dist configurations (k = 1 on 2 ranks, k = 3 on 3) x 2 rounds: 3 ranks, started and
    loaded once each (one spawn per (configuration, round) used to make 10 of each)."""
    log = count_ranks(monkeypatch, tmp_path)
    configs = [PPDConfig(2, 1, backend="dist"), PPDConfig(3, 3, "candidates", backend="dist")]
    result = validate(
        tiny_model("llama", seed=2), [[5, 6, 7], [9, 8, 30, 2]], profile=fake_profile(d=4),
        configs=configs, max_new_tokens=6,
        settings=RunSettings(world_size=3, repeats=2, timeout_s=60),
    )  # fmt: skip
    assert result.table["exact"].all()
    for config in configs:
        method = result.timing.ppd[config]
        assert len(method.results) == 2  # rounds
        ranks = {ev["process"] for runs in method.results for r in runs for ev in r.trace.events}
        assert ranks == set(range(min(3, config.k + 1)))
        assert all(r.wall_s > 0 for runs in method.results for r in runs)
    assert counted(log) == {(what, r): 1 for what in ("spawn", "load") for r in range(3)}
