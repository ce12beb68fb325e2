"""Importers: real GuideLLM, AIPerf and llmperf exports (trimmed), hand-made vLLM and GenAI-Perf files.

Where the tool's own summary is in the file (or next to it), the imported records must reproduce it:
counts exactly, means within rounding.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from faulty_server import faulty_run
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.errors import InputFormatError
from servebench.records.importers import FORMATS, ImportOptions, detect, import_bytes, import_runs, parse_format
from servebench.records.loaders import read_bytes, read_path, to_table
from servebench.records.table import STATUSES

DATA = Path(__file__).resolve().parent / "data" / "importers"
SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"

SAMPLES = {
    "guidellm-0.8.1-clean.json": "guidellm",
    "guidellm-0.8.1-errors.json": "guidellm",
    "guidellm-0.8.1-clean-head.csv": "guidellm",
    "vllm-serve-detailed.json": "vllm",
    "vllm-old-benchmark-serving.json": "vllm",
    "vllm-append-result.json": "vllm",
    "aiperf-0.13.0-clean-profile_export.jsonl": "aiperf",
    "aiperf-0.13.0-clean-profile_export_aiperf.json": "aiperf",
    "aiperf-errors-handmade.jsonl": "aiperf",
    "aiperf-statuses-handmade.jsonl": "aiperf",
    "guidellm-statuses-handmade.json": "guidellm",
    "genai-perf-profile_export.json": "genai-perf",
    "llmperf-individual.json": "llmperf",
    "llmperf-summary.json": "llmperf",
}


def load(name: str, fmt: str = "auto"):
    return read_path(DATA / name, fmt)


def table(name: str, fmt: str = "auto"):
    loaded = load(name, fmt)
    t, _, _ = to_table(loaded)
    return loaded, t


def status_counts(t) -> dict[str, int]:
    names = np.array(STATUSES, dtype=object)[t.status]
    return {s: int((names == s).sum()) for s in STATUSES if (names == s).any()}


def doc(name: str):
    return json.loads((DATA / name).read_text())


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("name,fmt", sorted(SAMPLES.items()))
def test_detect_picks_the_right_importer(name, fmt):
    assert detect((DATA / name).read_bytes(), name) == fmt


@pytest.mark.parametrize("path", [SAMPLE / "r1_r4.json", SAMPLE / "requests_sample.csv"])
def test_canonical_files_stay_with_the_canonical_readers(path):
    data = path.read_bytes()
    assert detect(data, path.name) is None
    assert read_bytes(data, path.name).format in ("json", "csv")


def test_every_format_has_an_importer_and_options_parse():
    assert set(FORMATS) == {"guidellm", "vllm", "genai-perf", "aiperf", "llmperf"}
    assert parse_format("GenAI_Perf:run=2") == ("genai-perf", parse_format("genai-perf:run=2")[1])
    with pytest.raises(InputFormatError, match="outside_window"):
        parse_format("guidellm:outside_window=keep")
    with pytest.raises(InputFormatError, match="unknown format option 'speed'"):
        parse_format("guidellm:speed=1")
    for bad, field in (({"run": -1}, "run=-1"), ({"run": True}, "run=True"),
                       ({"outside_window": "keep"}, "outside_window='keep'"), ({"tokens": "both"}, "tokens='both'")):
        with pytest.raises(InputFormatError, match=f"import option {re.escape(field)}"):
            ImportOptions(**bad)


def test_explicit_format_forces_the_importer_and_says_when_it_does_not_fit():
    data = (DATA / "llmperf-individual.json").read_bytes()
    assert read_bytes(data, "x.json", "llmperf").format == "llmperf"
    with pytest.raises(InputFormatError, match=r"x\.json: does not look like a vLLM bench serve export"):
        read_bytes(data, "x.json", "vllm")
    with pytest.raises(InputFormatError, match="unknown format 'nope'"):
        read_bytes(data, "x.json", "nope")


def test_a_file_no_importer_knows_keeps_the_canonical_error():
    with pytest.raises(InputFormatError, match="missing column"):
        read_bytes(b'[{"foo": 1}]', "odd.json")


# --------------------------------------------------------------------------- GuideLLM


def test_guidellm_errors_keeps_every_listed_request_and_marks_the_cooldown_one():
    loaded, t = table("guidellm-0.8.1-errors.json")
    assert loaded.format == "guidellm" and len(t) == 41  # listed: 30 successful, 7 errored, 4 incomplete
    # the 7 errored are httpx ReadTimeouts: status timeout, error text kept
    assert status_counts(t) == {"success": 30, "timeout": 7, "cancelled": 4}
    assert set(t.error[t.status == STATUSES.index("timeout")]) == {"ReadTimeout('')"}
    assert set(t.error[t.status == STATUSES.index("cancelled")]) == {"Request was cancelled"}
    assert list(t.slice).count("cooldown") == 1 and list(t.slice).count("measured") == 40
    # the partial streams of incomplete requests stay as wasted work
    cancelled_tokens = t.output_tokens[(t.status == STATUSES.index("cancelled")) & (t.output_tokens >= 0)]
    assert sorted(cancelled_tokens.tolist()) == [18, 34, 80]


def test_guidellm_measured_records_reproduce_request_totals_and_means():
    bench = doc("guidellm-0.8.1-errors.json")["benchmarks"][0]
    totals = bench["metrics"]["request_totals"]
    assert (totals["successful"], totals["errored"], totals["incomplete"]) == (30, 7, 3)
    _, t = table("guidellm-0.8.1-errors.json")
    measured = t.take(t.slice == "measured")
    c = status_counts(measured)
    assert (c["success"], c["timeout"], c["cancelled"]) == (30, 7, 3)
    ok = measured.take(measured.is_success)
    ttft_ms = (ok.first_token - ok.start) * 1000
    assert ttft_ms.mean() == pytest.approx(bench["metrics"]["time_to_first_token_ms"]["successful"]["mean"], abs=1e-3)
    latency = ok.end - ok.start
    assert latency.mean() == pytest.approx(bench["metrics"]["request_latency"]["successful"]["mean"], abs=1e-6)
    out_total = bench["metrics"]["output_token_count"]["successful"]["total_sum"]  # a float sum, 2116.0000000000005
    assert int(ok.output_tokens.sum()) == pytest.approx(out_total)


def test_guidellm_warning_explains_which_count_the_records_match():
    loaded = load("guidellm-0.8.1-errors.json")
    text = " ".join(loaded.warnings)
    assert "listed records 30/7/4" in text
    assert "metrics.request_totals 30/7/3" in text and "scheduler_metrics.requests_made 30/7/14" in text
    assert "40 that started inside the measured window match metrics.request_totals" in text
    assert "cancelled_requests = 63" in text
    assert loaded.metadata["tool_version"] == "0.8.1" and loaded.metadata["runs"] == 1


def test_guidellm_drop_leaves_out_requests_outside_the_measured_window():
    loaded = import_bytes((DATA / "guidellm-0.8.1-errors.json").read_bytes(), "e.json", "guidellm:outside_window=drop")
    t, _, _ = to_table(loaded)
    assert len(t) == 40 and not t.has_slices
    assert any("dropped" in w for w in loaded.warnings)


def test_guidellm_clean_reproduces_its_summary_and_gets_no_slices():
    loaded, t = table("guidellm-0.8.1-clean.json")
    bench = doc("guidellm-0.8.1-clean.json")["benchmarks"][0]
    assert status_counts(t) == {"success": 40} == {"success": bench["metrics"]["request_totals"]["successful"]}
    assert not t.has_slices
    assert ((t.first_token - t.start) * 1000).mean() == pytest.approx(
        bench["metrics"]["time_to_first_token_ms"]["successful"]["mean"], abs=1e-3)
    assert not any("holds" in w for w in loaded.warnings)


def test_guidellm_several_benchmarks_pick_one_and_warn():
    d = doc("guidellm-0.8.1-clean.json")
    second = json.loads(json.dumps(d["benchmarks"][0]))
    second["requests"]["successful"] = second["requests"]["successful"][:5]
    d["benchmarks"].append(second)
    data = json.dumps(d).encode()
    runs = import_runs(data, "two.json")
    assert [r.rows.n for r in runs] == [40, 5] and [r.metadata["run_index"] for r in runs] == [0, 1]
    first = import_bytes(data, "two.json")
    assert first.rows.n == 40 and "holds 2 benchmarks" in first.warnings[0]
    assert import_bytes(data, "two.json", "guidellm:run=1").rows.n == 5
    assert read_bytes(data, "two.json", "guidellm:run=1").rows.n == 5
    assert read_bytes(data, "two.json", "auto", ImportOptions(run=1)).rows.n == 5  # options as an object
    assert import_bytes(data, "two.json", "guidellm:run=1", ImportOptions(run=0)).rows.n == 40  # they win
    with pytest.raises(InputFormatError, match="run 2 does not exist; the file holds 2 benchmark"):
        import_bytes(data, "two.json", options=ImportOptions(run=2))


def test_guidellm_csv_is_explained_not_misread():
    with pytest.raises(InputFormatError, match="aggregate CSV.*import the JSON report"):
        load("guidellm-0.8.1-clean-head.csv")


def test_guidellm_older_flat_records_are_read():
    d = {"benchmarks": [{"type_": "generative_benchmark", "requests": {
        "successful": [{"request_id": "a", "start_time": 100.0, "first_token_time": 100.2, "end_time": 101.0,
                        "prompt_tokens": 50, "output_tokens": 9}],
        "errored": [{"request_id": "b", "start_time": 100.5, "end_time": 100.6, "prompt_tokens": 40,
                     "output_tokens": None, "error": "HTTPStatusError('500')"}],
        "incomplete": []}}]}
    t, _, _ = to_table(import_bytes(json.dumps(d).encode(), "old.json"))
    assert t.to_dicts() == [
        {"request_id": "a", "start": 100.0, "first_token": 100.2, "end": 101.0, "status": "success",
         "prompt_tokens": 50, "output_tokens": 9},
        {"request_id": "b", "start": 100.5, "end": 100.6, "status": "failed", "prompt_tokens": 40,
         "error": "HTTPStatusError('500')"}]


def test_guidellm_malformed_record_names_file_and_field():
    d = doc("guidellm-0.8.1-clean.json")
    d["benchmarks"][0]["requests"]["successful"][3]["info"]["timings"]["request_start"] = "soon"
    with pytest.raises(InputFormatError, match=r"bad\.json: benchmarks\[0\]\.requests\.successful\[3\]"
                                               r"\.info\.timings\.request_start: 'soon' is not a number"):
        import_bytes(json.dumps(d).encode(), "bad.json", "guidellm")


# --------------------------------------------------------------------------- vLLM


def test_vllm_records_reproduce_the_tools_summary():
    res = doc("vllm-serve-detailed.json")
    loaded, t = table("vllm-serve-detailed.json")
    c = status_counts(t)
    assert c["success"] == res["completed"] == 4
    assert len(t) - c["success"] == res["failed"] == 4
    assert c == {"success": 4, "failed": 2, "timeout": 1, "rejected": 1}
    ok = t.take(t.is_success)
    assert ((ok.first_token - ok.start) * 1000).mean() == pytest.approx(res["mean_ttft_ms"], abs=1e-6)
    assert ((ok.end - ok.start) * 1000).mean() == pytest.approx(res["mean_e2el_ms"], abs=1e-6)
    multi = ok.output_tokens > 1
    tpot = (ok.end[multi] - ok.first_token[multi]) / (ok.output_tokens[multi] - 1)
    assert tpot.mean() * 1000 == pytest.approx(res["mean_tpot_ms"], abs=1e-6)
    assert int(ok.prompt_tokens.sum()) == res["total_input_tokens"]
    assert int(ok.output_tokens.sum()) == res["total_output_tokens"]
    assert loaded.metadata["tool_summary"]["completed"] == 4 and loaded.metadata["clock"].startswith("relative")
    assert any("perf_counter" in w for w in loaded.warnings)


def test_vllm_failures_keep_their_error_and_partial_stream():
    _, t = table("vllm-serve-detailed.json")
    rows = t.to_dicts()
    assert rows[3] == {"start": 5000.75, "end": 5000.75, "status": "failed", "prompt_tokens": 300,
                       "error": "Internal Server Error"}
    assert rows[4]["error"].startswith("aiohttp.client_exceptions.ClientPayloadError")
    assert rows[4]["end"] == pytest.approx(5001.0 + 0.130 + 4 * 0.015)
    assert "output_tokens" not in rows[4]  # vLLM stores 0 for failures: unknown, not zero
    assert rows[5]["status"] == "timeout" and rows[7]["status"] == "rejected"


def test_vllm_old_file_without_start_times_or_latencies_says_so():
    loaded, t = table("vllm-old-benchmark-serving.json")
    res = doc("vllm-old-benchmark-serving.json")
    text = " ".join(loaded.warnings)
    assert "no 'start_times'" in text and "end = start + ttft + sum(itls)" in text
    assert "successful_requests_per_second" in loaded.metadata["unavailable_metrics"]
    assert (t.start == 0).all()
    ok = t.take(t.is_success)
    assert ((ok.first_token - ok.start) * 1000).mean() == pytest.approx(res["mean_ttft_ms"], abs=1e-6)
    assert ok.end[1] == pytest.approx(0.140 + 19 * 0.016)


def test_vllm_append_result_lines_are_runs():
    data = (DATA / "vllm-append-result.json").read_bytes()
    runs = import_runs(data, "a.json")
    assert [r.rows.n for r in runs] == [3, 5]
    assert read_bytes(data, "a.json", "vllm:run=1").rows.n == 5
    assert "holds 2 results" in read_bytes(data, "a.json").warnings[0]


def test_vllm_summary_only_and_misaligned_arrays_are_clear_errors():
    res = doc("vllm-serve-detailed.json")
    summary_only = {k: v for k, v in res.items() if not isinstance(v, list)}
    with pytest.raises(InputFormatError, match="without --save-detailed"):
        import_bytes(json.dumps(summary_only).encode(), "s.json")
    res["itls"] = res["itls"][:-1]
    with pytest.raises(InputFormatError, match=r"m\.json: 'itls' has 7 entries but 'ttfts' has 8"):
        import_bytes(json.dumps(res).encode(), "m.json", "vllm")


def test_vllm_disagreeing_counts_are_warned():
    res = doc("vllm-serve-detailed.json")
    res["completed"] = 5
    loaded = import_bytes(json.dumps(res).encode(), "c.json")
    assert any("completed=5, but 4" in w for w in loaded.warnings)


# --------------------------------------------------------------------------- AIPerf


def test_aiperf_records_reproduce_the_aggregate_json():
    agg = doc("aiperf-0.13.0-clean-profile_export_aiperf.json")
    loaded, t = table("aiperf-0.13.0-clean-profile_export.jsonl")
    assert status_counts(t) == {"success": int(agg["request_count"]["avg"])}
    ttft_ms = (t.first_token - t.start) * 1000
    assert ttft_ms.mean() == pytest.approx(agg["time_to_first_token"]["avg"], abs=1e-3)
    assert ((t.end - t.start) * 1000).mean() == pytest.approx(agg["request_latency"]["avg"], abs=1e-3)
    assert int(t.output_tokens.sum()) == agg["output_sequence_length"]["sum"] == 1512
    assert int(t.prompt_tokens.sum()) == agg["input_sequence_length"]["sum"]
    tpot_ms = (t.end - t.first_token) / (t.output_tokens - 1) * 1000
    assert tpot_ms.mean() == pytest.approx(agg["inter_token_latency"]["avg"], abs=1e-3)
    assert all(isinstance(r, str) for r in t.request_id)


def test_aiperf_error_lines_keep_status_cause_and_phase():
    loaded, t = table("aiperf-errors-handmade.jsonl")
    assert status_counts(t) == {"success": 2, "failed": 1, "timeout": 1, "cancelled": 1}
    assert list(t.slice) == ["warmup", "measured", "measured", "measured", "measured"]
    assert t.error[2].startswith("HTTP 500 Internal Server Error:") and t.prompt_tokens[2] == 240
    assert t.error[4].startswith("HTTP 499 RequestCancellationError")
    assert any("discards the partial stream of cancelled requests" in w for w in loaded.warnings)
    dropped = import_bytes((DATA / "aiperf-errors-handmade.jsonl").read_bytes(), "e.jsonl",
                           options=ImportOptions(outside_window="drop"))
    assert dropped.rows.n == 4


def test_aiperf_aggregate_and_malformed_lines_are_clear_errors():
    with pytest.raises(InputFormatError, match="aggregate profile_export_aiperf.json.*profile_export.jsonl"):
        load("aiperf-0.13.0-clean-profile_export_aiperf.json")
    lines = (DATA / "aiperf-errors-handmade.jsonl").read_text().splitlines()
    bad = json.loads(lines[1])
    bad["metadata"]["request_end_ns"] = "later"
    lines[1] = json.dumps(bad)
    with pytest.raises(InputFormatError, match=r"x\.jsonl: line 2: metadata\.request_end_ns: 'later' is not a number"):
        import_bytes("\n".join(lines).encode(), "x.jsonl", "aiperf")


# --------------------------------------------------------------------------- llmperf


def test_llmperf_records_reproduce_its_summary_without_inventing_timestamps():
    summary = doc("llmperf-summary.json")
    loaded, t = table("llmperf-individual.json")
    assert len(t) == summary["results_num_completed_requests"] == 40
    assert status_counts(t) == {"success": 40} and summary["results_number_errors"] == 0
    assert (t.start == 0).all()  # each request on its own clock: no invented arrival times
    assert (t.first_token - t.start).mean() == pytest.approx(summary["results_ttft_s_mean"], abs=1e-9)
    assert (t.end - t.start).mean() == pytest.approx(summary["results_end_to_end_latency_s_mean"], abs=1e-9)
    assert t.output_tokens.mean() == pytest.approx(summary["results_number_output_tokens_mean"])
    assert int(t.prompt_tokens.min()) == int(summary["results_number_input_tokens_min"])  # "176", a string
    assert statistics.median((t.end - t.start).tolist()) == pytest.approx(
        summary["results_end_to_end_latency_s_quantiles_p50"], abs=1e-9)
    unavailable = loaded.metadata["unavailable_metrics"]
    assert "successful_requests_per_second" in unavailable and "active_requests" in unavailable
    assert loaded.metadata["clock"] == "per-request (no timestamps)"
    assert "no timestamps" in loaded.warnings[0] and "unavailable" in loaded.warnings[0]


def test_llmperf_error_record_is_kept_as_failed():
    items = doc("llmperf-individual.json")[:2]
    items.append({"error_code": 500, "error_msg": '{"error":"boom"}', "inter_token_latency_s": 0,
                  "ttft_s": 0, "end_to_end_latency_s": 0, "request_output_throughput_token_per_s": 0,
                  "number_total_tokens": 0, "number_output_tokens": 0, "number_input_tokens": 0})
    t, _, _ = to_table(import_bytes(json.dumps(items).encode(), "i.json"))
    assert t.to_dicts()[2] == {"start": 0.0, "end": 0.0, "status": "failed", "error": 'HTTP 500: {"error":"boom"}'}


def test_llmperf_summary_and_malformed_values_are_clear_errors():
    with pytest.raises(InputFormatError, match="summary.json.*individual_responses"):
        load("llmperf-summary.json")
    items = doc("llmperf-individual.json")
    items[5]["end_to_end_latency_s"] = "fast"
    with pytest.raises(InputFormatError, match=r"i\.json: \[5\]\.end_to_end_latency_s: 'fast' is not a number"):
        import_bytes(json.dumps(items).encode(), "i.json", "llmperf")


# --------------------------------------------------------------------------- GenAI-Perf


def test_genai_perf_first_token_is_the_first_chunk_with_content():
    loaded, t = table("genai-perf-profile_export.json")
    rows = t.to_dicts()
    assert rows[0]["first_token"] - rows[0]["start"] == pytest.approx(0.120)  # role-only chunk at 0.100 skipped
    assert rows[0]["end"] - rows[0]["start"] == pytest.approx(0.150)  # last content, not usage/[DONE]
    assert (rows[0]["output_tokens"], rows[0]["prompt_tokens"]) == (3, 12)  # from the usage report
    assert rows[1]["output_tokens"] == 4 and rows[1]["end"] - rows[1]["start"] == pytest.approx(0.160)
    # an error event {"message": "server overloaded", "code": 503}: an admission refusal, as from `load`
    assert (rows[2]["status"], rows[2]["error"]) == ("rejected", "server overloaded")
    assert (rows[3]["status"], rows[3]["error"]) == ("failed", "no response with content")
    text = " ".join(loaded.warnings)
    assert "holds 2 experiments" in text and "number of responses with content" in text
    assert "GenAI-Perf skips them, servebench keeps them as failed" in text


def test_genai_perf_experiments_are_runs():
    data = (DATA / "genai-perf-profile_export.json").read_bytes()
    runs = import_runs(data, "p.json")
    assert [r.rows.n for r in runs] == [4, 3]
    assert [r.metadata["experiment_value"] for r in runs] == [1, 4]
    assert read_bytes(data, "p.json", "genai-perf:run=1").rows.n == 3


def test_genai_perf_misaligned_responses_name_the_request():
    d = doc("genai-perf-profile_export.json")
    d["experiments"][0]["requests"][1]["response_timestamps"].pop()
    with pytest.raises(InputFormatError, match=r"g\.json: experiments\[0\]\.requests\[1\]: 5 response_timestamps "
                                               r"but 6 response_outputs"):
        import_bytes(json.dumps(d).encode(), "g.json")


# --------------------------------------------------------------------------- every sample, through the CLI


@pytest.mark.parametrize("name", [n for n in sorted(SAMPLES) if "summary" not in n and "aiperf.json" not in n
                                  and not n.endswith(".csv")])
def test_every_sample_validates_and_keeps_every_request(name):
    loaded = load(name)
    t, ws, we = to_table(loaded)
    assert len(t) == loaded.rows.n > 0 and ws <= we
    assert loaded.warnings and loaded.metadata["tool"] == SAMPLES[name]


def test_cli_summarize_imports_with_format_and_shows_warnings():
    from typer.testing import CliRunner

    from servebench.cli.core import app
    result = CliRunner().invoke(app, ["summarize", str(DATA / "guidellm-0.8.1-errors.json"),
                                      "--format", "guidellm:outside_window=drop", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["summary"]["requests"] == 40 and out["summary"]["successes"] == 30
    assert any("request counts disagree" in w for w in out["warnings"])


def test_vllm_non_streaming_success_gets_first_token_at_end_not_at_start():
    res = doc("vllm-serve-detailed.json")
    res["ttfts"][0] = 0.0  # a non-streaming endpoint never sets ttft
    loaded = import_bytes(json.dumps(res).encode(), "n.json")
    t, _, _ = to_table(loaded)
    assert t.status[0] == STATUSES.index("success") and t.first_token[0] == t.end[0]
    assert any("no TTFT (a non-streaming endpoint)" in w for w in loaded.warnings)


_request = st.tuples(
    st.floats(0, 100, allow_nan=False),                       # start offset
    st.floats(0.001, 2, allow_nan=False),                     # ttft
    st.lists(st.floats(0.001, 0.1, allow_nan=False), max_size=6),  # itls
    st.integers(1, 500),                                      # input len
    st.sampled_from(["", "", "", "Internal Server Error", "Too Many Requests",
                     "Traceback (most recent call last):\nasyncio.exceptions.TimeoutError"]),
)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.lists(_request, min_size=1, max_size=12))
def test_vllm_import_keeps_every_request_and_the_tools_counts(reqs):
    ok = [r for r in reqs if not r[4]]
    res = {
        "completed": len(ok), "failed": len(reqs) - len(ok),
        "start_times": [1000 + r[0] for r in reqs],
        "ttfts": [0.0 if r[4] else r[1] for r in reqs],
        "itls": [[] if r[4] else r[2] for r in reqs],
        "latencies": [0.0 if r[4] else r[1] + sum(r[2]) for r in reqs],
        "input_lens": [r[3] for r in reqs],
        "output_lens": [0 if r[4] else len(r[2]) + 1 for r in reqs],
        "errors": [r[4] for r in reqs],
    }
    loaded = import_bytes(json.dumps(res).encode(), "p.json")
    t, _, _ = to_table(loaded, 0.0, 2000.0)  # one failed request alone has a zero-length default window
    assert len(t) == len(reqs)
    assert int(t.is_success.sum()) == res["completed"]
    assert not any("completed=" in w or "failed=" in w for w in loaded.warnings)
    if ok:
        got = (t.first_token[t.is_success] - t.start[t.is_success]).mean()
        assert got == pytest.approx(statistics.fmean(r[1] for r in ok), abs=1e-9)
    names = np.array(STATUSES, dtype=object)[t.status]
    assert all((names[i] == "success") == (not r[4]) for i, r in enumerate(reqs))


def test_guidellm_errored_shapes_become_the_right_status_with_partial_tokens_kept():
    d = doc("guidellm-0.8.1-errors.json")
    errored = d["benchmarks"][0]["requests"]["errored"]
    killed, http500, busy = errored[0], errored[1], errored[2]
    killed["info"]["error"] = "RemoteProtocolError('peer closed connection without sending complete message body')"
    killed["output_tokens"] = 52
    killed["info"]["timings"]["first_token_iteration"] = killed["info"]["timings"]["request_start"] + 0.1
    http500["info"]["error"] = "HTTPStatusError(\"Server error '500 Internal Server Error' for url 'x'\")"
    busy["info"]["error"] = "HTTPStatusError(\"Client error '429 Too Many Requests' for url 'x'\")"
    t, _, _ = to_table(import_bytes(json.dumps(d).encode(), "k.json"))
    by_id = {r.get("request_id"): r for r in t.to_dicts()}
    k = by_id[killed["request_id"]]
    assert (k["status"], k["output_tokens"]) == ("failed", 52) and "first_token" in k
    assert by_id[http500["request_id"]]["status"] == "failed"
    assert by_id[busy["request_id"]]["status"] == "rejected"


# --------------------------------------------------------------------------- one status vocabulary


def _by_id(name: str) -> dict:
    t, _, _ = to_table(load(name))
    return {r["request_id"]: r for r in t.to_dicts()}


def test_the_same_server_events_get_the_same_status_from_load_guidellm_and_aiperf():
    """A 503 queue_full is rejected and a server deadline mid-stream is a timeout, whoever measured it."""
    load_full = faulty_run("queue_full").outcomes[0]
    load_late = faulty_run("error_event", chunks=7).outcomes[0]
    guidellm = _by_id("guidellm-statuses-handmade.json")
    aiperf = _by_id("aiperf-statuses-handmade.jsonl")
    assert load_full.status == guidellm["req-1"]["status"] == aiperf["req-0"]["status"] == "rejected"
    assert load_late.status == guidellm["req-2"]["status"] == aiperf["req-1"]["status"] == "timeout"
    # and each keeps the tokens streamed before the deadline as wasted work
    assert load_late.output_tokens == guidellm["req-2"]["output_tokens"] == aiperf["req-1"]["output_tokens"] == 7
    assert "queue_full" in load_full.error and "queue_full" in aiperf["req-0"]["error"]
    assert "deadline_exceeded" in load_late.error and "deadline_exceeded" in aiperf["req-1"]["error"]


def test_a_client_read_timeout_is_a_timeout_from_load_and_from_the_real_peer_exports():
    timed = faulty_run("stall", chunks=2, deadline_s=0.4).outcomes[0]
    _, guidellm = table("guidellm-0.8.1-errors.json")  # httpx ReadTimeout (real GuideLLM 0.8.1 export)
    _, aiperf = table("aiperf-errors-handmade.jsonl")  # TimeoutError (AIPerf 0.13.0 shape)
    assert timed.status == "timeout"
    assert "timeout" in status_counts(guidellm) and "timeout" in status_counts(aiperf)


def test_aiperf_stream_that_ended_with_an_error_event_is_not_a_success_and_is_warned():
    loaded = load("aiperf-statuses-handmade.jsonl")
    rec = _by_id("aiperf-statuses-handmade.jsonl")["req-1"]
    assert rec["status"] == "timeout" and rec["error"] == "error event: request ended with timeout: deadline_exceeded"
    assert rec["first_token"] - rec["start"] == pytest.approx(0.100)  # the first content packet
    assert any("counts a stream that ends with an error event as a success: 1 request(s) did, 1 of them shorter "
               "than the max_tokens they asked for" in w for w in loaded.warnings)
    clean = load("aiperf-0.13.0-clean-profile_export.jsonl")
    assert not any("error event" in w for w in clean.warnings)


def test_a_raw_aiperf_success_without_metrics_takes_times_and_tokens_from_its_responses():
    lines = [json.loads(x) for x in (DATA / "aiperf-statuses-handmade.jsonl").read_text().splitlines()]
    raw = lines[1]
    raw["responses"] = [r for r in raw["responses"] if "error" not in r["packets"][0]["value"]]
    t, _, _ = to_table(import_bytes((json.dumps(raw) + "\n" + json.dumps(lines[0])).encode(), "r.jsonl"))
    ok = t.to_dicts()[0]
    assert ok["status"] == "success" and ok["output_tokens"] == 7
    assert ok["first_token"] - ok["start"] == pytest.approx(0.100) and ok["end"] - ok["start"] == pytest.approx(0.220)


@pytest.mark.parametrize("text,status", [
    ("HTTPStatusError(\"Server error '503 Service Unavailable' for url 'x'\")", "rejected"),
    ("HTTPStatusError(\"Client error '429 Too Many Requests' for url 'x'\")", "rejected"),
    ("HTTPStatusError(\"Server error '504 Gateway Timeout' for url 'x'\")", "timeout"),
    ("HTTPStatusError(\"Server error '500 Internal Server Error' for url 'x'\")", "failed"),
    ("RuntimeError('request rejected: queue_full')", "rejected"),
    ("ConnectError('All connection attempts failed')", "failed"),
])
def test_guidellm_errors_follow_the_status_table(text, status):
    d = doc("guidellm-statuses-handmade.json")
    d["benchmarks"][0]["requests"]["errored"][0]["info"]["error"] = text
    t, _, _ = to_table(import_bytes(json.dumps(d).encode(), "s.json"))
    assert {r["request_id"]: r for r in t.to_dicts()}["req-1"]["status"] == status


@pytest.mark.parametrize("code,msg,status", [(503, "Service Unavailable", "rejected"), (429, "", "rejected"),
                                             (504, "", "timeout"), (500, "queue_full", "rejected"),
                                             (500, "boom", "failed")])
def test_llmperf_and_vllm_errors_follow_the_status_table(code, msg, status):
    items = doc("llmperf-individual.json")[:1]
    items.append({"error_code": code, "error_msg": msg, "ttft_s": 0, "end_to_end_latency_s": 0,
                  "number_input_tokens": 0, "number_output_tokens": 0})
    t, _, _ = to_table(import_bytes(json.dumps(items).encode(), "i.json"))
    assert t.to_dicts()[1]["status"] == status
    res = doc("vllm-serve-detailed.json")
    res["errors"][3] = msg or {429: "Too Many Requests", 504: "Gateway Timeout"}[code]
    t, _, _ = to_table(import_bytes(json.dumps(res).encode(), "v.json"))
    assert t.to_dicts()[3]["status"] == status


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name, data", [
    ("deep.json", b"[" * 100_000 + b"]" * 100_000),
    ("deep.jsonl", b'{"a": 1}\n' + b"[" * 100_000 + b"\n"),
    ("bigint.json", b'{"benchmarks": [' + b"9" * 5000 + b"]}"),
    ("bigint.jsonl", b'{"a": 1}\n{"b": ' + b"9" * 5000 + b"}\n"),
])
def test_unreadable_json_is_one_clear_error_for_every_importer(fmt: str, name: str, data: bytes) -> None:
    """Nesting past Python's recursion limit and integers past 4300 digits are input errors, not tracebacks."""
    with pytest.raises(InputFormatError, match=rf"^{name}: (line 2: )?(unreadable JSON|JSON nested too deeply)"):
        import_bytes(data, name, fmt)
