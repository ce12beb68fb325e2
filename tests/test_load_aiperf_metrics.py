"""AIPerf's aggregated server-metrics JSON export read as the samples it places in time."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.server_metrics import server_metrics_report
from servebench.errors import InputFormatError
from servebench.records import rundir
from servebench.records.server_samples import read_aiperf_json

URL = "http://localhost:8000/metrics"
T0 = 1_765_793_061_000_000_000  # ns on the Unix epoch
S = 2_000_000_000  # a two-second slice


def export(metrics: dict, info: dict | None = None) -> dict:
    """Return an export as AIPerf 0.10 writes it (schema 1.0)."""
    return {"schema_version": "1.0", "aiperf_version": "0.10.0", "benchmark_id": "b",
            "summary": {"endpoints_configured": [URL], "endpoints_successful": [URL],
                        "endpoint_info": info or {URL: {"first_fetch_ns": T0, "last_fetch_ns": T0 + 3 * S}}},
            "metrics": metrics, "input_config": {}}


def sliced() -> dict:
    """Three slices of a gauge, a counter and a histogram, as in AIPerf's schema reference."""
    lab = {"model_name": "Qwen/Qwen3-0.6B"}
    edges = [(T0 + k * S, T0 + (k + 1) * S) for k in range(3)]
    return export({
        "vllm:num_requests_waiting": {"type": "gauge", "series": [{
            "endpoint_url": URL, "labels": lab, "stats": {"avg": 3.0, "max": 9.0},
            "timeslices": [{"start_ns": a, "end_ns": b, "avg": v, "min": 0.0, "max": v + 1}
                           for (a, b), v in zip(edges, (0.0, 6.0, 3.0))]}]},
        "vllm:num_preemptions": {"type": "counter", "series": [{
            "endpoint_url": URL, "labels": lab, "stats": {"total": 7.0, "rate": 7 / 6},
            "timeslices": [{"start_ns": a, "end_ns": b, "total": v, "rate": v / 2}
                           for (a, b), v in zip(edges, (0.0, 5.0, 2.0))]}]},
        "vllm:time_to_first_token_seconds": {"type": "histogram", "series": [{
            "endpoint_url": URL, "labels": lab, "stats": {"count": 10, "sum": 4.5},
            "buckets": {"0.1": 2, "1.0": 9, "+Inf": 10},
            "timeslices": [{"start_ns": a, "end_ns": b, "count": c, "sum": s, "buckets": bk}
                           for (a, b), (c, s, bk) in zip(edges, (
                               (4, 1.0, {"0.1": 2, "1.0": 4, "+Inf": 4}),
                               (6, 3.5, {"0.1": 0, "1.0": 5, "+Inf": 6}),
                               (0, 0.0, {"0.1": 0, "1.0": 0, "+Inf": 0})))]}]},
    })


def test_time_slices_become_samples_the_report_reads(tmp_path):
    path = tmp_path / "server_metrics_export.json"
    path.write_text(json.dumps(sliced()))
    samples = read_aiperf_json(path)
    start, end = T0 / 1e9, (T0 + 3 * S) / 1e9
    rep = server_metrics_report(samples, start, end)
    by_role = {s.role: s for s in rep.signals}
    assert by_role["waiting"].max == 6.0 and by_role["waiting"].mean == pytest.approx(3.0)  # slice means
    assert by_role["preemptions"].increase == 7.0
    ttft = rep.histograms[0]
    assert ttft.count == 10 and ttft.mean_s == pytest.approx(0.45)
    # the second slice alone: its own 5 preemptions and 6 first tokens
    second = server_metrics_report(samples, (T0 + S) / 1e9, (T0 + 2 * S) / 1e9)
    assert {s.role: s for s in second.signals}["preemptions"].increase == 5.0 and second.histograms[0].count == 6
    # beside AIPerf's record file (no Parquet export), rundir finds it
    (tmp_path / "profile_export.jsonl").write_text("")
    assert len(rundir.server_samples(tmp_path / "profile_export.jsonl")) == len(samples)


def test_without_slices_totals_span_the_collection_and_gauges_are_left_out(tmp_path):
    doc = sliced()
    for metric in doc["metrics"].values():
        for series in metric["series"]:
            series.pop("timeslices")
    path = tmp_path / "server_metrics_export.json"
    path.write_text(json.dumps(doc))
    samples = read_aiperf_json(path)
    assert {s.family for s in samples.series} == {"vllm:num_preemptions", "vllm:time_to_first_token_seconds"}
    rep = server_metrics_report(samples, T0 / 1e9, (T0 + 3 * S) / 1e9)
    assert {s.role: s for s in rep.signals}["preemptions"].increase == 7.0
    assert rep.histograms[0].count == 10 and rep.histograms[0].quantiles_s["p50"] == pytest.approx(0.1 + 0.9 * 3 / 7)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=12))
def test_a_counters_slices_add_up_over_any_run_of_slices(tmp_path_factory, totals):
    edges = [(T0 + k * S, T0 + (k + 1) * S) for k in range(len(totals))]
    doc = export({"vllm:prompt_tokens": {"type": "counter", "series": [{
        "endpoint_url": URL, "labels": None, "stats": {"total": float(sum(totals))},
        "timeslices": [{"start_ns": a, "end_ns": b, "total": float(v)} for (a, b), v in zip(edges, totals)]}]}})
    path = tmp_path_factory.mktemp("j") / "server_metrics_export.json"
    path.write_text(json.dumps(doc))
    samples = read_aiperf_json(path)
    for i in range(len(totals)):
        for j in range(i, len(totals)):
            rep = server_metrics_report(samples, edges[i][0] / 1e9, edges[j][1] / 1e9)
            assert {s.role: s for s in rep.signals}["prompt_tokens"].increase == sum(totals[i:j + 1])


@pytest.mark.parametrize("doc, message", [
    ("[]", "not an AIPerf server-metrics JSON export: no 'metrics' object"),
    ('{"metrics": {"m": {"type": "gauge"}}}', "metrics['m']: expected an object with a 'series' list"),
    ('{"metrics": {"m": {"type": "counter", "series": [{"timeslices": [{"start_ns": 5, "end_ns": 2, "total": 1}]}]}}}',
     "metrics['m'].series[0].timeslices[0]: expected integer 'start_ns' before 'end_ns'"),
    ('{"metrics": {"m": {"type": "gauge", "series": [{"timeslices": [{"start_ns": 1, "end_ns": 2, "avg": "x"}]}]}}}',
     "metrics['m'].series[0]: a value must be a number, got 'x'"),
    ("{not json", "cannot read as JSON"),
])
def test_a_broken_export_is_one_line_naming_the_field(tmp_path, doc, message):
    path = tmp_path / "server_metrics_export.json"
    path.write_text(doc)
    with pytest.raises(InputFormatError, match="^" + str(path).replace(".", r"\.") + ": ") as err:
        read_aiperf_json(path)
    assert message in str(err.value) and "\n" not in str(err.value)
