"""``ppd simulate``, ``ppd plan`` and ``ppd app`` take their settings as one value
(``sim.cli_settings``, ``sim.cli_app.AppSettings``): the options are derived from the fields
and grouped by concern, the handler passes the value whole to its workflow, and a value built
in Python is refused by the same rules and words as the command line."""

from __future__ import annotations

import re

import pytest

from ppdmodel.cli import build_parser, iter_commands, main
from sim import cli, cli_app, cli_plan
from sim.cli_settings import (
    CostSettings,
    PlanHardwareSettings,
    PlanSettings,
    SimulateSettings,
)
from tests.sim.plan_inputs import spread_profile

COMMANDS = dict(iter_commands(build_parser()))


def _groups(name: str) -> list[str]:
    parser = COMMANDS[name]
    loose = ("options", "positional arguments")
    return [g.title for g in parser._action_groups if g.title not in loose]


def test_help_groups_each_concern():
    assert _groups("ppd simulate") == ["configuration", "matches", "schedule", "cost",
                                       "sequences", "output"]  # fmt: skip
    assert _groups("ppd plan") == ["model", "hardware", "p-table", "search", "alternatives",
                                   "sequences and confirmation", "output"]  # fmt: skip
    assert _groups("ppd app") == ["server"]


def _workflow_gets(monkeypatch, module, name: str, argv: list[str]):
    """The value ``ppd argv`` hands ``module.name`` (the workflow, replaced by a recorder)."""
    got = []

    def record(settings):
        got.append(settings)
        raise SystemExit(0)

    monkeypatch.setattr(module, name, record)
    with pytest.raises(SystemExit):
        main(argv)
    (settings,) = got
    return settings


def test_plan_hands_its_workflow_one_value(monkeypatch, tmp_path):
    argv = ["plan", "--shape", "llama2-13b", "--gpu", "a100-80gb", "--devices", "2",
            "--engine", "hf-eager", "--k", "1", "3", "--confirm-n", "0", "--out",
            str(tmp_path)]  # fmt: skip
    s = _workflow_gets(monkeypatch, cli_plan, "plan_workflow", argv)
    assert isinstance(s, PlanSettings)
    assert s.model.shape == "llama2-13b" and s.hardware.gpu == ("a100-80gb",)
    assert s.hardware.devices == 2 and s.hardware.engine == "hf-eager"
    assert s.space.k == (1, 3) and s.space.early_head == ("main", "candidates")
    assert s.confirmation.confirm_n == 0 and s.confirmation.ell == 128
    assert s.output.out == str(tmp_path) and not s.output.json
    assert s == PlanSettings.from_args(COMMANDS["ppd plan"].parse_args(argv[1:]))


def test_simulate_and_app_hand_their_workflows_one_value(monkeypatch):
    s = _workflow_gets(monkeypatch, cli, "simulate_run", ["simulate", "--p", "0.7", "--n", "4"])
    assert isinstance(s, SimulateSettings)
    assert s.matches.p == 0.7 and s.sequences.n == 4 and s.cost.cost == "uniform"
    assert s.sequences == SimulateSettings().sequences.__class__(n=4)
    app = _workflow_gets(monkeypatch, cli_app, "serve", ["app", "--port", "8600"])
    assert app == cli_app.AppSettings(port=8600) and app.address == "127.0.0.1"


def test_the_defaults_are_the_parsers():
    assert PlanSettings() == PlanSettings.from_args(COMMANDS["ppd plan"].parse_args([]))
    assert SimulateSettings() == SimulateSettings.from_args(COMMANDS["ppd simulate"].parse_args([]))


def test_hardware_refusals_in_python_and_on_the_command_line(tmp_path, capsys):
    profile = str(spread_profile(tmp_path / "profile.json"))
    cases = [
        (dict(profile=profile, launch_us=5.0), "--launch-us: a --profile is measured already"),
        (dict(profile=profile, link=["pcie4-x16"]), "--link: a --profile is measured already"),
        (dict(host_us=40.0, message_us=3.0), "--message-us, --host-us require --engine NAME"),
        (dict(shared_slowdown=0.5), "--shared-slowdown must be a factor >= 1, got 0.5"),
        (dict(engine="hf-eager", shared_slowdown=2.0), "with --engine the slowdown follows"),
    ]
    for given, words in cases:
        with pytest.raises(ValueError, match=re.escape(words)):
            PlanHardwareSettings(**given)
        argv = ["plan", "--out", str(tmp_path / "o")]
        for name, value in given.items():
            values = value if isinstance(value, list) else [value]
            argv += ["--" + name.replace("_", "-"), *map(str, values)]
        assert pytest.raises(SystemExit, main, argv).value.code == 2
        assert words in capsys.readouterr().err
    with pytest.raises(ValueError, match="--layer-times is required with --cost measured"):
        CostSettings(cost="measured")
    with pytest.raises(ValueError, match="devices"):
        PlanHardwareSettings(devices=0)
    with pytest.raises(ValueError, match="hardware must be a PlanHardwareSettings"):
        PlanSettings(hardware=CostSettings())
