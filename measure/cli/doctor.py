"""``ppd doctor``: versions against the tested range, then a few-second self-check."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from measure.versions import environment
from ppdmodel.options import Settings, option


@dataclass(frozen=True, kw_only=True)
class DoctorSettings(Settings):
    """What ``ppd doctor`` checks: the versions, and (unless ``no_self_check``) the toolkit
    on a tiny random model."""

    GROUP = "checks"

    no_self_check: bool = option(
        False, action="store_true", help="print the versions only (no torch needed)"
    )


def register(subparsers) -> None:
    """Add ``doctor``."""
    doctor = subparsers.add_parser(
        "doctor",
        help="versions against the tested range and a few-second self-check (for bug reports)",
        description="Print the toolkit's, Python's, torch's and transformers' versions and "
        "whether they are inside the range the test suite passed on, then check on a tiny "
        "random model that transformers' internals are where the toolkit expects them, that "
        "layer-split decoding reproduces the model's logits and that PPD decodes exactly what "
        "greedy decoding does. Exit status 1 names the check that failed. Paste the output "
        "into bug reports.",
    )
    DoctorSettings.add_to(doctor)
    doctor.set_defaults(func=_doctor)


def _doctor(args) -> int:
    settings = DoctorSettings.from_args(args)
    statuses = environment()
    for status in statuses:
        print(status.line())
    for warning in filter(None, (s.warning() for s in statuses)):
        print(warning)
    if settings.no_self_check:
        return 0
    if any(s.installed is None for s in statuses if s.name in ("torch", "transformers")):
        print("self-check: skipped (install the measure extra: torch and transformers)")
        return 1
    from measure.doctor import self_check

    checks = self_check()
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    print(f"self-check: {'FAILED: ' + ', '.join(failed) if failed else 'all passed'}")
    sys.stdout.flush()
    return 1 if failed else 0
