"""The m_t <-> token-position rule, and every place that applies it agreeing with it."""

import numpy as np
import pytest

import sim
from ppdmodel import paper
from ppdmodel.positions import FIRST_T, m_from_positions, position_of_m


def test_m_t_is_the_match_at_position_t_minus_1():
    assert FIRST_T == 2
    assert position_of_m(2) == 1 and list(position_of_m(np.array([2, 5, 16]))) == [1, 4, 15]
    with pytest.raises(ValueError, match="t must be >= 2"):
        position_of_m(1)
    by_position = [1, 0, 1, 1, 0]  # positions 1..5 (ell = 5)
    assert m_from_positions(by_position) == [1, 0, 1, 1]  # m_2..m_5
    rates = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    assert m_from_positions(rates).tolist() == [[0.1, 0.2], [0.4, 0.5]]


def test_paper_per_position_p_follows_the_rule():
    rows = paper.TABLES_6_8.query("dataset == 'WMT' and k == 3 and trained == True and layer == 20")
    rate_at = np.empty(128)
    for first, last, value in rows[["position_first", "position_last", "p_correct"]].itertuples(
        index=False
    ):
        rate_at[first - 1 : last] = value
    p_t = paper.per_position_p(dataset="WMT", k=3, trained=True, layer=20)
    assert np.array_equal(p_t, rate_at[:-1])
    assert p_t[position_of_m(2) - 1] == rate_at[0]  # p_2 is the rate at position 1


def test_simulator_shortens_the_pass_after_a_matched_position():
    # positions 1..4 matched as [1, 0, 0, 1]: only the pass producing x_2 (m_2) is shortened;
    # position 4's match is never used (ell = 4)
    m = m_from_positions([1, 0, 0, 1])
    result = sim.simulate(sim.SimConfig(d=4, d_bar=2, k=1, ell=4, matches=sim.Replay(m)))
    assert result.n_runs == 1 + m.count(0) == 3
    assert result.latency_units == 2 * 4 + (4 - 2) * 3
