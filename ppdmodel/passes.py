"""The per-pass schedule of PPD in seconds under DecodeCosts (this project's extension).

A *pass* is main's work on one token t (Algorithm 2, one loop). With D = d - d_bar,
L = ``layer_s``, L_k = the k-row candidate batch's per-layer time, e = embedding, h_e / h_f =
early / final head, delta = dispatch message, eta = hand-off, tau = host time, s_m / s_c =
main's / the batch's shared-device slowdown (``shared_device_slowdown``,
``DecodeCosts.candidate_slowdown``; one factor sigma for both unless the candidate side's is
given), a pass runs, from its start:

1. Main's prefix up to the *split* (the moment the candidates can be started):
   fresh (token 1, or after a miss):   P_f = e + d_bar L  [+ h_e if early_head = "main"]
   resumed (after a match; the accepted candidate already ran layers 1..D of this token):
                                       P_r = (2 d_bar - d) L  [+ h_e if early_head = "main"]
2. From the split, in parallel:
   main:        W_m = D L + h_f of device work (layers d_bar+1..d, final head), then tau on
                the host;
   candidates:  after delta (the k ids under "main"; main's hidden state under "candidates"),
                W_c = e + D L_k [+ h_e if early_head = "candidates"] of device work (the early
                head and top-k, then embedding and layers 1..D of the k rows as one batch).
   On one device, fluid sharing: while both compute, main runs at rate 1/s_m and the batch at
   1/s_c; whichever computes alone runs at full rate (each factor applies exactly to its own
   side's work in the overlapped span). Main computes alone for delta, then has
   R = max(W_m - delta, 0) left; both compute for the span s_m R if main finishes first
   (s_m R <= s_c W_c), else s_c W_c. With r = s_c / s_m the work each side does while both
   compute is
       o_m = min(R, r W_c)     (main's)          o_c = min(R / r, W_c)     (the batch's)
   (s_m o_m = s_c o_c: the shared span), so
   main's device work ends at  E_m = W_m + (s_m - 1) o_m,
   the candidates' at          E_c = delta + W_c + (s_c - 1) o_c          (after the split).
   With s_m = s_c = sigma, r = 1.0 exactly and o_m = o_c = o = min(R, W_c): the one-factor
   schedule, bit for bit.
3. The pass ends
   on a miss (token t+1 not among the candidates, or t = ell): at E_m + tau; the rejected
   candidates are abandoned (they never delay the next pass);
   on a match: when main and the batch are both done, plus the hand-off:
   max(E_m + tau, E_c) + eta = E_m + tau + w + eta, with the candidate wait
   w = max(delta + W_c - W_m - tau + ((s_c - 1) o_c - (s_m - 1) o_m), 0)
     = max(delta + W_c - W_m - tau + o_m - o_c, 0)
   (the sharing term cancels when both sides slow alike; o_m - o_c is how much more work main
   did than the batch in the same shared span).

Where this is exact and where it is not: on separate devices (s_m = s_c = 1) every pass time
is a sum of the costs, so T below is exact for every trace (the simulator agrees to the last
bit on dyadic costs). On one shared device it is exact for *fluid* sharing (each stream slows
by its own factor exactly while both compute; ``sim.device.SharedDevice.compute``). A device
that fixes each kernel's (layer's) rate when it starts, as ``sim`` does with
``per_layer_events=True``, slows a kernel that straddles the start or end of the overlap for
all or none of it; the closed form then errs by at most 2 (s_max - 1) K_max per pass (s_max =
max(s_m, s_c); K_max: the longest kernel, a layer with an embedding or head attached, or a
head alone), |T_kernel - T| <= 2 ell (s_max - 1) K_max, tested against the simulator
(SmolLM2-like costs: within 5%).

A serial device (``DecodeCosts.serial_device``: the single backend, one stream at a time)
runs, at the split, the whole candidate side first (delta, then W_c: it runs to its end,
rejected or not) and only then main's W_m, so main's device work ends at
    E_m = delta + W_c + W_m,   with no wait on a match (w = 0; the batch is already done),
exact for every trace whether W_c fits in W_m or outlasts it (the slowdown-2 fluid model
agrees with it only while W_c <= W_m - delta, and is short by W_c - W_m on a miss beyond).
Its per-pass loss to the candidates, E_m - W_m = delta + W_c, takes the place of (s_m - 1) o_m
in every formula below (``main_loss``); the slowdowns are unused.

So a pass that starts s in {fresh, resumed} and ends in a miss or a match takes
    P_s + E_m + tau  [+ w + eta on a match]
and, summing over passes (pass t resumes iff m_t = 1; it ends in a match iff m_{t+1} = 1),
    T = ell B - M S,   B = P_f + E_m + tau,   S = (P_f - P_r) - w - eta = e + D L - w - eta,
where M = sum_{t=2..ell} m_t is the number of accepted predictions: exact for every trace.
Taking expectations, E[T] = ell B - S sum_{t=2..ell} p_t (= ell B - S (ell - 1) p, i.i.d.).
With unit layers and everything else free, B = d and S = d - d_bar: Theorem 4.1.
Greedy decoding takes G = e + d L + h_f + tau per token; PPD's excess at p = 0 is
B - G = [h_e if "main"] + (s_m - 1) o_m >= 0 (serial: + delta + W_c instead of the
sharing term), so the break-even p is that excess over S.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppdmodel.costs import DecodeCosts, check_early_head
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_nonnegative,
    check_positive,
    check_positive_int,
)


@dataclass(frozen=True)
class PassTimes:
    """Per-pass quantities of the module docstring, seconds (arrays broadcast over d, d_bar, k)."""

    fresh_prefix_s: object
    """P_f: pass start to the split when the pass starts at layer 1."""
    resumed_prefix_s: object
    """P_r: pass start to the split after a match."""
    main_rest_s: object
    """E_m + tau: split to the end of main's pass (no match)."""
    wait_s: object
    """w: how long main waits for the accepted candidate batch on a match."""
    handoff_s: float
    """eta: the hand-off after a match."""
    overlap_excess_s: object
    """(s_m - 1) o_m: time main loses to a shared device per pass (serial: delta + W_c)."""
    main_head_s: float
    """h_e when the early head runs on main's critical path, else 0."""
    candidate_excess_s: object = 0.0
    """(s_c - 1) o_c: time the candidate batch loses to a shared device per pass (0 on a
    serial device)."""

    @property
    def miss_only_s(self):
        """B = P_f + E_m + tau: a token's time when no prediction is accepted."""
        return self.fresh_prefix_s + self.main_rest_s

    @property
    def saving_s(self):
        """S = P_f - P_r - w - eta: what each accepted prediction saves (may be < 0)."""
        return self.fresh_prefix_s - self.resumed_prefix_s - self.wait_s - self.handoff_s

    @property
    def excess_over_greedy_s(self):
        """B - G = main_head + (s_m - 1) o_m: PPD's extra time per token at p = 0 (>= 0)."""
        return self.main_head_s + self.overlap_excess_s

    @property
    def break_even_p(self):
        """Smallest p in [0, 1] with B - p S <= G: 0 when B = G, (B - G) / S when
        0 < B - G <= S, else inf (``ppdmodel.break_even_p`` for validated arguments)."""
        excess, saving = np.asarray(self.excess_over_greedy_s), np.asarray(self.saving_s)
        reachable = (saving > 0) & (excess <= saving)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(reachable, excess / np.where(saving > 0, saving, 1.0), np.inf)
        return np.where(excess <= 0, 0.0, ratio)


def check_costs(costs) -> DecodeCosts:
    """Return ``costs`` if it is a DecodeCosts, else ValueError."""
    if not isinstance(costs, DecodeCosts):
        raise ValueError(f"costs must be a ppdmodel.DecodeCosts, got {type(costs).__name__}")
    return costs


def device_work(*, d, d_bar, k, costs: DecodeCosts, early_head: str):
    """(W_m, W_c, delta, main_head): device work after the split and the dispatch delay."""
    if not all(hasattr(costs, f) for f in ("early_head_s", "candidate_layer_seconds")):
        raise ValueError(f"costs must be a ppdmodel.DecodeCosts or DecodeCostsGrid, got "
                         f"{type(costs).__name__}")  # fmt: skip
    d = check_positive_int("d", d)
    d_bar, k = check_d_bar(d, d_bar), check_positive_int("k", k)
    check_broadcast(d=np.shape(d), d_bar=np.shape(d_bar), k=np.shape(k))
    gap = np.subtract(d, d_bar)
    on_main = check_early_head(early_head) == "main"
    main_head = costs.early_head_s if on_main else 0.0
    cand_head = 0.0 if on_main else costs.early_head_s
    work_main = np.multiply(gap, costs.layer_s) + costs.final_head_s
    layer_k = costs.candidate_layer_seconds(k)
    work_cand = (costs.embedding_s + cand_head) + np.multiply(gap, layer_k)
    return work_main, work_cand, costs.dispatch_seconds(early_head), main_head


def sharing_factors(costs):
    """(s_m, s_c): main's and the candidate batch's factors while both compute on one device
    (``shared_device_slowdown``; ``candidate_device_slowdown``, None: s_m), 1 on the rows of
    a serial device (nothing overlaps there)."""
    if not all(hasattr(costs, f) for f in ("serial_device", "shared_device_slowdown",
                                           "candidate_device_slowdown")):  # fmt: skip
        raise ValueError(f"costs must be a ppdmodel.DecodeCosts or DecodeCostsGrid, got "
                         f"{type(costs).__name__}")  # fmt: skip
    s_main = costs.shared_device_slowdown
    s_cand = s_main if costs.candidate_device_slowdown is None else costs.candidate_device_slowdown
    serial = np.asarray(costs.serial_device, dtype=bool)
    if serial.any():
        s_main, s_cand = np.where(serial, 1.0, s_main), np.where(serial, 1.0, s_cand)
    return s_main, s_cand


def shared_work(work_main, work_cand, delta, s_main, s_cand):
    """(o_m, o_c): the work main and the batch each do while both compute, fluid sharing
    (module docstring): o_m = min(R, r W_c), o_c = min(R / r, W_c), R = max(W_m - delta, 0),
    r = s_c / s_m (exactly 1.0 for equal factors, so then o_m = o_c bit for bit)."""
    work_main, work_cand, delta, s_main, s_cand = _sharing_inputs(
        work_main, work_cand, delta, s_main, s_cand
    )
    return _shared_work(work_main, work_cand, delta, s_main, s_cand)


def _sharing_inputs(work_main, work_cand, delta, s_main, s_cand):
    """The inputs of ``shared_work`` checked (ValueError naming the bad one); ``s_cand`` None:
    ``s_main``."""
    work_main = check_nonnegative("work_main", work_main)
    work_cand = check_nonnegative("work_cand", work_cand)
    delta, s_main = check_nonnegative("delta", delta), check_positive("s_main", s_main)
    s_cand = s_main if s_cand is None else check_positive("s_cand", s_cand)
    check_broadcast(
        work_main=np.shape(work_main),
        work_cand=np.shape(work_cand),
        delta=np.shape(delta),
        s_main=np.shape(s_main),
        s_cand=np.shape(s_cand),
    )
    return work_main, work_cand, delta, s_main, s_cand


def _shared_work(work_main, work_cand, delta, s_main, s_cand):
    ahead = np.maximum(np.subtract(work_main, delta), 0.0)
    ratio = np.divide(s_cand, s_main)
    return np.minimum(ahead, ratio * work_cand), np.minimum(ahead / ratio, work_cand)


def sharing_excess(work_main, work_cand, delta, s_main, s_cand=None):
    """((s_m - 1) o_m, (s_c - 1) o_c): what main's and the batch's device work each lose per
    pass to sharing one device (factors, or arrays of them broadcasting with the work;
    ``s_cand`` None: ``s_main``, one factor for both)."""
    work_main, work_cand, delta, s_main, s_cand = _sharing_inputs(
        work_main, work_cand, delta, s_main, s_cand
    )
    if np.ndim(s_main) == 0 and np.ndim(s_cand) == 0 and s_main == 1 and s_cand == 1:
        zeros = np.zeros_like(np.add(work_main, work_cand), dtype=float)
        return zeros, zeros
    shared_main, shared_cand = _shared_work(work_main, work_cand, delta, s_main, s_cand)
    return (s_main - 1.0) * shared_main, (s_cand - 1.0) * shared_cand


def overlap_excess(work_main, work_cand, delta, slowdown, candidate_slowdown=None):
    """(s_m - 1) o_m: main's loss to sharing (``sharing_excess``; ``slowdown`` is s_m, and
    s_c too when ``candidate_slowdown`` is None: then o_m = o = min(max(W_m - delta, 0), W_c))."""
    slowdown = check_positive("slowdown", slowdown)
    if candidate_slowdown is not None:
        candidate_slowdown = check_positive("candidate_slowdown", candidate_slowdown)
    return sharing_excess(work_main, work_cand, delta, slowdown, candidate_slowdown)[0]


def sharing_losses(work_main, work_cand, delta, costs):
    """(main's loss, (s_m - 1) o_m, (s_c - 1) o_c) per pass under ``costs``: main's loss is
    (s_m - 1) o_m under fluid sharing and delta + W_c on a serial device
    (``costs.serial_device``, scalar or array), where both fluid terms are 0."""
    s_main, s_cand = sharing_factors(costs)
    fluid_main, fluid_cand = sharing_excess(work_main, work_cand, delta, s_main, s_cand)
    serial = np.asarray(costs.serial_device, dtype=bool)
    if not serial.any():
        return fluid_main, fluid_main, fluid_cand
    return np.where(serial, np.add(delta, work_cand), fluid_main), fluid_main, fluid_cand


def main_loss(work_main, work_cand, delta, costs):
    """What main loses per pass to the candidates on its device: (s_m - 1) o_m under fluid
    sharing, delta + W_c on a serial device (``costs.serial_device``, scalar or array)."""
    return sharing_losses(work_main, work_cand, delta, costs)[0]


def pass_times(*, d, d_bar, k, costs: DecodeCosts, early_head: str) -> PassTimes:
    """The per-pass schedule (module docstring) for already validated arguments."""
    work_main, work_cand, delta, main_head = device_work(
        d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head
    )
    excess, fluid_main, fluid_cand = sharing_losses(work_main, work_cand, delta, costs)
    layer = costs.layer_s
    fresh = (costs.embedding_s + main_head) + np.multiply(d_bar, layer)
    resumed = main_head + np.multiply(np.subtract(np.multiply(2, d_bar), d), layer)
    slack = work_main + costs.host_s
    # w = max(E_c - E_m - tau, 0); the sharing terms add exactly 0.0 for equal factors
    wait = np.maximum(((delta + work_cand) + (fluid_cand - fluid_main)) - slack, 0.0)
    if np.any(costs.serial_device):  # the batch ran before main's suffix: never waited for
        wait = np.where(costs.serial_device, 0.0, wait)
    return PassTimes(
        fresh_prefix_s=fresh,
        resumed_prefix_s=resumed,
        main_rest_s=slack + excess,
        wait_s=wait,
        handoff_s=costs.handoff_s,
        overlap_excess_s=excess,
        main_head_s=main_head,
        candidate_excess_s=fluid_cand,
    )
