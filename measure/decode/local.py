"""The in-process candidate executor and the ``single`` backend (CPU sequential, CUDA streams)."""

from __future__ import annotations

import torch

from measure.checks import check_head_layer, check_ppd_args, checked_prompt
from measure.decode.loop import CANDIDATES, MAIN, Recorder, run_main
from measure.decode.results import build_result, handoff_nbytes
from measure.decode.sampling import GREEDY, NextToken, check_seed, prompt_and_rule
from measure.hf.kv_ops import append_entries, last_entries, share_prefix
from measure.hf.layer_split import LayerSplitModel
from measure.train.head_io import head_name
from ppdmodel.costs import check_early_head


class LocalCandidates:
    """The candidate process in the main process: one batch of k rows over layers [0, e).

    On CPU the rows run at once (sequential emulation: every batch runs to the end, rejected
    or not); on CUDA they are queued on their own stream so they overlap main's layers
    [d_bar, d). ``start_from_hidden`` (early head on the candidate side) runs the early head
    and the top-k first, on the same stream, and records that ``head`` block on the candidate
    process.
    """

    def __init__(self, lsm: LayerSplitModel, cache, e: int, recorder: Recorder, k: int = 1):
        self.lsm, self.cache, self.e, self.rec, self.k = lsm, cache, e, recorder, k
        cuda = lsm.device.type == "cuda"
        self.stream = torch.cuda.Stream(lsm.device) if cuda else None
        self.h = self.rows = self.done = self.ids = self.ids_ready = None

    def start(self, cands: torch.Tensor, position: int, token: int) -> None:
        """Run candidate tokens cands [1, k] at `position` through layers [0, e)."""
        self.ids, self.ids_ready = cands, None
        self._launch(cands, lambda: self._run(cands, position, token))

    def start_from_hidden(self, h: torch.Tensor, position: int, token: int) -> None:
        """Early head and top-k on main's h [1, 1, H] at d_bar, then the k rows as ``start``."""
        self._launch(h, lambda: self._run(self._top_k(h, token), position, token))

    def candidate_ids(self) -> list[int]:
        """The k ids of the current batch (on CUDA: waits for the candidate stream's top-k)."""
        if self.ids_ready is not None:
            torch.cuda.current_stream(self.lsm.device).wait_event(self.ids_ready)
        return self.ids[0].tolist()

    def _launch(self, source: torch.Tensor, run) -> None:
        """``run()`` now (CPU) or queued on the candidate stream after main's work so far."""
        if self.stream is None:
            run()
            return
        main = torch.cuda.current_stream(self.lsm.device)
        self.stream.wait_stream(main)  # the input and the prefix KV are ready
        source.record_stream(self.stream)  # main may drop this tensor while the stream reads
        for i in range(self.e):
            self.cache.layers[i].keys.record_stream(self.stream)
            self.cache.layers[i].values.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            run()
            self.done = torch.cuda.Event()
            self.done.record(self.stream)

    def _top_k(self, h: torch.Tensor, token: int) -> torch.Tensor:
        """The early head at d_bar on h [1, 1, H] -> top-k ids [1, k], timed on this process."""
        start = self.rec.mark(self.stream)
        cands = torch.topk(self.lsm.early_logits(h)[:, -1].float(), self.k, dim=-1).indices
        d_bar = self.lsm.num_layers - self.e
        self.rec.add(CANDIDATES, token, d_bar, d_bar, "head", start, self.rec.mark(self.stream))
        self.ids = cands
        if self.stream is not None:
            self.ids_ready = torch.cuda.Event()
            self.ids_ready.record(self.stream)
        return cands

    def _run(self, cands, position, token) -> None:
        k = cands.shape[-1]
        start = self.rec.mark(self.stream)
        rows = self.lsm.new_cache()
        share_prefix(self.cache, rows, range(self.e), k)
        pos = torch.full((k, 1), position, dtype=torch.long, device=cands.device)  # [k, 1]
        h = self.lsm.embed(cands.reshape(k, 1), pos)  # [k, 1, H]
        self.h = self.lsm.run_layers(h, 0, self.e, rows, pos)  # [k, 1, H]
        self.rows = rows
        self.rec.add(CANDIDATES, token, 0, self.e, "layers", start, self.rec.mark(self.stream))

    def accept(self, j: int, token_id: int, position: int, token: int) -> torch.Tensor:
        """Hand row j to main: append its KV for layers [0, e); return h [1, 1, H] at layer e."""
        start = self.rec.mark()
        if self.stream is not None:
            torch.cuda.current_stream(self.lsm.device).wait_event(self.done)
        entries = last_entries(self.rows, range(self.e), j)
        h = self.h[j : j + 1]
        if self.stream is not None:
            main = torch.cuda.current_stream(self.lsm.device)
            for t in (h, *(x for pair in entries for x in pair)):
                t.record_stream(main)
        append_entries(self.cache, range(self.e), entries)
        self.rec.add(MAIN, token, self.e, self.e, "handoff", start, self.rec.mark())
        self.h = self.rows = self.ids = None
        return h

    def reject(self, token_id: int, position: int, token: int) -> None:
        """No candidate matched: drop the rows (main recomputes the token from layer 0)."""
        self.h = self.rows = self.ids = None

    def finish(self) -> None:
        """Nothing to collect: the candidate blocks were recorded in this process."""
        self.h = self.rows = self.ids = None


@torch.no_grad()
def ppd_single(
    model,
    input_ids,
    *,
    d_bar,
    k,
    max_new_tokens,
    eos_token_id=None,
    head=None,
    sequence="0",
    return_cache=False,
    early_head="main",
    decoding=GREEDY,
    seed=None,
    generator=None,
    next_token: NextToken | None = None,
):
    """PPD in one process (sequential on CPU, two CUDA streams on a GPU); see ``ppd_generate``.

    ``next_token`` (a ``measure.decode.sampling.NextToken``) replaces the rule built from
    ``decoding``, ``seed``, ``generator`` and ``eos_token_id`` (``measure.generate_hf``).
    """
    check_early_head(early_head)
    check_seed(seed, generator)
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model, head=head)
    d = lsm.num_layers
    vocab = lsm.model.config.get_text_config().vocab_size
    check_ppd_args(d, d_bar, k, vocab, max_new_tokens)
    d_bar, k, max_new_tokens = int(d_bar), int(k), int(max_new_tokens)
    check_head_layer(lsm.head, d_bar)
    if next_token is None:
        ids, next_token = prompt_and_rule(
            lsm, input_ids, decoding, max_new_tokens=max_new_tokens, eos=eos_token_id, seed=seed,
            generator=generator,
        )  # fmt: skip
    else:  # the caller's rule: nothing seeded here
        ids = checked_prompt(lsm, input_ids, max_new_tokens)
    fields, cache = run_main(
        lsm,
        ids,
        d_bar=d_bar,
        k=k,
        max_new_tokens=max_new_tokens,
        next_token=next_token,
        candidates_factory=lambda c, e, rec: LocalCandidates(lsm, c, e, rec, k=k),
        early_head=early_head,
    )
    result = build_result(
        fields,
        d=d,
        d_bar=d_bar,
        k=k,
        sequence=sequence,
        backend="single",
        head_name=head_name(lsm.head),
        nbytes=handoff_nbytes(lsm, cache, d - d_bar),
        decoding=decoding.label,
    )
    return (result, cache) if return_cache else result
