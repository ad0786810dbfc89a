"""Plain decoding with PPD's prefill/decode split (greedy, or sampled): the reference PPD must
reproduce token for token."""

from __future__ import annotations

import torch

from measure import clock as clocks
from measure.checks import check_max_new_tokens
from measure.clock import synchronize
from measure.decode.results import GreedyResult
from measure.decode.sampling import GREEDY, Decoding, check_seed, prompt_and_rule
from measure.hf.layer_split import LayerSplitModel
from ppdmodel.validation import check_flag, check_instance


@torch.no_grad()
def greedy_generate(
    model,
    input_ids,
    *,
    max_new_tokens,
    eos_token_id=None,
    return_cache=False,
    decoding=GREEDY,
    seed=None,
    generator=None,
):
    """Plain decoding with the same prefill/decode split as PPD (the exactness reference).

    Greedy by default; ``decoding`` (``measure.decode.sampling.Decoding``), ``seed`` and
    ``generator`` sample the tokens as ``ppd_generate`` does, from the same draws.
    """
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
    max_new_tokens = check_max_new_tokens(max_new_tokens)
    check_seed(seed, generator)
    check_instance("decoding", decoding, Decoding)
    check_flag("return_cache", return_cache)
    ids, rule = prompt_and_rule(
        lsm, input_ids, decoding, max_new_tokens=max_new_tokens, eos=eos_token_id, seed=seed,
        generator=generator,
    )  # fmt: skip
    cache = lsm.new_cache()
    t0 = clocks.host_clock()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)
    synchronize(lsm.device)
    t1 = clocks.host_clock()
    token, position, tokens, times = ids[:, -1:], ids.shape[1] - 1, [], []
    for _ in range(max_new_tokens):
        nxt = rule.choose(lsm.decode_step(token, cache, position))  # logits [1, V]
        tokens.append(nxt)
        times.append(clocks.host_clock() - t1)
        if rule.stop(nxt):
            break
        token = torch.full((1, 1), nxt, dtype=torch.long, device=lsm.device)
        position += 1
    synchronize(lsm.device)
    result = GreedyResult(tokens, clocks.host_clock() - t1, times, prefill_s=t1 - t0)
    return (result, cache) if return_cache else result
