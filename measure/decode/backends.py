"""One dispatch over PPD's backends (``single``, ``dist``), used by every caller.

``ppd_many`` decodes several prompts after one untimed warm-up (``dist``: on the caller's
``RankGroup``, or on ranks spawned for the call); ``ppd_generate`` is the one-prompt form of
the public API.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from measure.checks import as_prompt_ids, check_context, check_model
from measure.decode.launch import ppd_dist_many
from measure.decode.local import ppd_single
from measure.decode.rank_group import RankGroup
from measure.decode.sampling import Decoding, check_seed
from measure.decode.settings import (
    BACKENDS,
    DEFAULT_SETTINGS,
    WARMUP_TOKENS,
    PPDRequest,
    RunSettings,
)
from measure.hf.loading import load_model
from ppdmodel.costs import check_early_head
from ppdmodel.validation import check_instance, items_of, refused_as


def check_backend(backend) -> None:
    """ValueError unless ``backend`` is one of ``BACKENDS``."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be 'single' or 'dist', got {backend!r:.80}")


def ppd_many(
    model,
    prompts,
    request: PPDRequest | None = None,
    *,
    ranks: RankGroup | None = None,
    prompts_argument: str = "prompts",
    **fields,
):
    """PPD on every prompt, a list of ``PPDResult``; ``dist`` runs all prompts as one task.

    ``request``: the call whole (``PPDRequest``: ``d_bar``, ``k``, ``max_new_tokens``,
    ``backend``, ``early_head``, ``head``, ``sequences``, ``seeds``, ``generator``, ``warmup``
    and ``settings``), or its fields given as keywords instead (``eos_token_id``,
    ``decoding``, ``world_size`` and ``timeout_s`` go into its ``settings``). ``settings``:
    the stop tokens, main's rule (``decoding``: greedy or sampled), and ``dist``'s world size,
    watchdog and ``model_dir`` (a local directory holding ``model``'s weights spares ``dist``
    a temporary copy); ``ranks``: a ``RankGroup`` of this model that runs ``dist`` (on
    min(its world size, k + 1) ranks; None: ranks spawned for this call,
    ``settings.world_size`` of them); ``warmup`` decodes ``WARMUP_TOKENS`` of the first prompt
    untimed first (greedy, so it draws nothing; ``dist``: through the ranks); ``early_head``
    as in ``ppd_generate``. Sampled, ``seeds`` (one per prompt) seeds main's global generator
    before each prompt, or ``generator`` gives every draw. ``prompts_argument``: the argument a
    prompt too long for the context is named by (``ppd_generate``'s is ``input_ids``).
    """
    request = PPDRequest.of(request, fields)
    check_backend(request.backend)
    check_early_head(request.early_head)
    check_instance("settings", request.settings, RunSettings)
    if items_of(prompts) is None:
        raise ValueError(f"prompts must be a list of prompts, got {type(prompts).__name__}")
    names = request.sequences or [str(i) for i in range(len(prompts))]
    if items_of(names) is None or not all(isinstance(n, str) for n in names):
        raise ValueError(f"sequences must be a list of names (strings), got {names!r:.80}")
    seeds = _check_seeds(request.seeds, request.generator, len(prompts))
    request = replace(request, sequences=list(names), seeds=seeds)
    if request.backend == "dist":
        if ranks is not None:
            return ranks.run(prompts, request)
        return ppd_dist_many(request.settings.model_dir or model, prompts, request)
    if isinstance(model, str | Path):  # a local model directory
        with refused_as("model"):
            model = load_model(model)[0]
    check_model(model)
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    # before any decoding
    check_context(model.config, lengths, request.max_new_tokens, names=names,
                  argument=prompts_argument)  # fmt: skip
    return ppd_single_many(model, prompts, request)


def ppd_single_many(model, prompts, request: PPDRequest) -> list:
    """``request`` on the ``single`` backend (checked by ``ppd_many``): the warm-up, then
    every prompt."""
    r, settings = request, request.settings
    if r.warmup and prompts:
        ppd_single(model, prompts[0], d_bar=r.d_bar, k=r.k, max_new_tokens=WARMUP_TOKENS,
                   head=r.head, early_head=r.early_head)  # fmt: skip
    return [
        ppd_single(
            model,
            p,
            d_bar=r.d_bar,
            k=r.k,
            max_new_tokens=r.max_new_tokens,
            eos_token_id=settings.eos_token_id,
            head=r.head,
            sequence=name,
            early_head=r.early_head,
            decoding=settings.decoding,
            seed=seed,
            generator=r.generator,
        )  # fmt: skip
        for p, name, seed in zip(prompts, r.sequences, r.seeds, strict=True)
    ]


def _check_seeds(seeds, generator, n: int) -> list:
    """One seed (or None) per prompt; ValueError for a bad seed or a list of the wrong length."""
    if seeds is None:
        check_seed(None, generator)
        return [None] * n
    seeds = list(seeds)
    if len(seeds) != n:
        raise ValueError(f"seeds must hold one seed per prompt ({n}), got {len(seeds)}")
    for seed in seeds:
        check_seed(seed, generator)
    return seeds


def ppd_generate(
    model,
    input_ids,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos_token_id=None,
    backend="single",
    head=None,
    sequence="0",
    early_head="main",
    do_sample=False,
    temperature=None,
    top_k=None,
    top_p=None,
    seed=None,
    generator=None,
    settings: RunSettings = DEFAULT_SETTINGS,
):
    """Real PPD decoding (paper Algorithm 2); the tokens equal greedy decoding's, or sampled
    decoding's (paper Appendix B).

    model: a Hugging Face causal LM (or a local model directory); input_ids: one prompt ([P],
    [1, P] or a list); d_bar: early-prediction layer, d/2 <= d_bar < d; k: candidates,
    1..vocab; backend: ``single`` or ``dist`` (``settings``: a ``RunSettings`` whose
    ``world_size`` ranks are main + world_size - 1 candidate ranks, ``timeout_s`` its
    watchdog; this call's ``eos_token_id`` and sampling arguments replace its stop tokens and
    rule); early_head: ``main`` (main runs the early head
    and sends the k ids, Algorithm 2) or ``candidates`` (main hands its layer-d_bar hidden
    state over and goes on; the candidate side runs the early head and the top-k, and main
    gets the k ids back when it decides the match), see ``measure.decode.loop``.

    Sampling (``do_sample=True``; ``temperature`` > 0, ``top_k`` >= 0, ``top_p`` in (0, 1],
    None: the model's generation config, then transformers' defaults): main samples its final
    token as ``model.generate(do_sample=True, ...)`` does (the same logits processors in the
    same order, one draw per token) and a match is the sampled token among the k candidates,
    which never draw. ``seed=s`` seeds torch's global generator with s first (on ``dist``:
    main's process's), so ``torch.manual_seed(s); model.generate(ids, do_sample=True, top_k=K,
    max_new_tokens=N)`` gives the same tokens; ``generator`` (``single``: used as is; ``dist``:
    main's process starts from its state) gives the draws instead. See
    ``measure.decode.sampling`` for what is refused.
    """
    decoding = Decoding(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p)
    check_seed(seed, generator)
    check_instance("sequence", sequence, str)
    check_instance("settings", settings, RunSettings)
    request = PPDRequest(
        d_bar=d_bar, k=k, max_new_tokens=max_new_tokens, backend=backend,
        early_head=early_head, head=head, sequences=[sequence], seeds=[seed],
        generator=generator, warmup=False,
        settings=replace(settings, eos_token_id=eos_token_id, decoding=decoding),
    )  # fmt: skip
    (result,) = ppd_many(model, [input_ids], request, prompts_argument="input_ids")
    return result
