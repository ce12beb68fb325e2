"""The report's fleet section (servebench.analysis.fleet) and where it shows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import run_cli

from servebench.analysis.fleet import fleet_report
from servebench.analysis.summary import build_report
from servebench.records.table import STATUSES, RecordTable

# replica 0: two successes (TTFT 0.5 and 1, latency 2 and 3) overlapping, 100 of 400 prompt tokens cached;
# replica 1: a success and a timeout, nothing cached, never two at once
ROWS = [
    {"start": 0.0, "first_token": 0.5, "end": 2.0, "status": "success", "output_tokens": 5, "prompt_tokens": 200,
     "cached_prompt_tokens": 100, "replica": 0},
    {"start": 1.0, "first_token": 2.0, "end": 4.0, "status": "success", "output_tokens": 5, "prompt_tokens": 200,
     "cached_prompt_tokens": 0, "replica": 0},
    {"start": 0.0, "first_token": 0.25, "end": 1.0, "status": "success", "output_tokens": 5, "prompt_tokens": 100,
     "cached_prompt_tokens": 0, "replica": 1},
    {"start": 1.0, "end": 6.0, "status": "timeout", "prompt_tokens": 100, "replica": 1},
    {"start": 2.0, "first_token": 2.5, "end": 3.0, "status": "success", "output_tokens": 5, "prompt_tokens": 100,
     "cached_prompt_tokens": 100, "replica": 0},
]


def table(rows: list[dict], replica: pa.Array | None = None) -> RecordTable:
    cols = {k: [r.get(k) for r in rows] for k in ("start", "first_token", "end", "output_tokens", "prompt_tokens",
                                                     "cached_prompt_tokens")}
    t = RecordTable.from_columns(
        start=np.array(cols["start"], float), end=np.array(cols["end"], float),
        first_token=np.array([np.nan if v is None else v for v in cols["first_token"]]),
        output_tokens=np.array([-1 if v is None else v for v in cols["output_tokens"]]),
        prompt_tokens=np.array(cols["prompt_tokens"]), admitted=np.full(len(rows), np.nan),
        cached_prompt_tokens=np.array([-1 if v is None else v for v in cols["cached_prompt_tokens"]]),
        status=np.array([STATUSES.index(r["status"]) for r in rows], dtype=np.int8))
    if replica is None:
        return t
    return t.with_columns(extra={"replica": replica})


def test_each_replica_and_the_fleet() -> None:
    fl = fleet_report(table(ROWS, pa.array([r["replica"] for r in ROWS], pa.int64())))
    assert fl is not None
    assert fl.replicas == 2 and fl.load_imbalance == 3 / 2.5
    assert fl.token_hit_rate == 200 / 600  # the timeout says no cached tokens: left out of both sums
    r0, r1 = fl.per_replica["0"], fl.per_replica["1"]
    assert (r0.requests, r0.in_flight_peak, r0.token_hit_rate) == (3, 2, 200 / 500)
    assert (r0.ttft_p95_s, r0.latency_p95_s) == (1.0, 3.0)
    assert (r1.requests, r1.in_flight_peak, r1.token_hit_rate) == (2, 1, 0.0)
    assert (r1.ttft_p95_s, r1.latency_p95_s) == (0.25, 1.0)


def test_no_replica_column_no_section() -> None:
    assert fleet_report(table(ROWS)) is None
    report = build_report(table(ROWS), 0, 10)
    assert report.fleet is None and "fleet" not in report.model_dump(mode="json")


def test_replicas_named_by_text_and_absent_ones() -> None:
    fl = fleet_report(table(ROWS, pa.array(["gpu-b", "gpu-b", "gpu-a", None, "gpu-a"])))
    assert fl is not None and list(fl.per_replica) == ["gpu-a", "gpu-b"]
    assert [r.requests for r in fl.per_replica.values()] == [2, 2] and fl.load_imbalance == 1.0
    assert fleet_report(table(ROWS, pa.nulls(5, pa.int64()))) is None


def test_a_replica_without_successes_has_no_percentiles() -> None:
    fl = fleet_report(table(ROWS, pa.array([0, 0, 0, 1, 0], pa.int64())))
    assert fl is not None and fl.per_replica["1"].ttft_p95_s is None and fl.per_replica["1"].latency_p95_s is None


def test_summarize_shows_the_fleet_by_either_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    code, out, _ = run_cli(capsys, "summarize", str(path), "--json")
    assert code == 0 and json.loads(out)["fleet"]["per_replica"]["0"]["requests"] == 3
    code, duck, err = run_cli(capsys, "summarize", str(path), "--engine", "duckdb", "--json")
    assert code == 0 and json.loads(duck)["fleet"] == json.loads(out)["fleet"], err  # tests/test_duckdb_fleet.py
    code, out, _ = run_cli(capsys, "summarize", str(path))
    assert code == 0 and "Fleet: 2 replicas, load imbalance 1.2" in out
