"""Fuzz the public API of ``measure`` with malformed input (issue 47), as tests/test_fuzz_api.py
fuzzes ppdmodel and sim, with its malformed values, its naming rule and its result check.

Targets: every name of ``measure.__all__`` and ``measure.profile.__all__`` (a target named
``name[variant]`` is one more valid starting point), ``ppd_generate_hf`` through transformers'
door, ``model.generate(custom_generate=ppd_generate_hf)``; each with valid
keyword arguments chosen by hand on tiny random models built once per session (``World``:
from configs, a short context so no valid call runs long), and extra strategies for what a
measure function takes: token ids (0.5, NaN, out of the vocabulary, wrong shapes and dtypes),
generation options (sampling settings at their limits, seeds of every integer-like type),
heads (trained for another layer, of another model), files (missing paths, folders where a
file is expected, malformed JSON, a file that is no model) and malformed DataFrames.

Each target's valid call must succeed and pass the target's own check of its result
(``expect``: tokens generated, rows measured, a model loaded): a valid call that is refused,
or does nothing, would leave every malformed call refused before the body (a no-op fuzz).
Whatever the input, a call must return (numbers in its result finite and >= 0, except where
the result is a record built from the arguments or holds logits) or raise ValueError or
TypeError naming an offending parameter (``names_a_parameter`` of test_fuzz_api), within
``CALL_TIME_BOUND_S``; through ``model.generate``, an option refused by transformers before
PPD's code runs is transformers' (counted apart, ``transformers``).

Profiles: the CI profile (default) runs ``CI_EXAMPLES`` examples per target (fewer for the
slow targets, ``Target.examples``), deterministically. The slow profile runs
``SLOW_EXAMPLES`` random examples per target and then each ``FIXED_BAD`` value in each
parameter (``test_fuzz_measure_sweep_slow``): ``PPD_FUZZ=slow python -m pytest
tests/test_fuzz_measure.py -m slow``. ``PPD_FUZZ_MEASURE_REPORT``: a path to write the counts
to as JSON; ``PPD_FUZZ_MEASURE_COUNT_ONLY=1``: count the outcomes of every call, failing none.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field, fields, is_dataclass
from numbers import Number
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import measure  # noqa: E402
import measure.profile  # noqa: E402
from measure.decode.sampling import GREEDY, Decoding  # noqa: E402
from measure.free.threshold import AdaptiveThreshold  # noqa: E402
from tests.measure.tiny_models import (  # noqa: E402
    char_tokenizer,
    save_tiny_gguf,
    save_tiny_model_dir,
    tiny_model,
)
from tests.ppdmodel.profiles import minimal_profile  # noqa: E402
from tests.test_fuzz_api import (  # noqa: E402
    FIXED_BAD,
    frame_mutations,
    malformed,
    names_a_parameter,
    offending_names,
    report_fuzz,
)

CI_EXAMPLES = int(os.environ.get("PPD_FUZZ_MEASURE_EXAMPLES", 40))
"""Examples per target in the CI profile (``Target.examples`` caps the slow targets;
``PPD_FUZZ_MEASURE_EXAMPLES`` sets another number, for a quick look)."""
SLOW_EXAMPLES = 1000
"""Examples per target in the slow profile (``5 * Target.examples`` for the slow targets)."""
CALL_TIME_BOUND_S = 20.0
"""No single call may take longer: a call still running then is stopped (``Hang``) and fails
the test (the tiny models' short context keeps valid calls to a second or two; the bound is
wide for a busy machine)."""
CONTEXT = 24
"""Context of the fuzzed models (max_position_embeddings): a valid max_new_tokens is small."""
COUNT_ONLY = os.environ.get("PPD_FUZZ_MEASURE_COUNT_ONLY") == "1"
"""Count every outcome and fail no call (every example of every target runs): the counts of a
whole profile, as the closing note of an issue reports them."""
ALLOWED = ("ok", "ValueError", "TypeError", "transformers")
"""Outcomes a call may have (``transformers``: ``generate`` refused an option of its own before
PPD's code ran, ``RefusedByTransformers``)."""
REPORTED = ("ok", "ValueError", "TypeError", "transformers", "unnamed", "other", "over bound")

COUNTS: Counter = Counter()
"""Outcome of every fuzzed call (``other``: a crash or a non-finite or negative result)."""
PROBLEMS: list[str] = []
"""The calls that counted ``unnamed`` or ``other`` (printed at the end)."""


# -- the world: tiny models and files, built once per session ---------------------------------


class World:
    """Everything a valid call needs: tiny models, heads, tokenizer, data and files."""

    def __init__(self, root: Path) -> None:
        torch.set_num_threads(1)
        self.root = root
        self.model = tiny_model("llama", max_position_embeddings=CONTEXT)
        self.gpt2 = tiny_model("gpt2", n_positions=CONTEXT)
        self.other = tiny_model("llama", vocab_size=64, max_position_embeddings=CONTEXT)
        self.lsm = measure.LayerSplitModel(self.model)
        self.tokenizer = char_tokenizer()
        self.ids = [5, 6, 7, 8]
        self.prompts = [[5, 6, 7], [9, 10, 11, 12]]
        self.head = measure.new_head(self.model, "full", 2)
        self.translator = measure.new_head(self.model, "translator", 2)
        self.head_3 = measure.new_head(self.model, "full", 3)
        self.head_dir = self.head.save(root / "head")
        self.model_dir = save_tiny_model_dir(root / "model")
        self.gguf = save_tiny_gguf(root / "tiny.gguf")
        self.prompts_file = root / "prompts.jsonl"
        self.prompts_file.write_text(
            "".join(json.dumps({"id": f"p{i}", "prompt": t}) + "\n"
                    for i, t in enumerate(["hello there", "the cat sat", "a b c"]))
        )  # fmt: skip
        self.profile_file = root / "profile.json"
        self.profile_file.write_text(json.dumps(minimal_profile(d=4)))
        self.profile = measure.profile.load_profile(self.profile_file)
        self.rates = measure.match_rates(
            self.model, self.prompts, layers=[2, 3], ks=[1, 3], max_new_tokens=4, verify=False
        )
        self.atlas = measure.atlas(self.rates, 4, n_boot=20)
        self.states = measure.collect_states(self.model, self.prompts, [2], max_new_tokens=3)
        self.bad_files = _bad_files(root / "bad")


def _bad_files(root: Path) -> list[Path]:
    """Paths a file or folder argument must refuse by name: missing, a folder for a file, a
    file for a folder, empty and malformed files, a folder of malformed files."""
    root.mkdir(parents=True)
    (root / "empty.json").write_text("")
    (root / "broken.json").write_text("{not json")
    (root / "list.json").write_text("[1, 2]")
    (root / "bytes.gguf").write_bytes(b"\x00\x01 not a gguf")
    (root / "prompts.jsonl").write_text('{"id": 1}\nnot json\n')
    folder = root / "folder"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "nope"}')
    (folder / "head_config.json").write_text('{"layer": "x"}')
    empty = root / "empty_folder"
    empty.mkdir()
    return [root / "missing", root / "missing.json", folder, empty, root / "empty.json",
            root / "broken.json", root / "list.json", root / "bytes.gguf",
            root / "prompts.jsonl", Path("/dev/null")]  # fmt: skip


WORLD: list[World] = []
"""The session's world (``the_world`` builds it under pytest's temporary folder)."""


@pytest.fixture(scope="session", autouse=True)
def the_world(tmp_path_factory):
    """Build the ``World`` once per session, before this module's first test."""
    if not WORLD:
        WORLD.append(World(tmp_path_factory.mktemp("fuzz-measure")))


def world() -> World:
    return WORLD[0]


# -- strategies of what measure functions take -------------------------------------------------

token_ids = st.one_of(
    st.lists(st.integers(-3, 140), max_size=5),  # negative, beyond the vocabulary of 128, empty
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=3),
    st.sampled_from([[0.5, 1.0], [float("nan"), 1], [1.0, 2.0], [True, False], ["a", "b"]]),
    st.lists(st.integers(0, 127), min_size=1, max_size=4).map(torch.tensor),
    st.lists(st.integers(0, 127), min_size=1, max_size=4).map(
        lambda x: torch.tensor(x, dtype=torch.float32)),
    st.sampled_from([
        torch.tensor([[1, 2], [3, 4]]), torch.tensor([[[1, 2]]]), torch.tensor([]),
        torch.tensor([1.5, 2.0]), torch.tensor([float("nan"), 1.0]), torch.tensor([True, False]),
        torch.tensor([2**40, 1]), torch.tensor([1, 2], dtype=torch.int8), torch.tensor(3),
        np.array([1, 2]), np.array([0.5]), list(range(CONTEXT + 4)),
    ]),
)  # fmt: skip
prompt_lists = st.one_of(st.lists(token_ids, max_size=3), token_ids)
counts = st.sampled_from([0, 1, 2, 3, 5, CONTEXT - 4, CONTEXT, 10**6, 2**31, 2**63, 10**30,
                          np.int64(3), np.bool_(True), np.float64(2.0), 2.0,
                          float("inf")])  # fmt: skip
layer_ids = st.sampled_from([0, 1, 2, 3, 4, 5, -1, 2**31, np.int8(2), 2.0, 2.5])
floats_edge = st.sampled_from([5e-324, 1e-300, 1e-30, 0.0, -0.0, 1.0, 1.0 + 1e-16, 2.0, 1e300,
                               float("inf"), float("nan"), np.float16(1e-8),
                               np.float32(0.5)])  # fmt: skip
seeds = st.sampled_from([np.bool_(True), True, 0, -1, 2**63 - 1, 2**63, 2**64, np.int64(-1),
                         np.uint64(2**64 - 1), 1.5, 2.0, "1", torch.tensor(1)])  # fmt: skip
eos_ids = st.sampled_from([-1, 128, 10**30, [1, 200], [], [None], "2", 2.5, np.int64(3),
                           torch.tensor([2]), torch.tensor(2.0)])  # fmt: skip
head_values = st.sampled_from(["head", "translator", "head_3", "lens", "other_head", "str"])
files = st.sampled_from(list(range(10))).map(lambda i: world().bad_files[i])
out_dirs = st.sampled_from([4, 9]).map(lambda i: world().bad_files[i])
"""Folders to write into that a writer must refuse: files (nothing is written among the paths
``files`` draws)."""
out_files = st.sampled_from([2, 9]).map(lambda i: world().bad_files[i])
"""Files to write that a writer must refuse (a folder) or may write harmlessly (/dev/null)."""


def _head(name):
    w = world()
    return {"head": w.head, "translator": w.translator, "head_3": w.head_3,
            "lens": measure.LogitLens(w.model),
            "other_head": measure.new_head(w.other, "full", 2), "str": "head"}[name]  # fmt: skip


heads = head_values.map(_head)
models = st.sampled_from(["gpt2", "other", "lsm", "dir", "none"]).map(
    lambda n: {"gpt2": world().gpt2, "other": world().other, "lsm": world().lsm,
               "dir": str(world().model_dir), "none": None}[n])  # fmt: skip
GENERATION = {"input_ids": token_ids, "max_new_tokens": counts, "eos_token_id": eos_ids,
              "seed": seeds, "temperature": floats_edge, "top_p": floats_edge,
              "top_k": counts, "d_bar": layer_ids, "k": counts, "exit_layer": layer_ids,
              "threshold": floats_edge, "head": heads, "model": models}  # fmt: skip
"""Extra strategies by parameter name (every target that has the parameter draws from them)."""


# -- targets ------------------------------------------------------------------------------------


@dataclass
class Target:
    """A public callable of measure, its valid keyword arguments (built from the ``World``), a
    check of the valid call's result, and extra strategies per argument."""

    name: str
    build: object
    """World -> (callable, valid keyword arguments)."""
    expect: object
    """Result of the valid call -> True when it did its work (not a no-op)."""
    special: dict = field(default_factory=dict)
    examples: int | None = None
    record: bool = False
    """The result is a record built from the arguments (not checked for finite numbers)."""
    no_none: tuple = ()
    """Parameters whose None is their default and starts the full job (minutes): not drawn."""
    unset: tuple = ()

    @functools.cached_property
    def built(self):
        return self.build(world())

    @property
    def func(self):
        return self.built[0]

    @property
    def valid(self) -> dict:
        return self.built[1]

    def strategy(self) -> st.SearchStrategy:
        names = sorted(self.valid)
        if not names:
            return st.just({})

        @st.composite
        def kwargs(draw):
            chosen = draw(st.lists(st.sampled_from(names), min_size=1,
                                   max_size=min(3, len(names)), unique=True))  # fmt: skip
            out = dict(self.valid)
            for name in chosen:
                extra = self.special.get(name, GENERATION.get(name))
                bad = malformed if extra is None else st.one_of(malformed, extra)
                out[name] = draw(bad.filter(lambda v: v is not None) if name in self.no_none
                                 else bad)  # fmt: skip
            return out

        return kwargs()


class RefusedByTransformers(Exception):
    """``model.generate`` refused an option before it reached ``ppd_generate_hf`` (its own
    checks, the same for every decoding method: not this toolkit's to name)."""


def generate_ppd(model, input_ids, **kwargs):
    """PPD through transformers' door: ``model.generate(ids, custom_generate=ppd_generate_hf)``
    (a tensor prompt as ``generate`` takes it; the rest are ``generate``'s keywords). An error
    raised before PPD's code ran is transformers' own (``RefusedByTransformers``)."""
    try:
        return model.generate(input_ids, custom_generate=measure.ppd_generate_hf, **kwargs)
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        if any(f"{os.sep}measure{os.sep}" in frame.filename for frame in frames[1:]):
            raise
        raise RefusedByTransformers(f"{type(exc).__name__}: {exc}") from exc


FRESH = "<a fresh folder>"
"""``run_match_rate_fresh``'s valid out_dir: a new folder for each call."""


def run_match_rate_fresh(out_dir, **kwargs):
    """``run_match_rate``, into a new folder for each call when given ``FRESH`` (a run left by
    an earlier call would refuse other settings, as it should, and for reasons of that call)."""
    if out_dir is FRESH:
        out_dir = Path(tempfile.mkdtemp(dir=world().root, prefix="run-"))
    return measure.run_match_rate(out_dir=out_dir, **kwargs)


def _ppd(w, **extra):
    return measure.ppd_generate, dict(model=w.model, input_ids=w.ids, d_bar=2, k=2,
                                      max_new_tokens=4, **extra)  # fmt: skip


def _tokens(n):
    return lambda r: len(r.tokens) == n


EDGE_DECODINGS = [Decoding(True, 1e-30), Decoding(True, 1e30, 1),
                  Decoding(True, None, 0, 1e-300), Decoding(True, top_k=2**31 - 1),
                  Decoding(True, top_p=1.0), "greedy", {}]  # fmt: skip
"""Decoding rules at the edges of what ``Decoding`` takes (it refuses the rest itself)."""
SAMPLED = dict(do_sample=True, temperature=0.7, top_k=5, top_p=0.9, seed=3)
DIST_REFUSED = {"backend": st.sampled_from(["single", "x", None, "DIST"])}
"""Backends drawn (``dist`` spawns ranks: its own tests cover it)."""


def frame_mutations_of(name: str) -> st.SearchStrategy:
    """``frame_mutations`` of the world's DataFrame ``name`` (built when first drawn)."""
    return st.deferred(lambda: frame_mutations(getattr(world(), name)))


def _corpus(root: Path) -> Path:
    """A folder of a few Python files: the reference model's corpus."""
    corpus = root / "corpus"
    corpus.mkdir(exist_ok=True)
    for i in range(3):
        (corpus / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" * 20)
    return corpus


REFERENCE = dict(vocab_size=260, hidden_size=8, num_layers=1, num_heads=2,
                 intermediate_size=8, seq_len=8, batch_size=2, steps=2, warmup_steps=1,
                 corpus_max_bytes=2000, max_position_embeddings=16)  # fmt: skip
"""A reference model trained in a second: the fields ``train_reference_model`` is called with."""


TARGETS = [
    Target("ppd_generate", lambda w: _ppd(w, early_head="main", eos_token_id=None,
                                          sequence="0", generator=None, backend="single"),
           _tokens(4), DIST_REFUSED),  # fmt: skip
    Target("ppd_generate[sampled]", lambda w: _ppd(w, **SAMPLED), _tokens(4), DIST_REFUSED),
    Target("ppd_generate[candidates, head]",
           lambda w: _ppd(w, early_head="candidates", head=w.head), _tokens(4)),
    Target("greedy_generate", lambda w: (measure.greedy_generate, dict(
        model=w.model, input_ids=w.ids, max_new_tokens=4, eos_token_id=None, decoding=GREEDY,
        return_cache=False, seed=None, generator=None)), _tokens(4),
        {"decoding": st.sampled_from(EDGE_DECODINGS)}),
    Target("greedy_generate[sampled]", lambda w: (measure.greedy_generate, dict(
        model=w.model, input_ids=w.ids, max_new_tokens=4, decoding=Decoding(True, 0.8, 5, 0.9),
        seed=1)), _tokens(4)),
    Target("free_generate", lambda w: (measure.free_generate, dict(
        model=w.model, input_ids=w.ids, exit_layer=2, threshold=0.3, max_new_tokens=4,
        mode="sync", head=None, eos_token_id=None, estimator=None, return_cache=False)),
        _tokens(4), {"mode": st.sampled_from(["sync", "copy", "oracle", "x"])}),
    Target("free_generate[auto]", lambda w: (measure.free_generate, dict(
        model=w.model, input_ids=w.ids, exit_layer=2, threshold="auto", max_new_tokens=4,
        estimator=AdaptiveThreshold(), head=w.head)), _tokens(4),
        {"estimator": st.sampled_from(["x", AdaptiveThreshold, 0.5])}),
    Target("ppd_generate_hf[model.generate]", lambda w: (generate_ppd, dict(
        model=w.model, input_ids=torch.tensor([w.ids]), max_new_tokens=4, d_bar=2, k=2,
        early_head="main", head=None, do_sample=False, pad_token_id=0)),
        lambda r: r.shape == (1, 8), {"do_sample": st.booleans()}),
    Target("ppd_generate_hf[model.generate, sampled]", lambda w: (
        generate_ppd, dict(model=w.model, input_ids=torch.tensor([w.ids]), max_new_tokens=4,
                           d_bar=3, k=1, do_sample=True, temperature=0.7, top_k=5, top_p=0.9,
                           pad_token_id=0, return_dict_in_generate=True, output_scores=True)),
        lambda r: r.sequences.shape == (1, 8) and r.n_runs >= 1),
    Target("match_rates", lambda w: (measure.match_rates, dict(
        model=w.model, prompts=w.prompts, layers=[2], ks=[1, 3], max_new_tokens=3,
        heads=None, tokenizer=None, sampling=None, seed=0, verify=True, progress=False,
        chat_template=True)), lambda r: len(r) > 0,
        {"prompts": prompt_lists, "layers": st.lists(layer_ids, max_size=3),
         "ks": st.lists(counts, max_size=3), "heads": st.lists(heads, max_size=2)}),
    Target("run_match_rate", lambda w: (run_match_rate_fresh, dict(
        model=str(w.model_dir), prompts_path=w.prompts_file, out_dir=FRESH,
        layers=[2], ks=[1], max_new_tokens=3, resume=False, progress=False, verify=False,
        limit=2)), lambda r: r.n_done == 2,
        {"prompts_path": files, "out_dir": out_dirs, "model": files}, examples=10),
    Target("load_model", lambda w: (measure.load_model, dict(
        path=w.model_dir, gguf_file=None, dtype="float32", device="cpu",
        attn_implementation=None)), lambda r: r[0].config.num_hidden_layers == 4,
        {"path": files, "gguf_file": files, "dtype": st.sampled_from(["bfloat16", "x"])},
        examples=15),
    Target("resolve_model_dir", lambda w: (measure.resolve_model_dir, dict(
        path=w.model_dir, gguf_file=None)), lambda r: (r / "config.json").is_file(),
        {"path": files, "gguf_file": files}),
    Target("convert_gguf", lambda w: (measure.convert_gguf, dict(
        path=w.gguf, root=w.root / "gguf-cache")), lambda r: (r / "config.json").is_file(),
        {"path": files, "root": out_dirs}, examples=10),
    Target("verify_layout", lambda w: (measure.verify_layout, dict(lsm=w.lsm)),
           lambda r: 0 <= r < 1e-3, {"lsm": models}),
    Target("LayerSplitModel", lambda w: (measure.LayerSplitModel, dict(
        model=w.model, head=None, verify=True)), lambda r: r.num_layers == 4),
    Target("arch_spec", lambda w: (measure.arch_spec, dict(model_or_config=w.gpt2)),
           lambda r: r is not None, {"model_or_config": models}),
    Target("table2", lambda w: (measure.table2, dict(df=w.rates, stat="p")),
           lambda r: len(r) > 0, {"df": frame_mutations_of("rates")}),
    Target("by_position", lambda w: (measure.by_position, dict(
        df=w.rates, bin_width=None, stat="p")), lambda r: len(r) > 0,
        {"df": frame_mutations_of("rates")}),
    Target("to_traces", lambda w: (measure.to_traces, dict(
        df=w.rates, d=4, d_bar=2, k=1, head="shared", tokens=None)), lambda r: len(r) == 2,
        {"df": frame_mutations_of("rates")}),
    Target("atlas", lambda w: (measure.atlas, dict(
        df=w.rates, d=4, categories=None, pooled_name="all", n_boot=20, seed=0, level=0.95)),
        lambda r: len(r) > 0, {"df": frame_mutations_of("rates")}),
    Target("plot_atlas", lambda w: (measure.plot_atlas, dict(
        table=w.atlas, prompt_set="all", title=None)), lambda r: len(r.axes) >= 1,
        {"table": frame_mutations_of("atlas")}),
    Target("time_layers", lambda w: (measure.time_layers, dict(
        model=w.model, input_ids=w.ids, n_tokens=2, warmup=1, batch_sizes=(1, 2))),
        lambda r: len(r) == 2 * 6, {"n_tokens": counts, "warmup": counts,
                                    "batch_sizes": st.lists(counts, max_size=3)}),
    Target("time_greedy", lambda w: (measure.time_greedy, dict(
        model=w.model, input_ids=w.ids, n_tokens=2, warmup=1)), lambda r: len(r) > 0,
        {"n_tokens": counts, "warmup": counts}),
    Target("load_prompts", lambda w: (measure.load_prompts, dict(
        path=w.prompts_file, fmt="auto", limit=None, category=None, split="all",
        holdout_every=4)), lambda r: len(r) == 3, {"path": files}),
    Target("sample_path", lambda w: (measure.sample_path, dict(fmt="jsonl")),
           lambda r: r.is_file()),
    Target("Prompt", lambda w: (measure.Prompt, dict(id="a", text="hi", reference=None,
                                                     category=None)),
           lambda r: r.text == "hi", record=True),  # fmt: skip
    Target("HeadConfig", lambda w: (measure.HeadConfig, dict(
        layer=2, vocab_size=128, hidden_size=32, epochs=1, batch_size=4, micro_batch_size=2,
        max_seq_len=8)), lambda r: r.layer == 2, record=True),
    Target("TrainedHead", lambda w: (measure.TrainedHead, dict(config=w.head.config)),
           lambda r: r.layer == 2, {"config": st.sampled_from([None, "x", {"layer": 2}])}),
    Target("train_head", lambda w: (measure.train_head, dict(
        model=w.model, layer=2, data=torch.randint(0, 128, (4, 8)), tokenizer=None,
        config=measure.HeadConfig(layer=2, vocab_size=128, hidden_size=32, epochs=1,
                                  batch_size=4, micro_batch_size=2, max_seq_len=8),
        progress=False)), lambda r: r.layer == 2,
        {"data": prompt_lists, "layer": layer_ids}, examples=15),
    Target("TranslatorHead", lambda w: (measure.TranslatorHead, dict(
        config=w.translator.config, model=w.model)), lambda r: r.layer == 2,
        {"model": models}),
    Target("load_head", lambda w: (measure.load_head, dict(
        directory=w.head_dir, model=None, device="cpu")), lambda r: r.layer == 2,
        {"directory": files, "model": models}),
    Target("LogitLens", lambda w: (measure.LogitLens, dict(model=w.model)),
           lambda r: r is not None, {"model": models}),
    Target("collect_states", lambda w: (measure.collect_states, dict(
        model=w.model, prompts=w.prompts, layers=[2], max_new_tokens=3, eos_token_id=None,
        pad_token_id=None, batch_size=2, max_batch_tokens=64, prompt_positions=0,
        progress=None)), lambda r: r.n_positions > 0,
        {"prompts": prompt_lists, "layers": st.lists(layer_ids, max_size=3)}),
    Target("fit_head", lambda w: (measure.fit_head, dict(
        head=measure.new_head(w.model, "full", 2), model=w.model, states=w.states,
        config=None, progress=False)), lambda r: r["steps"] >= 1,
        {"head": heads, "model": models}, examples=15),
    Target("new_head", lambda w: (measure.new_head, dict(model=w.model, kind="full", layer=2)),
           lambda r: r.layer == 2, {"kind": st.sampled_from(["full", "translator", "x"]),
                                    "model": models}),
    Target("encode_prompt", lambda w: (measure.encode_prompt, dict(
        tokenizer=w.tokenizer, text="hi", chat_template=True)), lambda r: len(r) == 2,
        {"text": st.text(max_size=5)}),
    Target("ReferenceModelConfig", lambda w: (measure.ReferenceModelConfig, dict(
        **REFERENCE)), lambda r: r.steps == 2, record=True),
    Target("train_reference_model", lambda w: (measure.train_reference_model, dict(
        out_dir=w.root / "reference", config=measure.ReferenceModelConfig(
            corpus_dir=str(_corpus(w.root)), **REFERENCE), progress=False)),
        lambda r: (r / "config.json").is_file(), {"out_dir": out_dirs}, examples=5,
        no_none=("config",)),
    Target("custom_generate_dir", lambda w: (measure.custom_generate_dir, {}),
           lambda r: (Path(r) / "custom_generate").is_dir(), examples=1),
    Target("table3", lambda w: (measure.table3, dict(
        model=w.model, prompts=w.prompts, d_bar=2, ks=(1,), max_new_tokens=3,
        backend="single", early_head="main", assistant=False, head=None, sequences=None,
        seeds=None)), lambda r: r is not None,
        {"prompts": prompt_lists, "ks": st.lists(counts, max_size=3), **DIST_REFUSED},
        examples=15),
    Target("FreeResult", lambda w: (measure.FreeResult, dict(
        tokens=[1], exits=[0], confidences=[0.5], deep_rows=[1], thresholds=[0.5], wall_s=0.1,
        token_times_s=[0.1])), lambda r: r.ell == 1, record=True),
    Target("AdaptiveThreshold", lambda w: (measure.AdaptiveThreshold, dict(
        initial=0.9, zeta=0.4, calibration_sentences=1, refit="sentence")),
        lambda r: r.threshold == 0.9),
    Target("rouge_l", lambda w: (measure.rouge_l, dict(candidate="a b c", reference="a c")),
           lambda r: 0 < r <= 1, {"candidate": prompt_lists, "reference": prompt_lists}),
    Target("PPDResult", lambda w: (measure.PPDResult, dict(
        tokens=[1], m=[], n_runs=1, trace=None, wall_s=0.1, token_times_s=[0.1])),
        lambda r: r.n_runs == 1, record=True),
    Target("PPDGenerateOutput", lambda w: (measure.PPDGenerateOutput, dict(
        sequences=torch.tensor([[1, 2]]))), lambda r: r.sequences is not None, record=True),
    Target("measure_profile", lambda w: (measure.profile.measure_profile, dict(
        model=w.model, ks=(1,), context_tokens=8, repeats=2, warmup=0, calls=1, threads=1,
        backends=("single",), progress=False, remeasure_rounds=0)),
        lambda r: r.d == 4, {"backends": st.lists(st.sampled_from(["single", "x", None]))},
        examples=10),
    Target("load_profile", lambda w: (measure.profile.load_profile, dict(
        path=w.profile_file, model=None, d=4)), lambda r: r.d == 4,
        {"path": files, "model": models, "d": layer_ids}),
    Target("write_profile", lambda w: (measure.profile.write_profile, dict(
        path=w.root / "written" / "p.json", profile=w.profile)), lambda r: r.is_file(),
        {"path": out_files}),
    Target("Spread", lambda w: (measure.profile.Spread, dict(
        median=1.0, q1=0.5, q3=1.5, n=3, samples=(0.5, 1.0, 1.5))), lambda r: r.n == 3,
        record=True),  # (a figure may be a difference of timed pieces: any sign)
]  # fmt: skip


NOT_FUZZED = {}
"""Public names of ``measure`` left out, and why."""


# -- calls and outcomes -------------------------------------------------------------------------


LOGITS = ("scores", "logits")
"""Fields that hold logits (any real number, -inf where a processor masked a token)."""
NAN_OK = ("thresholds",)
"""Fields that hold NaN by contract (``FreeResult.thresholds``: NaN in ``oracle`` mode, which
uses no threshold)."""
SIGNED = ("layer", "batch_startup_s[", "rank_startup_s")
"""Fields (by prefix) that may be negative: a layer index (-1: embedding or head rows of a
timing table) and start-ups measured as differences of timed pieces (priced floored at 0)."""


def bad_number(value, where: str = "result") -> str | None:
    """'non-finite <where>' or 'negative <where>' for the first such number in ``value``: a
    number, an array or tensor, a list or tuple of them, a dict's values, a dataclass's fields
    or a DataFrame's numeric columns (NaN allowed in a DataFrame: a statistic with no data)."""
    if isinstance(value, bool | np.bool_ | str | bytes | Path) or value is None:
        return None
    if isinstance(value, Number | np.ndarray | np.generic):
        arr = np.asarray(value)
        if arr.dtype.kind not in "iuf" or arr.size == 0:
            return None
        if not np.isfinite(arr).all():
            return f"non-finite {where}"
        return f"negative {where}" if (arr < 0).any() else None
    if isinstance(value, torch.Tensor):
        return None if value.dtype.is_floating_point else bad_number(value.numpy(), where)
    if isinstance(value, pd.DataFrame):
        numeric = value.select_dtypes("number")
        for column in numeric.columns:
            data = numeric[column].to_numpy(dtype=float)
            if np.isinf(data).any() or (data < 0).any() and not str(column).startswith(SIGNED):
                return f"non-finite or negative {where}[{column!r}]"
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value[:1000]):
            bad = bad_number(item, f"{where}[{i}]")
            if bad:
                return bad
        return None
    if isinstance(value, dict):
        items = value.items()
    elif is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name)) for f in fields(value))
    else:
        return None
    for key, item in items:
        if key in LOGITS:
            continue
        if key in NAN_OK:
            item = [x for x in item if x == x]  # (NaN != NaN)
        bad = bad_number(item, f"{where}.{key}")
        if bad and not (bad.startswith("negative") and str(key).startswith(SIGNED)):
            return bad
    return None


class Hang(BaseException):
    """A call still running after ``CALL_TIME_BOUND_S`` (raised in it by a timer signal; a
    BaseException, so no ``except Exception`` of the code under test swallows it)."""


def _hang(signum, frame):
    raise Hang(f"still running after {CALL_TIME_BOUND_S:g} s")


def _call(target: Target, kwargs: dict) -> tuple[str, float]:
    """``target.func(**kwargs)``: its outcome (``ok``, ``ValueError: <message>``, ``Hang``,
    ...) and the seconds it took; a non-finite or negative number in a result counts as
    ``silent ...``."""
    import matplotlib.pyplot as plt

    previous = signal.signal(signal.SIGALRM, _hang)
    signal.setitimer(signal.ITIMER_REAL, CALL_TIME_BOUND_S)
    start = time.perf_counter()
    try:
        result = target.func(**kwargs)
        signal.setitimer(signal.ITIMER_REAL, 0)
        bad = None if target.record else bad_number(result)
        outcome = "ok" if bad is None else f"silent {bad}"
    except (ValueError, TypeError) as exc:  # (a subclass counts as its base: MissingPath)
        outcome = f"{'TypeError' if isinstance(exc, TypeError) else 'ValueError'}: {exc}"
    except RefusedByTransformers as exc:
        outcome = f"transformers: {exc}"
    except (Exception, Hang) as exc:  # noqa: BLE001 - anything else is what this test looks for
        outcome = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        plt.close("all")
    return outcome, time.perf_counter() - start


def _shown(target: Target, kwargs: dict) -> str:
    shown = {k: v for k, v in kwargs.items() if v is not target.valid.get(k)}
    return f"{target.name}({shown!r:.300})"


def check_call(target: Target, kwargs: dict) -> None:
    """Call ``target`` with ``kwargs``, count the outcome, and fail on an error naming no
    offending parameter, another exception, a bad number in the result, or a call over
    ``CALL_TIME_BOUND_S``."""
    outcome, seconds = _call(target, kwargs)
    kind, _, message = outcome.partition(": ")
    if kind in ("ValueError", "TypeError"):
        if not names_a_parameter(message, offending_names(target, kwargs)):
            kind = "unnamed"
    elif kind not in ("ok", "transformers"):
        kind = "other"
    COUNTS[kind] += 1
    if kind in ("unnamed", "other"):
        PROBLEMS.append(f"{kind}: {_shown(target, kwargs)}: {outcome:.300}")
    if seconds >= CALL_TIME_BOUND_S:
        COUNTS["over bound"] += 1
    if COUNT_ONLY:
        return
    assert kind != "unnamed", f"{_shown(target, kwargs)} raised {outcome!r:.300}, naming none " \
        f"of {sorted(offending_names(target, kwargs))}"  # fmt: skip
    assert kind in ALLOWED, f"{_shown(target, kwargs)}: {outcome:.300}"
    assert seconds < CALL_TIME_BOUND_S, f"{_shown(target, kwargs)} took {seconds:.1f} s"


def fuzz(target: Target, examples: int, derandomize: bool) -> None:
    """``examples`` malformed calls of ``target`` (not shrunk: a failing call of a model
    function is shown as drawn, rather than re-run for minutes)."""

    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.reuse, Phase.generate])  # fmt: skip
    @given(target.strategy())
    def check(kwargs):
        check_call(target, kwargs)

    check()


def sweep(target: Target) -> None:
    """Each ``FIXED_BAD`` value in each parameter of ``target``, one at a time; every failure
    reported."""
    failures = []
    for name in sorted(target.valid):
        for value in FIXED_BAD:
            if value is None and name in target.no_none:
                continue
            try:
                check_call(target, {**target.valid, name: value})
            except AssertionError as err:
                failures.append(str(err).splitlines()[0])
    assert not failures, f"{len(failures)} failed calls:\n" + "\n".join(failures[:10])


def _examples(target: Target, ci: bool) -> int:
    if ci:
        return min(CI_EXAMPLES, target.examples or CI_EXAMPLES)
    return SLOW_EXAMPLES if target.examples is None else 5 * target.examples


# -- tests --------------------------------------------------------------------------------------

IDS = [t.name for t in TARGETS]


@pytest.fixture(scope="module", autouse=True)
def report_counts(request):
    """Print the outcome counts of this module's fuzzing (and write them if asked)."""
    COUNTS.clear()
    PROBLEMS.clear()
    yield
    counts = {key: COUNTS[key] for key in REPORTED}
    calls = sum(v for k, v in COUNTS.items() if k != "over bound")
    if not calls:
        return
    line = f"fuzz_measure: {calls} calls, " + ", ".join(f"{k} {v}" for k, v in counts.items())
    report_fuzz(request, line, PROBLEMS[:50], "PPD_FUZZ_MEASURE_REPORT",
                {"calls": calls, **counts, "problems": PROBLEMS})  # fmt: skip


@pytest.fixture(autouse=True)
def in_work_dir(monkeypatch, tmp_path):
    """Each target's calls run in an empty folder of their own (a fuzzed relative path writes
    there), on one torch thread."""
    monkeypatch.chdir(tmp_path)
    torch.set_num_threads(1)


def test_every_public_name_is_fuzzed():
    """Every callable of ``measure.__all__`` and ``measure.profile.__all__`` has a target."""
    covered = {t.name.partition("[")[0] for t in TARGETS} | set(NOT_FUZZED)
    names = [n for n in measure.__all__ if callable(getattr(measure, n))]
    names += [n for n in measure.profile.__all__ if callable(getattr(measure.profile, n))]
    missing = [n for n in names if n not in covered]
    assert not missing, f"no fuzz target for {missing}"


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_the_valid_call_does_its_work(target):
    """The valid call returns and passes the target's check of its result: not refused, not a
    no-op (a fuzz whose valid call never reaches the body tests the checks alone)."""
    outcome, seconds = _call(target, dict(target.valid))
    assert outcome == "ok", f"{target.name}'s valid call: {outcome}"
    assert target.expect(target.func(**target.valid)), f"{target.name}: the valid call did not work"


@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_fuzz_measure(target):
    """CI profile: CI_EXAMPLES malformed calls per target at most, deterministic."""
    if os.environ.get("PPD_FUZZ") == "slow":
        pytest.skip("PPD_FUZZ=slow runs test_fuzz_measure_slow instead")
    fuzz(target, _examples(target, ci=True), derandomize=True)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PPD_FUZZ") != "slow", reason="set PPD_FUZZ=slow to run")
@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_fuzz_measure_slow(target):
    """Slow profile: SLOW_EXAMPLES random malformed calls per target."""
    fuzz(target, _examples(target, ci=False), derandomize=False)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("PPD_FUZZ") != "slow", reason="set PPD_FUZZ=slow to run")
@pytest.mark.parametrize("target", TARGETS, ids=IDS)
def test_fuzz_measure_sweep_slow(target):
    """Slow profile, systematic part: every ``FIXED_BAD`` value in every parameter."""
    sweep(target)


AUDIT = [
    ("ppd_generate", dict(model=None), "model"),
    ("ppd_generate", dict(input_ids=[0.5, 1.0]), "input_ids"),
    ("ppd_generate", dict(input_ids=[float("nan"), 1.0]), "input_ids"),
    ("greedy_generate", dict(input_ids=[0.5, 1.0]), "input_ids"),
    ("greedy_generate", dict(input_ids=torch.tensor([float("nan"), 1.0])), "input_ids"),
    ("free_generate", dict(input_ids=[float("nan"), 1.0]), "input_ids"),
    ("ppd_generate[sampled]", dict(seed=np.bool_(True)), "seed"),
    ("ppd_generate[sampled]", dict(temperature=5e-324), "temperature"),
    ("free_generate[auto]", dict(estimator="x"), "estimator"),
    ("ppd_generate_hf[model.generate]", dict(max_new_tokens=float("inf")), "max_new_tokens"),
    ("load_model", dict(path="/nonexistent/model"), "path"),
    ("load_head", dict(directory="/nonexistent/head"), "directory"),
]  # fmt: skip
"""The audit's examples (issue 47): each a crash or an unnamed error before."""


@pytest.mark.parametrize(("name", "bad", "named"), AUDIT, ids=[f"{a}-{c}" for a, _, c in AUDIT])
def test_the_audits_examples_are_refused_by_name(name, bad, named):
    target = next(t for t in TARGETS if t.name == name)
    outcome, _ = _call(target, {**target.valid, **bad})
    kind, _, message = outcome.partition(": ")
    assert kind == "ValueError" and names_a_parameter(message, {named}), outcome
