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
    from measure.decode.settings import RunRequest
    from ppdmodel.cli import build_parser

    def run_settings(args):
        return RunRequest.from_args(args).run_settings()

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


def test_one_request_travels_whole_to_the_ranks():
    """``ppd_many`` hands the ``dist`` ranks the one ``PPDRequest`` it was given (its names and
    seeds filled in), not loose keywords; loose keywords build the same value."""
    from measure.decode.backends import ppd_many
    from measure.decode.settings import PPDRequest

    class Ranks:
        def run(self, prompts, request):
            self.request = request
            return []

    settings = RunSettings(world_size=3, eos_token_id=[2])
    request = PPDRequest(d_bar=2, k=2, max_new_tokens=4, backend="dist", settings=settings)
    ranks = Ranks()
    ppd_many("unused", [[1, 2]], request, ranks=ranks)
    assert ranks.request == dataclasses.replace(request, sequences=["0"], seeds=[None])
    assert ranks.request.settings is settings
    loose = Ranks()
    ppd_many("unused", [[1, 2]], d_bar=2, k=2, max_new_tokens=4, backend="dist", ranks=loose,
             settings=RunSettings(world_size=3), eos_token_id=[2])  # fmt: skip
    assert loose.request == ranks.request
    with pytest.raises(TypeError, match="give a PPDRequest or its fields, not both"):
        ppd_many("unused", [[1, 2]], request, k=3)


def test_the_request_checks_across_concerns_before_any_model():
    from measure.decode.settings import RunRequest
    from ppdmodel.cli import build_parser

    def request(*extra):
        argv = ["validate", "--model", "m", "--prompt", "x", "--out", "o", *extra]
        return RunRequest.from_args(build_parser().parse_args(argv))

    assert request("--d-bar", "2", "3").methods.d_bar == (2, 3)
    cases = [
        (("--early-exit", "2"), "--early-exit and --draft-tokens must be given together"),
        (("--free", "2"), "--free and --threshold must be given together"),
        (("--top-k", "5"), "--top-k: sampling options need --do-sample"),
        (("--do-sample", "--spec-draft", "d", "--draft-tokens", "2"), "--do-sample: --spec"),
        (("--spec-draft", "d", "--draft-tokens", "2"), "add --k 3 so the profile measured now"),
        (("--backend", "dist", "--world-size", "3"), r"--world-size 3 is above k \+ 1 = 2"),
        (("--no-interleave-probes", "--probe-rounds", "2"), "--probe-rounds sets the interleaved"),
    ]
    for extra, message in cases:
        with pytest.raises(ValueError, match=message):
            request(*extra)
