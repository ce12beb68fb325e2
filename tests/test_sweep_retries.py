"""Sweeps of retrying clients: offered user requests, attempts and completions per point, and their chart."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from servebench.cli.core import main
from servebench.output.figures.sweep import outcomes_vs_load
from servebench.serving.scenario import Scenario, load_scenario
from servebench.serving.sweep import SweepResult, sweep, sweep_csv

STORM = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "retry_storm.yaml"


@pytest.fixture(scope="module")
def storm() -> Scenario:
    return load_scenario(STORM)


@pytest.fixture(scope="module")
def storm_sweep(storm: Scenario) -> SweepResult:
    return sweep(storm, [0.5, 3.0], requests=40, search=False)


def test_offered_counts_user_requests_and_attempted_counts_retries(storm_sweep: SweepResult):
    calm, overload = storm_sweep.points
    assert calm.offered == overload.offered == 40  # user requests, whatever their retries
    assert calm.attempted == 40 and overload.attempted > 40  # the overload's timeouts came back as retries
    assert overload.attempted == sum(overload.model_dump()[k] for k in
                                     ("completed", "rejected", "timed_out", "cancelled", "failed"))
    assert overload.completed <= overload.offered
    assert overload.attempted_rps == pytest.approx(overload.offered_rps * overload.attempted / overload.offered)
    assert overload.slo_attainment == pytest.approx(overload.completed / 40)  # no SLO: success per user request
    rows = list(csv.DictReader(io.StringIO(sweep_csv(storm_sweep))))
    assert [int(r["attempted"]) for r in rows] == [40, overload.attempted]


def test_without_retries_attempted_equals_offered(storm: Scenario):
    result = sweep(storm.model_copy(update={"client": None}), [3.0], requests=40, search=False)
    (point,) = result.points
    assert point.attempted == point.offered == 40 and point.attempted_rps == point.offered_rps
    names = [t.name for t in outcomes_vs_load(result).data]
    assert not any(n.startswith("attempted") for n in names)


def test_the_outcomes_chart_shows_offered_vs_attempted_vs_completed(storm_sweep: SweepResult):
    fig = outcomes_vs_load(storm_sweep)
    by_name = {t.name: list(t.y) for t in fig.data}
    attempted = by_name["attempted (with retries)"]
    assert attempted[1] > by_name["offered"][1] > by_name["completed"][1]  # the amplification curve
    assert "offered vs attempted vs completed" in fig.layout.title.text


def test_sweep_command_on_the_retry_storm_shows_attempts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "240")  # every column of the table, unabbreviated
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(STORM), "--rates", "0.5,3", "--requests", "30", "--no-search", "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None) and "tried/s" in out
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert int(rows[1]["attempted"]) > int(rows[1]["offered"]) == 30
