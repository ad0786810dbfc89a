"""The settings of ``ppd measure`` and ``ppd doctor`` (``measure/cli/*_settings.py``): each
command's options come from them, and a value built in Python keeps the command's rules."""

from __future__ import annotations

import pytest

from measure.cli.match_settings import MatchOutputSettings, MatchSamplingSettings
from measure.cli.train_settings import (
    HeadSettings,
    HeadTrainingSettings,
    ReferenceCorpusSettings,
    ReferenceShapeSettings,
    ReferenceTrainingSettings,
    reference_config,
)
from measure.settings import ProbeSettings
from measure.train.reference_model import ReferenceModelConfig
from ppdmodel.cli import build_parser, iter_commands


def parse(*argv: str):
    """The parsed options of ``ppd argv``."""
    return build_parser().parse_args(list(argv))


def test_a_translator_needs_greedy_data():
    assert HeadSettings(layer=[4], kind=["translator", "full", "translator"]).kinds == [
        "translator",
        "full",
    ]
    assert HeadSettings(layer=[4], kind=["translator"]).source == "greedy"
    assert HeadSettings(layer=[4]).source == "text"
    with pytest.raises(ValueError, match="--kind translator needs --data greedy"):
        HeadSettings(layer=[4], kind=["translator"], data="text")


def test_the_sampling_spec_is_checked_on_construction():
    assert MatchSamplingSettings(sampling="top_k=50").sampling == "top_k=50"
    with pytest.raises(ValueError, match="sampling must look like top_k=50"):
        MatchSamplingSettings(sampling="top_q=2")


def test_match_rate_options_build_the_values(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "prompt": "hi"}\n')
    args = parse("measure", "match-rate", "--model", "m", "--prompts", str(prompts),
                 "--out", str(tmp_path / "o"), "--ks", "1", "3", "--no-verify")  # fmt: skip
    assert ProbeSettings.from_args(args) == ProbeSettings(ks=(1, 3))
    output = MatchOutputSettings.from_args(args)
    assert output.verify is False and output.progress and output.records_format == "csv"


def test_the_reference_model_defaults_are_its_config_defaults():
    values = (ReferenceCorpusSettings(), ReferenceShapeSettings(), ReferenceTrainingSettings())
    assert reference_config(*values) == ReferenceModelConfig()
    assert ReferenceTrainingSettings(steps=50).warmup == 5
    assert ReferenceTrainingSettings(steps=50, warmup_steps=0).warmup == 0


def test_text_overrides_hold_only_the_given_options():
    assert HeadTrainingSettings().text_overrides() == {"loss": "ce"}
    assert HeadTrainingSettings(lr=1e-3, seed=2).text_overrides() == {
        "loss": "ce", "lr": 1e-3, "seed": 2,
    }  # fmt: skip


def test_atlas_takes_exactly_one_of_records_and_model(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse("measure", "atlas", "--out", str(tmp_path))
    assert "one of the arguments --records --model is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse("measure", "atlas", "--out", str(tmp_path), "--model", "m", "--records", ".")
    assert "not allowed with argument" in capsys.readouterr().err
    assert parse("measure", "atlas", "--out", str(tmp_path), "--model", "m").records is None


def test_measure_help_is_grouped_by_concern():
    commands = dict(iter_commands(build_parser()))
    titles = {g.title for g in commands["ppd measure match-rate"]._action_groups}
    assert {"model", "prompts", "probes", "generation", "sampling", "output"} <= titles
    titles = {g.title for g in commands["ppd measure train-head"]._action_groups}
    assert {"model", "heads", "prompts", "training", "greedy data", "output"} <= titles
