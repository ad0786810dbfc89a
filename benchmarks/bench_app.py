"""How long the what-if page (``ppd app``) takes to re-render after a widget change, in a real
browser: an 80-layer model (llama2-70b) on 8 devices, the GPU changed to one not planned before
(the page plans anew) and then back to ones it planned (kept views), against the page's own
computation (``sim.cli_app_view.page_view``) timed in this process as the baseline. Reported,
not asserted; the issue's target is about a second.

Needs the app extra, Playwright and Debian's chromium (``apt-get install chromium``):

    python benchmarks/bench_app.py [--shape llama2-70b] [--devices 8] [--draws 12]

About two minutes on 2 cores (each new GPU is planned twice: by the page and here).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.cli_app_view import PAGE_DRAWS, PageInputs, page_view  # noqa: E402
from tests.sim.app_browser import (  # noqa: E402
    browser_missing,
    browser_page,
    choose,
    served_page,
    timed_change,
    type_number,
    wait_drawn,
)

NEW_GPUS = ("h200", "a100-80gb", "l40s")
"""GPUs the page has not planned for the model: each change plans anew."""
TARGET_S = 1.0
"""The issue's target for a widget change (about a second)."""


def decision(inputs: PageInputs, folder: Path) -> tuple[str, float, float]:
    """The page's decision text for ``inputs``, and the wall and CPU seconds ``page_view``
    took here (on a loaded machine the two differ)."""
    wall, cpu = time.perf_counter(), time.process_time()
    view = page_view(inputs, folder)
    return "\n".join(view.summary), time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="llama2-70b")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--draws", type=int, choices=(PAGE_DRAWS, 24, 40), default=PAGE_DRAWS)
    args = parser.parse_args()
    missing = browser_missing()
    if missing:
        print(f"bench_app: skipped: {missing}")
        return 0
    folder = Path(tempfile.mkdtemp(prefix="bench-app-"))

    def inputs(gpu: str) -> PageInputs:
        return PageInputs(shape=args.shape, gpu=gpu, devices=args.devices, workload="SQuAD",
                          draws=args.draws)  # fmt: skip

    fresh, kept, baseline, cpu = [], [], [], []
    with served_page() as url, browser_page(url) as page:
        started = time.perf_counter()
        if args.draws != PAGE_DRAWS:
            choose(page, "interval draws", str(args.draws))
            wait_drawn(page)
        type_number(page, "devices", args.devices)
        wait_drawn(page)
        choose(page, "shape", args.shape)
        text, *_ = decision(inputs("h100-sxm"), folder)
        wait_drawn(page, text)
        print(f"set up ({args.shape}, {args.devices} devices, {args.draws} draws): "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        for gpu in NEW_GPUS:
            text, seconds, busy = decision(inputs(gpu), folder)
            baseline.append(seconds)
            cpu.append(busy)
            fresh.append(timed_change(page, lambda p, g=gpu: choose(p, "GPU", g), text))
            print(f"  GPU -> {gpu}: {fresh[-1]:.2f} s in the browser; page_view {seconds:.2f} s "
                  f"({busy:.2f} CPU s)")  # fmt: skip
        for gpu in ("h100-sxm", *NEW_GPUS[:-1]):
            text, *_ = decision(inputs(gpu), folder)
            kept.append(timed_change(page, lambda p, g=gpu: choose(p, "GPU", g), text))
            print(f"  GPU -> {gpu} (planned before): {kept[-1]:.2f} s")
    new, old, base, busy = (statistics.median(x) for x in (fresh, kept, baseline, cpu))
    print(f"re-render after a widget change, {args.shape} on {args.devices} devices: median "
          f"{new:.2f} s planned anew (page_view alone {base:.2f} s, {busy:.2f} CPU s: "
          f"x{new / base:.2f}), {old:.2f} s for a view planned before; target about "
          f"{TARGET_S:g} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
