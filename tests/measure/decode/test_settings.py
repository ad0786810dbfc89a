"""RunSettings: one frozen value, one default per setting, bad values refused by name."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from measure.decode.sampling import GREEDY, Decoding
from measure.decode.settings import DEFAULT_SETTINGS, RunSettings


def test_defaults_are_defined_once_and_frozen():
    s = RunSettings()
    assert s == DEFAULT_SETTINGS
    assert (s.eos_token_id, s.decoding) == (None, GREEDY)
    assert (s.world_size, s.timeout_s, s.model_dir, s.repeats, s.threads, s.progress) == (
        2, 600.0, None, 3, None, False,
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.timeout_s = 1.0
    assert RunSettings.from_dict(RunSettings(repeats=5).to_dict()) == RunSettings(repeats=5)


def test_model_dir_and_stop_tokens_are_normalized():
    assert RunSettings(model_dir=Path("a/b")).model_dir == "a/b"
    assert RunSettings(eos_token_id=2).eos_token_id == (2,)
    assert RunSettings(eos_token_id=[2, 7]).eos_token_id == (2, 7)
    sampled = RunSettings(eos_token_id=[2], decoding=Decoding(True, top_k=5))
    assert RunSettings.from_dict(sampled.to_dict()) == sampled


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("world_size", 1, "world_size must be an integer >= 2"),
        ("world_size", 2.0, "world_size must be an integer >= 2"),
        ("repeats", 0, "repeats must be an integer >= 1"),
        ("repeats", True, "repeats must be an integer >= 1"),
        ("threads", 0, "threads must be an integer >= 1"),
        ("timeout_s", 0, "timeout_s must be a finite number of seconds > 0"),
        ("timeout_s", float("inf"), "timeout_s must be a finite number of seconds > 0"),
        ("timeout_s", float("nan"), "timeout_s must be a finite number of seconds > 0"),
        ("timeout_s", "60", "timeout_s must be a finite number of seconds > 0"),
        ("model_dir", 3, "model_dir must be a directory path or None"),
        ("progress", 1, "progress must be True or False"),
        ("eos_token_id", -1, "eos_token_id must be a token id >= 0"),
        ("eos_token_id", [1, "x"], "eos_token_id must be a token id >= 0"),
        ("eos_token_id", 1.5, "eos_token_id must be a token id >= 0"),
        ("decoding", "greedy", "decoding must be a Decoding"),
    ],
)
def test_bad_values_are_refused_by_name(field, value, message):
    with pytest.raises(ValueError, match=message):
        RunSettings(**{field: value})


def test_the_cli_builds_one_settings_value_from_its_options():
    from measure.cli.run import run_settings
    from ppdmodel.cli import build_parser

    args = build_parser().parse_args(
        ["validate", "--model", "m", "--prompt", "x", "--out", "o", "--world-size", "3",
         "--timeout-s", "30", "--repeats", "2", "--threads", "1", "--no-progress"]
    )  # fmt: skip
    assert run_settings(args) == RunSettings(
        world_size=3, timeout_s=30.0, model_dir="m", repeats=2, threads=1, progress=False
    )
    defaults = build_parser().parse_args(["run", "--model", "m", "--prompt", "x", "--out", "o"])
    got = run_settings(defaults)
    assert (got.world_size, got.timeout_s, got.repeats, got.progress) == (2, 600.0, 3, True)
    assert got.turns == "prompts"
    runs = build_parser().parse_args(["run", "--model", "m", "--prompt", "x", "--out", "o",
                                      "--turns", "runs"])  # fmt: skip
    assert run_settings(runs).turns == "runs"
    assert RunSettings.from_dict({}).turns == "runs"  # a record from before turns: run by run
