"""Driving the what-if page in a real browser: ``ppd app`` served on a free loopback port, and
Debian's Chromium driven by Playwright (its own browser downloads are never used). Shared by
tests/sim/test_app_browser.py and benchmarks/bench_app.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

CHROMIUM = os.environ.get("PPD_CHROMIUM", "/usr/bin/chromium")
"""The Chromium binary (Debian's package ``chromium``)."""
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-dev-shm-usage")  # fmt: skip
"""Headless Chromium as root on a machine with no network beyond loopback (with a fresh
profile folder: ``launch_persistent_context``; shared memory in /tmp, as a container's
/dev/shm may be small)."""
START_S = 120.0
"""Seconds the server may take to answer its health check."""
RENDER_S = 180.0
"""Seconds one page run may take (a plan is seconds on a loaded 2-core machine)."""
VIEWPORT = {"width": 1500, "height": 3300}
"""Tall enough that a screenshot holds the whole page (Streamlit scrolls inside the page)."""


def browser_missing() -> str:
    """Why the browser test cannot run here ("" when it can)."""
    for module in ("streamlit", "playwright"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install -e '.[app,dev]')"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served_page():
    """``ppd app`` on a free port of 127.0.0.1; yields its address, stops it on leaving."""
    port = free_port()
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([sys.executable, "-m", "ppdmodel", "app", "--port", str(port)],
                              stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                    if answer.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"ppd app did not start: {log.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@contextmanager
def browser_page(url: str):
    """A Chromium page (fresh profile folder) showing ``url`` once its first run is drawn."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=list(CHROMIUM_FLAGS),
            viewport=VIEWPORT)  # fmt: skip
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url, wait_until="domcontentloaded")
            page.get_by_text("decision per workload").first.wait_for(timeout=RENDER_S * 1e3)
            wait_drawn(page)
            yield page
        finally:
            context.close()


def wait_drawn(page, decision: str | None = None) -> None:
    """Wait until the page's script has finished, showing ``decision`` (the summary lines)
    when given."""
    script = """([text]) => {
        const app = document.querySelector('[data-test-script-state]');
        if (!app || app.getAttribute('data-test-script-state') !== 'notRunning') return false;
        if (text === null) return true;
        const code = document.querySelector('[data-testid="stCode"] code');
        return code !== null && code.innerText.trim() === text.trim();
    }"""
    page.wait_for_function(script, arg=[decision], timeout=RENDER_S * 1e3, polling=50)


def decision_text(page) -> str:
    return page.locator('[data-testid="stCode"] code').first.inner_text().strip()


def choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the select box labelled ``label``."""
    box = page.locator('[data-testid="stSelectbox"]').filter(
        has=page.get_by_text(label, exact=True))  # fmt: skip
    box.click()
    page.get_by_role("option", name=option, exact=True).click()


def type_number(page, label: str, value) -> None:
    """Enter ``value`` in the number box labelled ``label``."""
    box = page.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Enter")


def timed_change(page, change, decision: str) -> float:
    """Seconds from ``change(page)`` until the page shows ``decision`` and its run ends."""
    started = time.perf_counter()
    change(page)
    wait_drawn(page, decision)
    return time.perf_counter() - started
