"""``ppd measure profile`` writes a profile that ``ppd latency --costs`` reads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from ppdmodel.cli import main  # noqa: E402
from tests.measure.tiny_models import save_tiny_model_dir  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny-profile"))


def test_profile_command_writes_json_and_bars_that_latency_reads(model_dir, tmp_path, capsys):
    out = tmp_path / "p.json"
    argv = ["measure", "profile", "--model", str(model_dir), "--out", str(out), "--ks", "1", "2"]
    argv += ["--max-spread", "1e6"]  # this test reads the file back, whatever the machine's noise
    assert main([*argv, "--threads", "1", "--repeats", "2", "--warmup", "0", "--calls", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"cost profile of {model_dir.name}: d = 4")
    assert "candidate batch k=2 (per layer)" in printed and f"wrote {out}" in printed
    assert (tmp_path / "p-layers.png").read_bytes()[:4] == b"\x89PNG"
    data = json.loads(out.read_text())
    assert data["provenance"]["threads"] == 1 and data["model"]["d"] == 4
    assert main(["latency", "--costs", str(out), "--p", "0.5", "--k", "2", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["d"], row["d_bar"], row["k"], row["backend"]) == (4, 2, 2, "single")
    assert row["ppd_s_per_token"] > 0 and row["greedy_s_per_token"] > 0


def test_profile_command_refuses_bad_options(model_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main(["measure", "profile", "--model", str(model_dir), "--out", str(tmp_path / "x.json"),
              "--backends", "gpu"])  # fmt: skip
    assert info.value.code == 2 and "invalid choice: 'gpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["measure", "profile", "--model", str(model_dir), "--out", str(tmp_path),
              "--repeats", "1", "--warmup", "0", "--calls", "1", "--ks", "1"])  # fmt: skip
    assert info.value.code == 2 and "is a folder" in capsys.readouterr().err
