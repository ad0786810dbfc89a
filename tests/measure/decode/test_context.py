"""Prompt + new tokens must fit the model's context: refused with the numbers, before any work.

A GPT-2 of 64 positions used to crash with IndexError (learned position embeddings); a Llama of
256 positions used to extrapolate RoPE silently past its context. Every generating API and
command refuses both up front.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from measure.checks import check_context, context_length  # noqa: E402
from measure.decode.backends import ppd_generate, ppd_many  # noqa: E402
from measure.decode.greedy import greedy_generate  # noqa: E402
from measure.decode.launch import ppd_dist_many  # noqa: E402
from measure.eval.report import table3  # noqa: E402
from measure.hf import layer_split  # noqa: E402
from measure.hf.layer_split import LayerSplitModel  # noqa: E402
from measure.match.rate import match_rates  # noqa: E402
from measure.match.records import run_match_rate  # noqa: E402
from measure.profile.timing import time_layers  # noqa: E402
from ppdmodel.cli import main  # noqa: E402
from tests.measure.tiny_models import char_tokenizer, tiny_config, tiny_model  # noqa: E402

torch.set_num_threads(1)
CONTEXTS = {"gpt2": 64, "llama": 256}
"""The two models of issue 10: learned positions (GPT-2) and rotary ones (Llama)."""


def small(arch: str):
    if arch == "gpt2":
        return tiny_model("gpt2", n_positions=CONTEXTS["gpt2"])
    return tiny_model("llama", max_position_embeddings=CONTEXTS["llama"])


@pytest.fixture(scope="module", params=sorted(CONTEXTS))
def arch_model(request):
    return request.param, small(request.param)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if any decoding starts (the check must come first)."""

    def refuse(*args, **kwargs):
        raise AssertionError("decoding started before the context check")

    monkeypatch.setattr(LayerSplitModel, "prefill", refuse)
    monkeypatch.setattr(LayerSplitModel, "embed", refuse)
    # the one-time layout check of a new LayerSplitModel (a short forward) is not decoding
    monkeypatch.setattr(layer_split, "verify_layout", lambda lsm: 0.0)


def test_context_length_of_each_config_field():
    assert context_length(tiny_config("gpt2", n_positions=64)) == 64
    assert context_length(small("llama")) == 256
    assert context_length(SimpleNamespace(max_seq_len=2048)) == 2048
    assert context_length(SimpleNamespace(hidden_size=8)) is None  # recurrent models: no limit
    assert context_length(SimpleNamespace(max_position_embeddings=None, n_positions=32)) == 32


def test_message_gives_prompt_tokens_new_tokens_and_context():
    config = tiny_config("gpt2", n_positions=64)
    check_context(config, 60, 4)  # exactly the context
    with pytest.raises(ValueError) as info:
        check_context(config, [3, 60], 5, names=["a", "b"])
    message = str(info.value)
    assert "prompt 'b' has 60 tokens + max_new_tokens 5 = 65 positions" in message
    assert "context of 64" in message and "max_new_tokens <= 4" in message
    with pytest.raises(ValueError, match="prompts of fewer than 64 tokens"):
        check_context(config, 70, 1)
    check_context(SimpleNamespace(), 10**6, 10**6)  # no context field: not checked
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        check_context(config, 3, None)


def test_every_generating_api_refuses_before_any_work(arch_model, no_work, tmp_path):
    arch, model = arch_model
    context = CONTEXTS[arch]
    fits, too_long = [1, 2, 3], list(range(1, 41))
    new = context - 20  # fits after a 3-token prompt, not after a 40-token one
    expected = (
        f"has 40 tokens \\+ max_new_tokens {new} = {new + 40} positions.*context of {context}"
    )
    calls = [
        lambda: greedy_generate(model, too_long, max_new_tokens=new),
        lambda: ppd_generate(model, too_long, d_bar=2, k=1, max_new_tokens=new),
        lambda: ppd_many(model, [fits, too_long], d_bar=2, k=1, max_new_tokens=new),
        lambda: table3(model, [fits, too_long], d_bar=2, ks=(1,), max_new_tokens=new),
        lambda: match_rates(model, [fits, too_long], ks=(1,), max_new_tokens=new),
        lambda: time_layers(model, too_long, n_tokens=new - 2, warmup=2),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="has 40 tokens") as info:
            call()
        assert str(context) in str(info.value)
    with pytest.raises(ValueError, match=expected):
        ppd_many(model, [fits, too_long], d_bar=2, k=1, max_new_tokens=new)


def test_dist_refuses_before_spawning(monkeypatch, tmp_path):
    import measure.decode.launch as launch

    monkeypatch.setattr(launch, "RankGroup", lambda *a, **kw: pytest.fail("ranks were spawned"))
    model = small("gpt2")
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="prompt 'long' has 60 tokens.*context of 64"):
        ppd_dist_many(
            str(tmp_path), [[1, 2], [1] * 60], d_bar=2, k=1, max_new_tokens=8,
            sequences=["short", "long"],
        )  # fmt: skip


def test_run_match_rate_refuses_before_touching_out_dir(tmp_path, no_work):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(json.dumps({"id": f"p{i}", "prompt": "x" * n}) for i, n in enumerate([3, 50]))
    )
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="prompt 'p1' has 50 tokens.*context of 64"):
        run_match_rate(
            small("gpt2"), prompts, out, tokenizer=char_tokenizer(), ks=(1,), max_new_tokens=20
        )
    assert not out.exists()  # a resumed run is refused the same way, before any work


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2-64")
    small("gpt2").save_pretrained(path)
    char_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--prompt", "hello", "--max-new-tokens", "200", "--no-assistant"],
        ["validate", "--prompt", "hello", "--max-new-tokens", "200"],
        ["measure", "match-rate", "--prompts", "PROMPTS", "--max-new-tokens", "200"],
        ["measure", "timing", "--prompt-text", "hello", "--n-tokens", "200"],
    ],
    ids=["run", "validate", "match-rate", "timing"],
)
def test_commands_refuse_with_the_numbers(command, gpt2_dir, tmp_path, capsys, no_work):
    from measure.datasets import sample_path

    argv = [str(sample_path("jsonl")) if a == "PROMPTS" else a for a in command]
    out = tmp_path / ("t.csv" if "timing" in command else "out")
    with pytest.raises(SystemExit) as info:
        main([*argv, "--model", str(gpt2_dir), "--out", str(out)])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err
    assert "context of 64" in err and "tokens +" in err
