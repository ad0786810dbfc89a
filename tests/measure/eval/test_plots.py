"""The validation figures read cleanly at 1 to 32 configurations: no point label over another,
the title clear of the panels' titles, each block's time beside the profile's price."""

from __future__ import annotations

from dataclasses import replace

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from measure.eval.plot_labels import overlapping, repel_labels, text_boxes
from measure.eval.plots import (
    block_times,
    plot_block_times,
    plot_predicted_vs_measured,
    plot_waterfalls,
    point_table,
)
from measure.eval.repeat import PPDConfig
from measure.eval.terms import block_prices, price_intervals
from measure.eval.validate import ProfileValidation
from ppdmodel.cost_profile import parse_cost_profile
from tests.measure.eval.fake_validation import fake_validation
from tests.ppdmodel.profiles import minimal_profile


def _drawn(fig):
    """The figure laid out and drawn as savefig draws it, and its renderer."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("n", [1, 32])
def test_predicted_vs_measured_labels_do_not_overlap(n, tmp_path):
    validation = fake_validation(n)
    fig = plot_predicted_vs_measured(validation, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    renderer = _drawn(fig)
    ax = fig.axes[0]
    labels = ax.texts
    rows = n + (1 if n == 1 else 2)  # a greedy row per backend priced on
    assert [t.get_text() for t in labels] == [str(i) for i in range(1, rows + 1)]
    boxes = text_boxes(labels, renderer)
    assert overlapping(boxes) == []
    frame = ax.get_window_extent(renderer)
    for box in boxes:  # every label inside the plot
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1
        assert frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1
    key = point_table(validation.table)
    assert len(key) == rows + 1
    assert key[rows - n + 1].split()[1:6] == ["ppd", "d_bar=12", "k=1", "main", "single"]


@pytest.mark.parametrize("n", [4, 16, 32])
def test_waterfall_title_clears_the_panel_titles(n, tmp_path):
    fig = plot_waterfalls(fake_validation(n), tmp_path / "w.png")
    renderer = _drawn(fig)
    title = fig._suptitle.get_window_extent(renderer)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == n
    boxes = [title] + [ax.title.get_window_extent(renderer) for ax in panels]
    assert not [pair for pair in overlapping(boxes) if 0 in pair]
    assert overlapping(boxes[1:]) == []  # nor do the panels' titles overprint each other


def test_repelled_labels_of_one_point_fan_out():
    fig = Figure(figsize=(4, 4))
    ax = fig.subplots()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    labels = [ax.annotate(str(i), (0.5, 0.5), textcoords="offset points", xytext=(0, 0))
              for i in range(12)]  # fmt: skip
    renderer = _drawn(fig)
    assert overlapping(text_boxes(labels, renderer))  # all on one spot before
    repel_labels(ax, labels, renderer)
    renderer = _drawn(fig)
    assert overlapping(text_boxes(labels, renderer)) == []
    repel_labels(ax, [], renderer)  # nothing to place


def test_block_times_hold_each_price_with_its_replicate_interval(tmp_path):
    validation = fake_validation(16)
    table = block_times(validation)
    assert set(table["backend"]) == {"single", "dist"}
    assert list(dict.fromkeys(table["backend"])) == ["single", "dist"]  # grouped by backend
    assert (table["price_low_s"] <= table["price_high_s"]).all()
    wide = table["price_high_s"] > table["price_low_s"]
    assert wide.mean() > 0.5  # the replicates move most prices
    fig = plot_block_times(validation, tmp_path / "layer_times.png")
    assert (tmp_path / "layer_times.png").read_bytes()[:4] == b"\x89PNG"
    titles = {ax.get_title() for ax in fig.axes if ax.get_visible()}
    assert {"main prefix, fresh", "main suffix", "candidate batch", "host per token"} <= titles
    empty = ProfileValidation(
        [replace(validation.results[0], terms=None)], timing=None, profile=validation.profile
    )
    with pytest.raises(ValueError, match="no block timed"):
        plot_block_times(empty, tmp_path / "none.png")


def test_price_intervals_follow_the_replicates():
    validation = fake_validation(1)
    config = validation.results[0].config
    prices = block_prices(validation.profile, config)
    bands = price_intervals(validation.profile, config)
    assert set(bands) == set(prices)
    layer_priced = ("main prefix, fresh", "main suffix", "candidate batch")
    for name in layer_priced:  # every cost was scaled about +-5 %: the price sits inside
        assert bands[name].low < prices[name] < bands[name].high
        assert bands[name].high / bands[name].low == pytest.approx(1.08, abs=0.06)
    bare = parse_cost_profile(minimal_profile(d=30))
    assert price_intervals(bare, PPDConfig(15, 1)) == {}
    bare_prices = block_prices(bare, PPDConfig(15, 1))
    assert bare_prices["main prefix, fresh"] == pytest.approx(1e-4 + 15 * 0.002)  # e + d_bar L
    assert bare_prices["main suffix"] == pytest.approx(15 * 0.002)


def test_predicted_vs_measured_shows_the_prediction_of_record_where_the_probes_ran(tmp_path):
    from types import SimpleNamespace

    table = fake_validation(4).table

    def legend(t):
        fig = plot_predicted_vs_measured(SimpleNamespace(table=t), tmp_path / "p.png")
        return [x.get_text() for x in fig.axes[0].get_legend().get_texts()]

    record = "closed form, interleaved probes (of record)"
    assert record not in legend(table.assign(interleaved_predicted_s=float("nan")))
    probed = table.assign(interleaved_predicted_s=3 * table["predicted_s"])
    assert record in legend(probed)
    fig = plot_predicted_vs_measured(SimpleNamespace(table=probed), tmp_path / "p.png")
    assert fig.axes[0].get_ylim()[1] >= probed["interleaved_predicted_s"].max()  # in view
