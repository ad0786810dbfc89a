"""The logit lens as a head object, and head files refused on a model whose LM head differs."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from measure.decode.local import ppd_single
from measure.free.decode import free_generate
from measure.hf.layer_split import LayerSplitModel
from measure.hf.lens import EarlyHead, LogitLens, resolve_head
from measure.match.rate import match_rates
from measure.train.distill import new_head
from measure.train.head_io import head_layer, head_name, load_head
from measure.train.heads import CONFIG_NAME, HeadConfig, TrainedHead, train_head
from tests.measure.tiny_models import tiny_model

pytestmark = pytest.mark.usefixtures("one_thread")
LAYER = 2
PROMPT = [3, 17, 42, 5]


@pytest.fixture(scope="module")
def twins():
    """Two random models of one shape: same config, different weights."""
    return tiny_model("llama", seed=0), tiny_model("llama", seed=1)


@pytest.fixture(scope="module")
def trained(twins, tmp_path_factory):
    """A full head trained for one step on the first twin, saved."""
    ids = torch.randint(0, 128, (4, 9), generator=torch.Generator().manual_seed(0))
    config = HeadConfig.for_model(twins[0], LAYER, epochs=1, batch_size=4, micro_batch_size=4)
    head = train_head(twins[0], LAYER, ids, config)
    return head.save(tmp_path_factory.mktemp("heads") / "full")


def test_logit_lens_is_a_head_beside_the_trained_ones(twins):
    model = twins[0]
    lsm = LayerSplitModel(model)
    lens = LogitLens(model)
    h = torch.randn(2, 3, model.config.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(lens(h), lsm.logits(h))
        out = model(torch.tensor([PROMPT]), output_hidden_states=True)
        torch.testing.assert_close(lens(out.hidden_states[-1]), out.logits)  # the final head
    heads = [lens, new_head(model, "full", LAYER), new_head(model, "translator", LAYER)]
    assert all(isinstance(head, EarlyHead) for head in heads)
    assert [head_name(head) for head in heads] == ["shared", "trained", "translator"]
    assert [head_layer(head) for head in heads] == [None, LAYER, LAYER]
    assert head_name(None) == "shared" and head_layer(None) is None
    assert isinstance(lsm.head, LogitLens) and resolve_head(None, lsm.lens) is lsm.lens


def test_an_explicit_logit_lens_decodes_as_no_head(twins):
    model = twins[0]
    plain = ppd_single(model, PROMPT, d_bar=LAYER, k=2, max_new_tokens=6)
    lens = ppd_single(model, PROMPT, d_bar=LAYER, k=2, max_new_tokens=6, head=LogitLens(model))
    assert lens.tokens == plain.tokens and lens.m == plain.m
    assert lens.trace.head == plain.trace.head == "shared"


def test_fingerprint_is_stable_and_follows_the_weights(twins):
    first, second = twins
    assert LogitLens(first).fingerprint() == LogitLens(tiny_model("llama", seed=0)).fingerprint()
    assert LogitLens(first).sha256("float32") != LogitLens(second).sha256("float32")
    model = copy.deepcopy(first)
    before = LogitLens(model).sha256("float32")
    with torch.no_grad():
        model.model.norm.weight[0] += 1  # the final norm counts too
    assert LogitLens(model).sha256("float32") != before


@pytest.mark.parametrize("kind", ["full", "translator"])
def test_head_file_is_refused_on_another_model_of_the_same_shape(twins, tmp_path, kind):
    first, second = twins
    directory = new_head(first, kind, LAYER).save(tmp_path / kind)
    record = json.loads((directory / CONFIG_NAME).read_text())
    assert record["lm_head_dtype"] == "float32"
    assert record["lm_head_sha256"] == LogitLens(first).fingerprint().sha256
    assert set(record["lm_head_sha256"]) == {"float32", "bfloat16", "float16"}
    head = load_head(directory, first)  # its own model: works
    assert ppd_single(first, PROMPT, d_bar=LAYER, k=2, max_new_tokens=4, head=head).tokens
    ours, theirs = record["lm_head_sha256"]["float32"], LogitLens(second).sha256("float32")
    with pytest.raises(ValueError, match="sha256") as info:
        load_head(directory, second)
    message = str(info.value)
    assert str(directory) in message and ours in message and theirs in message
    assert "train" in message  # what to do


def test_a_loaded_head_is_refused_where_it_is_used(twins, trained):
    first, second = twins
    head = TrainedHead.load(trained)  # no model to check against yet
    assert head.source == trained
    with pytest.raises(ValueError, match=str(trained)):
        LayerSplitModel(second, head=head)
    with pytest.raises(ValueError, match="sha256"):
        ppd_single(second, PROMPT, d_bar=LAYER, k=2, max_new_tokens=4, head=head)
    with pytest.raises(ValueError, match="sha256"):
        free_generate(second, PROMPT, exit_layer=LAYER, threshold=0.5, max_new_tokens=4, head=head)
    with pytest.raises(ValueError, match="sha256"):
        match_rates(second, [PROMPT], layers=[LAYER], ks=(1,), max_new_tokens=3, heads=[head])
    df = match_rates(first, [PROMPT], layers=[LAYER], ks=(1,), max_new_tokens=3, heads=[head])
    assert set(df["head"]) == {"shared", "trained"}
    assert head.trained_against == TrainedHead.load(trained).trained_against  # saved again


def test_an_in_memory_head_is_refused_on_another_model(twins):
    first, second = twins
    with pytest.raises(ValueError, match="not from a file"):
        LayerSplitModel(second, head=TrainedHead.from_model(first, LAYER))


def test_an_old_head_file_loads_with_a_warning(twins, trained, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    for path in trained.iterdir():
        (old / path.name).write_bytes(path.read_bytes())
    record = json.loads((old / CONFIG_NAME).read_text())
    del record["lm_head_sha256"], record["lm_head_dtype"]
    (old / CONFIG_NAME).write_text(json.dumps(record))
    with pytest.warns(UserWarning, match="records no LM head hash"):
        head = load_head(old, twins[1])  # cannot be checked: used as given
    assert head.trained_against is None
    assert LayerSplitModel(twins[1], head=head).head is head


@pytest.mark.parametrize(
    ("trained_in", "used_in"),
    [
        ("float32", "float32"),
        ("float32", "bfloat16"),
        ("float32", "float16"),
        ("bfloat16", "float32"),
        ("bfloat16", "bfloat16"),
    ],  # fmt: skip
)
def test_a_head_is_accepted_by_other_loads_of_its_checkpoint(twins, trained_in, used_in):
    """Not bfloat16 -> float16: neither rounding of the float32 checkpoint gives the other."""
    checkpoint = copy.deepcopy(twins[0])  # a float32 checkpoint, loaded in two dtypes
    head = TrainedHead.from_model(copy.deepcopy(checkpoint).to(getattr(torch, trained_in)), 2)
    assert head.trained_against.dtype == trained_in
    used = copy.deepcopy(checkpoint).to(getattr(torch, used_in))
    assert LayerSplitModel(used, head=head, verify=False).head is head
    other = copy.deepcopy(twins[1]).to(getattr(torch, used_in))
    with pytest.raises(ValueError, match=trained_in):
        LayerSplitModel(other, head=head, verify=False)


def test_a_float32_load_of_a_bfloat16_checkpoint_accepts_its_heads(twins):
    checkpoint = copy.deepcopy(twins[0]).to(torch.bfloat16)  # stored in bfloat16
    head = TrainedHead.from_model(copy.deepcopy(checkpoint).float(), LAYER)  # trained in float32
    assert LayerSplitModel(checkpoint, head=head, verify=False).head is head  # used in bfloat16
