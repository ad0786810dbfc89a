"""``ppd doctor``: versions against the tested range, and a self-check that names what failed."""

from __future__ import annotations

import pytest

from measure import doctor, versions
from measure.versions import TESTED, VersionStatus, environment, release_tuple
from ppdmodel.cli import main


def test_release_tuples():
    assert release_tuple("2.13.0+cpu") == (2, 13, 0)
    assert release_tuple("5.24") == (5, 24, 0)
    with pytest.raises(ValueError, match="version"):
        release_tuple("dev")


def test_inside_and_outside_the_tested_range():
    low, high = TESTED["transformers"]
    assert VersionStatus("transformers", low, TESTED["transformers"]).inside
    assert VersionStatus("transformers", high, TESTED["transformers"]).inside
    assert VersionStatus("transformers", "6.0.0", TESTED["transformers"]).inside is False
    assert VersionStatus("transformers", "4.57.1", TESTED["transformers"]).inside is False
    assert VersionStatus("numpy", "2.0.0", None).inside is None
    assert {s.name for s in environment()} >= {"python", "ppd-toolkit", "torch", "transformers"}


def test_self_check_passes():
    checks = doctor.self_check()
    assert [c.name for c in checks] == [name for name, _ in doctor.CHECKS]
    assert all(c.ok for c in checks), [c.line() for c in checks]


def test_doctor_command(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "transformers" in out and "self-check: all passed" in out
    assert "PPD == greedy" in out


def test_simulated_out_of_range_version(monkeypatch, capsys):
    low, high = TESTED["torch"]
    fake = {"transformers": "6.0.0", "torch": high}
    monkeypatch.setattr(versions, "installed_version", lambda n: fake.get(n, "1.0.0"))
    assert main(["doctor", "--no-self-check"]) == 0
    out = capsys.readouterr().out
    assert f"transformers  6.0.0  (tested {TESTED['transformers'][0]}" in out
    assert "OUTSIDE the tested range" in out and f"torch         {high}  (tested" in out
    assert (
        "warning: transformers 6.0.0 is outside the tested range 5.17.0 .. 5.24.0 (newer than the "
        "suite has passed on)" in out
    )
    assert "warning: torch" not in out  # inside its range: no line


def test_a_newer_torch_is_a_warning_line_not_a_failure(monkeypatch, capsys):
    """pyproject does not bound torch from above (an install keeps a GPU machine's newer torch),
    so ppd doctor says, in one line, when torch is outside the tested range."""
    low, high = TESTED["torch"]
    fake = {"torch": "2.15.0+cu130", "transformers": TESTED["transformers"][1]}
    monkeypatch.setattr(versions, "installed_version", lambda n: fake.get(n, "1.0.0"))
    assert main(["doctor", "--no-self-check"]) == 0
    warnings = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert warnings == [
        f"warning: torch 2.15.0+cu130 is outside the tested range {low} .. {high} (newer than "
        "the suite has passed on): results may differ; report problems with this output"
    ]
    older = VersionStatus("torch", "2.10.0", TESTED["torch"]).warning()
    assert older.startswith("warning: torch 2.10.0 is outside") and "(older than" in older
    assert VersionStatus("torch", high, TESTED["torch"]).warning() is None


def test_the_install_bounds_torch_from_below_and_transformers_both_ways():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    spec = {req.split(">")[0].split("<")[0].split("=")[0]: req for req in extra["measure"]}
    low, _ = TESTED["torch"]
    assert spec["torch"] == f"torch>={'.'.join(low.split('.')[:2])}"  # no upper bound
    low, high = TESTED["transformers"]
    assert spec["transformers"] == f"transformers>={'.'.join(low.split('.')[:2])},<={high}"


def test_a_failing_check_is_named(monkeypatch, capsys):
    def broken(_model):
        raise KeyError("cache_position")

    monkeypatch.setattr(doctor, "CHECKS", (*doctor.CHECKS[:1], ("layer-split decoding", broken)))
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL layer-split decoding: KeyError: 'cache_position'" in out
    assert "self-check: FAILED: layer-split decoding" in out
