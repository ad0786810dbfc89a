"""``ppd simulate`` through the ppd dispatcher."""

import json

import pandas as pd
import pytest

from ppdmodel.cli import main
from sim.formats import MatchTrace, write_traces

SMALL = ["simulate", "--d", "4", "--d-bar", "2", "--k", "1", "--ell", "5"]


def test_simulate_writes_events_and_gantt(tmp_path, capsys):
    events, gantt = tmp_path / "events.csv", tmp_path / "gantt.png"
    argv = SMALL + ["--p", "0.5", "--n", "20", "--seed", "3"]
    assert main(argv + ["--events-csv", str(events), "--gantt", str(gantt)]) == 0
    out = capsys.readouterr().out
    assert "layer units" in out and "p99" in out and "greedy           20" in out
    assert "Theorem 4.1" in out and "(s)" not in out  # uniform cost: no seconds
    log = pd.read_csv(events)
    assert list(log.columns) == [
        "process", "gpu", "token", "layer_start", "layer_end", "start", "end", "kind",
    ]  # fmt: skip
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_one_sequence_behind_summary_events_and_gantt(tmp_path, capsys):
    """With --n 1 the summary, the first sequence and the event log are the same run."""
    events = tmp_path / "events.csv"
    argv = SMALL + ["--ell", "40", "--p", "0.5", "--n", "1", "--seed", "7", "--json"]
    assert main(argv + ["--events-csv", str(events)]) == 0
    report = json.loads(capsys.readouterr().out)
    latency = report["first"]["latency_units"]
    assert report["monte_carlo"]["mean"] == latency
    main_ends = pd.read_csv(events).query("process == 'main'")["end"].max()
    assert main_ends == latency  # unit cost: seconds == layer units
    assert report["greedy_latency_units"] == 4 * 40
    assert report["closed_form_latency_units"] == 4 * 40 - 2 * 39 * 0.5
    assert main(SMALL + ["--p", "0.5", "--n", "1"]) == 0
    assert "CI" not in capsys.readouterr().out  # no interval from one sequence


def test_simulate_json_with_trace_and_greedy(tmp_path, capsys):
    path = write_traces(
        tmp_path / "t.jsonl",
        [MatchTrace("a", 4, 2, 1, [1, 1, 1, 1]), MatchTrace("b", 4, 2, 1, [0, 0, 0, 0])],
    )
    assert main(SMALL + ["--trace", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["monte_carlo"]["n"] == 2
    assert report["monte_carlo"]["mean"] == ((2 * 5 + 2 * 1) + (4 * 5)) / 2
    assert main(SMALL + ["--schedule", "greedy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["first"]["latency_units"] == 20


def test_simulate_roofline_link_and_per_position(tmp_path, capsys):
    p_t = tmp_path / "p.csv"
    p_t.write_text("0.1,0.5,0.9,0.4\n")
    argv = SMALL + ["--per-position", str(p_t), "--cost", "roofline", "--gpu-model", "a100-80gb",
                    "--link", "pcie4-x16", "--gpus", "2", "--n", "5", "--json"]  # fmt: skip
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)["first"]
    assert first["latency_s"] > 0 and len(first["utilisation"]) == 2


@pytest.mark.parametrize(
    "extra, name",
    [(["--d-bar", "1", "--d", "4"], "d-bar"), (["--gpus", "9"], "n_gpus"),
     (["--cost", "measured"], "layer-times"), (["--link", "wifi"], "link name")],
)  # fmt: skip
def test_simulate_bad_input_is_a_clean_error(extra, name, capsys):
    with pytest.raises(SystemExit) as exc:
        main(SMALL + extra)
    assert exc.value.code == 2 and name in capsys.readouterr().err


def test_trace_file_with_several_configurations_is_narrowed_by_options(tmp_path, capsys):
    """A match-rate traces.jsonl holds every probed layer and k: replay one of them."""
    path = write_traces(
        tmp_path / "t.jsonl",
        [
            MatchTrace("a", 6, 3, 1, [1, 1, 0, 1]),
            MatchTrace("a", 6, 4, 1, [1, 1, 1, 1]),
            MatchTrace("a", 6, 3, 3, [1, 1, 1, 1]),
        ],
    )
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--trace", str(path)])
    assert exc.value.code == 2
    assert "choose one with --d-bar" in capsys.readouterr().err
    assert main(["simulate", "--trace", str(path), "--d-bar", "3", "--k", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["config"]["d"], report["config"]["d_bar"], report["config"]["k"]) == (6, 3, 1)
    assert report["first"]["n_runs"] == 2  # N = 1 + one miss, from the trace's own d=6
    with pytest.raises(SystemExit):
        main(["simulate", "--trace", str(path), "--d", "40"])  # no sequence of that model
    assert "no sequence" in capsys.readouterr().err


def test_per_position_json_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"m": [1]}\n')
    with pytest.raises(SystemExit, match="2"):
        main(["simulate", "--per-position", str(bad)])
    assert "not JSON" in capsys.readouterr().err


def test_below_half_message_names_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--d-bar", "10"])
    assert "--allow-below-half" in capsys.readouterr().err
