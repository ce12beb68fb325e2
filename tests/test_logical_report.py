"""Tests for the report's logical-request and fairness sections, --warmup-s, and how they are shown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.analysis.retries import jain_index, tenant_weights
from servebench.analysis.summary import SLO, build_report
from servebench.output.figures.markdown_table import markdown_tables
from servebench.records.schema import parse_objects
from servebench.records.table import RecordTable, validate

# Two users. u1: attempt 1 times out after streaming 4 tokens, attempt 2 succeeds (partial output, then a retry).
# u2: attempt 1 rejected, attempt 2 cut by the client's deadline. One record with no logical_id: its own request.
ATTEMPTS = [
    {"request_id": "a", "logical_id": "u1", "attempt": 1, "start": 0.0, "first_token": 1.0, "end": 3.0,
     "status": "timeout", "output_tokens": 4, "slice": "chat"},
    {"request_id": "b", "logical_id": "u1", "attempt": 2, "start": 4.0, "first_token": 4.5, "end": 6.0,
     "status": "success", "output_tokens": 10, "slice": "chat"},
    {"request_id": "c", "logical_id": "u2", "attempt": 1, "start": 1.0, "end": 1.0, "status": "rejected",
     "slice": "batch"},
    {"request_id": "d", "logical_id": "u2", "attempt": 2, "start": 2.0, "end": 9.0, "status": "timeout",
     "error": "client_deadline", "output_tokens": 0, "slice": "batch"},
    {"request_id": "e", "start": 2.0, "first_token": 2.2, "end": 3.0, "status": "success", "output_tokens": 5,
     "slice": "batch"},
]


def table_of(records: list[dict]) -> RecordTable:
    return validate(parse_objects(records, strict_keys=True), 0.0, 10.0)


def test_logical_section_counts_attempts_successes_and_partial_output() -> None:
    lg = build_report(table_of(ATTEMPTS), 0.0, 10.0).logical
    assert lg is not None
    assert (lg.logical_requests, lg.logical_successes, lg.attempts) == (3, 2, 5)
    assert lg.amplification == pytest.approx(5 / 3)
    assert (lg.retried, lg.partial_then_retry, lg.attempts_cut_by_deadline) == (2, 1, 1)
    assert lg.user_latency_s.n == 3 and lg.user_latency_s.max == 8.0  # u2: 1.0 to 9.0
    assert sorted(p.value for p in lg.user_latency_success_s.percentiles if p.q == 50) == [1.0]  # e: 1 s; u1: 6 s


def test_no_logical_section_without_logical_ids() -> None:
    plain = [{k: v for k, v in r.items() if k not in ("logical_id", "attempt")} for r in ATTEMPTS]
    assert build_report(table_of(plain), 0.0, 10.0).logical is None


def test_fairness_section_over_slices() -> None:
    fr = build_report(table_of(ATTEMPTS), 0.0, 10.0, SLO(ttft_s=0.6)).fairness
    assert fr is not None and set(fr.slices) == {"batch", "chat"}
    assert fr.slices["chat"].goodput_share == 0.5 and fr.slices["batch"].goodput_share == 0.5
    assert fr.slices["chat"].slo_attainment == 0.5 and fr.slices["batch"].slo_attainment == pytest.approx(1 / 3)
    assert fr.jain_index == 1.0 and fr.weights_from == "equal"
    assert fr.ttft_p95_ratio == pytest.approx(0.5 / 0.2)
    weighted = build_report(table_of(ATTEMPTS), 0.0, 10.0, SLO(ttft_s=0.6), weights={"chat": 3.0}).fairness
    assert weighted is not None and weighted.weights_from == "metadata"
    assert weighted.jain_index == pytest.approx(jain_index([1 / 3, 1.0]))  # goodput equal, chat should have 3x


def test_one_slice_has_no_fairness_section() -> None:
    one = [{**r, "slice": "chat"} for r in ATTEMPTS]
    assert build_report(table_of(one), 0.0, 10.0).fairness is None


def test_jain_index_bounds() -> None:
    assert jain_index([2.0, 2.0, 2.0, 2.0]) == 1.0
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == 0.25
    assert jain_index([]) is None


def test_warmup_reports_cold_and_warm_apart() -> None:
    rep = build_report(table_of(ATTEMPTS), 0.0, 10.0, warmup_s=1.5)
    assert set(rep.slices) == {"cold", "warm"}
    assert rep.slices["cold"].offered == 2 and rep.slices["warm"].offered == 3  # starts 0.0 and 1.0 are cold


def test_tenant_weights_from_a_run_scenario() -> None:
    doc = {"scenario": {"server": {"tenants": {"a": {"weight": 2}, "b": {}}}}}
    assert tenant_weights(doc) == {"a": 2.0, "b": 1.0}
    assert tenant_weights({"server": {}}) is None


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120)


def test_summarize_json_has_logical_and_fairness_and_tables_show_them(tmp_path: Path) -> None:
    f = tmp_path / "attempts.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in ATTEMPTS))
    out = run_cli("summarize", str(f), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["logical"]["attempts"] == 5 and doc["logical"]["amplification"] == pytest.approx(5 / 3)
    assert set(doc["fairness"]["slices"]) == {"batch", "chat"}
    text = run_cli("summarize", str(f), "--warmup-s", "1.5")
    assert text.returncode == 0, text.stderr
    assert "Logical requests" in text.stdout and "Fairness across slices" in text.stdout and "'cold'" in text.stdout
    bad = run_cli("summarize", str(f), "--warmup-s", "-1")
    assert bad.returncode == 2


def test_report_site_shows_retries_and_fairness(tmp_path: Path) -> None:
    f = tmp_path / "attempts.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in ATTEMPTS))
    out = run_cli("report", str(f), "-o", str(tmp_path / "site"))
    assert out.returncode == 0, out.stderr
    page = next((tmp_path / "site").glob("run-*.html")).read_text(encoding="utf-8")
    assert '<section id="logical">' in page and '<section id="fairness">' in page
    assert "amplification (attempts / logical)" in page


def test_dashboard_summary_shows_retries_fairness_and_warm_up() -> None:
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=90)
    at.run()
    data = "\n".join(json.dumps(r) for r in ATTEMPTS).encode()
    at.file_uploader(key="records_upload").set_value(("attempts.jsonl", data, "application/jsonl")).run()
    assert not at.exception
    heads = [h.value for h in at.subheader]
    assert "Retries: logical requests" in heads and "Fairness across slices" in heads
    next(n for n in at.number_input if n.label.startswith("Warm-up")).set_value(1.5).run()
    assert not at.exception
    assert any("cold" in str(t.to_dict()) for t in markdown_tables(m.value for m in at.markdown))  # Slices
