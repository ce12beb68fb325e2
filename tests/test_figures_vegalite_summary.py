"""Summary's over-time charts (equal bins, nearest rank per bin, in the unit asked) and a multi-run rate curve."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from conftest import REPO
from vega_charts import valid

from servebench.analysis.multirun import runs_table
from servebench.analysis.percentiles import percentile
from servebench.output.figures.over_time import over_time_bins
from servebench.output.figures.vegalite_summary import over_time_charts, rate_curve_charts
from servebench.records.schema import parse_objects
from servebench.records.table import validate

pytest.importorskip("altair")  # its Vega-Lite schema checks the specs (vega_charts.valid)


def _series(frame, name: str) -> list[float | None]:
    rows = frame[frame["series"] == name].sort_values("x")
    return [None if math.isnan(v) else v for v in rows["y"]]


@pytest.fixture
def six_seconds():
    """Three successes ending in 0-2 s, none in 2-4 s, one ending at the window's end (6 s), and a timeout."""
    rows = [{"start": 0.0, "first_token": 0.5, "end": 1.0, "status": "success", "output_tokens": 4},
            {"start": 0.5, "first_token": 1.0, "end": 1.9, "status": "success", "output_tokens": 4},
            {"start": 1.0, "first_token": 1.2, "end": 1.5, "status": "success", "output_tokens": 4},
            {"start": 1.0, "end": 3.0, "status": "timeout"},
            {"start": 4.0, "first_token": 4.5, "end": 6.0, "status": "success", "output_tokens": 4}]
    return validate(parse_objects(rows), 0, 6)


def test_over_time_counts_each_success_in_the_bin_it_ended_in(six_seconds) -> None:
    b = over_time_bins(six_seconds, 0.0, 6.0, bins=3)
    assert b.width_s == 2.0 and b.mids_s.tolist() == [1.0, 3.0, 5.0]
    assert b.successes_per_s.tolist() == [1.5, 0.0, 0.5]  # the success ending at 6 s is in the last bin
    assert b.percentiles_s["latency"] == {50: [1.0, None, 2.0], 95: [1.4, None, 2.0]}  # nearest rank of 3 values
    assert b.percentiles_s["ttft"] == {50: [0.5, None, 0.5], 95: [0.5, None, 0.5]}


def test_over_time_charts_draw_the_bins_in_the_unit_asked_with_a_gap_where_none_ended(six_seconds) -> None:
    charts = over_time_charts(over_time_bins(six_seconds, 0.0, 6.0, bins=3), "ms")
    assert list(charts) == ["successes", "ttft", "latency"]
    for spec in charts.values():
        valid(spec)
    bars = charts["successes"]["datasets"]["bins"]
    assert bars[["x", "x2", "y"]].values.tolist() == [[0.0, 2.0, 1.5], [2.0, 4.0, 0.0], [4.0, 6.0, 0.5]]
    latency = charts["latency"]
    assert _series(latency["datasets"]["lines"], "p50") == [1000.0, None, 2000.0]
    assert _series(latency["datasets"]["lines"], "p95") == [1400.0, None, 2000.0]
    line = latency["layer"][0]
    assert line["mark"]["invalid"] == "break-paths-filter-domains"  # an empty bin breaks the line, never a 0
    assert line["encoding"]["y"]["title"] == "ms" and latency["title"]["text"].startswith("Latency (ms)")
    assert {spec["layer"][0]["encoding"]["x"]["scale"]["domain"][1] if "layer" in spec
            else spec["encoding"]["x"]["scale"]["domain"][1] for spec in charts.values()} == {6.0}  # one time axis


def test_over_time_percentiles_match_each_bins_own_successes() -> None:
    rng = np.random.default_rng(18)
    n = 5000
    start = np.sort(rng.uniform(0, 100, n))
    rows = [{"start": s, "first_token": s + t, "end": s + t + d, "status": "success" if ok else "failed",
             "output_tokens": 3} if ok else {"start": s, "end": s + t + d, "status": "failed"}
            for s, t, d, ok in zip(start, rng.exponential(0.2, n), rng.exponential(1.0, n), rng.uniform(size=n) < 0.9)]
    table = validate(parse_objects(rows), 0, float(max(r["end"] for r in rows)))
    we = float(table.end.max())
    b = over_time_bins(table, 0.0, we)
    ok = table.is_success
    edges = np.linspace(0.0, we, 61)
    latency = table.end - table.start
    for i in range(60):  # a mask per bin, not the sort and split over_time_bins does
        inside = ok & (table.end >= edges[i]) & ((table.end < edges[i + 1]) if i < 59 else (table.end <= we))
        assert b.successes_per_s[i] == pytest.approx(inside.sum() / (we / 60))
        assert b.percentiles_s["latency"][95][i] == percentile(latency[inside], 95)


def _two_runs(second_rate: float | None):
    doc = json.loads((REPO / "tests" / "data" / "importers" / "guidellm-0.8.1-errors.json").read_text())
    second = copy.deepcopy(doc["benchmarks"][0])
    second["config"]["strategy"]["rate"] = second_rate
    doc["benchmarks"].append(second)
    return runs_table(json.dumps(doc).encode(), "two.json")


def test_rate_curve_draws_each_runs_throughput_and_p95s_against_its_rate() -> None:
    frame = _two_runs(8.0)
    charts = rate_curve_charts(frame)
    assert list(charts) == ["rate", "times"]
    for spec in charts.values():
        valid(spec)
        assert spec["layer"][0]["encoding"]["x"]["title"] == "offered rate (req/s)"
    rate = charts["rate"]["datasets"]["lines"]
    assert rate["x"].tolist() == [4.0, 8.0] and _series(rate, "successful req/s") == frame["successful req/s"].tolist()
    times = charts["times"]["datasets"]["lines"]
    assert _series(times, "latency p95 (s)") == frame["latency p95 (s)"].tolist()
    assert _series(times, "TTFT p95 (s)") == frame["TTFT p95 (s)"].tolist()


def test_rate_curve_of_runs_without_a_rate_is_drawn_by_run() -> None:
    frame = _two_runs(None)
    assert frame["rate (req/s)"].isna().any()
    charts = rate_curve_charts(frame)
    assert charts["rate"]["datasets"]["lines"]["x"].tolist() == [0.0, 1.0]
    assert charts["rate"]["layer"][0]["encoding"]["x"]["title"] == "run"
