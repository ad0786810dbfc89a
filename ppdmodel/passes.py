"""The per-pass schedule of PPD in seconds under DecodeCosts (this project's extension).

A *pass* is main's work on one token t (Algorithm 2, one loop). With D = d - d_bar,
L = ``layer_s``, L_k = the k-row candidate batch's per-layer time, e = embedding, h_e / h_f =
early / final head, delta = dispatch message, eta = hand-off, tau = host time, sigma = shared-
device slowdown, a pass runs, from its start:

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
   On one device (sigma > 1) both streams run sigma times slower while both compute (fluid
   sharing: the slowdown applies exactly to the overlapped span). Main computes alone for
   delta, so the overlapped work is o = min(max(W_m - delta, 0), W_c), and
   main's device work ends at  E_m = W_m + (sigma - 1) o,
   the candidates' at          E_c = delta + W_c + (sigma - 1) o          (after the split).
3. The pass ends
   on a miss (token t+1 not among the candidates, or t = ell): at E_m + tau; the rejected
   candidates are abandoned (they never delay the next pass);
   on a match: when main and the batch are both done, plus the hand-off:
   max(E_m + tau, E_c) + eta = E_m + tau + w + eta, with the candidate wait
   w = max(delta + W_c - W_m - tau, 0)  (the slowdown term cancels: both streams slow alike).

Where this is exact and where it is not: on separate devices (sigma = 1) every pass time is
a sum of the costs, so T below is exact for every trace (the simulator agrees to the last
bit on dyadic costs). On one shared device it is exact for *fluid* sharing (both streams slow
by sigma exactly while both compute; ``sim.device.SharedDevice.compute``). A device that fixes
each kernel's (layer's) rate when it starts, as ``sim`` does with ``per_layer_events=True``,
slows a kernel that straddles the start or end of the overlap for all or none of it; the
closed form then errs by at most 2 (sigma - 1) K_max per pass (K_max: the longest kernel, a
layer with an embedding or head attached, or a head alone), |T_kernel - T| <= 2 ell (sigma - 1)
K_max, tested against the simulator (SmolLM2-like costs: within 5%).

A serial device (``DecodeCosts.serial_device``: the single backend, one stream at a time)
runs, at the split, the whole candidate side first (delta, then W_c: it runs to its end,
rejected or not) and only then main's W_m, so main's device work ends at
    E_m = delta + W_c + W_m,   with no wait on a match (w = 0; the batch is already done),
exact for every trace whether W_c fits in W_m or outlasts it (the slowdown-2 fluid model
agrees with it only while W_c <= W_m - delta, and is short by W_c - W_m on a miss beyond).
Its per-pass loss to the candidates, E_m - W_m = delta + W_c, takes the place of (sigma - 1) o
in every formula below (``main_loss``).

So a pass that starts s in {fresh, resumed} and ends in a miss or a match takes
    P_s + E_m + tau  [+ w + eta on a match]
and, summing over passes (pass t resumes iff m_t = 1; it ends in a match iff m_{t+1} = 1),
    T = ell B - M S,   B = P_f + E_m + tau,   S = (P_f - P_r) - w - eta = e + D L - w - eta,
where M = sum_{t=2..ell} m_t is the number of accepted predictions: exact for every trace.
Taking expectations, E[T] = ell B - S sum_{t=2..ell} p_t (= ell B - S (ell - 1) p, i.i.d.).
With unit layers and everything else free, B = d and S = d - d_bar: Theorem 4.1.
Greedy decoding takes G = e + d L + h_f + tau per token; PPD's excess at p = 0 is
B - G = [h_e if "main"] + (sigma - 1) o >= 0 (serial: + delta + W_c instead of the
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
    """(sigma - 1) o: time main loses to a shared device per pass (serial: delta + W_c)."""
    main_head_s: float
    """h_e when the early head runs on main's critical path, else 0."""

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
        """B - G = main_head + (sigma - 1) o: PPD's extra time per token at p = 0 (>= 0)."""
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


def overlap_excess(work_main, work_cand, delta, slowdown):
    """(sigma - 1) o with o = min(max(W_m - delta, 0), W_c): main's loss to sharing
    (``slowdown`` a factor, or an array of them broadcasting with the work)."""
    work_main, work_cand = check_nonnegative("work_main", work_main), check_nonnegative(
        "work_cand", work_cand)  # fmt: skip
    delta, slowdown = check_nonnegative("delta", delta), check_nonnegative("slowdown", slowdown)
    if np.any(np.asarray(slowdown) < 1):
        raise ValueError("slowdown must be a factor >= 1 (1: no contention)")
    check_broadcast(work_main=np.shape(work_main), work_cand=np.shape(work_cand),
                    delta=np.shape(delta), slowdown=np.shape(slowdown))  # fmt: skip
    if np.ndim(slowdown) == 0 and slowdown == 1:
        return np.zeros_like(np.add(work_main, work_cand), dtype=float)
    overlap = np.minimum(np.maximum(np.subtract(work_main, delta), 0.0), work_cand)
    return (slowdown - 1.0) * overlap


def main_loss(work_main, work_cand, delta, costs):
    """What main loses per pass to the candidates on its device: (sigma - 1) o under fluid
    sharing, delta + W_c on a serial device (``costs.serial_device``, scalar or array)."""
    if not all(hasattr(costs, f) for f in ("serial_device", "shared_device_slowdown")):
        raise ValueError(f"costs must be a ppdmodel.DecodeCosts or DecodeCostsGrid, got "
                         f"{type(costs).__name__}")  # fmt: skip
    serial = np.asarray(costs.serial_device, dtype=bool)
    if not serial.any():
        return overlap_excess(work_main, work_cand, delta, costs.shared_device_slowdown)
    slowdown = np.where(serial, 1.0, costs.shared_device_slowdown)
    fluid = overlap_excess(work_main, work_cand, delta, slowdown)
    return np.where(serial, np.add(delta, work_cand), fluid)


def pass_times(*, d, d_bar, k, costs: DecodeCosts, early_head: str) -> PassTimes:
    """The per-pass schedule (module docstring) for already validated arguments."""
    work_main, work_cand, delta, main_head = device_work(
        d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head
    )
    excess = main_loss(work_main, work_cand, delta, costs)
    layer = costs.layer_s
    fresh = (costs.embedding_s + main_head) + np.multiply(d_bar, layer)
    resumed = main_head + np.multiply(np.subtract(np.multiply(2, d_bar), d), layer)
    slack = work_main + costs.host_s
    wait = np.maximum((delta + work_cand) - slack, 0.0)
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
    )
