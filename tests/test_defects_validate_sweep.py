"""validate-sweep on a trace replay (each rate offered through the trace's speedup), and its folder through records.rundir."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from test_validate_sweep import TINY_SWEEP  # the engine end to end's server, with a trace in place of its arrivals

from servebench.cli.validate_sweep import print_sweep_validation
from servebench.errors import ConfigError, InputFormatError
from servebench.formatting import NO_DATA
from servebench.records import rundir
from servebench.serving.engine.sweep_validation import (
    SweepValidation,
    read_sweep_validation,
    replay_rate_rps,
    scenario_at_rate,
)
from servebench.serving.scenario import load_scenario
from servebench.serving.workload import replay_trace

# Bursts of three 20 ms apart, a burst every 300 ms, then a straggler: 12 requests over 1.1 s, 10 requests/s
TIMES_MS = [0, 20, 40, 300, 320, 340, 600, 620, 640, 900, 920, 1100]
SCENARIO = TINY_SWEEP[:TINY_SWEEP.index("workload:")] + "workload:\n  trace: {path: trace.jsonl, speedup: 1.5}\n"


def write_trace_scenario(folder: Path) -> Path:
    lines = [json.dumps({"timestamp": t, "input_length": 16 + 7 * i, "output_length": 4 + i % 5})
             for i, t in enumerate(TIMES_MS)]
    (folder / "trace.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "s.yaml").write_text(SCENARIO)
    return folder / "s.yaml"


@pytest.fixture(scope="module")
def trace_scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace_scenario(tmp_path_factory.mktemp("trace"))


def offered_rps(arrival_s: np.ndarray) -> float:
    return (arrival_s.size - 1) / float(arrival_s[-1] - arrival_s[0])  # as a sweep point reads it


def test_the_replay_rate_is_the_traces_own_at_speedup_1(trace_scenario: Path) -> None:
    sc = load_scenario(trace_scenario)  # its own speedup (1.5) does not change the rate at speedup 1
    assert replay_rate_rps(sc) == (pytest.approx(11 / 1.1), 12)
    assert replay_rate_rps(sc, 4) == (pytest.approx(3 / 0.3), 4)  # the first 4: a burst and the next one


@settings(max_examples=40, deadline=None)
@given(rate_rps=st.floats(0.01, 5_000), requests=st.sampled_from([None, 2, 5, 12]))
def test_each_rate_is_offered_through_the_speedup(trace_scenario: Path, rate_rps: float, requests: int | None) -> None:
    sc = load_scenario(trace_scenario)
    at = scenario_at_rate(sc, rate_rps, requests)
    assert at.workload.trace is not None and at.workload.arrival is None  # still the trace, with its bursts
    arrival = replay_trace(at.workload).arrival_s
    assert arrival.size == (requests or 12)
    assert offered_rps(arrival) == pytest.approx(rate_rps, rel=1e-9)
    shape = np.diff(arrival) * at.workload.trace.speedup  # the trace's own gaps, scaled
    assert shape == pytest.approx(np.diff(TIMES_MS[:arrival.size]) / 1000, rel=1e-9, abs=1e-12)


def test_a_trace_whose_requests_arrive_at_one_instant_has_no_rate(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text("\n".join(json.dumps({"timestamp": 5, "input_length": 20,
                                                                  "output_length": 4}) for _ in range(3)))
    (tmp_path / "s.yaml").write_text(SCENARIO)
    with pytest.raises(ConfigError, match="arrive at one instant"):
        scenario_at_rate(load_scenario(tmp_path / "s.yaml"), 10.0)


def test_the_result_file_is_written_and_read_by_rundir(tmp_path: Path) -> None:
    doc = {"points": [{"rate_rps": 1.5, "measured": {}, "simulated": {}}]}
    path = rundir.write_validation(tmp_path / "vs", json.dumps(doc))
    assert path == tmp_path / "vs" / rundir.VALIDATION
    assert read_sweep_validation(tmp_path / "vs") == read_sweep_validation(path) == doc
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        rundir.write_validation(tmp_path / "file", "{}")
    with pytest.raises(InputFormatError, match="not a validate-sweep result"):
        rundir.read_validation(tmp_path / "file")


def test_validate_sweep_on_a_trace_end_to_end(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    scenario = write_trace_scenario(tmp_path)
    out = tmp_path / "vs"
    code, stdout, err = run_cli(capsys, "validate-sweep", str(scenario), "--rates", "12.5,40", "--requests", "12",
                                "-o", str(out), "--device", "cpu", "--allow-poor-fit", "--engine-repeats", "1",
                                "--replicas", "2", "--json")
    assert code == 0, err
    doc = json.loads(stdout)
    assert [p["rate_rps"] for p in doc["points"]] == [12.5, 40]
    assert [p["speedup"] for p in doc["points"]] == pytest.approx([1.25, 4.0])
    # the engine was offered each rate, with the trace's bursts (the simulated side pools replays end to end)
    assert [p["offered_rps"] for p in doc["measured_sweep"]] == pytest.approx([12.5, 40], rel=1e-9)
    assert [p["offered"] for p in doc["measured_sweep"]] == [12, 12]
    assert [sum(p["simulated_status"].values()) for p in doc["points"]] == [12, 12]
    assert any("each rate is replayed at rate / 10 " in note for note in doc["notes"])
    assert doc["requests_per_rate"] == 12
    console = Console(record=True, width=250, color_system=None)  # the tables: each rate with its speedup
    print_sweep_validation(console, SweepValidation.model_validate(doc), out)
    lines = [line.split("│") for line in console.export_text().splitlines() if line.startswith("│ ")]
    rows = [cells[1].strip() for cells in lines]
    assert "12.5 (1.25x)" in rows and "40 (4x)" in rows, rows
    spreads = [cells[-2].strip() for cells in lines if cells[1].strip()]
    assert spreads == [NO_DATA] * 2  # served once: no run-to-run difference, never a '-' that reads as minus
    # the folder is records.rundir's: its result file and a run folder per rate that every reader takes
    assert read_sweep_validation(out)["points"] == doc["points"]
    assert (out / rundir.VALIDATION_REPORT).is_file()
    for rate in (12.5, 40):
        folder = rundir.rate_folder(out, rate)
        assert rundir.is_run_folder(folder) and rundir.read_folder(folder, require=("steps", "metadata")).steps
        meta = json.loads((folder / rundir.METADATA).read_text())
        assert meta["scenario"]["workload"]["trace"]["speedup"] == pytest.approx(rate / 10)
    code, _, err = run_cli(capsys, "report", str(rundir.rate_folder(out, 12.5)), str(rundir.rate_folder(out, 40)),
                           "-o", str(tmp_path / "site"))
    assert code == 0, err
    assert len(list((tmp_path / "site").glob("run-*.html"))) == 2
