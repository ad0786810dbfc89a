"""FREE decoding on a layer-split Hugging Face model (Bae et al., EMNLP 2023, section 5).

The shallow model is layers [0, L_s) with an exit head (the logit lens, or a trained head for
layer L_s); the deep model is all d layers. Each step feeds the last token x_t through the
shallow layers and the exit head, whose top probability is the confidence c_t of the next
token x_{t+1}. Three modes:

``sync`` (synchronized parallel decoding, section 5.2): if c_t >= threshold, x_{t+1} is the
  shallow prediction and x_t's layer-L_s hidden state is *stacked*; its deep KV entries do not
  exist yet. The next token whose confidence stays below the threshold runs layers
  [L_s, d) over the n stacked states and its own as one block of n + 1 rows (positions in
  order, causal), which writes the stacked tokens' deep KV entries computed by the real deep
  layers, never copied; x_{t+1} is the deep prediction of the last row.
``copy`` (state copying, the CALM-style baseline of Table 5): the same schedule, but in every
  deep layer a stacked row's input is its *copied* layer-L_s state h_{L_s}, not the previous
  deep layer's output, so the deep layers' K/V of an exited position are computed from h_{L_s}
  (CALM's propagation of the exited hidden state to the skipped layers). The non-exiting row
  runs the deep layers normally and attends to those approximate entries.
``oracle`` (reference exit): every token also runs the deep layers (the check), so the deep
  cache is always greedy's (what synchronized parallel decoding holds after its next deep
  pass) and the token is the deep prediction; a token counts as exited iff the shallow
  prediction equals the deep one. Tokens equal greedy's; ``threshold`` is not used.

A threshold above 1 never exits (tokens equal greedy's); 0 always exits. ``"auto"`` uses an
``AdaptiveThreshold`` (Algorithm 1): while it calibrates, every deep pass computes the final
head on all its rows and yields the pairs (c_i, shallow == deep) of its stacked tokens and of
the non-exiting token (in ``copy`` mode only the non-exiting token's pair: a copied row has no
real deep prediction). The first generated token comes from the last prompt token's step like
any other (prefill covers the prompt minus its last token, as ``greedy_generate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral

import torch

from measure import clock as clocks
from measure.checks import check_head_layer, check_max_new_tokens, checked_prompt, eos_set
from measure.clock import synchronize
from measure.free.threshold import AdaptiveThreshold, check_threshold
from measure.hf.layer_split import LayerSplitModel
from measure.hf.lens import resolve_head
from ppdmodel.validation import check_choice, check_flag, check_instance

MODES = ("sync", "copy", "oracle")
"""``free_generate`` modes (module docstring)."""


@dataclass
class FreeResult:
    """One FREE generation: tokens, exits and timings."""

    tokens: list[int]
    """Generated token ids (prompt excluded)."""
    exits: list[int]
    """1 if generated token t came from the shallow model (exited), else 0."""
    confidences: list[float]
    """Exit head's top probability for each generated token."""
    deep_rows: list[int]
    """Rows of each deep pass (stacked tokens + 1), in order."""
    thresholds: list[float]
    """Threshold in force at each generated token (NaN in ``oracle`` mode)."""
    wall_s: float
    """Wall-clock seconds of the decode steps (prefill excluded)."""
    token_times_s: list[float]
    """Seconds from the start of decoding until each token was known."""
    prefill_s: float = 0.0
    mode: str = "sync"
    exit_layer: int = 0
    pairs: list[tuple[float, bool]] = field(default_factory=list)
    """(confidence, shallow == deep) pairs this run yielded to the estimator (or the oracle)."""

    @property
    def ell(self) -> int:
        return len(self.tokens)

    @property
    def exit_rate(self) -> float:
        """Fraction of generated tokens that exited."""
        return sum(self.exits) / max(1, len(self.exits))

    def __repr__(self) -> str:
        return (
            f"FreeResult(ell={self.ell}, mode={self.mode!r}, exit_layer={self.exit_layer}, "
            f"exit_rate={self.exit_rate:.3g}, wall_s={self.wall_s:.4g})"
        )


def check_exit_layer(exit_layer, d: int) -> int:
    """ValueError unless 1 <= exit_layer <= d - 1."""
    ok = isinstance(exit_layer, Integral) and not isinstance(exit_layer, bool)
    if not (ok and 1 <= exit_layer < d):
        raise ValueError(f"exit_layer must be an integer in [1, {d - 1}], got {exit_layer!r}")
    return exit_layer


class _Stack:
    """Tokens that exited and wait for the deep layers: their states, positions, confidences
    and shallow predictions."""

    def __init__(self) -> None:
        self.h: list[torch.Tensor] = []  # each [1, 1, H]
        self.positions: list[int] = []
        self.confidences: list[float] = []
        self.predictions: list[int] = []

    def push(self, h, position, confidence, prediction) -> None:
        self.h.append(h)
        self.positions.append(position)
        self.confidences.append(confidence)
        self.predictions.append(prediction)

    def __len__(self) -> int:
        return len(self.h)

    def clear(self) -> None:
        """Forget every stacked token (their deep KV entries were just written)."""
        self.__init__()


def deep_pass(lsm: LayerSplitModel, exit_layer: int, h_rows, positions, cache, *, copy=False):
    """Layers [exit_layer, d) over n + 1 rows of one sequence: h_rows [1, n + 1, H] (the
    stacked layer-L_s states, then the current token's) -> last layer's output [1, n + 1, H].

    Writes the n + 1 positions' deep KV entries into ``cache``. ``copy``: every layer gets
    the stacked rows' copied h_{L_s} as their input (state copying); the last row propagates.
    """
    pos = torch.tensor([positions], device=h_rows.device)  # [1, n + 1]
    if not copy:
        return lsm.run_layers(h_rows, exit_layer, lsm.num_layers, cache, pos)
    kwargs = lsm.layer_kwargs(h_rows, exit_layer, cache, pos)
    copied, h = h_rows[:, :-1], h_rows
    for i in range(exit_layer, lsm.num_layers):
        h = lsm.run_layer(i, torch.cat([copied, h[:, -1:]], dim=1), kwargs)
    return h


def _top(logits: torch.Tensor) -> tuple[float, int]:
    """(top probability, argmax) of logits [V]."""
    probs = torch.softmax(logits.float(), dim=-1)
    conf, pred = probs.max(-1)
    return float(conf), int(pred)


@torch.no_grad()
def free_generate(
    model,
    input_ids,
    *,
    exit_layer,
    threshold,
    max_new_tokens,
    mode="sync",
    head=None,
    eos_token_id=None,
    estimator: AdaptiveThreshold | None = None,
    return_cache=False,
):
    """FREE decoding (module docstring); a ``FreeResult`` (and the cache if ``return_cache``).

    ``threshold``: a number (>= 0; above 1 never exits) or "auto" (``estimator``, default a
    fresh ``AdaptiveThreshold(refit="pass")`` calibrating over this call). ``head``: an exit
    head for layer ``exit_layer`` (None: the logit lens). ``model``: a causal LM or a
    ``LayerSplitModel``.
    """
    check_choice("mode", mode, MODES)
    threshold = check_threshold(threshold)
    if estimator is not None:
        check_instance("estimator", estimator, AdaptiveThreshold)
    check_flag("return_cache", return_cache)
    if threshold == "auto" and estimator is None:
        estimator = AdaptiveThreshold(refit="pass")
    if threshold != "auto" and estimator is not None:
        raise ValueError("estimator is only used with threshold='auto'")
    lsm = model if isinstance(model, LayerSplitModel) else LayerSplitModel(model)
    d = lsm.num_layers
    check_exit_layer(exit_layer, d)
    check_head_layer(head, exit_layer, "exit_layer")
    max_new_tokens = check_max_new_tokens(max_new_tokens)
    ids = checked_prompt(lsm, input_ids, max_new_tokens)
    exit_logits = resolve_head(head, lsm.lens)
    eos = eos_set(eos_token_id)
    cache = lsm.new_cache()
    t0 = clocks.host_clock()
    if ids.shape[1] > 1:
        lsm.prefill(ids[:, :-1], cache)
    synchronize(lsm.device)
    t1 = clocks.host_clock()
    token, position = ids[:, -1:], ids.shape[1] - 1
    out = FreeResult([], [], [], [], [], 0.0, [], prefill_s=t1 - t0, mode=mode)
    out.exit_layer = exit_layer
    stack = _Stack()
    run = _Run(lsm, exit_layer, cache, mode, estimator, out)
    for _ in range(max_new_tokens):
        pos = torch.full_like(token, position)  # [1, 1]
        h = lsm.run_layers(lsm.embed(token, pos), 0, exit_layer, cache, pos)  # [1, 1, H]
        conf, pred = _top(exit_logits(h)[0, -1])
        lam = estimator.threshold if threshold == "auto" else threshold
        if mode == "oracle":
            deep = int(lsm.logits(lsm.run_layers(h, exit_layer, d, cache, pos))[0, -1].argmax())
            exited, nxt, lam = int(pred == deep), deep, float("nan")
            out.pairs.append((conf, pred == deep))
        elif conf >= lam:
            exited, nxt = 1, pred
            stack.push(h, position, conf, pred)
        else:
            exited = 0
            nxt = _deep(run, stack, h, position, conf, pred)
        out.tokens.append(nxt)
        out.exits.append(exited)
        out.confidences.append(conf)
        out.thresholds.append(float(lam))
        out.token_times_s.append(clocks.host_clock() - t1)
        if nxt in eos:
            break
        token = torch.full((1, 1), nxt, dtype=torch.long, device=lsm.device)
        position += 1
    synchronize(lsm.device)
    out.wall_s = clocks.host_clock() - t1
    if estimator is not None:
        estimator.end_sentence()
    return (out, cache) if return_cache else out


@dataclass
class _Run:
    """What a deep pass needs of the generation it serves."""

    lsm: LayerSplitModel
    exit_layer: int
    cache: object
    mode: str
    estimator: AdaptiveThreshold | None
    out: FreeResult


def _deep(run: _Run, stack: _Stack, h, position: int, conf: float, pred: int) -> int:
    """The deep pass of a non-exiting token over the stack and itself; its deep prediction.

    While the estimator calibrates, the final head runs on every row and the pairs go to it.
    """
    lsm, exit_layer, cache, mode, estimator, out = (
        run.lsm,
        run.exit_layer,
        run.cache,
        run.mode,
        run.estimator,
        run.out,
    )
    rows = torch.cat([*stack.h, h], dim=1)  # [1, n + 1, H]
    hd = deep_pass(lsm, exit_layer, rows, [*stack.positions, position], cache, copy=mode == "copy")
    out.deep_rows.append(rows.shape[1])
    collect = estimator is not None and estimator.calibrating
    if not collect:
        nxt = int(lsm.logits(hd[:, -1:])[0, -1].argmax())
    else:
        deep = lsm.logits(hd)[0].argmax(-1).tolist()  # [n + 1]
        nxt = deep[-1]
        confs = [*stack.confidences, conf]
        agree = [p == q for p, q in zip([*stack.predictions, pred], deep, strict=True)]
        if mode == "copy":  # copied rows have no real deep prediction
            confs, agree = confs[-1:], agree[-1:]
        estimator.observe(confs, agree)
        out.pairs.extend(zip(confs, agree, strict=True))
    stack.clear()
    return nxt
