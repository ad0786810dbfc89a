"""The argparse types every ``ppd`` option uses: numbers in range, paths usable, files readable."""

from __future__ import annotations

import argparse
import os

import pytest

from ppdmodel import cli_args as t


@pytest.mark.parametrize(
    ("parse", "good", "bad"),
    [
        (t.positive_int, {"1": 1, str(2**53): 2**53}, ["0", "-1", "1.5", str(2**53 + 1)]),
        (t.nonnegative_int, {"0": 0, "7": 7}, ["-1", str(2**53 + 1), "nan"]),
        (t.int_at_least(2), {"2": 2}, ["1", "two"]),
        (t.positive_float, {"0.5": 0.5, "1e3": 1000.0}, ["0", "-1", "nan", "inf", "x"]),
        (t.nonnegative_float, {"0": 0.0, "2.5": 2.5}, ["-0.1", "inf", "-inf", "nan"]),
        (t.probability, {"0": 0.0, "1": 1.0, "0.25": 0.25}, ["1.5", "-0.1", "nan", "x"]),
    ],
)
def test_number_types_accept_the_range_and_refuse_the_rest(parse, good, bad):
    for text, value in good.items():
        assert parse(text) == value
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError, match="must be"):
            parse(text)


def test_input_path_types(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert t.existing_file(str(a_file)) == str(a_file)
    assert t.existing_dir(str(tmp_path)) == str(tmp_path)
    assert t.existing_path(str(a_file)) == str(a_file)
    cases = [
        (t.existing_file, tmp_path, "is a folder"),
        (t.existing_file, tmp_path / "no", "not found"),
        (t.existing_dir, a_file, "is a file"),
        (t.existing_dir, tmp_path / "no", "not found"),
        (t.existing_path, tmp_path / "no", "not found"),
    ]
    for parse, path, message in cases:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(str(path))


def test_output_path_types(tmp_path):
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    assert t.output_file(str(tmp_path / "new" / "deeper" / "out.csv"))  # parents are created
    assert t.output_file(str(a_file)) == str(a_file)  # overwritten
    assert t.output_dir(str(tmp_path / "a" / "b")) and t.output_dir(str(tmp_path))
    cases = [
        (t.output_file, tmp_path, "is a folder"),
        (t.output_file, a_file / "out.csv", "is not a folder"),
        (t.output_dir, a_file, "must be a folder"),
        (t.output_dir, a_file / "sub" / "dir", "is not a folder"),
    ]
    for parse, path, message in cases:
        with pytest.raises(argparse.ArgumentTypeError, match=message):
            parse(str(path))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_output_types_refuse_unwritable_folders(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(argparse.ArgumentTypeError, match="not writable"):
            t.output_dir(str(tmp_path / "out"))
        with pytest.raises(argparse.ArgumentTypeError, match="not writable"):
            t.output_file(str(tmp_path / "out.csv"))
    finally:
        tmp_path.chmod(0o700)


def test_reading_reports_structural_errors_as_value_errors():
    with pytest.raises(ValueError, match=r"--trace x.jsonl: malformed file \(KeyError: 'm'\)"):
        with t.reading("--trace", "x.jsonl"):
            {}["m"]
    with pytest.raises(ValueError, match="already a ValueError"):  # passes through unchanged
        with t.reading("--trace", "x.jsonl"):
            raise ValueError("already a ValueError")
    with pytest.raises(RuntimeError):  # not a file-structure error: not hidden
        with t.reading("--trace", "x.jsonl"):
            raise RuntimeError("bug")


def test_describe_names_the_file_of_an_os_error():
    from ppdmodel.cli import describe

    error = PermissionError(13, "Permission denied", "/root/x.csv")
    assert describe(error) == "Permission denied: /root/x.csv"
    assert describe(MemoryError()) == "out of memory; use smaller sizes"
    assert describe(ValueError("k must be >= 1")) == "k must be >= 1"
