"""Timing rows: the simulator's schema, attribution of laps, warm-up excluded, clear errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import measure.clock as clock_module  # noqa: E402
from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from measure.profile.timing import time_greedy, time_layers  # noqa: E402
from sim.formats import LAYER_TIMES_COLUMNS, read_layer_times, write_layer_times  # noqa: E402
from tests.measure.tiny_models import NUM_LAYERS, tiny_model  # noqa: E402

PROMPT = [5, 9, 2, 7]
D = NUM_LAYERS
MARKS_PER_TOKEN = D + 3  # start, after embed, after each layer, after head


pytestmark = pytest.mark.usefixtures("one_thread")


class FakeClock:
    """Call c returns the sum of (i % MARKS_PER_TOKEN) ms for i <= c: lap j lasts j ms."""

    def __init__(self):
        self.calls = 0
        self.now = 0.0

    def __call__(self) -> float:
        self.now += (self.calls % MARKS_PER_TOKEN) * 1e-3
        self.calls += 1
        return self.now


def test_rows_follow_the_schema(tmp_path):
    df = time_layers(tiny_model("gpt2"), PROMPT, n_tokens=3, warmup=1, batch_sizes=(1, 3))
    assert list(df.columns) == list(LAYER_TIMES_COLUMNS)
    one = ["embed"] + ["layer"] * D + ["head"]
    assert list(df["component"]) == one + one
    assert list(df["layer"]) == ([-1, *range(D), -1]) * 2
    assert list(df["batch"]) == [1] * (D + 2) + [3] * (D + 2)
    assert (df["n_samples"] == 3).all()
    assert (df["seconds"] > 0).all() and (df["std_seconds"] >= 0).all()
    back = read_layer_times(write_layer_times(tmp_path / "t.csv", df))
    assert back.equals(df)


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_laps_are_attributed_and_warmup_is_not_timed(monkeypatch, arch):
    clock = FakeClock()
    monkeypatch.setattr(clock_module, "host_clock", clock)
    n_tokens, warmup = 4, 3
    df = time_layers(tiny_model(arch), PROMPT, n_tokens=n_tokens, warmup=warmup, batch_sizes=(1, 2))
    assert clock.calls == 2 * n_tokens * MARKS_PER_TOKEN  # no clock read during warm-up
    expected_ms = [1.0, *(2.0 + i for i in range(D)), D + 2.0]
    for batch in (1, 2):
        rows = df[df["batch"] == batch]
        assert list(rows["seconds"]) == pytest.approx([ms * 1e-3 for ms in expected_ms])
        assert list(rows["std_seconds"]) == pytest.approx([0.0] * (D + 2), abs=1e-12)


def test_warmup_tokens_are_decoded(monkeypatch):
    model = tiny_model("qwen2")
    LayerSplitModel(model)  # its one-time check against the model runs before counting calls
    calls = []
    model.model.layers[0].register_forward_hook(lambda mod, args, out: calls.append(out.shape))
    time_layers(model, PROMPT, n_tokens=2, warmup=3, batch_sizes=(2,))
    assert len(calls) == 1 + 3 + 2  # prefill, warm-up, timed
    assert calls[0][:2] == (1, len(PROMPT)) and calls[-1][:2] == (2, 1)


def test_greedy_token_rows(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(clock_module, "host_clock", clock)
    df = time_greedy(tiny_model("mistral"), torch.tensor([PROMPT]), n_tokens=5, warmup=2)
    assert clock.calls == 2 * 5
    assert list(df["component"]) == ["token"] and list(df["layer"]) == [-1]
    assert int(df["batch"].iloc[0]) == 1 and int(df["n_samples"].iloc[0]) == 5


def test_greedy_real_clock():
    df = time_greedy(tiny_model("gpt2"), PROMPT, n_tokens=2, warmup=0)
    assert df["seconds"].iloc[0] > 0 and df["n_samples"].iloc[0] == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_tokens": 0}, "n_tokens"),
        ({"warmup": -1}, "warmup"),
        ({"batch_sizes": (0,)}, "batch_sizes"),
        ({"batch_sizes": ()}, "batch_sizes"),
        ({"n_tokens": 600}, "context of 512"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        time_layers(tiny_model("gpt2"), PROMPT, **kwargs)


def test_bad_prompt_shape():
    with pytest.raises(ValueError, match="input_ids"):
        time_greedy(tiny_model("gpt2"), [PROMPT, PROMPT])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_events_one_synchronize_per_token(monkeypatch):
    syncs = []
    real = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: (syncs.append(1), real(*a))[1])
    model = tiny_model("llama").cuda()
    df = time_layers(model, PROMPT, n_tokens=3, warmup=1, batch_sizes=(1, 4))
    assert len(syncs) == 2 * 3
    assert (df["seconds"] > 0).all() and (df["n_samples"] == 3).all()
