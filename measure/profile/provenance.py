"""Where and how a measurement was taken: machine, libraries, threads, date, load."""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from importlib import metadata

import torch

from measure.profile.stats import LoadReading, cpu_count

LIBRARIES = ("torch", "transformers", "numpy", "scipy", "simpy", "ppd-toolkit")
"""Packages whose versions a profile records."""


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else ``platform``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def library_versions() -> dict[str, str | None]:
    """Installed versions of ``LIBRARIES`` (None for one that is not installed)."""
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    out["python"] = platform.python_version()
    return out


def provenance(*, device, dtype, threads: int, load: LoadReading) -> dict:
    """A JSON-ready record of the machine, libraries, threads, date and load average."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "dtype": str(dtype).removeprefix("torch."),
        "threads": int(threads),
        "cpu": cpu_name(),
        "cpus": cpu_count(),
        "gpu": gpu,
        "platform": platform.platform(),
        "libraries": library_versions(),
        "load_average": load.to_dict(),
    }
