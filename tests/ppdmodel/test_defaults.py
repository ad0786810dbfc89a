"""One default d and d_bar for every command, the planner, the profiler and the predictors."""

from __future__ import annotations

import numpy as np
import pytest

from ppdmodel import cli_args
from ppdmodel.defaults import DEFAULT_D, default_d_bar


@pytest.mark.parametrize(("d", "d_bar"), [(2, 1), (3, 2), (40, 20), (41, 21), (np.int8(9), 5)])
def test_default_d_bar_is_the_smallest_layer_at_or_above_half_depth(d, d_bar):
    assert default_d_bar(d) == d_bar and isinstance(default_d_bar(d), int)
    assert d / 2 <= default_d_bar(d) < d


@pytest.mark.parametrize("d", [1, 0, -3, 2.5, "40", None, float("nan")])
def test_default_d_bar_refuses_a_bad_depth_naming_d(d):
    with pytest.raises(ValueError, match=r"^d must be"):
        default_d_bar(d)


def test_the_cli_uses_the_one_definition():
    assert DEFAULT_D == 40 and cli_args.default_d_bar is default_d_bar
    assert cli_args.DEFAULT_D is DEFAULT_D
