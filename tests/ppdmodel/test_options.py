"""``ppdmodel.options``: a settings field's option is derived from it, and a value built in
Python is checked by the same rules the command line applies."""

from __future__ import annotations

import argparse
from dataclasses import FrozenInstanceError, dataclass

import numpy as np
import pytest

from ppdmodel.cli_args import existing_file, positive_float, positive_int
from ppdmodel.options import Command, Settings, like, option, part


@dataclass(frozen=True, kw_only=True)
class Timing(Settings):
    GROUP = "timing"
    ABOUT = "how runs are timed"

    repeats: int = option(3, type=positive_int, help="rounds (default 3)")
    k: tuple[int, ...] = option([1], type=positive_int, nargs="+", help="candidates")
    turns: str = option("prompts", choices=("prompts", "runs"), help="order")
    timeout_s: float = option(600.0, type=positive_float, help="seconds")
    threads: int | None = option(None, type=positive_int, help="threads")
    no_progress: bool = option(False, action="store_true", help="no bar")
    probes: bool | None = option(None, action=argparse.BooleanOptionalAction, help="probes")
    out: str = option(metavar="DIR", required=True, help="where")

    def check(self) -> None:
        if self.repeats > 100 and self.turns == "runs":
            raise ValueError("repeats above 100 need turns 'prompts'")


@dataclass(frozen=True, kw_only=True)
class Source(Settings):
    GROUP = "source"

    prompt: tuple[str, ...] | None = option(
        None, action="append", exclusive="src", required=True, help="a prompt"
    )
    prompts: str | None = option(
        None, type=existing_file, exclusive="src", required=True, help="a file"
    )


def parser(**changes) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    Timing.add_to(p, changes=changes)
    Source.add_to(p)
    return p


def test_options_are_derived_and_grouped():
    p = parser()
    titles = {g.title: [a.dest for a in g._group_actions] for g in p._action_groups}
    assert titles["timing"] == ["repeats", "k", "turns", "timeout_s", "threads", "no_progress",
                                "probes", "out"]  # fmt: skip
    assert titles["source"] == ["prompt", "prompts"]
    assert "how runs are timed" in p.format_help()


def test_from_args_builds_the_checked_value():
    args = parser().parse_args(["--out", "o", "--k", "1", "3", "--prompt", "a", "--no-probes"])
    t = Timing.from_args(args)
    assert t == Timing(out="o", k=(1, 3), probes=False)
    assert t.k == (1, 3) and t.repeats == 3 and t.no_progress is False
    assert Source.from_args(args).prompt == ("a",)
    with pytest.raises(FrozenInstanceError):
        t.repeats = 4


def test_python_values_meet_the_command_line_rules():
    assert Timing(out="o", repeats="7").repeats == 7  # text converts as on the command line
    for bad, name in [
        (dict(repeats=0), "repeats"),
        (dict(repeats=True), "repeats"),
        (dict(repeats=2.5), "repeats"),
        (dict(k=3), "k"),
        (dict(k=(1, 0)), "k"),
        (dict(k=()), "k"),
        (dict(turns="both"), "turns"),
        (dict(turns=np.array([1, 2])), "turns"),
        (dict(timeout_s=float("nan")), "timeout_s"),
        (dict(no_progress=1), "no_progress"),
        (dict(out=None), "out"),
        (dict(repeats=101, turns="runs"), "repeats"),
    ]:
        with pytest.raises(ValueError, match=name):
            Timing(**{"out": "o", **bad})
    with pytest.raises(TypeError):
        Timing()  # out is required


def test_changes_alter_one_command_only():
    p = parser(k={"default": [1, 3], "help": "candidates (default 1 3)"})
    assert p.parse_args(["--out", "o", "--prompt", "a"]).k == [1, 3]
    assert Timing(out="o").k == (1,)
    with pytest.raises(ValueError, match="no option field"):
        Timing.add_to(argparse.ArgumentParser(), skip=("nope",))


def test_exclusive_fields_are_exclusive_in_python_too():
    assert Source(prompt=["a"]).prompt == ("a",)
    with pytest.raises(ValueError, match="give one of --prompt, --prompts"):
        Source(prompt=["a"], prompts=__file__)


def test_exclusive_fields_form_one_required_group():
    p = parser()
    with pytest.raises(SystemExit):
        p.parse_args(["--out", "o"])  # neither --prompt nor --prompts
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        p.parse_args(["--out", "o", "--prompt", "a", "--prompts", __file__])


def test_like_declares_a_field_again_with_its_rules():
    @dataclass(frozen=True, kw_only=True)
    class Grid(Settings):
        repeats: int = like(Timing, "repeats", 5, help="rounds (default 5)")
        k: tuple[int, ...] | None = like(Timing, "k", None)

    assert Grid().repeats == 5 and Grid().k is None
    assert Grid(k=[2]).k == (2,)
    with pytest.raises(ValueError, match="repeats"):
        Grid(repeats=0)  # Timing's check, declared once
    with pytest.raises(ValueError, match="option field"):
        like(Timing, "nope")


def test_a_command_is_one_value_per_concern():
    @dataclass(frozen=True, kw_only=True)
    class Run(Command):
        CHANGES = {"timing": {"repeats": {"default": 9}}}

        timing: Timing
        source: Source = part(Source)

        def check(self) -> None:
            if self.timing.turns == "runs" and self.source.prompt is None:
                raise ValueError("turns 'runs' needs --prompt")

    assert Run.concerns() == {"timing": Timing, "source": Source}
    p = argparse.ArgumentParser(exit_on_error=False)
    Run.add_to(p)
    run = Run.from_args(p.parse_args(["--out", "o", "--prompt", "a"]))
    assert run.timing.repeats == 9 and run.source.prompt == ("a",)
    with pytest.raises(ValueError, match="source must be a Source"):
        Run(timing=Timing(out="o"), source=Timing(out="o"))
    with pytest.raises(ValueError, match="needs --prompt"):
        Run(timing=Timing(out="o", turns="runs"))
