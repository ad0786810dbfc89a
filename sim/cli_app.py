"""``ppd app``: the what-if page, the planner in a browser (``sim.cli_app_page``, Streamlit).

The parser imports nothing of Streamlit, so ``ppd app --help`` and ``ppd --help`` work with
the core install alone; without the ``app`` extra the command says in one line which extra to
install. The page runs in a child ``python -m streamlit run`` process, headless, bound to
``--address`` (loopback by default), with no usage statistics sent and no traceback shown in
the browser (``STREAMLIT_FLAGS``).
"""

from __future__ import annotations

import argparse
import importlib.util
import ipaddress
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ppdmodel.options import Settings, option

PAGE = Path(__file__).with_name("cli_app_page.py")
"""The Streamlit script of the page."""
STREAMLIT_FLAGS = {
    "server.headless": "true",  # print the address; no browser, no e-mail prompt
    "browser.gatherUsageStats": "false",  # nothing leaves the machine
    "client.showErrorDetails": "none",  # the page shows its own one-line messages
    "client.toolbarMode": "minimal",
    "server.fileWatcherType": "none",  # the toolkit is not edited while it is served
    "server.runOnSave": "false",
    "runner.magicEnabled": "false",  # a bare string in the page is not drawn
}
"""Streamlit settings ``ppd app`` always passes."""
DEFAULT_PORT = 8501
"""Streamlit's usual port."""
MAX_PORT = 65535
"""Largest TCP port."""


def register(subparsers) -> None:
    """Add ``app`` to the ``ppd`` command."""
    p = subparsers.add_parser(
        "app",
        help="the what-if page: the planner in a browser (needs the app extra)",
        description=(
            "Serve the what-if page: pick a model (a shape preset or a config.json), GPU, "
            "devices, engine, p-table or a p by hand, head kinds and minimum quality, and see "
            "ppd plan's decision with its intervals and sources, every method's speed-up "
            "against compute, PPD's speed-up against p with the break-even, the waterfall, "
            "the regime of each tensor-parallel degree, the engine preset's evidence and the "
            "ppd plan command that reproduces the view. Needs the app extra: "
            'pip install -e ".[app]".'
        ),
    )
    AppSettings.add_to(p)
    p.set_defaults(func=run_app)


def tcp_port(text: str) -> int:
    """argparse type: a TCP port, an integer in [1, ``MAX_PORT``]."""
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port in [1, {MAX_PORT}], got {text!r}")
    return port


HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
"""A host name (letters, digits, dots and hyphens)."""


def host_address(text: str) -> str:
    """argparse type: an IP address or a host name to serve on."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        if HOSTNAME.fullmatch(text):
            return text
    raise argparse.ArgumentTypeError(f"must be an IP address or a host name, got {text!r}")


@dataclass(frozen=True, kw_only=True)
class AppSettings(Settings):
    """Where ``ppd app`` serves the page."""

    GROUP = "server"

    address: str = option(
        "127.0.0.1", type=host_address,
        help="address to serve on (default 127.0.0.1: this machine only)",
    )  # fmt: skip
    port: int = option(
        DEFAULT_PORT, type=tcp_port, help=f"port to serve on (default {DEFAULT_PORT})"
    )


def streamlit_command(address: str, port: int) -> list[str]:
    """The command that serves the page."""
    flags = {**STREAMLIT_FLAGS, "server.address": address, "server.port": str(port)}
    return [sys.executable, "-m", "streamlit", "run", str(PAGE),
            *(f"--{name}={value}" for name, value in flags.items())]  # fmt: skip


def run_app(args: argparse.Namespace) -> int:
    """``ppd app``: serve the page where the options say (``serve``)."""
    return serve(AppSettings.from_args(args))


def serve(settings: AppSettings) -> int:
    """Serve the page until interrupted; a missing Streamlit is reported as the ``app``
    extra to install (``ppdmodel.cli.missing_extra``)."""
    if importlib.util.find_spec("streamlit") is None:
        raise ModuleNotFoundError("No module named 'streamlit'", name="streamlit")
    print(f"ppd app: serving the what-if page on http://{settings.address}:{settings.port} "
          "(Ctrl-C stops it)", flush=True)  # fmt: skip
    return subprocess.call(streamlit_command(settings.address, settings.port))
