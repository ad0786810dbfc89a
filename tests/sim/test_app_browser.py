"""The what-if page in a real browser (Debian's Chromium, driven by Playwright): ``ppd app``
served on a free loopback port; the decision text and the Pareto chart follow ``sim.plan`` when
the GPU and the devices change; a bad config.json upload is named on the page, which stays
usable. Prints the re-render time of a widget change for an 80-layer model on 8 devices (a
reading, not an assertion: benchmarks/bench_app.py reports it) and writes screenshots
(``PPD_APP_SCREENSHOTS``: the folder; default a temporary one). Skipped without Chromium,
Streamlit or Playwright, except where ``PPD_APP_BROWSER=required`` (.ci/run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sim.plan_summary import summary_lines
from tests.sim.app_browser import (
    browser_missing,
    browser_page,
    choose,
    decision_text,
    served_page,
    timed_change,
    type_number,
    wait_drawn,
)
from tests.sim.app_reference import reference_plan

REQUIRED = os.environ.get("PPD_APP_BROWSER") == "required"
"""Set by .ci/run, which installs Chromium: there a missing browser fails the test."""
pytestmark = pytest.mark.skipif(bool(browser_missing()) and not REQUIRED,
                                reason=browser_missing() or "ready")  # fmt: skip


def test_the_browser_is_here_where_ci_installs_it():
    assert not browser_missing(), browser_missing()


def expected(**inputs) -> str:
    """The decision ``sim.plan`` gives for the page's inputs, as the page shows it."""
    return "\n".join(summary_lines(reference_plan(**inputs)))


def pareto_caption(page) -> str:
    return page.get_by_text("pareto chart: recommended").first.inner_text()


def recommended(**inputs) -> str:
    front = reference_plan(**inputs).frontier
    best = front[front.recommended].iloc[0]
    return f"recommended {best.config}, {best.speedup:.3f}x at {best.compute_ratio:.2f}x"


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("PPD_APP_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_page_in_chromium(shots, tmp_path):
    with served_page() as url, browser_page(url) as page:
        # the first view: the page's defaults, as sim.plan says
        assert decision_text(page) == expected()
        assert recommended() in pareto_caption(page)
        chart = page.locator('[data-testid="stVegaLiteChart"]').first
        chart_before = chart.screenshot()
        page.screenshot(path=shots / "01-default.png")

        # another GPU, then fewer devices: the decision and the chart follow sim.plan
        choose(page, "GPU", "a100-80gb")
        wait_drawn(page, expected(gpu="a100-80gb"))
        type_number(page, "devices", 2)
        wait_drawn(page, expected(gpu="a100-80gb", devices=2))
        assert recommended(gpu="a100-80gb", devices=2) in pareto_caption(page)
        assert chart.screenshot() != chart_before
        page.screenshot(path=shots / "02-a100-2-devices.png")

        # an 80-layer model on 8 devices: the time a widget change takes to re-render
        type_number(page, "devices", 8)
        wait_drawn(page, expected(gpu="a100-80gb"))
        choose(page, "shape", "llama2-70b")
        wait_drawn(page, expected(shape="llama2-70b", gpu="a100-80gb"))
        new = expected(shape="llama2-70b", gpu="h100-sxm")
        first = timed_change(page, lambda p: choose(p, "GPU", "h100-sxm"), new)
        back = expected(shape="llama2-70b", gpu="a100-80gb")
        again = timed_change(page, lambda p: choose(p, "GPU", "a100-80gb"), back)
        print(f"\nre-render after a GPU change, llama2-70b (80 layers) on 8 devices: "
              f"{first:.2f} s planned anew, {again:.2f} s for a view planned before")  # fmt: skip
        page.screenshot(path=shots / "03-llama2-70b-8-devices.png")

        # a config.json without the fields a shape needs: named on the page, never a traceback
        bad = tmp_path / "config.json"
        bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
        page.get_by_text("config.json upload", exact=True).click()
        page.locator('[data-testid="stFileUploader"] input[type="file"]').set_input_files(bad)
        alert = page.locator('[data-testid="stAlert"]').filter(has_text="model config.json:")
        alert.wait_for(timeout=60_000)
        assert "num_attention_heads" in alert.inner_text()
        assert page.get_by_text("Traceback").count() == 0
        page.screenshot(path=shots / "04-bad-config.png")

        # the page stays usable (the shape box starts again from its default)
        page.get_by_text("shape preset", exact=True).click()
        wait_drawn(page, expected(gpu="a100-80gb"))
    print(f"screenshots: {shots}")
