"""Shared fixtures of the validation tests: a planted-cost model whose sleeps advance a clock
the test controls (``VirtualClock``), so a prediction from its profile holds on a busy
machine. A module sets other costs by defining its own ``planted_costs``."""

import pytest

from tests.measure.virtual_clock import VirtualClock

PLANTED_COSTS = dict(layer_s=0.005, extra_row_s=0.002, embed_s=0.001, head_s=0.006)
"""Seconds a layer, an extra row of a layer, the embedding and a head sleep."""


@pytest.fixture(scope="module")
def clock():
    """The clock the planted sleeps advance (installed where a test measures)."""
    return VirtualClock()


@pytest.fixture(scope="module")
def planted_costs() -> dict:
    return PLANTED_COSTS


@pytest.fixture(scope="module")
def planted(clock, planted_costs):
    """Planted sleeps on ``clock``; a layer's extra rows or positions (a k-row batch, q + 1
    verified positions, a deep pass's stacked positions) add ``extra_row_s`` each."""
    from tests.measure.tiny_models import planted_model  # torch: only where a test asks

    return planted_model(**planted_costs, count_positions=True, sleep=clock.sleep)


@pytest.fixture
def validate_argv(tmp_path) -> list[str]:
    """``ppd validate`` of one prompt on a tiny Llama saved with its character tokenizer,
    written to ``tmp_path``."""
    from tests.measure.tiny_models import char_tokenizer, tiny_model  # torch, as above

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=3).save_pretrained(model_dir)
    char_tokenizer().save_pretrained(model_dir)
    return ["validate", "--model", str(model_dir), "--prompt", "hi", "--out", str(tmp_path)]


@pytest.fixture
def refuses(capsys):
    """``refuses(argv, message)``: ``ppd argv`` exits with status 2 before any work, its error
    holding ``message``."""
    from ppdmodel.cli import main

    def check(argv, message: str) -> None:
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert message in capsys.readouterr().err

    return check
