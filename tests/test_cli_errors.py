"""Every ``ppd`` sub-command ends a user error with ``ppd <command>: error: ...``, exit 2, and
no traceback; unexpected failures print one line and a hint to rerun with ``--debug``.

Sub-commands are enumerated from the parser, so a new one is covered without editing this file;
a new option must use a checked type (``ppdmodel.cli_args``) or be listed in ``TEXT_OPTIONS``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from measure.lifeline import DistRunError, failure_message
from ppdmodel import cli_args
from ppdmodel.cli import build_parser, iter_commands, main

ROOT = Path(__file__).resolve().parents[1]

BAD_INTEGERS = ("abc", "nan", "-1", "2.5", str(10**30))
BAD_FLOATS = ("abc", "nan", "inf", "-1")
"""Values every integer / float option must refuse at parse time (exit 2 before any work)."""

TEXT_OPTIONS = {
    # option -> a bad value its handler must refuse with exit 2 (None: free text, not checked)
    "--dtype": "float128",
    "--device": "tpu:7",
    "--link": "wifi",
    "--gpu-model": "gtx-480",
    "--shape": "no-such-model",
    "--trace-head": None,  # narrows the traces; a value matching none is tested below
    "--sampling": "top_q=2",
    "--paper-positions": "squad:x:Y:20",
    "--prompt": None,
    "--prompt-text": None,
    "--glob": None,
    "--category": "no-such-category",  # refused when the prompts are read, before the model
    "--model": "no-such-model",  # a directory, a .gguf file or a known name (``smollm2``)
    "--gpu": "tpu-v9",  # ppd plan
    "--table": "no-such-table",  # ppd plan: a built-in p-table name or a CSV/Parquet file
    "--workload": "no-such-workload",  # ppd plan
    "--head": "no-such-head",  # ppd plan
    "--executor": "slurm",  # ppd plan
}
"""String options (no numeric or path type): the bad value each handler must refuse."""

INTEGER_TYPES = {cli_args.positive_int, cli_args.nonnegative_int}
FLOAT_TYPES = {cli_args.positive_float, cli_args.nonnegative_float, cli_args.probability,
               cli_args.percent_below_100}  # fmt: skip
PATH_TYPES = {
    cli_args.existing_file,
    cli_args.existing_dir,
    cli_args.existing_path,
    cli_args.output_file,
    cli_args.output_dir,
}


def commands() -> dict[str, argparse.ArgumentParser]:
    """Every leaf sub-command of ``ppd``: {"ppd measure timing": parser, ...}."""
    return dict(iter_commands(build_parser()))


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if action.option_strings and action.nargs != 0 and action.dest not in ("help",):
            yield action


def _bad_numbers(action) -> tuple[str, ...]:
    """The malformed values an option's type must refuse (none for a non-numeric option)."""
    if action.type in INTEGER_TYPES or action.type.__name__.startswith("int_at_least"):
        return BAD_INTEGERS
    return BAD_FLOATS if action.type in FLOAT_TYPES else ()


@pytest.fixture
def one_parser(monkeypatch):
    """``main`` reuses one parser (building it loads every registrar: ~50 ms a call)."""
    import ppdmodel.cli as cli

    parser = build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``ppd argv`` run in this process."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out + out.err


def run_ppd(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``python -m ppdmodel argv`` in a fresh process (as a user runs it)."""
    return subprocess.run(
        [sys.executable, "-m", "ppdmodel", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        **kwargs,
    )


def assert_user_error(code: int, output: str, prog: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output, output
    assert f"{prog}: error:" in output, output


# -- every sub-command, from the parser ------------------------------------------------------


def test_the_parser_lists_every_sub_command():
    names = set(commands())
    assert {"ppd latency", "ppd simulate", "ppd measure match-rate", "ppd run"} <= names
    assert {"ppd measure timing", "ppd measure reference-model", "ppd validate"} <= names


@pytest.mark.parametrize("prog", sorted(commands()))
def test_every_option_has_a_checked_type(prog):
    """Numbers and paths are parsed by ``ppdmodel.cli_args`` types; text is listed above."""
    for action in _options(commands()[prog]):
        if action.choices is not None or action.dest == "debug":
            continue
        option = action.option_strings[-1]
        if action.type in (int, float):
            pytest.fail(f"{prog} {option}: use a ppdmodel.cli_args type, not {action.type}")
        if action.type is None:
            assert option in TEXT_OPTIONS, f"{prog} {option}: add a bad value to TEXT_OPTIONS"


@pytest.mark.parametrize("prog", sorted(commands()))
def test_malformed_numbers_exit_2_before_any_work(prog, capsys, one_parser):
    argv = prog.split()[1:]
    for action in _options(commands()[prog]):
        for value in _bad_numbers(action) if action.type else ():
            code, output = run_cli([*argv, action.option_strings[-1], value], capsys)
            assert_user_error(code, output, prog)
            assert f"argument {'/'.join(action.option_strings)}" in output


@pytest.mark.parametrize("prog", sorted(commands()))
def test_missing_required_and_unknown_options_exit_2(prog, capsys, one_parser):
    argv = prog.split()[1:]
    code, output = run_cli([*argv, "--no-such-option"], capsys)
    assert_user_error(code, output, prog)
    required = [a for a in _options(commands()[prog]) if a.required]
    if required:
        code, output = run_cli(argv, capsys)
        assert_user_error(code, output, prog)


@pytest.mark.parametrize("prog", sorted(commands()))
def test_bad_paths_exit_2_before_any_work(prog, capsys, tmp_path, one_parser):
    """A missing input, a folder given as a file (or a file as a folder), an output whose
    parent is a file: refused by the option's type, at parse time."""
    argv = prog.split()[1:]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for action in _options(commands()[prog]):
        option = action.option_strings[-1]
        bad = {
            cli_args.existing_file: [str(tmp_path / "missing"), str(tmp_path)],
            cli_args.existing_dir: [str(tmp_path / "missing"), str(a_file)],
            cli_args.existing_path: [str(tmp_path / "missing")],
            cli_args.output_file: [str(tmp_path), str(a_file / "out.csv")],
            cli_args.output_dir: [str(a_file), str(a_file / "out")],
        }.get(action.type, [])
        for value in bad:
            code, output = run_cli([*argv, option, value], capsys)
            assert_user_error(code, output, prog)
            assert f"argument {'/'.join(action.option_strings)}" in output


def test_debug_flag_is_accepted_before_and_after_the_command(capsys):
    assert main(["--debug", "latency", "--p", "0.5", "--ell", "4"]) == 0
    assert main(["latency", "--p", "0.5", "--ell", "4", "--debug"]) == 0
    capsys.readouterr()


# -- the 18 invocations of issue 10 that showed a traceback ----------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Malformed inputs: a layer-times CSV with text, trace lines without m or as a list, ..."""
    root = tmp_path_factory.mktemp("malformed")
    paths = {"root": root, "a_file": root / "a-file", "dir": root / "a-dir"}
    paths["a_file"].write_text("x\n")
    paths["dir"].mkdir()
    paths["layer_times"] = root / "layer_times.csv"
    paths["layer_times"].write_text(
        "component,layer,batch,seconds,std_seconds,n_samples\n"
        "layer,0,1,fast,0,1\nlayer,1,1,0.1,0,1\n"
    )
    paths["no_m"] = root / "no_m.jsonl"
    paths["no_m"].write_text(json.dumps({"sequence": "a", "d": 4, "d_bar": 2, "k": 1}) + "\n")
    paths["list"] = root / "list.jsonl"
    paths["list"].write_text("[1, 0, 1]\n")
    paths["m_number"] = root / "m_number.jsonl"
    paths["m_number"].write_text(
        json.dumps({"sequence": "a", "d": 4, "d_bar": 2, "k": 1, "m": 5}) + "\n"
    )
    paths["per_position"] = root / "p.csv"
    paths["per_position"].write_text("0.5,high,0.2\n")
    paths["squad"] = root / "squad.json"
    paths["squad"].write_text(json.dumps({"data": 5}))
    return paths


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """A tiny Llama; the same with an invalid config.json; one with only a pickle."""
    torch = pytest.importorskip("torch")
    from tests.measure.tiny_models import char_tokenizer, tiny_model

    root = tmp_path_factory.mktemp("models")
    model = tiny_model("llama")
    good, bad_config, pickle = root / "good", root / "bad-config", root / "pickle-only"
    for path in (good, bad_config):
        model.save_pretrained(path)
        char_tokenizer().save_pretrained(path)
    (bad_config / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    pickle.mkdir()
    (pickle / "config.json").write_text((good / "config.json").read_text())
    torch.save(model.state_dict(), pickle / "pytorch_model.bin")
    return {"good": good, "bad_config": bad_config, "pickle": pickle}


def _issue_cases(f, m):
    """(argv, text the error must contain) of the invocations listed in issue 10."""
    huge = str(2**64)
    run = ["run", "--prompt", "hi", "--max-new-tokens", "2", "--no-assistant"]
    model = ["--model", str(m["good"])]
    return [
        (["latency", "--p", "0.5", "--ell", huge], "--ell"),
        (["latency", "--p", "0.5", "--d", huge], "--d"),
        (["compute", "--p", "0.5", "--k", huge], "--k"),
        (["simulate", "--ell", huge], "--ell"),
        (["simulate", "--cost", "measured", "--layer-times", str(f["layer_times"])], "layer-times"),
        (["simulate", "--trace", str(f["no_m"])], "not a match trace"),
        (["simulate", "--trace", str(f["list"])], "JSON object"),
        (["simulate", "--trace", str(f["m_number"])], str(f["m_number"])),
        (["simulate", "--trace", str(f["dir"])], "is a folder"),
        (["simulate", "--per-position", str(f["per_position"])], ""),
        (["simulate", "--ell", "4", "--events-csv", str(f["a_file"] / "e.csv")], "not a folder"),
        (["simulate", "--ell", "4", "--gantt", str(f["dir"])], "is a folder"),
        ([*run, "--model", str(m["bad_config"]), "--out", str(f["root"] / "o1")], "config"),
        ([*run, *model, "--out", str(f["a_file"])], "must be a folder"),
        ([*run, *model, "--threads", "-1", "--out", str(f["root"] / "o2")], "--threads"),
        ([*run, *model, "--timeout-s", "-1", "--out", str(f["root"] / "o3")], "--timeout-s"),
        ([*run, "--model", str(m["pickle"]), "--out", str(f["root"] / "o4")], "pickle"),
        (["measure", "timing", *model, "--prompt-text", "x", "--out", str(f["dir"])], "folder"),
        (
            ["measure", "match-rate", *model, "--prompts", str(f["squad"]), "--format", "squad"]
            + ["--out", str(f["root"] / "o5")],
            "malformed",
        ),
        (["measure", "reference-model", "--out", str(f["a_file"] / "m")], "not a folder"),
        (["measure", "reference-model", "--out", "x", "--threads", "-1"], "--threads"),
    ]


def test_issue_cases_exit_2_without_traceback(files, model_dirs, capsys):
    cases = _issue_cases(files, model_dirs)
    assert len(cases) >= 18
    for argv, expected in cases:
        prog = "ppd " + (" ".join(argv[:2]) if argv[0] == "measure" else argv[0])
        code, output = run_cli(argv, capsys)
        assert_user_error(code, output, prog)
        assert expected in output, (argv, output)


def test_pickle_weights_are_never_loaded(model_dirs, monkeypatch, capsys):
    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("torch.load was called on a pickle")

    monkeypatch.setattr(torch, "load", refuse)
    argv = ["run", "--model", str(model_dirs["pickle"]), "--prompt", "hi", "--out", "x"]
    code, output = run_cli(argv, capsys)
    assert_user_error(code, output, "ppd run")
    assert "pytorch_model.bin" in output and "safetensors" in output


def test_reference_model_unwritable_out_fails_at_once(files):
    """Before training (minutes) starts, in a fresh process as a user runs it."""
    start = time.monotonic()
    result = run_ppd(["measure", "reference-model", "--out", str(files["a_file"] / "model")])
    assert time.monotonic() - start < 60  # the import of the CLI only; training takes minutes
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "cannot create" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_unwritable_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, output = run_cli(["tradeoff", "--out", str(locked / "out")], capsys)
        assert_user_error(code, output, "ppd tradeoff")
        assert "not writable" in output
        argv = ["simulate", "--ell", "4", "--events-csv", str(locked / "e.csv")]
        assert_user_error(*run_cli(argv, capsys), "ppd simulate")
    finally:
        locked.chmod(0o700)


def test_closed_stdout_pipe_is_quiet():
    """``ppd simulate --json | head -c0``: the reader is gone before the JSON is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE (BrokenPipeError)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "ppdmodel", "simulate", "--ell", "8", "--json"],
            cwd=ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert "Exception ignored" not in result.stderr


# -- unexpected failures: one line and a hint; --debug shows the traceback -------------------


def _crashing_registrar(subparsers) -> None:
    parser = subparsers.add_parser("crash")
    parser.set_defaults(func=lambda args: {}["missing key"])


@pytest.fixture
def crash_command(monkeypatch):
    """A ``ppd crash`` sub-command whose handler fails with an unexpected KeyError."""
    import ppdmodel.cli as cli

    class EntryPoint:
        name, value = "zz-crash", "tests.test_cli_errors:_crashing_registrar"

        def load(self):
            return _crashing_registrar

    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points", lambda group: [*real(group=group), EntryPoint()])


def test_unexpected_failure_prints_one_line_and_a_hint(crash_command, capsys):
    code, output = run_cli(["crash"], capsys)
    assert code == 1 and "Traceback" not in output
    lines = output.strip().splitlines()
    assert lines[0] == "ppd crash: error: KeyError: 'missing key'"
    assert "--debug" in lines[1] and len(lines) == 2


def test_debug_shows_the_traceback(crash_command, capsys):
    with pytest.raises(KeyError):
        main(["--debug", "crash"])
    with pytest.raises(KeyError):
        main(["crash", "--debug"])


def _killed_rank(args) -> int:
    raise DistRunError(failure_message({}, {0: None, 1: -signal.SIGKILL}))


def test_a_reported_failure_is_one_line_exit_1(monkeypatch, capsys):
    """Issue 47: a dist rank killed by a signal (``DistRunError``, a ``ReportedFailure``) is
    its own line naming the rank and the signal, exit 1, no second line; --debug raises."""
    import ppdmodel.cli as cli

    class EntryPoint:
        name, value = "zz-dist", "tests.test_cli_errors:_killed_rank"

        def load(self):
            return lambda subparsers: subparsers.add_parser("dist").set_defaults(func=_killed_rank)

    real = cli.entry_points
    monkeypatch.setattr(cli, "entry_points", lambda group: [*real(group=group), EntryPoint()])
    code, output = run_cli(["dist"], capsys)
    assert code == 1
    assert output.splitlines() == [
        "ppd dist: error: PPD dist run failed: rank 1: killed by SIGKILL (signal 9) (out of "
        "memory? the OOM killer sends SIGKILL); ranks still running (killed): [0]"
    ]
    with pytest.raises(DistRunError):
        main(["dist", "--debug"])


def test_user_error_under_debug_raises(capsys):
    with pytest.raises(ValueError, match="give --p"):
        main(["latency", "--debug"])


def test_text_options_refuse_bad_values(capsys, files):
    """The handlers of string options refuse a bad value with exit 2 (no model needed)."""
    sim = ["simulate", "--ell", "4"]
    cases = [
        [*sim, "--link", TEXT_OPTIONS["--link"]],
        [*sim, "--cost", "roofline", "--gpu-model", TEXT_OPTIONS["--gpu-model"]],
        [*sim, "--cost", "roofline", "--shape", TEXT_OPTIONS["--shape"]],
        ["latency", "--paper-positions", TEXT_OPTIONS["--paper-positions"]],
    ]
    for argv in cases:
        assert_user_error(*run_cli(argv, capsys), f"ppd {argv[0]}")


def test_model_text_options_refuse_bad_values(model_dirs, capsys, tmp_path):
    model = ["--model", str(model_dirs["good"])]
    timing = ["measure", "timing", *model, "--prompt-text", "x", "--out", str(tmp_path / "t.csv")]
    prompts = str(ROOT / "measure" / "data" / "prompts_sample.jsonl")
    match = ["measure", "match-rate", *model, "--prompts", prompts, "--out", str(tmp_path)]
    cases = [
        [*timing, "--dtype", TEXT_OPTIONS["--dtype"]],
        [*timing, "--device", TEXT_OPTIONS["--device"]],
        [*match, "--sampling", TEXT_OPTIONS["--sampling"], "--no-progress"],
        [*match, "--category", TEXT_OPTIONS["--category"], "--no-progress"],
    ]
    for argv in cases:
        assert_user_error(*run_cli(argv, capsys), "ppd measure " + argv[1])


# -- issue 25 --------------------------------------------------------------------------------


def test_a_user_error_is_one_line_without_the_usage_block(capsys, one_parser):
    """The usage block only where it is the answer: a missing required option (or --help)."""
    code, output = run_cli(["latency", "--p", "abc"], capsys)
    assert_user_error(code, output, "ppd latency")
    assert "usage:" not in output and len(output.strip().splitlines()) == 1
    code, output = run_cli(["simulate", "--no-such-option"], capsys)
    assert output.strip() == "ppd simulate: error: unrecognized arguments: --no-such-option"
    code, output = run_cli(["measure", "timing"], capsys)  # --model is required
    assert code == 2 and output.startswith("usage: ppd measure timing")


def test_plan_refuses_a_confirmation_without_end(capsys, one_parser):
    start = time.monotonic()
    code, output = run_cli(["plan", "--confirm-n", "100000000", "--out", "x"], capsys)
    assert_user_error(code, output, "ppd plan")
    assert "confirm_n must be <= 1000000" in output
    assert time.monotonic() - start < 10


def test_gantt_is_written_exactly_where_asked(tmp_path, capsys, one_parser):
    path = tmp_path / "chart"  # no suffix: matplotlib would have written chart.png
    code, output = run_cli(["simulate", "--ell", "4", "--gantt", str(path)], capsys)
    assert code == 0, output
    assert path.is_file() and path.read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "chart.png").exists()


def test_an_option_beside_one_that_overrides_it_is_refused(capsys, one_parser):
    argv = ["latency", "--p", "0.5", "--paper-positions", "squad:3:Y:20"]
    code, output = run_cli(argv, capsys)
    assert_user_error(code, output, "ppd latency")
    assert "--p or --paper-positions, not both" in output


def test_world_size_above_k_plus_one_is_refused_before_the_model_loads(capsys, one_parser):
    argv = ["run", "--model", "no-such-model", "--prompt", "hi", "--backend", "dist",
            "--k", "1", "--world-size", "3", "--out", "x"]  # fmt: skip
    code, output = run_cli(argv, capsys)
    assert_user_error(code, output, "ppd run")
    assert "--world-size 3 is above k + 1 = 2" in output


def test_remote_code_refusal_names_what_the_toolkit_allows(tmp_path, capsys):
    pytest.importorskip("torch")
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "my-custom-lm", "architectures": ["MyLM"],
        "auto_map": {"AutoConfig": "configuration_my.MyConfig"},
    }))  # fmt: skip
    code, output = run_cli(["run", "--model", str(tmp_path), "--prompt", "hi", "--out",
                            str(tmp_path / "out")], capsys)  # fmt: skip
    assert_user_error(code, output, "ppd run")
    assert "never runs code shipped with a model" in output
    assert "trust_remote_code=True" not in output and "http" not in output


def test_plan_writes_nothing_for_an_empty_out_dir():
    from sim.sweep import run_sweep

    with pytest.raises(ValueError, match="out_dir must name a directory"):
        run_sweep(json.dumps, [{"a": 1}], out_dir="")


def test_candidate_batches_are_capped_before_the_model_loads(capsys, one_parser, tmp_path):
    """A fixed cap needs no model: refused even where --model names nothing."""
    timing = ["measure", "timing", "--model", "no-such-model", "--prompt-text", "x"]
    code, output = run_cli([*timing, "--batch-sizes", "100000000", "--out", "t.csv"], capsys)
    assert_user_error(code, output, "ppd measure timing")
    assert "--batch-sizes must be between 1 and 4096" in output
    profile = ["measure", "profile", "--model", "no-such-model", "--ks", "1", "100000"]
    code, output = run_cli([*profile, "--out", str(tmp_path / "p.json")], capsys)
    assert_user_error(code, output, "ppd measure profile")
    assert "--ks must be between 1 and 4096" in output
    assert not list(tmp_path.iterdir())


def test_candidate_batches_above_the_vocabulary_are_refused(model_dirs, capsys, tmp_path):
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(model_dirs["good"]).vocab_size
    model = ["--model", str(model_dirs["good"])]
    argv = ["measure", "timing", *model, "--prompt-text", "x", "--out", str(tmp_path / "t.csv")]
    code, output = run_cli([*argv, "--batch-sizes", str(vocab + 1)], capsys)
    assert_user_error(code, output, "ppd measure timing")
    assert f"--batch-sizes must be between 1 and {vocab} (the model's vocabulary size)" in output
    argv = ["measure", "profile", *model, "--ks", str(vocab + 1), "--out", str(tmp_path / "p.json")]
    code, output = run_cli(argv, capsys)
    assert_user_error(code, output, "ppd measure profile")
    assert f"--ks must be between 1 and {vocab}" in output
    assert not list(tmp_path.iterdir())


def test_a_huge_profile_cost_is_refused_in_one_line(tmp_path):
    """``layer_s: 1e308`` is finite, but its products overflow: refused by name, no numpy
    warning (a fresh process, as a user runs it)."""
    from tests.ppdmodel.profiles import minimal_profile

    path = tmp_path / "huge.json"
    path.write_text(json.dumps(minimal_profile(layer_s=1e308)))
    result = run_ppd(["latency", "--p", "0.5", "--costs", str(path)])
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and "Warning" not in result.stderr, result.stderr
    assert "backends.single.costs.layer_s must be" in result.stderr


def test_a_truncated_safetensors_file_is_named(model_dirs, tmp_path, capsys):
    import shutil

    model = tmp_path / "truncated"
    shutil.copytree(model_dirs["good"], model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    argv = ["measure", "timing", "--model", str(model), "--prompt-text", "x"]
    code, output = run_cli([*argv, "--out", str(tmp_path / "t.csv")], capsys)
    assert_user_error(code, output, "ppd measure timing")
    assert f"{weights}: damaged safetensors weights" in output
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    ("records", "message"),
    [
        ('prompt,position\np1,1\np1,"2\n', "not a records table"),
        ("", "not a records table"),
        ("prompt,position,layer,k,head,decoding,token\np1,1,1,1,shared,greedy,5\n", "missing"),
        ("prompt,position,layer,k,head,decoding,match,token\n"
         "p1,one,1,1,shared,greedy,True,5\n", "column position must hold integers >= 1"),
        ("prompt,position,layer,k,head,decoding,match,token\n"
         "p1,1,1,1,shared,greedy,maybe,5\n", "column match must hold True or False"),
    ],
)  # fmt: skip
def test_tampered_atlas_records_are_named(records, message, tmp_path, capsys):
    run = tmp_path / "match"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"records": "records.csv", "d": 4, "model": "m"}))
    (run / "records.csv").write_text(records)
    argv = ["measure", "atlas", "--records", str(run), "--out", str(tmp_path / "atlas")]
    code, output = run_cli(argv, capsys)
    assert_user_error(code, output, "ppd measure atlas")
    assert f"records {run / 'records.csv'}" in output and message in output
    assert not (tmp_path / "atlas").exists()


def test_no_progress_silences_the_loading_bars(model_dirs, tmp_path, capsys):
    """transformers 5 prints "Loading weights" bars while loading; --no-progress hides them
    and leaves transformers' setting as it was."""
    from transformers.utils import logging as hf_logging

    prompts = str(ROOT / "measure" / "data" / "prompts_sample.jsonl")
    argv = ["measure", "match-rate", "--model", str(model_dirs["good"]), "--prompts", prompts]
    argv += ["--limit", "1", "--max-new-tokens", "2", "--layers", "1"]
    assert hf_logging.is_progress_bar_enabled()
    assert main([*argv, "--out", str(tmp_path / "quiet"), "--no-progress"]) == 0
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()
    assert main([*argv, "--out", str(tmp_path / "bars")]) == 0
    assert "Loading weights" in capsys.readouterr().err  # the bars the option hides


def test_an_encoder_checkpoint_is_refused_in_one_line_before_its_weights_load(tmp_path, capsys):
    """A BERT folder: transformers would load BertLMHeadModel with a fresh head after a long
    weight report; refused from its config.json, before any weight is read."""
    pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    sizes = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2)
    config = BertConfig(**sizes, intermediate_size=32, architectures=["BertModel"])
    BertModel(config).save_pretrained(tmp_path / "bert")
    (tmp_path / "bert" / "model.safetensors").write_bytes(b"not read")
    capsys.readouterr()
    timing = ["measure", "timing", "--prompt-text", "x", "--out", str(tmp_path / "t.csv")]
    code, output = run_cli([*timing, "--model", str(tmp_path / "bert")], capsys)
    assert_user_error(code, output, "ppd measure timing")
    assert len(output.strip().splitlines()) == 1, output
    assert "an encoder checkpoint (BertModel, is_decoder false), not a causal LM" in output
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text(json.dumps({"model_type": "t5"}))
    code, output = run_cli([*timing, "--model", str(tmp_path / "t5")], capsys)
    assert_user_error(code, output, "ppd measure timing")
    assert "model_type 't5' has no causal-LM class" in output


def test_a_head_trained_against_another_lm_head_is_refused_in_one_line(
    model_dirs, tmp_path, capsys
):
    """A head of the right shape made from another checkpoint: named with both hashes."""
    pytest.importorskip("torch")
    from measure.train.heads import TrainedHead
    from tests.measure.tiny_models import tiny_model

    head = TrainedHead.from_model(tiny_model("llama", seed=9), 2).save(tmp_path / "head")
    run = ["run", "--model", str(model_dirs["good"]), "--prompt", "hi", "--max-new-tokens", "2"]
    run += ["--no-assistant", "--out", str(tmp_path / "out"), "--head-dir", str(head)]
    code, output = run_cli(run, capsys)
    assert_user_error(code, output, "ppd run")
    last = output.strip().splitlines()[-1]  # after the weight-loading bars: one line
    assert last.startswith(f"ppd run: error: head file {head} was trained against an LM head")
    assert output.count("sha256") == 1 and "train a head for this one" in last


def test_spawned_ranks_load_without_bars(model_dirs, capfd):
    """A dist rank's "Loading weights" bar would interleave with the parent's output (the
    ranks write to the same stderr): ranks load without it, with or without --no-progress."""
    pytest.importorskip("torch")
    from measure.hf.loading import load_causal_lm

    load_causal_lm(model_dirs["good"], bars=False)
    assert "Loading weights" not in capfd.readouterr().err
    load_causal_lm(model_dirs["good"])
    assert "Loading weights" in capfd.readouterr().err  # what bars=False leaves out
    for module in ("measure/decode/launch.py", "measure/profile/ranks.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert text.count("load_causal_lm(") == text.count("bars=False") > 0, module


@pytest.fixture
def weights_unread(monkeypatch):
    """Reading a model's weights fails the test: what it refuses is refused before."""
    transformers = pytest.importorskip("transformers")

    def refuse(*args, **kwargs):
        raise AssertionError("the model's weights were read before the refusal")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)


def _before_loading_cases(model: Path, tmp: Path):
    """(argv, text of the one-line error) of option refusals that need the model's config.json
    or tokenizer, not its weights (issue 25: each waited for the model to load)."""
    from measure.train.heads import TrainedHead
    from tests.measure.tiny_models import tiny_model
    from tests.ppdmodel.profiles import minimal_profile

    head = TrainedHead.from_model(tiny_model("llama"), 2).save(tmp / "head")
    other, wide, profile = tmp / "other.json", tmp / "wide.json", tmp / "profile.json"
    other.write_text(json.dumps(minimal_profile(d=12)))
    profile.write_text(json.dumps(minimal_profile(d=4)))
    data = minimal_profile(d=4)
    data["wide_prices"] = [{"backend": "single", "figure": "layer_s", "rel_spread": 0.5,
                            "threshold": 0.2}]  # fmt: skip
    wide.write_text(json.dumps(data))
    prompts = str(ROOT / "measure" / "data" / "prompts_sample.jsonl")
    m, huge = ["--model", str(model)], "100000"
    run = ["run", *m, "--prompt", "hi", "--max-new-tokens", "2", "--no-assistant"]
    validate = ["validate", *m, "--prompt", "hi", "--max-new-tokens", "2", "--profile",
                str(profile)]  # fmt: skip
    match = ["measure", "match-rate", *m, "--prompts", prompts, "--limit", "1"]
    atlas = ["measure", "atlas", *m, "--prompts", prompts, "--limit", "1"]
    timing = ["measure", "timing", *m, "--prompt-text", "x"]
    train = ["measure", "train-head", *m, "--prompts", prompts, "--limit", "1"]
    context = "more than the model's context of 512"
    previous = tmp / "previous"  # a match-rate folder holding a run
    previous.mkdir()
    (previous / "records.csv").write_text("prompt\n")
    return [
        ([*run, "--d-bar", "4"], "d_bar must be an integer with d/2 <= d_bar < d = 4, got 4"),
        ([*run, "--k", "129"], "k must be an integer in [1, vocab_size = 128], got 129"),
        ([*run, "--max-new-tokens", huge], context),
        ([*run, "--temperature", "0.5"], "--temperature: sampling options need --do-sample"),
        ([*run, "--profile", str(other)], "model.d = 12 does not match the model's depth d = 4"),
        ([*run, "--head-dir", str(head), "--d-bar", "3"], "head is trained for layer 2; d_bar"),
        ([*validate, "--d-bar", "4"], "d_bar must be an integer with d/2 <= d_bar < d = 4"),
        ([*validate, "--early-exit", "4", "--draft-tokens", "1"], "--early-exit: 4 is not in"),
        ([*validate, "--free", "4", "--threshold", "0.5"], "--free: 4 is not in [1, d - 1]"),
        ([*validate, "--k", "2"], "k = 2 was not measured in the profile"),
        ([*validate[:-1], str(wide)], "cost profile price too wide to predict from"),
        ([*validate[:-1], str(other)], "model.d = 12 does not match the model's depth d = 4"),
        ([*validate, "--max-new-tokens", huge], context),
        ([*validate, "--drift-floor", "10"], "--drift-floor applies to the profile ppd validate"),
        ([*match, "--layers", "5"], "layers must hold integers in [1, 4], got 5"),
        ([*match, "--ks", "129"], "--ks must be between 1 and 128 (the model's vocabulary"),
        ([*match, "--max-new-tokens", huge], context),
        ([*match, "--sampling", "top_k=0"], "sampling: top_k must be an integer >= 1"),
        ([*match, "--out", str(previous)], f"out_dir {previous} holds a previous run"),
        ([*atlas, "--layers", "5"], "layers must hold integers in [1, 4], got 5"),
        ([*atlas, "--ks", "129"], "--ks must be between 1 and 128 (the model's vocabulary"),
        ([*atlas, "--max-new-tokens", huge], context),
        ([*timing, "--n-tokens", huge], f"warmup + n_tokens 100002 = 100003 positions, {context}"),
        ([*timing, "--batch-sizes", "129"], "--batch-sizes must be between 1 and 128"),
        (["measure", "profile", *m, "--context-tokens", huge],
         "--context-tokens must be <= the model's context of 512 positions"),
        (["measure", "profile", *m, "--ks", "129"], "--ks must be between 1 and 128"),
        ([*train, "--layer", "4"], "--layer must be in [0, 4) for this 4-layer model"),
        ([*train, "--layer", "4", "--kind", "translator"], "--layer must be in [1, 4)"),
        ([*train, "--layer", "1", "--kind", "translator", "--new-tokens", huge], context),
    ]  # fmt: skip


def test_option_refusals_come_before_any_weight_is_read(model_dirs, weights_unread, tmp_path,
                                                         capsys):  # fmt: skip
    """Issue 25: every refusal that needs only the model's config.json or tokenizer (its
    depth, vocabulary, context) is made before the weights load (seconds to minutes), in one
    line with exit 2, and nothing is written."""
    out = tmp_path / "out"
    for argv, message in _before_loading_cases(model_dirs["good"], tmp_path):
        prog = "ppd " + (" ".join(argv[:2]) if argv[0] == "measure" else argv[0])
        target = out / ("p.json" if "profile" in argv[:2] else "t.csv" if "timing" in argv else "o")
        given = ["--out", str(target)] if "--out" not in argv else []
        code, output = run_cli([*argv, *given], capsys)
        assert_user_error(code, output, prog)
        assert message in output, (argv, output)
        assert len(output.strip().splitlines()) == 1, output
        assert not out.exists(), argv
