"""measure.match.rate and measure.match.records on tiny random models: tokens, matches, outputs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from measure.checks import eos_token_ids
from measure.decode.backends import ppd_generate, ppd_many
from measure.decode.sampling import Decoding, prompt_seed
from measure.decode.settings import RunSettings
from measure.hf.layer_split import LayerSplitModel
from measure.match.config import RECORD_COLUMNS, make_config
from measure.match.rate import (
    GreedyMismatchError,
    MeasureOOMError,
    match_rates,
    measure_prompt,
    verify_greedy,
)
from measure.match.records import read_part, read_records, run_match_rate
from measure.match.tables import by_position, table2, to_traces
from measure.train.heads import TrainedHead
from sim.formats import read_traces, write_traces
from tests.measure.tiny_models import ARCHS, NUM_LAYERS, tiny_model

torch.set_num_threads(1)

PROMPTS = [[5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [3]]
ELL = 8


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama")


def greedy_reference(model, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids])
    out = model.generate(
        x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n, pad_token_id=0
    )
    return out[0, x.shape[1] :].tolist()


@pytest.mark.parametrize("arch", ARCHS)
def test_tokens_equal_model_generate(arch):
    model = tiny_model(arch)
    lsm = LayerSplitModel(model)
    config = make_config(NUM_LAYERS, layers=[1, NUM_LAYERS], ks=(1,), max_new_tokens=ELL)
    for i, ids in enumerate(PROMPTS):
        result = measure_prompt(lsm, torch.tensor([ids]), str(i), config)  # verify=True
        assert result.tokens == greedy_reference(model, ids, ELL)


def test_stops_at_eos_like_generate(llama):
    ids = PROMPTS[0]
    free = greedy_reference(llama, ids, ELL)
    llama.generation_config.eos_token_id = free[3]
    try:
        df = match_rates(llama, [ids], layers=[2], ks=(1,), max_new_tokens=ELL)
        expected = greedy_reference(llama, ids, ELL)
    finally:
        llama.generation_config.eos_token_id = None
    assert expected == free[: free.index(free[3]) + 1]
    assert df["token"].tolist() == expected  # positions 1..ell, the EOS token included
    assert df["position"].tolist() == list(range(1, len(expected) + 1))


def test_matches_equal_hidden_state_logit_lens(llama):
    """Position j: x_j in the top-k of layer's hidden state in the pass reading x_{j-1}.

    x_0 is the last prompt token, so position 1 reads the prompt's last row (the prefill's).
    """
    ids, ks = PROMPTS[1], (1, 3, 5)
    df = match_rates(llama, [ids], layers=range(1, NUM_LAYERS + 1), ks=ks, max_new_tokens=ELL)
    tokens = greedy_reference(llama, ids, ELL)
    assert sorted(df["position"].unique()) == list(range(1, ELL + 1))
    full = torch.tensor([ids + tokens[:-1]])
    with torch.no_grad():
        hidden = llama(full, output_hidden_states=True).hidden_states
        lsm = LayerSplitModel(llama)
        for layer in range(1, NUM_LAYERS):
            top = lsm.logits(hidden[layer])[0].topk(max(ks)).indices  # [S + ell - 1, K]
            for j in range(1, ELL + 1):
                row = len(ids) + j - 2  # position of the input x_{j-1}
                for k in ks:
                    expected = tokens[j - 1] in top[row, :k].tolist()
                    got = df.query("layer == @layer and k == @k and position == @j")
                    assert got["match"].item() == expected, (layer, k, j)
                    assert got["token"].item() == tokens[j - 1]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_traces_equal_real_ppd_m(arch):
    """to_traces(match_rates(...)).m is PPDResult.m of ppd_generate on the same prompt.

    match_rate's layer L (output of L layers) is PPD's d_bar; d_bar in {d/2, d-1}, k in {1, 3}.
    """
    model = tiny_model(arch)
    prompts = [*PROMPTS, [40, 41, 42, 7, 7]]
    d_bars, ks = (NUM_LAYERS // 2, NUM_LAYERS - 1), (1, 3)
    heads = {NUM_LAYERS // 2: TrainedHead.from_model(model, NUM_LAYERS // 2)}
    with torch.no_grad():  # a head unlike the shared one: vocabulary rows rolled by one
        weight = heads[NUM_LAYERS // 2].lm_head.weight
        weight.copy_(weight.roll(1, dims=0))
    df = match_rates(model, prompts, layers=d_bars, ks=ks, max_new_tokens=ELL, heads=heads)
    eos, matched = eos_token_ids(model), 0
    for d_bar in d_bars:
        for k in ks:
            for head_name in ("shared", "trained") if d_bar in heads else ("shared",):
                head = heads[d_bar] if head_name == "trained" else None
                traces = to_traces(df, NUM_LAYERS, d_bar, k, head=head_name)
                for i, ids in enumerate(prompts):
                    run = ppd_generate(
                        model,
                        ids,
                        d_bar=d_bar,
                        k=k,
                        max_new_tokens=ELL,
                        eos_token_id=eos,
                        head=head,
                    )
                    rows = df[(df["prompt"] == str(i)) & (df["layer"] == d_bar) & (df["k"] == k)]
                    assert rows[rows["head"] == head_name]["token"].tolist() == run.tokens
                    assert traces[i].m == run.m, (d_bar, k, head_name, i)
                    assert len(run.m) == len(run.tokens) - 1
                    matched += sum(run.m)
    assert 0 < matched  # some hand-offs happen, so the comparison is not all zeros


@pytest.mark.parametrize("sampling", [{"top_k": 20}, {"top_p": 0.9}])
def test_sampled_records_equal_sampled_ppd_m(sampling):
    """Appendix B: the sampled match-rate records of a seed are the m (and tokens) of sampled
    PPD runs seeded per prompt with prompt_seed(seed, prompt id), both placements."""
    model, seed, d_bar = tiny_model("qwen2", seed=5), 6, NUM_LAYERS // 2
    df = match_rates(
        model, PROMPTS, layers=[d_bar], ks=(1, 3), max_new_tokens=ELL, sampling=sampling, seed=seed
    )
    names = [str(i) for i in range(len(PROMPTS))]
    seeds = [prompt_seed(seed, name) for name in names]
    matched = 0
    for k in (1, 3):
        traces = to_traces(df, NUM_LAYERS, d_bar, k)
        for early_head in ("main", "candidates"):
            runs = ppd_many(
                model,
                PROMPTS,
                d_bar=d_bar,
                k=k,
                max_new_tokens=ELL,
                settings=RunSettings(
                    eos_token_id=eos_token_ids(model), decoding=Decoding(True, **sampling)
                ),
                seeds=seeds,
                early_head=early_head,
            )
            assert [t.m for t in traces] == [r.m for r in runs], (k, early_head)
            for name, run in zip(names, runs, strict=True):
                rows = df[(df["prompt"] == name) & (df["k"] == k)].sort_values("position")
                assert rows["token"].tolist() == run.tokens
            matched += sum(sum(r.m) for r in runs)
    assert matched > 0


def test_schema_final_layer_and_monotone_in_k(llama):
    ks, layers = (1, 2, 5), [1, 2, 3, NUM_LAYERS]
    df = match_rates(llama, PROMPTS, layers=layers, ks=ks, max_new_tokens=ELL)
    assert tuple(df.columns) == RECORD_COLUMNS
    assert len(df) == len(PROMPTS) * ELL * len(layers) * len(ks)
    assert df["match"].dtype == bool and set(df["head"]) == {"shared"}
    assert set(df["decoding"]) == {"greedy"}
    assert sorted(df["position"].unique()) == list(range(1, ELL + 1))
    assert df[df["layer"] == NUM_LAYERS]["match"].all()  # the final layer's top-1 is the token
    wide = df.pivot_table(index=["prompt", "position", "layer"], columns="k", values="match")
    assert (wide[1] <= wide[2]).all() and (wide[2] <= wide[5]).all()
    assert df[df["layer"] < NUM_LAYERS]["match"].mean() < 1.0  # random early layers do miss


def test_aggregations_and_traces_round_trip(llama, tmp_path):
    ks, layers = (1, 3), [1, 2, 3]
    df = match_rates(llama, PROMPTS, layers=layers, ks=ks, max_new_tokens=ELL)
    t2 = table2(df)
    assert t2.shape == (len(ks), len(layers)) and list(t2.columns) == layers
    assert t2.loc[("shared", 3), 2] == pytest.approx(df.query("k == 3 and layer == 2").match.mean())
    bp = by_position(df, bin_width=2)
    assert list(bp.columns) == ["1-2", "3-4", "5-6", "7-8", "Total"]
    assert bp.shape[0] == len(ks) * len(layers)
    assert bp.loc[(1, 1, "shared"), "1-2"] == pytest.approx(
        df.query("layer == 1 and k == 1 and position <= 2").match.mean()
    )
    traces = to_traces(df, d=NUM_LAYERS, d_bar=2, k=3)
    assert [tr.sequence for tr in traces] == ["0", "1", "2"]
    path = write_traces(tmp_path / "t.jsonl", traces)
    back = read_traces(path)
    assert back == traces
    for tr in back:
        assert len(tr.m) == ELL - 1 and tr.d_bar == 2 and tr.k == 3
        rows = df.query("prompt == @tr.sequence and layer == 2 and k == 3").sort_values("position")
        assert rows["position"].tolist() == list(range(1, ELL + 1))
        assert tr.m == rows["match"].astype(int).tolist()[:-1]  # m_t = match at t - 1


def test_sampling_variants(llama):
    ids, layers = PROMPTS[:2], [2]
    greedy = match_rates(llama, ids, layers=layers, ks=(1, 3), max_new_tokens=ELL)
    top1 = match_rates(llama, ids, layers=layers, ks=(1, 3), max_new_tokens=ELL, sampling="top_k=1")
    assert top1["token"].tolist() == greedy["token"].tolist()  # top-1 sampling is greedy
    assert set(top1["decoding"]) == {"top_k=1"}
    opts = dict(layers=layers, ks=(1,), max_new_tokens=ELL, sampling={"top_p": 0.9})
    a = match_rates(llama, ids, seed=3, **opts)
    b = match_rates(llama, ids, seed=3, **opts)
    c = match_rates(llama, ids, seed=4, **opts)
    pd.testing.assert_frame_equal(a, b)
    assert a["token"].tolist() != c["token"].tolist()
    assert a["token"].tolist() != greedy.query("k == 1")["token"].tolist()
    both = pd.concat([greedy, a])
    assert "decoding" in table2(both).index.names


def test_trained_head_copy_matches_shared(llama):
    heads = {2: TrainedHead.from_model(llama, 2)}  # a fresh head is the model's own norm + head
    df = match_rates(llama, PROMPTS, layers=[1, 2], ks=(1, 3), heads=heads, max_new_tokens=ELL)
    assert set(df["head"]) == {"shared", "trained"}
    trained = df[df["head"] == "trained"].reset_index(drop=True)
    shared = df.query("head == 'shared' and layer == 2").reset_index(drop=True)
    assert (trained["layer"] == 2).all()
    assert trained["match"].tolist() == shared["match"].tolist()
    assert table2(df).shape == (4, 2)  # (shared, trained) x (k=1, 3) by layers 1, 2


def test_head_used_at_another_layer_is_refused(llama):
    heads = {1: TrainedHead.from_model(llama, 2)}
    with pytest.raises(ValueError, match=r"heads\[1\] was trained for layer 2"):
        match_rates(llama, PROMPTS, layers=[1], ks=(1,), heads=heads, max_new_tokens=2)


def test_bad_arguments(llama):
    with pytest.raises(ValueError, match="layers"):
        match_rates(llama, PROMPTS, layers=[0])
    with pytest.raises(ValueError, match="layers"):
        match_rates(llama, PROMPTS, layers=[NUM_LAYERS + 1])
    with pytest.raises(ValueError, match="ks"):
        match_rates(llama, PROMPTS, ks=(0,))
    with pytest.raises(ValueError, match="max_new_tokens"):
        match_rates(llama, PROMPTS, max_new_tokens=0)
    with pytest.raises(ValueError, match="sampling"):
        match_rates(llama, PROMPTS, sampling={"top_p": 1.5})
    for spec in ("top_k=x", "top_p=", "top_k=2.5"):  # `--sampling top_k=x` said only "int()"
        with pytest.raises(ValueError, match="sampling must look like"):
            match_rates(llama, PROMPTS, sampling=spec)
    with pytest.raises(ValueError, match="tokenizer"):
        match_rates(llama, ["some text"])


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_verify_greedy_catches_wrong_tokens(arch):
    model = tiny_model(arch)
    ids = torch.tensor([PROMPTS[1]])
    tokens = greedy_reference(model, PROMPTS[1], 5)

    def prefilled_cache():
        lsm = LayerSplitModel(model)
        cache = lsm.new_cache()
        lsm.prefill(ids, cache)
        lsm.decode_step(torch.tensor([[tokens[0]]]), cache, ids.shape[1])  # spent cache: cropped
        return cache

    verify_greedy(model, ids, tokens, "p")
    verify_greedy(model, ids, tokens, "p", prefilled_cache())
    wrong = list(tokens)
    wrong[2] = (wrong[2] + 1) % 128
    with pytest.raises(GreedyMismatchError, match="token 3"):
        verify_greedy(model, ids, wrong, "p")
    with pytest.raises(GreedyMismatchError, match="token 3"):
        verify_greedy(model, ids, wrong, "p", prefilled_cache())
    wrong = [(tokens[0] + 1) % 128, *tokens[1:]]  # token 1 is checked with the cache too
    with pytest.raises(GreedyMismatchError, match="token 1 "):
        verify_greedy(model, ids, wrong, "p", prefilled_cache())


def test_out_of_memory_names_sizes(llama, monkeypatch):
    def boom(self, i, h, kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(LayerSplitModel, "run_layer", boom)
    with pytest.raises(MeasureOOMError) as info:
        match_rates(llama, PROMPTS[1:], layers=[2], max_new_tokens=ELL)
    message = str(info.value)
    for part in ("prompt_tokens=7", "batch=1", f"max_new_tokens={ELL}", "dtype=torch.float32"):
        assert part in message


# ---- long runs: output files, resume, sharding ----------------------------------------------


class CharTokenizer:
    """Maps characters to ids 1..127, enough to feed text prompts to the tiny models."""

    chat_template = None

    def __call__(self, text, **kwargs):
        return {"input_ids": [1 + ord(c) % 127 for c in text]}


def write_prompts(path, n: int = 5):
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i}", "prompt": f"prompt number {i}" + "x" * i}) + "\n")
    return path


def run(llama, prompts, out, **kwargs):
    options = dict(tokenizer=CharTokenizer(), layers=[1, 2, 3], ks=(1, 3), max_new_tokens=6)
    return run_match_rate(llama, prompts, out, progress=False, **{**options, **kwargs})


def test_run_writes_records_sidecar_traces(llama, tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl")
    result = run(llama, prompts, tmp_path / "out", records_format="parquet")
    df = read_records(result.records)
    assert result.n_done == result.n_prompts == 5
    assert len(df) == 5 * 6 * 3 * 2 and tuple(df.columns) == RECORD_COLUMNS
    assert sorted(df["position"].unique()) == list(range(1, 7))
    meta = json.loads(result.sidecar.read_text())
    for key in ("model_type", "d", "dtype", "device", "versions", "prompts_sha256", "seed", "ks"):
        assert key in meta
    assert meta["d"] == NUM_LAYERS and meta["ks"] == [1, 3] and meta["layers"] == [1, 2, 3]
    assert set(meta["versions"]) >= {"torch", "transformers", "numpy"}
    traces = read_traces(result.traces)
    assert len(traces) == 5 * 3 * 2 and all(len(t.m) == 5 and len(t.tokens) == 6 for t in traces)
    assert to_traces(df, NUM_LAYERS, 2, 3)[0].m == next(
        t.m for t in traces if t.d_bar == 2 and t.k == 3 and t.sequence == "q0"
    )


def test_refused_run_leaves_out_dir_reusable(llama, tmp_path):
    # k above the vocabulary used to fail after the part file was created: the directory then
    # refused both a fresh run ("holds a previous run") and --resume ("different config")
    prompts = write_prompts(tmp_path / "p.jsonl")
    with pytest.raises(ValueError, match="ks must be <= the vocabulary size"):
        run(llama, prompts, tmp_path / "out", ks=(1, 10**6))
    assert not (tmp_path / "out").exists()
    assert run(llama, prompts, tmp_path / "out", limit=1, max_new_tokens=2).n_done == 1


def test_resume_after_interrupt_loses_and_duplicates_nothing(llama, tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl")
    reference = read_records(run(llama, prompts, tmp_path / "ref").records)

    class Interrupt(Exception):
        pass

    seen = []

    def stop_after_two(pid):
        seen.append(pid)
        if len(seen) == 2:
            raise Interrupt

    out = tmp_path / "out"
    with pytest.raises(Interrupt):
        run(llama, prompts, out, on_prompt_done=stop_after_two)
    part = next((out / "parts").glob("part-*.jsonl"))
    with part.open("a") as fh:  # a prompt torn mid-write
        fh.write('{"prompt": "q2", "tokens": [1, 2')
    with pytest.raises(ValueError, match="resume"):
        run(llama, prompts, out)
    seen.clear()
    result = run(llama, prompts, out, resume=True, on_prompt_done=seen.append)
    assert seen == ["q2", "q3", "q4"]
    pd.testing.assert_frame_equal(read_records(result.records), reference)
    with pytest.raises(ValueError, match="different"):
        run(llama, prompts, out, resume=True, ks=(1, 2))


def test_old_part_files_without_position_1_are_refused(llama, tmp_path):
    # runs recorded before positions 1..ell held ell - 1 ranks per prompt (no x_1): mixing them
    # with new records would shift every trace by one token, so they are not read
    prompts = write_prompts(tmp_path / "p.jsonl", n=1)
    result = run(llama, prompts, tmp_path / "out")
    (record,) = read_part(result.part)
    assert record.ranks["shared"][1].shape == (len(record.tokens), 3)
    old = record.to_dict()
    old["ranks"]["shared"]["ranks"] = old["ranks"]["shared"]["ranks"][1:]
    result.part.write_text(json.dumps(old) + "\n")
    with pytest.raises(ValueError, match="positions 1..ell"):
        read_part(result.part)
    meta = json.loads(result.sidecar.read_text())
    del meta["config"]["positions"]
    result.sidecar.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="different"):
        run(llama, prompts, tmp_path / "out", resume=True)


def test_out_of_memory_keeps_finished_prompts(llama, tmp_path, monkeypatch):
    prompts = write_prompts(tmp_path / "p.jsonl")
    reference = read_records(run(llama, prompts, tmp_path / "ref").records)
    real, calls = LayerSplitModel.run_layer, []

    def run_layer(self, i, h, kwargs):  # 6 decode steps x 4 layers per prompt: OOM in prompt 3
        calls.append(i)
        if len(calls) == 55:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return real(self, i, h, kwargs)

    monkeypatch.setattr(LayerSplitModel, "run_layer", run_layer)
    out = tmp_path / "out"
    with pytest.raises(MeasureOOMError, match="prompt 'q2'.*max_new_tokens=6"):
        run(llama, prompts, out)
    assert len((out / "parts" / "part-00000-of-00001.jsonl").read_text().splitlines()) == 2
    result = run(llama, prompts, out, resume=True)
    pd.testing.assert_frame_equal(read_records(result.records), reference)


def test_sharded_ranks_merge_to_the_unsharded_run(llama, tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl")
    reference = read_records(run(llama, prompts, tmp_path / "ref").records)
    out = tmp_path / "sharded"
    first = run(llama, prompts, out, rank=1, world_size=2)
    assert first.records is None and first.n_done == 2
    second = run(llama, prompts, out, rank=0, world_size=2)
    assert second.n_done == 5
    assert len(list((out / "parts").glob("part-*-of-00002.jsonl"))) == 2
    pd.testing.assert_frame_equal(read_records(second.records), reference)
    with pytest.raises(ValueError, match="rank"):
        run(llama, prompts, out, rank=2, world_size=2)


def test_table2_by_position_on_sample_sizes():
    rng = np.random.default_rng(0)
    n = 2 * 16 * 2 * 3
    df = pd.DataFrame(
        {
            "prompt": np.repeat(["a", "b"], n // 2),
            "position": np.tile(np.arange(1, 17), n // 16),
            "layer": np.tile(np.repeat([10, 20], 16), n // 32),
            "k": np.tile(np.repeat([1, 3, 5], 32), 2),
            "head": "shared",
            "decoding": "greedy",
            "match": rng.random(n) < 0.5,
            "token": 0,
        }
    )
    bp = by_position(df)  # default: eight bins over 16 positions, like the paper's Table 6
    labels = [f"{lo}-{lo + 1}" for lo in range(1, 17, 2)]  # the paper's "1-2" ... "15-16"
    assert list(bp.columns) == [*labels, "Total"]
    assert bp.shape == (6, 9)
    one = df.query("layer == 10 and k == 3")
    assert bp.loc[(10, 3, "shared"), "1-2"] == pytest.approx(
        one.query("position <= 2").match.mean()
    )
    assert table2(df.assign(dataset="squad")).index.names == ["dataset", "head", "k"]


def _gloo_rank(rank, world_size, init_file, prompts, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    url = f"file://{init_file}"
    dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world_size)
    try:
        run(tiny_model("llama"), prompts, out)  # rank and world size from torch.distributed
    finally:
        dist.destroy_process_group()


def test_torch_distributed_two_gloo_ranks(llama, tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl")
    reference = read_records(run(llama, prompts, tmp_path / "ref").records)
    out = tmp_path / "dist"
    args = (2, str(tmp_path / "init"), str(prompts), str(out))
    # fork: the children reuse the imported torch/transformers (torch threads are set to 1)
    torch.multiprocessing.start_processes(_gloo_rank, args=args, nprocs=2, start_method="fork")
    assert len(list((out / "parts").glob("part-*-of-00002.jsonl"))) == 2
    pd.testing.assert_frame_equal(read_records(out / "records.csv"), reference)
