"""servebench.dashboard.server_view and its pages: a server-metrics upload joins its records on Summary and Diagnosis."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from servebench.dashboard.server_view import is_server_metrics_file, read_server_metrics, server_charts
from servebench.errors import InputFormatError
from servebench.records.loaders import read_bytes, to_table
from servebench.records.server_samples import SampleLog, Series, write_samples

APP = str(Path(__file__).resolve().parent.parent / "app.py")
ENDPOINT = "http://127.0.0.1:8000/metrics"


def _records(n: int = 40) -> bytes:
    """n requests, one every 0.5 s from t = 10 s, TTFT growing with the queue (past 2 s); no admitted times."""
    recs = [{"start": 10 + 0.5 * i, "first_token": 10 + 0.5 * i + 0.1 * (i + 1), "end": 10 + 0.5 * i + 6 + 0.1 * i,
             "status": "success", "output_tokens": 50, "prompt_tokens": 100} for i in range(n)]
    return json.dumps(recs).encode()


def _samples(full: bool = True):
    """A vLLM server scraped every 0.5 s over the records' window: a full batch, a queue, KV near full, preempting."""
    log = SampleLog()
    gauges = {"vllm:num_requests_running": 8.0, "vllm:num_requests_waiting": 6.0,
              "vllm:kv_cache_usage_perc": 0.98 if full else 0.3}
    for i in range(70):
        t = 9.5 + 0.5 * i
        for family, value in gauges.items():
            log.add(t, Series(ENDPOINT, family, family, "gauge", ()), value)
        log.add(t, Series(ENDPOINT, "vllm:num_preemptions_total", "vllm:num_preemptions", "counter", ()),
                float(i if full else 0))
    return log.samples()


def _parquet(samples) -> bytes:
    buf = io.BytesIO()
    path = Path(__import__("tempfile").mkdtemp()) / "server_metrics.parquet"
    write_samples(path, samples)
    buf.write(path.read_bytes())
    return buf.getvalue()


def test_server_metrics_files_are_told_from_records_by_name() -> None:
    assert is_server_metrics_file("server_metrics.parquet") and is_server_metrics_file("SERVER_METRICS.PARQUET")
    assert is_server_metrics_file("run_server_metrics_export.parquet")
    assert not is_server_metrics_file("records.parquet") and not is_server_metrics_file("server_metrics.csv")


def test_an_upload_reads_back_its_samples_and_a_bad_one_names_the_upload() -> None:
    samples = read_server_metrics("server_metrics.parquet", _parquet(_samples()))
    assert len(samples) == 70 * 4
    with pytest.raises(InputFormatError) as err:
        read_server_metrics("server_metrics.parquet", b"not parquet at all")
    assert str(err.value).startswith("server_metrics.parquet: cannot read as Parquet")
    assert "sb-server-metrics" not in str(err.value)  # the temporary file it went through is not named


def test_server_charts_share_one_time_axis_under_the_clients_ttft_and_offered_load() -> None:
    table, ws, we = to_table(read_bytes(_records(), "r.json"))
    charts = server_charts(table, _samples(), ws, we, unit="ms")
    titles = [c["title"]["text"] for c in charts]
    assert titles == ["client TTFT, ms", "offered, req/s", "server requests", "KV cache use (1: full)",
                      "preemptions so far"]
    assert {tuple(c["encoding"]["x"]["scale"]["domain"]) for c in charts} == {(0.0, we - ws)}
    ttft = charts[0]["datasets"]["rows"]
    assert ttft["y"].iloc[0] == pytest.approx(100.0)  # the first request's TTFT, 0.1 s, in ms
    assert ttft["x"].iloc[0] == pytest.approx(0.0)  # seconds since the window's start
    assert set(charts[2]["datasets"]["rows"]["series"]) == {"running", "waiting"}
    preempted = charts[4]["datasets"]["rows"]["y"]
    assert preempted.iloc[0] == 0.0 and preempted.is_monotonic_increasing  # counted since the window began


def test_without_a_published_signal_its_row_is_left_out() -> None:
    log = SampleLog()
    for i in range(10):
        log.add(10 + i, Series(ENDPOINT, "vllm:num_requests_running", "vllm:num_requests_running", "gauge", ()), 3.0)
    table, ws, we = to_table(read_bytes(_records(), "r.json"))
    titles = [c["title"]["text"] for c in server_charts(table, log.samples(), ws, we, unit="s")]
    assert titles == ["client TTFT, s", "offered, req/s", "server requests"]


def _upload_both(page: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page(page).run()
    if page.endswith("diagnosis.py"):
        at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
    at.file_uploader(key="records_upload").set_value([
        ("run.json", _records(), "application/json"),
        ("server_metrics.parquet", _parquet(_samples()), "application/octet-stream")]).run()
    assert not at.exception and not at.error
    return at


def test_summary_over_time_panel_draws_the_server_under_the_client() -> None:
    at = _upload_both("pages/summary.py")
    assert any("Server metrics: **server_metrics.parquet** (280 samples)" in c.value for c in at.sidebar.caption)
    assert any("run.json" in c.value for c in at.caption)  # the records, not the scrapes, are on screen
    at.session_state["over_time_open"] = True
    at.run()
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    titles = {s["title"]["text"] for s in specs}
    assert {"client TTFT, ms", "server requests", "KV cache use (1: full)", "preemptions so far"} <= titles


def test_diagnosis_weighs_the_servers_evidence_and_draws_it() -> None:
    at = _upload_both("pages/diagnosis.py")
    assert any(s.value == "The server over time" for s in at.subheader)
    verdict = next(w.value for w in at.warning if w.value.startswith("**Profile"))
    assert "KV memory" in verdict  # the server's full, preempting cache decides where records alone cannot
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    assert "KV cache use (1: full)" in {s["title"]["text"] for s in specs}


def test_diagnosis_without_server_metrics_says_how_to_add_them() -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
    at.file_uploader(key="records_upload").set_value([("run.json", _records(), "application/json")]).run()
    assert not at.exception and not at.error
    verdict = next(w.value for w in [*at.warning, *at.success] if w.value.startswith("**Profile"))
    assert "cannot be told apart" in verdict  # the records alone cannot tell memory from queueing
    assert not any(s.value == "The server over time" for s in at.subheader)
    assert any("server_metrics.parquet" in c.value for c in at.caption)
