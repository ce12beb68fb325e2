"""Faithful imports (issue 33, section 5): GuideLLM's lost requests are warned; AIPerf's raw export keeps token times."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from servebench.analysis.summary import build_report
from servebench.records.importers import import_bytes
from servebench.records.loaders import to_table

DATA = Path(__file__).resolve().parent / "data" / "importers"


def guidellm(**state: int) -> dict:
    doc = json.loads((DATA / "guidellm-0.8.1-clean.json").read_text())
    doc["benchmarks"][0]["scheduler_state"].update(state)
    return doc


def warnings_of(doc: dict) -> list[str]:
    return import_bytes(json.dumps(doc).encode(), "g.json", "guidellm").warnings


def test_guidellm_requests_created_but_never_processed_are_warned_with_their_count():
    """GuideLLM 0.8.1 at 10 and 1,000 req/s: created 100, processed 99, none cancelled; 99 imported, 1 lost."""
    ws = warnings_of(guidellm(created_requests=41))  # the file lists and processed 40, all successful
    lost = [w for w in ws if "never processed or cancelled" in w]
    assert len(lost) == 1 and lost[0].startswith("GuideLLM: 1 request(s) created") and "= 1" in lost[0]
    ws = warnings_of(guidellm(created_requests=100, processed_requests=99, successful_requests=99,
                              cancelled_requests=0))
    assert any("1 request(s) created but never processed or cancelled (created 100 - processed 99 = 1)" in w
               for w in ws)


def test_guidellm_counts_that_add_up_are_not_warned():
    assert not any("never processed" in w for w in warnings_of(guidellm()))
    errors = json.loads((DATA / "guidellm-0.8.1-errors.json").read_text())  # 100 = 30 + 7 + 63, processed 100
    assert not any("never processed" in w or "more request(s) finished" in w for w in warnings_of(errors))


def test_guidellm_processed_without_its_cancelled_counts_them_apart():
    """Where processed leaves the cancelled out, created - processed - cancelled is what is missing."""
    ws = warnings_of(guidellm(created_requests=50, processed_requests=40, cancelled_requests=7))
    assert any("3 request(s) created but never processed or cancelled (created 50 - processed 40 - cancelled 7 = 3)"
               in w for w in ws)


# --------------------------------------------------------------------------- AIPerf raw export


def raw_export(records_lines: list[dict]) -> list[dict]:
    """Build profile_export_raw.jsonl lines (AIPerf's RawRecordInfo) for the requests of a records export.

    Each line keeps the metadata, and its responses are what the server streamed: a role chunk, one content
    chunk per server token at start + TTFT + the inter-chunk gaps (perf_counter ns after start_perf_ns), then
    the usage chunk and [DONE] at start + request_latency.
    """
    out = []
    for k, line in enumerate(records_lines):
        m = line["metrics"]
        start_perf = 10_000_000_000 + k * 7_000_000_000
        ttft_ns = round(m["time_to_first_token"]["value"] * 1e6)
        at = [ttft_ns]
        for gap_ms in m["inter_chunk_latency"]["value"]:
            at.append(at[-1] + round(gap_ms * 1e6))
        end_ns = max(at[-1], round(m["request_latency"]["value"] * 1e6))

        def sse(at_ns: int, payload: object) -> dict:
            value = payload if isinstance(payload, str) else json.dumps(payload)
            return {"perf_ns": start_perf + at_ns, "packets": [{"name": "data", "value": value}]}

        responses = [sse(max(0, ttft_ns - 1000), {"choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
        responses += [sse(t, {"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}) for i, t in enumerate(at)]
        usage = {"prompt_tokens": m["usage_prompt_tokens"]["value"], "completion_tokens": len(at)}
        responses += [sse(end_ns, {"choices": [], "usage": usage}), sse(end_ns, "[DONE]")]
        out.append({"metadata": copy.deepcopy(line["metadata"]), "start_perf_ns": start_perf,
                    "payload": {"model": "mock-llama-8b", "stream": True, "max_completion_tokens": 64},
                    "status": 200, "responses": responses})
    return out


def test_aiperf_raw_export_carries_token_times_like_the_records_export():
    lines = [json.loads(x) for x in (DATA / "aiperf-0.13.0-clean-icl.jsonl").read_text().splitlines()]
    records = import_bytes((DATA / "aiperf-0.13.0-clean-icl.jsonl").read_bytes(), "profile_export.jsonl",
                           "aiperf:tokens=server")
    body = "".join(json.dumps(x) + "\n" for x in raw_export(lines)).encode()
    raw = import_bytes(body, "profile_export_raw.jsonl", "aiperf")
    t_raw, ws, we = to_table(raw)
    t_rec, ws2, we2 = to_table(records)
    by_id = {r["request_id"]: r for r in t_rec.to_dicts()}
    for row in t_raw.to_dicts():
        want = by_id[row["request_id"]]
        assert row["token_times"] is not None and len(row["token_times"]) == len(want["token_times"])
        assert row["token_times"] == pytest.approx(want["token_times"], abs=2e-6)
    itl_raw = build_report(t_raw, ws, we).itl_s
    itl_rec = build_report(t_rec, ws2, we2).itl_s
    assert itl_raw is not None and itl_raw.n == itl_rec.n == 2498
    assert itl_raw.mean == pytest.approx(itl_rec.mean, abs=1e-6)
    assert any("raw export's content chunks" in w and "40 success(es) carried" in w for w in raw.warnings)


def test_aiperf_raw_chunks_that_do_not_match_the_servers_count_are_left_out_and_said():
    line = raw_export([json.loads((DATA / "aiperf-0.13.0-clean-icl.jsonl").read_text().splitlines()[0])])[0]
    for r in line["responses"]:
        if '"usage"' in r["packets"][0]["value"]:
            r["packets"][0]["value"] = json.dumps({"choices": [], "usage": {"prompt_tokens": 5,
                                                                            "completion_tokens": 99}})
    loaded = import_bytes((json.dumps(line) + "\n").encode(), "raw.jsonl", "aiperf")
    table, _, _ = to_table(loaded)
    assert table.to_dicts()[0].get("token_times") is None
    assert any("1 not, their chunks do not match" in w for w in loaded.warnings)
