"""Server metrics: parsing recorded vLLM and SGLang pages, the window's statistics, scraping through a load run.

The two pages in tests/data/server_metrics/ are written in the formats vLLM 0.10 (V1 engine) and SGLang
(--enable-metrics) expose, after the names and help texts of vllm/v1/metrics/loggers.py and
sglang/srt/metrics/collector.py; their numbers are made up but consistent (a saturated server).
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest
from asgi_server import serve_in_background
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from servebench.analysis.server_metrics import (
    KNOWN_SIGNALS,
    WindowHistogram,
    counter_increase,
    gauge_series,
    histogram_window,
    server_metrics_report,
    server_state,
)
from servebench.cli import main
from servebench.load.scrape_process import parse_page
from servebench.load.server_metrics import MetricsScraper, discover, metrics_url
from servebench.records import rundir
from servebench.records.server_samples import (
    SampleLog,
    Series,
    labels_key,
    read_aiperf_parquet,
    read_samples,
    write_samples,
)

DATA = Path(__file__).parent / "data" / "server_metrics"


def page_samples(name: str, t: float = 1.0) -> SampleLog:
    log = SampleLog()
    for series, value in parse_page((DATA / name).read_text(), "http://127.0.0.1:8000/metrics"):
        log.add(t, series, value)
    return log


# --------------------------------------------------------------------------- parsing recorded pages


def test_a_vllm_page_parses_into_known_signals_and_keeps_the_rest():
    samples = page_samples("vllm_0.10_v1_engine.txt").samples()
    families = {s.family for s in samples.series}
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc", "vllm:num_preemptions", "vllm:prompt_tokens", "vllm:generation_tokens",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"} <= families
    # unknown metrics are kept: the process, the HTTP layer, the cache config info and a _created timestamp
    assert {"python_gc_objects_collected", "process_resident_memory_bytes", "http_requests",
            "vllm:cache_config_info", "vllm:time_to_first_token_seconds_created"} <= families
    by_metric = {(s.metric, s.label("finished_reason")): samples.value[samples.series_index == k][0]
                 for k, s in enumerate(samples.series)}
    assert by_metric[("vllm:num_preemptions_total", None)] == 23.0
    assert by_metric[("vllm:request_success_total", "length")] == 1531.0
    kinds = {s.family: s.type for s in samples.series}
    assert kinds["vllm:num_preemptions"] == "counter" and kinds["vllm:e2e_request_latency_seconds"] == "histogram"
    state = server_state(samples, 0.0, 2.0)
    assert state is not None
    assert (state.running_metric, state.running_max) == ("vllm:num_requests_running", 64.0)
    assert (state.waiting_metric, state.waiting_max, state.waiting_share) == ("vllm:num_requests_waiting", 37.0, 1.0)
    assert state.kv_metric == "vllm:kv_cache_usage_perc"  # the current name wins over the deprecated one
    assert state.kv_usage_p95 == pytest.approx(0.9871)


def test_an_sglang_page_parses_and_a_repeated_rank_is_not_counted_twice():
    samples = page_samples("sglang_0.5_enable_metrics.txt").samples()
    families = {s.family: s.type for s in samples.series}
    assert families["sglang:num_running_reqs"] == "gauge" and families["sglang:prompt_tokens"] == "counter"
    assert families["sglang:time_to_first_token_seconds"] == "histogram"
    assert families["sglang:num_requests"] == "counter"  # not in servebench's table: kept
    ranks = [s.label("tp_rank") for s in samples.series if s.family == "sglang:num_running_reqs"]
    assert ranks == ["0", "1"]
    state = server_state(samples, 0.0, 2.0)
    assert state is not None
    assert state.running_max == 128.0  # rank 1 repeats rank 0: not 256
    assert state.waiting_max == 211.0 and state.kv_usage_p95 == pytest.approx(0.98)
    assert state.preemptions_metric == "sglang:num_retracted_requests_total"


def test_not_prometheus_text_is_refused_with_its_cause():
    from servebench.load.scrape_process import ScrapeFailed

    with pytest.raises(ScrapeFailed, match="not Prometheus text"):
        parse_page("<html><body>404 Not Found</body></html>", "u")


def test_every_known_signal_has_a_unit_and_a_meaning_and_one_row():
    families = [s.family for s in KNOWN_SIGNALS]
    assert len(families) == len(set(families))
    assert all(s.unit and s.meaning and s.kind in ("gauge", "counter", "histogram") for s in KNOWN_SIGNALS)
    assert {s.server for s in KNOWN_SIGNALS} == {"vLLM", "SGLang", "TGI", "TensorRT-LLM"}


def test_metrics_url():
    assert metrics_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://127.0.0.1:8002/metrics") == "http://127.0.0.1:8002/metrics"
    from servebench.errors import ConfigError
    with pytest.raises(ConfigError, match="--server-metrics"):
        metrics_url("localhost:8000")


# --------------------------------------------------------------------------- the window's statistics


def series(family: str, kind: str, metric: str | None = None, **labels: str) -> Series:
    return Series("http://e/metrics", metric or family, family, kind, labels_key(labels))


def test_gauge_mean_max_p95_and_counter_increase_through_a_restart():
    log = SampleLog()
    run = series("vllm:num_requests_running", "gauge")
    pre = series("vllm:num_preemptions", "counter", "vllm:num_preemptions_total")
    values = [1, 2, 3, 4, 8, 8, 8, 8, 8, 8]
    counts = [10, 12, 15, 15, 2, 5, 5, 9, 9, 9]  # the server restarted before t=4: 2 counted from 0
    for t in range(10):
        log.add(float(t), run, float(values[t]))
        log.add(float(t), pre, float(counts[t]))
    samples = log.samples()
    rep = server_metrics_report(samples, 2.0, 8.0)
    g = next(s for s in rep.signals if s.role == "running")
    assert (g.scrapes, g.max, g.p95) == (7, 8.0, 8.0)
    assert g.mean == pytest.approx(np.mean(values[2:9]))
    c = next(s for s in rep.signals if s.role == "preemptions")
    # from t=2 (15) to t=8 (9): 0 + 2 (restart) + 3 + 0 + 4 + 0 = 9 over 6 s
    assert c.increase == 9.0 and c.rate_per_s == pytest.approx(1.5)
    assert counter_increase(samples, "vllm:num_preemptions", 2.5, 7.5) == (9.0, 6.0)  # bounded by 2 and 8


def test_label_sets_are_summed_and_usage_takes_the_fullest_engine():
    log = SampleLog()
    for t, (a, b) in enumerate([(1, 2), (3, 4)]):
        log.add(float(t), series("vllm:num_requests_running", "gauge", engine="0"), float(a))
        log.add(float(t), series("vllm:num_requests_running", "gauge", engine="1"), float(b))
        log.add(float(t), series("vllm:kv_cache_usage_perc", "gauge", engine="0"), a / 10)
        log.add(float(t), series("vllm:kv_cache_usage_perc", "gauge", engine="1"), b / 10)
    samples = log.samples()
    assert gauge_series(samples, "vllm:num_requests_running")[1].tolist() == [3.0, 7.0]
    assert gauge_series(samples, "vllm:kv_cache_usage_perc")[1].tolist() == [0.2, 0.4]


def hist_log(bounds: list[float], before: list[int], after: list[int], sums: tuple[float, float]) -> SampleLog:
    log = SampleLog()
    fam = "vllm:time_to_first_token_seconds"
    for t, counts, total in ((0.0, before, sums[0]), (10.0, after, sums[1])):
        for b, c in zip([*bounds, math.inf], counts):
            le = "+Inf" if math.isinf(b) else repr(float(b))
            log.add(t, series(fam, "histogram", fam + "_bucket", le=le), float(c))
        log.add(t, series(fam, "histogram", fam + "_sum"), total)
        log.add(t, series(fam, "histogram", fam + "_count"), float(counts[-1]))
    return log


def test_histogram_quantiles_of_the_window_and_the_client_beside_them():
    # 100 observations in the window: 20 under 0.1 s, 60 in (0.1, 0.5], 20 in (0.5, 1]
    log = hist_log([0.1, 0.5, 1.0], [5, 5, 5, 5], [25, 85, 105, 105], (1.0, 31.0))
    samples = log.samples()
    h = histogram_window(samples, "vllm:time_to_first_token_seconds", 1.0, 9.0)
    assert h is not None and h.count == 100 and h.sum == 30.0
    assert h.quantile(50) == (pytest.approx(0.1 + 0.4 * 30 / 60), (0.1, 0.5))
    assert h.quantile(99) == (pytest.approx(0.5 + 0.5 * 19 / 20), (0.5, 1.0))
    rep = server_metrics_report(samples, 1.0, 9.0, {"ttft_s": {50: 0.31, 90: 0.8, 95: 0.9, 99: 1.2}})
    ttft = rep.histograms[0]
    assert ttft.role == "ttft" and ttft.count == 100 and ttft.mean_s == pytest.approx(0.3)
    assert ttft.client_metric == "ttft_s" and ttft.client_s == {"p50": 0.31, "p90": 0.8, "p95": 0.9, "p99": 1.2}
    assert "network" in rep.note


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.floats(0.5, 99.5))
def test_a_histogram_quantile_falls_in_the_bucket_that_holds_its_rank(counts, q):
    bounds = np.array([0.01 * 2 ** i for i in range(len(counts))] + [math.inf])
    cumulative = np.cumsum([*counts, 0]).astype(float)
    h = WindowHistogram(bounds, cumulative, 0.0, float(cumulative[-1]))
    value, (lower, upper) = h.quantile(q)
    if cumulative[-1] == 0:
        assert value is None
        return
    rank = q / 100 * cumulative[-1]
    i = int(np.searchsorted(cumulative, rank))
    assert upper == bounds[i] and (lower or 0.0) <= value <= upper
    assert h.quantile(min(q + 0.5, 100))[0] >= value  # monotone in q


def test_samples_survive_the_run_folder_file(tmp_path):
    samples = page_samples("vllm_0.10_v1_engine.txt", t=0.25).samples()
    write_samples(tmp_path / rundir.SERVER_METRICS, samples)
    back = read_samples(tmp_path / rundir.SERVER_METRICS)
    assert back.series == samples.series
    assert back.t_s.tolist() == samples.t_s.tolist() and back.value.tolist() == samples.value.tolist()


def test_aiperf_parquet_export_reads_as_the_same_samples(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    url, model = "http://localhost:8000/metrics", "Qwen/Qwen3-0.6B"
    rows = []
    for ns, (running, preempt, buckets) in ((1_765_793_061_000_000_000, (4.0, 0.0, (0.0, 0.0, 0.0))),
                                           (1_765_793_071_000_000_000, (8.0, 3.0, (2.0, 9.0, 10.0)))):
        base = {"endpoint_url": url, "timestamp_ns": ns, "model_name": model, "unit": None, "description": None}
        rows.append(base | {"metric_name": "vllm:num_requests_running", "metric_type": "gauge", "value": running})
        rows.append(base | {"metric_name": "vllm:num_preemptions", "metric_type": "counter", "value": preempt})
        for le, c in zip(("0.1", "1.0", "+Inf"), buckets):
            rows.append(base | {"metric_name": "vllm:time_to_first_token_seconds", "metric_type": "histogram",
                                "sum": 4.5 if c else 0.0, "count": buckets[-1], "bucket_le": le, "bucket_count": c})
    cols = ["endpoint_url", "metric_name", "metric_type", "unit", "description", "timestamp_ns", "model_name",
            "value", "sum", "count", "bucket_le", "bucket_count"]
    pq.write_table(pa.table({c: [r.get(c) for r in rows] for c in cols}), tmp_path / "server_metrics_export.parquet")
    samples = read_aiperf_parquet(tmp_path / "server_metrics_export.parquet")
    start, end = 1_765_793_061.0, 1_765_793_071.0
    rep = server_metrics_report(samples, start, end)
    by_role = {s.role: s for s in rep.signals}
    assert by_role["running"].max == 8.0 and by_role["preemptions"].increase == 3.0
    ttft = rep.histograms[0]
    assert ttft.count == 10 and ttft.mean_s == pytest.approx(0.45)
    assert ttft.quantiles_s["p50"] == pytest.approx(0.1 + 0.9 * 3 / 7)
    # beside an AIPerf record file, rundir finds it (the records are on the same epoch clock)
    (tmp_path / "profile_export.jsonl").write_text("")
    assert len(rundir.server_samples(tmp_path / "profile_export.jsonl")) == len(samples)


# --------------------------------------------------------------------------- scraping


class QueueServer:
    """An OpenAI-like server running at most ``cap`` requests at once; /metrics in vLLM's names.

    Each request holds a slot for ``service_s`` and streams ``max_tokens`` tokens; the rest wait, so
    the queue persists while running sits at ``cap`` (queueing, with the KV cache far from full).
    """

    def __init__(self, cap: int = 2, service_s: float = 0.2, metrics: bool = True) -> None:
        self.cap, self.service_s = cap, service_s
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels,
                             registry=self.registry).labels("fake", "0")
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
                             registry=self.registry).labels("fake", "0")
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
                        registry=self.registry).labels("fake", "0")
        self.preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
                               registry=self.registry).labels("fake", "0")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0], registry=self.registry
                              ).labels("fake", "0")
        self.scrapes = 0
        self.requests = 0
        self.app = self._app(metrics)

    def _app(self, metrics: bool) -> FastAPI:
        app = FastAPI()
        slots: list[asyncio.Semaphore] = []

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

        if metrics:
            @app.get("/metrics")
            async def prom() -> PlainTextResponse:
                self.scrapes += 1
                return PlainTextResponse(generate_latest(self.registry).decode(), media_type="text/plain")

        @app.post("/v1/completions")
        async def completions(request: Request) -> StreamingResponse:
            body = await request.json()
            self.requests += 1
            if not slots:
                slots.append(asyncio.Semaphore(self.cap))
            arrived = asyncio.get_running_loop().time()

            async def events():
                self.waiting.inc()
                async with slots[0]:
                    self.waiting.dec()
                    self.running.inc()
                    self.kv.set(0.1 * self.cap)
                    try:
                        self.ttft.observe(asyncio.get_running_loop().time() - arrived)
                        n = int(body["max_tokens"])
                        for i in range(n):
                            await asyncio.sleep(self.service_s / n)
                            yield f"data: {json.dumps({'choices': [{'index': 0, 'text': ' x'}]})}\n\n"
                        usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}
                        yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                        yield "data: [DONE]\n\n"
                    finally:
                        self.running.dec()
            return StreamingResponse(events(), media_type="text/event-stream")

        return app


def test_the_scraper_keeps_samples_and_counts_failures_without_stopping():
    server = QueueServer()
    with serve_in_background(server.app) as url:
        found, note = discover(url)
        assert found == url + "/metrics", note
        scraper = MetricsScraper([found, url + "/nothing-here", "http://127.0.0.1:9/metrics"], interval_s=0.05,
                                 timeout_s=1.0).start()
        threading.Event().wait(0.3)
        done = scraper.stop()
    ok, missing, refused = done.endpoints
    assert ok.scrapes >= 4 and ok.failed == 0 and ok.samples > 0
    assert missing.scrapes == 0 and missing.failed == ok.scrapes and missing.first_error == "HTTP 404"
    assert refused.failed == ok.scrapes and refused.first_error.startswith("ConnectionRefusedError")
    report = done.report("server_metrics.parquet")
    assert len(report.warnings()) == 2 and "never" not in report.warnings()[0]
    times = np.unique(done.samples.t_s)
    assert times.size == ok.scrapes and np.all(np.diff(times)[:-1] > 0.03)  # a 50 ms grid, then one at the stop


def test_discover_says_why_when_a_server_has_no_metrics():
    with serve_in_background(QueueServer(metrics=False).app) as url:
        found, note = discover(url)
    assert found is None and "HTTP 404" in note


def run_load(args: list[str], capsys) -> tuple[int, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_load_scrapes_the_server_through_the_run_and_summarize_and_diagnose_use_it(tmp_path, capsys):
    server = QueueServer(cap=2, service_s=0.25)
    out = tmp_path / "run"
    with serve_in_background(server.app) as url:
        code, text = run_load(["load", url, "-o", str(out), "--rate", "40", "--requests", "24", "--output-tokens",
                               "5", "--arrival", "constant", "--metrics-interval-s", "0.1", "--json"], capsys)
    assert code == 0, text
    doc = json.loads(text[text.index("{"):])
    assert doc["scrape"]["endpoints"][0]["failed"] == 0 and doc["scrape"]["file"] == "server_metrics.parquet"
    section = doc["server_metrics"]
    by_role = {s["role"]: s for s in section["signals"]}
    assert by_role["running"]["max"] == 2.0  # the server's cap, seen from inside
    assert by_role["waiting"]["max"] >= 5
    ttft = next(h for h in section["histograms"] if h["role"] == "ttft")
    assert ttft["count"] == 24 and ttft["client_s"]["p95"] >= ttft["quantiles_s"]["p50"]
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["server_metrics"]["interval_s"] == 0.1 and meta["server_metrics"]["samples"] > 0
    samples = read_samples(out / "server_metrics.parquet")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    first, last = min(r["start"] for r in records), max(r["end"] for r in records)
    assert samples.t_s.min() <= first + 0.05 and samples.t_s.max() >= last - 0.05  # before the first, after the last

    code, text = run_load(["summarize", str(out), "--json"], capsys)
    assert code == 0 and json.loads(text)["server_metrics"]["signals"]
    code, text = run_load(["summarize", str(out)], capsys)
    assert code == 0 and "Server metrics (vLLM" in text and "Server signals over the window" in text

    # no admitted times: the records alone cannot tell; the server's queue and batch say queueing
    code, text = run_load(["diagnose", str(out / "records.jsonl"), "--ttft-objective-s", "0.3", "--json"], capsys)
    verdict = next(iter(json.loads(text)["profiles"].values()))
    assert verdict["limit"] == "queueing", verdict["summary"]
    evidence = verdict["headline"]["evidence"]
    assert any("vllm:num_requests_waiting" in e for e in evidence)
    assert any("vllm:num_requests_running" in e and "ceiling of 2" in e for e in evidence)
    (out / "server_metrics.parquet").unlink()
    code, text = run_load(["diagnose", str(out / "records.jsonl"), "--ttft-objective-s", "0.3", "--json"], capsys)
    assert next(iter(json.loads(text)["profiles"].values()))["limit"] == "undetermined"


def test_load_without_metrics_or_with_them_off_writes_none_and_says_why(tmp_path, capsys):
    with serve_in_background(QueueServer(metrics=False).app) as url:
        code, text = run_load(["load", url, "-o", str(tmp_path / "a"), "--rate", "50", "--requests", "3"], capsys)
        assert code == 0 and "no Prometheus metrics found" in text
        assert not (tmp_path / "a" / "server_metrics.parquet").exists()
    server = QueueServer()
    with serve_in_background(server.app) as url:
        code, text = run_load(["load", url, "-o", str(tmp_path / "b"), "--rate", "50", "--requests", "3",
                               "--no-server-metrics"], capsys)
        assert code == 0 and server.scrapes == 0
        assert json.loads((tmp_path / "b" / "metadata.json").read_text())["server_metrics"]["note"].endswith(
            "(--no-server-metrics)")
        # an explicit endpoint that never answers is counted, not fatal
        code, text = run_load(["load", url, "-o", str(tmp_path / "c"), "--rate", "50", "--requests", "3",
                               "--server-metrics", url + "/missing"], capsys)
        assert code == 0 and "scrapes of " + url + "/missing failed" in text
    code, text = run_load(["load", "http://127.0.0.1:9", "-o", str(tmp_path / "d"), "--rate", "1",
                           "--server-metrics", "http://127.0.0.1:9", "--no-server-metrics"], capsys)
    assert code == 2 and "give one or the other" in text
    code, text = run_load(["load", "http://127.0.0.1:9", "-o", str(tmp_path / "d"), "--rate", "1",
                           "--metrics-interval-s", "0"], capsys)
    assert code == 2 and "--metrics-interval-s" in text


# --------------------------------------------------------------------------- the diagnosis from the server's metrics


def fifo_records(arrivals: list[float], cap: int, service_s: float, n_out: int = 20) -> list[dict]:
    """Return records of a server running at most ``cap`` requests (no admitted times: a peer tool's view)."""
    free = [0.0] * cap
    recs = []
    for i, a in enumerate(arrivals):
        adm = max(a, free.pop(free.index(min(free))))
        end = adm + service_s
        free.append(end)
        recs.append({"request_id": f"r{i}", "start": a, "first_token": adm + 0.05, "end": end, "status": "success",
                     "prompt_tokens": 100, "output_tokens": n_out, "_admitted": adm})
    return recs


def scrapes_of(recs: list[dict], kv_full_at: float, preempt_every_s: float | None, step_s: float = 0.5) -> SampleLog:
    """Return what the server's /metrics would have said every ``step_s``: running, waiting, KV use, preemptions."""
    log = SampleLog()
    end = max(r["end"] for r in recs)
    for t in np.arange(0.0, end + step_s, step_s):
        running = sum(r["_admitted"] <= t < r["end"] for r in recs)
        waiting = sum(r["start"] <= t < r["_admitted"] for r in recs)
        log.add(t, series("vllm:num_requests_running", "gauge"), float(running))
        log.add(t, series("vllm:num_requests_waiting", "gauge"), float(waiting))
        log.add(t, series("vllm:kv_cache_usage_perc", "gauge"), min(1.0, running / kv_full_at))
        preempted = 0.0 if preempt_every_s is None else float(t // preempt_every_s)
        log.add(t, series("vllm:num_preemptions", "counter", "vllm:num_preemptions_total"), preempted)
    return log


def diagnose_without_admitted(recs: list[dict], log: SampleLog | None):
    from servebench.analysis.diagnosis import diagnose_records
    from servebench.records.loaders import read_bytes, to_table

    plain = [{k: v for k, v in r.items() if k != "_admitted"} for r in recs]
    table, ws, we = to_table(read_bytes(json.dumps(plain).encode(), "peer.json"))
    assert not table.has_admitted
    return diagnose_records(table, ws, we, server_metrics=None if log is None else log.samples())


def test_kv_memory_from_the_server_when_its_cache_is_full_and_it_preempts():
    recs = fifo_records([i * 0.2 for i in range(150)], cap=8, service_s=3.0)
    v = diagnose_without_admitted(recs, scrapes_of(recs, kv_full_at=8.1, preempt_every_s=2.0))
    assert v.limit == "kv_memory", v.summary
    said = " ".join(v.headline.evidence)
    assert "vllm:kv_cache_usage_perc p95 0.988 >= 0.9" in said and "vllm:num_preemptions_total increase" in said
    assert v.summary.startswith("KV memory, from the server's own metrics")
    assert "--gpu-memory-utilization" in v.experiment.action
    assert v.headline.standing == "at_limit" and v.headline.capacity_rate_per_s <= 5.0


def test_queueing_from_the_server_when_the_batch_is_capped_below_memory():
    recs = fifo_records([i * 0.2 for i in range(150)], cap=8, service_s=3.0)
    v = diagnose_without_admitted(recs, scrapes_of(recs, kv_full_at=40.0, preempt_every_s=None))
    assert v.limit == "queueing", v.summary
    said = " ".join(v.headline.evidence)
    assert "running at its ceiling of 8" in said and "vllm:num_requests_waiting" in said
    assert "above 8" in v.experiment.action
    # the same records without the server's metrics: nothing can tell
    assert diagnose_without_admitted(recs, None).limit == "undetermined"


def test_no_server_verdict_without_a_symptom_or_a_pattern():
    calm = fifo_records([i * 1.0 for i in range(40)], cap=8, service_s=0.5)
    assert diagnose_without_admitted(calm, scrapes_of(calm, 8.1, None)).limit == "none"  # no symptom
    # a symptom (TTFT over 2 s) but a queue seen only now and then, the cache half used: still undetermined
    recs = fifo_records([i * 0.2 for i in range(150)], cap=8, service_s=3.0)
    log = SampleLog()
    for t in np.arange(0.0, 60.0, 0.5):
        log.add(t, series("vllm:num_requests_running", "gauge"), 8.0)
        log.add(t, series("vllm:num_requests_waiting", "gauge"), 1.0 if int(t * 2) % 5 == 0 else 0.0)
        log.add(t, series("vllm:kv_cache_usage_perc", "gauge"), 0.5)
    v = diagnose_without_admitted(recs, log)
    assert v.limit == "undetermined" and any(r.conditions[0].measurement.startswith("server ") for r in v.rules)


def test_decode_from_the_server_needs_a_full_batch_no_queue_and_tpot_growing():
    from servebench.analysis.diagnosis import Evidence, Thresholds, server_rules
    from servebench.analysis.server_metrics import ServerState

    state = ServerState(scrapes=100, running_metric="sglang:num_running_reqs", running_max=64, running_mean=62,
                        running_full_share=0.9, waiting_metric="sglang:num_queue_reqs", waiting_share=0.02,
                        waiting_mean=0.02, waiting_max=1, kv_metric="sglang:token_usage", kv_usage_p95=0.6)
    growing = Evidence(measurement="tpot_growth", value=1.6, threshold=1.25, rule=">=", crossed=True, note="")
    flat = growing.model_copy(update={"value": 1.05, "crossed": False})
    rules = {r.limit: r for r in server_rules(state, growing, Thresholds())}
    assert rules["decode"].holds and not rules["queueing"].holds and not rules["kv_memory"].holds
    assert not {r.limit: r for r in server_rules(state, flat, Thresholds())}["decode"].holds
    queued = state.model_copy(update={"waiting_share": 0.7, "full_while_waiting": 0.95})
    rules = {r.limit: r for r in server_rules(queued, growing, Thresholds())}
    assert rules["queueing"].holds and not rules["decode"].holds


# --------------------------------------------------------------------------- charts and the report site


def test_the_chart_puts_the_server_under_the_clients_ttft_on_one_time_axis():
    from servebench.output.figures.server_metrics import server_panels, server_timeline_figure
    from servebench.records.loaders import read_bytes, to_table

    recs = fifo_records([5.0 + i * 0.2 for i in range(150)], cap=8, service_s=3.0)
    log = scrapes_of(recs, kv_full_at=8.1, preempt_every_s=2.0)
    plain = [{k: v for k, v in r.items() if k != "_admitted"} for r in recs]
    table, ws, we = to_table(read_bytes(json.dumps(plain).encode(), "peer.json"))
    panels = server_panels(table, log.samples(), ws, we)
    assert [p.title for p in panels] == ["client TTFT, s", "offered, req/s", "server requests",
                                         "KV cache use (1: full)", "preemptions so far"]
    assert [line.source for line in panels[2].lines] == ["vllm:num_requests_running", "vllm:num_requests_waiting"]
    for panel in panels:
        for line in panel.lines:
            assert line.x.min() >= 0.0 and line.x.max() <= we - ws + 1e-9  # seconds since the window's start
    assert panels[4].lines[0].y[0] == 0.0 and panels[4].lines[0].source == "vllm:num_preemptions_total"
    assert panels[1].lines[0].y.max() == pytest.approx(5.0, rel=0.2)  # 5 arrivals a second
    fig = server_timeline_figure(table, log.samples(), ws, we)
    assert fig is not None and len(fig.data) == 6
    assert server_timeline_figure(table, None, ws, we) is None


def test_the_report_site_shows_the_server_section_and_diagnoses_with_it(tmp_path):
    from servebench.output.site import KvOptions, SiteOptions, build_site, load_runs

    recs = fifo_records([i * 0.2 for i in range(150)], cap=8, service_s=3.0)
    plain = [{k: v for k, v in r.items() if k != "_admitted"} for r in recs]
    rundir.write_run(tmp_path / "run", plain, metadata={"kind": "servebench load"},
                     server_metrics=scrapes_of(recs, kv_full_at=40.0, preempt_every_s=None).samples())
    runs = load_runs(tmp_path / "run")
    assert runs[0].server_metrics is not None and "server_metrics.parquet" in runs[0].files
    files = build_site(runs, SiteOptions(kv=KvOptions(model="llama-3.1-8b", budget_gib=8)))
    page = next(v.decode() for k, v in files.items() if k.startswith("run-"))
    assert 'id="server_metrics"' in page and "The server over time" in page
    assert "Queueing, from the server&#x27;s own metrics" in page or "Queueing, from the server's own metrics" in page


@pytest.mark.parametrize("workers", [1, 2])
def test_a_run_stopped_by_sigterm_keeps_the_scrapes_it_made(tmp_path, workers):
    """SIGTERM to the command (one process, or a coordinator with worker processes): the records gathered and the
    server's scrapes until then are written, the scraper process is stopped, and the samples sit on the run's clock."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from processes import stop

    server = QueueServer(cap=1, service_s=5.0)  # one request runs, the rest wait: the run is cut midway
    out = tmp_path / "run"
    with serve_in_background(server.app) as url:
        proc = subprocess.Popen([sys.executable, "-m", "servebench", "load", url, "--rate", "20", "--arrival",
                                 "constant", "--requests", "4", "--output-tokens", "50", "-o", str(out),
                                 "--metrics-interval-s", "0.1", "--workers", str(workers)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "COLUMNS": "120"})
        try:
            for _ in range(600):  # until every request is on the server, scraped a few times (bounded: 30 s)
                if server.requests >= 4 or proc.poll() is not None:
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            output = proc.communicate(timeout=30)[0].decode()
        finally:
            stop(proc)
    assert proc.returncode == 143, output
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["interrupted_by"] == "SIGTERM" and meta["server_metrics"]["file"] == "server_metrics.parquet"
    samples = read_samples(out / "server_metrics.parquet")
    t, waiting = gauge_series(samples, "vllm:num_requests_waiting")
    assert waiting.max() >= 2 and t.min() < 0.5  # the queue, from the first scrape (before the first request) on



def test_a_broken_server_metrics_file_gets_one_line_naming_row_and_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from servebench.errors import InputFormatError

    good = {"t_s": [0.0, 1.0], "endpoint": ["u", "u"], "metric": ["m", "m"], "family": ["m", "m"],
            "type": ["gauge", "gauge"], "labels": ["{}", "{}"], "value": [1.0, float("nan")]}
    cases = [({k: v for k, v in good.items() if k != "labels"}, "no column 'labels'"),
             ({**good, "labels": ["{}", "not json"]}, "row 2, field 'labels'"),
             ({**good, "t_s": [0.0, float("inf")]}, "row 2, field 't_s'"),
             ({**good, "metric": ["m", None]}, "row 2, field 'metric'"),
             ({**good, "value": ["1", "2"]}, "column 'value' must be numbers")]
    for columns, message in cases:
        path = tmp_path / "server_metrics.parquet"
        pq.write_table(pa.table(columns), path)
        with pytest.raises(InputFormatError, match=message):
            read_samples(path)
    pq.write_table(pa.table(good), tmp_path / "server_metrics.parquet")
    back = read_samples(tmp_path / "server_metrics.parquet")  # plain strings read as well as dictionaries
    assert len(back.series) == 1 and back.t_s.tolist() == [0.0, 1.0] and math.isnan(back.value[1])
    (tmp_path / "server_metrics.parquet").write_bytes(b"junk")
    with pytest.raises(InputFormatError, match="cannot read as Parquet"):
        read_samples(tmp_path / "server_metrics.parquet")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b:c", "d_total"]), st.dictionaries(
    st.sampled_from(["engine", "le", "model_name"]), st.text(max_size=5), max_size=2),
    st.floats(allow_nan=False, width=32)), min_size=1, max_size=40))
def test_samples_written_read_back_are_the_same(tmp_path_factory, rows):
    log = SampleLog()
    for i, (name, labels, value) in enumerate(rows):
        log.add(i * 0.5, Series("http://e/metrics", name, name.removesuffix("_total"), "gauge", labels_key(labels)),
                value)
    path = tmp_path_factory.mktemp("s") / "server_metrics.parquet"
    samples = log.samples()
    write_samples(path, samples)
    back = read_samples(path)
    assert back.series == samples.series and back.series_index.tolist() == samples.series_index.tolist()
    assert back.value.tolist() == samples.value.tolist()


def test_a_full_preempting_cache_outranks_the_records_own_decode_reading():
    # TPOT grows with the batch (each step slows as it fills): the records alone read decode; the server's
    # metrics show its KV cache full and preempting, which also slows every step: the server's evidence decides
    recs, free = [], [0.0] * 8
    arrivals = [i * 1.5 for i in range(40)] + [60.0 + i * 0.1 for i in range(150)]  # light, then a burst
    for i, a in enumerate(arrivals):
        adm = max(a, free.pop(free.index(min(free))))
        running = 8 - sum(f <= adm for f in free)  # busy seats when this request is admitted
        end = adm + 0.05 + 19 * 0.02 * (1 + running)
        free.append(end)
        recs.append({"request_id": f"r{i}", "start": a, "first_token": adm + 0.05, "end": end, "status": "success",
                     "prompt_tokens": 100, "output_tokens": 20, "_admitted": adm})
    assert diagnose_without_admitted(recs, None).limit == "decode"
    v = diagnose_without_admitted(recs, scrapes_of(recs, kv_full_at=2.0, preempt_every_s=2.0))
    assert v.limit == "kv_memory", v.summary
    assert "vllm:num_preemptions_total increase" in " ".join(v.headline.evidence)
