"""One dispatch over PPD's backends (``single``, ``dist``), used by every caller.

``ppd_many`` decodes several prompts (one warm-up for ``single``, one spawned job for ``dist``);
``ppd_generate`` is the one-prompt form of the public API.
"""

from __future__ import annotations

from pathlib import Path

from measure.decode.checks import as_prompt_ids, check_context
from measure.decode.launch import ppd_dist_many
from measure.decode.local import ppd_single
from measure.hf.loading import load_model
from ppdmodel.costs import check_early_head

BACKENDS = ("single", "dist")
"""``single``: one process (sequential on CPU, two CUDA streams on a GPU); ``dist``: ranks."""


def check_backend(backend) -> None:
    """ValueError unless ``backend`` is one of ``BACKENDS``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'single' or 'dist', got {backend!r}")


def ppd_many(
    model,
    prompts,
    *,
    d_bar,
    k,
    max_new_tokens,
    backend="single",
    world_size=2,
    eos_token_id=None,
    timeout_s=300.0,
    sequences=None,
    model_dir=None,
    head=None,
    warmup=True,
    early_head="main",
):
    """PPD on every prompt, a list of ``PPDResult``; ``dist`` runs all prompts in one job.

    ``model_dir`` (a local directory holding ``model``'s weights) spares ``dist`` a temporary
    copy; ``warmup`` decodes two tokens of the first prompt untimed first (``single``);
    ``early_head`` as in ``ppd_generate``.
    """
    check_backend(backend)
    check_early_head(early_head)
    names = sequences or [str(i) for i in range(len(prompts))]
    if backend == "dist":
        return ppd_dist_many(
            model_dir or model,
            prompts,
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            world_size=world_size,
            timeout_s=timeout_s,
            head=head,
            sequences=names,
            early_head=early_head,
        )
    if isinstance(model, str | Path):  # a local model directory
        model = load_model(model)[0]
    lengths = [as_prompt_ids(p, "cpu").shape[1] for p in prompts]
    check_context(model.config, lengths, max_new_tokens, names=names)  # before any decoding
    if warmup and prompts:
        ppd_single(
            model,
            prompts[0],
            d_bar=d_bar,
            k=k,
            max_new_tokens=2,
            head=head,
            early_head=early_head,
        )
    return [
        ppd_single(
            model,
            p,
            d_bar=d_bar,
            k=k,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            head=head,
            sequence=name,
            early_head=early_head,
        )
        for p, name in zip(prompts, names, strict=True)
    ]


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
    world_size=2,
    timeout_s=120.0,
    sequence="0",
    early_head="main",
):
    """Real PPD decoding (paper Algorithm 2); the tokens equal greedy decoding's.

    model: a Hugging Face causal LM (or a local model directory); input_ids: one prompt ([P],
    [1, P] or a list); d_bar: early-prediction layer, d/2 <= d_bar < d; k: candidates,
    1..vocab; backend: ``single`` or ``dist`` (``world_size`` ranks: main + world_size - 1
    candidate ranks, ``timeout_s`` per run); early_head: ``main`` (main runs the early head
    and sends the k ids, Algorithm 2) or ``candidates`` (main hands its layer-d_bar hidden
    state over and goes on; the candidate side runs the early head and the top-k, and main
    gets the k ids back when it decides the match), see ``measure.decode.loop``.
    """
    (result,) = ppd_many(
        model,
        [input_ids],
        d_bar=d_bar,
        k=k,
        max_new_tokens=max_new_tokens,
        backend=backend,
        world_size=world_size,
        eos_token_id=eos_token_id,
        timeout_s=timeout_s,
        sequences=[sequence],
        head=head,
        warmup=False,
        early_head=early_head,
    )
    return result
