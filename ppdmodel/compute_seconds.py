"""PPD's compute in busy device-seconds under DecodeCosts (this project's extension).

The paper counts compute as busy compute units times time (Theorem 4.1: C = T + k(d - d_bar)
ell). In seconds, from the per-pass schedule of ``ppdmodel.passes`` (same symbols), a pass keeps

* main's device busy for its prefix (P_f fresh, P_r resumed; no host or message time) and then
  E_m = W_m + (s_m - 1) o_m (its layers d_bar+1..d and final head, slowed by main's factor
  while shared);
* the candidate side busy from dispatch (delta after the split) until its batch is done,
  c_match = E_c - delta = W_c + (s_c - 1) o_c (slowed by its own factor while shared), when
  the next token was predicted (a match: main waits for it); on a miss the batch is abandoned
  when main's pass ends (E_m + tau after the split), so it was busy
  c_miss = min(max(E_m + tau - delta, 0), E_c - delta).

Per trace with M = sum_t m_t accepted predictions (the last pass, t = ell, is a miss):

    C_main = ell (P_f + E_m) - M (P_f - P_r)
    C_cand = ell c_miss + M (c_match - c_miss)

exact on separate devices (the simulator's ``busy_s``; on one shared device the simulator's
fluid sharing, each stream's own busy time). Expectations replace M by sum_{t=2..ell} p_t.
On a serial device (``DecodeCosts.serial_device``) nothing is slowed (the factors are unused)
and the batch always runs to its end: c_match = c_miss = W_c. With s_m = s_c (one factor),
o_m = o_c and both sides lose the same (sigma - 1) o, bit for bit as before. Greedy
decoding: ell (e + d L + h_f). A side spread over n devices (tensor parallel) counts n times
its busy time (``devices_main``, ``devices_candidates``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppdmodel.passes import check_costs, device_work, sharing_excess, sharing_factors
from ppdmodel.positions import check_m
from ppdmodel.theorem import _as_result, expected_matches, validate_theorem_args
from ppdmodel.validation import (
    check_broadcast,
    check_d_bar,
    check_positive_int,
    check_probability,
)


@dataclass(frozen=True)
class ComputeTerms:
    """Per-pass busy seconds of each side (arrays broadcast over d, d_bar, k)."""

    main_fresh_s: object
    """Main's busy time in a pass that starts at layer 1: P_f + E_m."""
    main_saving_s: object
    """What a resumed pass saves main: P_f - P_r = e + (d - d_bar) L."""
    candidates_match_s: object
    """The candidate batch's busy time when its prediction is accepted: E_c - delta."""
    candidates_miss_s: object
    """Its busy time when abandoned at the end of main's pass."""

    def per_token(self, rate, devices_main=1, devices_candidates=1):
        """(main, candidates) busy device-seconds per token at match rate ``rate`` (M / ell)."""
        rate = check_probability("rate", rate)
        devices_main = check_positive_int("devices_main", devices_main)
        devices_candidates = check_positive_int("devices_candidates", devices_candidates)
        check_broadcast(rate=np.shape(rate), devices_main=np.shape(devices_main),
                        devices_candidates=np.shape(devices_candidates),
                        terms=np.shape(self.main_fresh_s))  # fmt: skip
        main = self.main_fresh_s - np.multiply(rate, self.main_saving_s)
        extra = np.subtract(self.candidates_match_s, self.candidates_miss_s)
        cand = self.candidates_miss_s + np.multiply(rate, extra)
        return np.multiply(devices_main, main), np.multiply(devices_candidates, cand)


def compute_terms(*, d, d_bar, k, costs, early_head: str) -> ComputeTerms:
    """The per-pass busy seconds (module docstring) for validated arguments.

    ``costs``: a ``DecodeCosts`` or any object with its fields (``ppdmodel.DecodeCostsGrid``).
    """
    work_main, work_cand, delta, main_head = device_work(
        d=d, d_bar=d_bar, k=k, costs=costs, early_head=early_head
    )
    serial = np.asarray(costs.serial_device, dtype=bool)
    excess_main, excess_cand = sharing_excess(work_main, work_cand, delta, *sharing_factors(costs))
    fresh = (costs.embedding_s + main_head) + np.multiply(d_bar, costs.layer_s)
    resumed = main_head + np.multiply(np.subtract(np.multiply(2, d_bar), d), costs.layer_s)
    end_main = work_main + excess_main
    cand_match = work_cand + excess_cand
    cand_miss = np.clip(end_main + costs.host_s - delta, 0.0, cand_match)
    if serial.any():  # the batch runs to its end before main's suffix, matched or not
        cand_miss = np.where(serial, cand_match, cand_miss)
    return ComputeTerms(
        main_fresh_s=fresh + end_main,
        main_saving_s=fresh - resumed,
        candidates_match_s=cand_match,
        candidates_miss_s=cand_miss,
    )


def expected_compute_seconds(
    *,
    d,
    d_bar,
    ell,
    p,
    k=1,
    costs,
    early_head: str = "main",
    devices_main=1,
    devices_candidates=1,
    per_position: bool | None = None,
):
    """Expected busy device-seconds of PPD for ell tokens (main + candidate side).

    E[C] = n_m (ell (P_f + E_m) - E[M] (P_f - P_r)) + n_c (ell c_miss + E[M] (c_match -
    c_miss)), E[M] = sum_{t=2..ell} p_t; n_m, n_c: ``devices_main``, ``devices_candidates``.
    """
    k = check_positive_int("k", k)
    devices_main = check_positive_int("devices_main", devices_main)
    devices_candidates = check_positive_int("devices_candidates", devices_candidates)
    validate_theorem_args(d, d_bar, ell, p, per_position, k=k, devices_main=devices_main,
                          devices_candidates=devices_candidates)  # fmt: skip
    terms = compute_terms(d=d, d_bar=d_bar, k=k, costs=check_costs(costs), early_head=early_head)
    rate = np.divide(expected_matches(ell=ell, p=p, per_position=per_position), ell)
    main, cand = terms.per_token(rate, devices_main, devices_candidates)
    return _as_result(np.multiply(ell, main + cand))


def trace_compute_seconds(*, d, d_bar, m, k=1, costs, early_head: str = "main"):
    """Busy device-seconds of one trace m = (m_2..m_ell) (2-d: one trace per row), exact."""
    m = check_m(m)
    d = check_positive_int("d", d)
    check_d_bar(d, d_bar)
    k = check_positive_int("k", k)
    ell = m.shape[-1] + 1
    terms = compute_terms(d=d, d_bar=d_bar, k=k, costs=check_costs(costs), early_head=early_head)
    main, cand = terms.per_token(m.sum(axis=-1) / ell)
    return _as_result(ell * (main + cand))


def greedy_compute_seconds(*, d, ell, costs, devices=1):
    """Busy device-seconds of greedy decoding: ell (e + d L + h_f) per device (host excluded)."""
    d = check_positive_int("d", d)
    ell = check_positive_int("ell", ell)
    devices = check_positive_int("devices", devices)
    check_broadcast(d=np.shape(d), ell=np.shape(ell), devices=np.shape(devices))
    costs = check_costs(costs)
    per_token = costs.embedding_s + np.multiply(d, costs.layer_s) + costs.final_head_s
    return _as_result(np.multiply(np.multiply(ell, devices), per_token))
