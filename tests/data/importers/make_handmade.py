"""Write the hand-made exports in this folder from the tools' documented formats (run once; provenance only).

vLLM: the keys ``vllm bench serve --save-result --save-detailed`` writes (vllm/benchmarks/serve.py): aligned
per-request arrays plus the summary, here computed with the same formulas vLLM documents (means over
successful requests; TPOT = (latency - ttft) / (output_len - 1) where output_len > 1). Failed requests carry
vLLM's defaults: ttft 0, latency 0, output_lens 0, and the error text (HTTP reason or a traceback).
GenAI-Perf: perf_analyzer's profile_export.json for the OpenAI service kind (SSE text per response).
AIPerf: error lines in the shapes described in /work/shared/peer-exports/README.md (AIPerf 0.13.0).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

DST = Path(__file__).resolve().parent

# (start, ttft, itls, extra_after_last_token, input_len, output_len, error)
VLLM_REQUESTS = [
    (5000.000, 0.120, [0.015] * 9, 0.002, 210, 10, ""),
    (5000.250, 0.140, [0.016] * 19, 0.001, 260, 20, ""),
    (5000.500, 0.110, [], 0.001, 190, 1, ""),
    (5000.750, 0.0, [], None, 300, 0, "Internal Server Error"),
    (5001.000, 0.130, [0.015] * 4, None, 240, 0,
     "Traceback (most recent call last):\n  File \"endpoint_request_func.py\", line 420, in request\n"
     "aiohttp.client_exceptions.ClientPayloadError: Response payload is not completed\n"),
    (5001.100, 0.0, [], None, 250, 0,
     "Traceback (most recent call last):\n  File \"endpoint_request_func.py\", line 380, in request\n"
     "asyncio.exceptions.TimeoutError\n"),
    (5001.200, 0.200, [0.020] * 29, 0.001, 230, 30, ""),
    (5001.300, 0.0, [], None, 220, 0, "Too Many Requests"),
]


def vllm_result(requests, *, detailed_times: bool = True) -> dict:
    ok = [r for r in requests if not r[6]]
    lat = [r[1] + sum(r[2]) + r[3] for r in ok]
    ttfts = [r[1] for r in ok]
    tpots = [(total - r[1]) / (r[5] - 1) for r, total in zip(ok, lat) if r[5] > 1]
    itls = [x for r in ok for x in r[2]]
    ends = [r[0] + total for r, total in zip(ok, lat)]
    duration = max(ends) - min(r[0] for r in requests) + 0.010
    result = {
        "date": "20261129-101500", "endpoint_type": "openai-chat", "backend": "openai-chat", "label": None,
        "model_id": "mock-llama-8b", "tokenizer_id": "mock-llama-8b", "num_prompts": len(requests),
        "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
        "duration": duration, "completed": len(ok), "failed": len(requests) - len(ok),
        "total_input_tokens": sum(r[4] for r in ok), "total_output_tokens": sum(r[5] for r in requests),
        "request_throughput": len(ok) / duration, "request_goodput": None,
        "output_throughput": sum(r[5] for r in requests) / duration,
        "total_token_throughput": (sum(r[4] for r in ok) + sum(r[5] for r in requests)) / duration,
        "input_lens": [r[4] for r in requests], "output_lens": [r[5] for r in requests],
        "ttfts": [r[1] for r in requests], "itls": [r[2] for r in requests],
        "generated_texts": ["x " * r[5] for r in requests], "errors": [r[6] for r in requests],
        "mean_ttft_ms": statistics.fmean(ttfts) * 1000, "median_ttft_ms": statistics.median(ttfts) * 1000,
        "mean_tpot_ms": statistics.fmean(tpots) * 1000, "median_tpot_ms": statistics.median(tpots) * 1000,
        "mean_itl_ms": statistics.fmean(itls) * 1000, "median_itl_ms": statistics.median(itls) * 1000,
        "mean_e2el_ms": statistics.fmean(lat) * 1000, "median_e2el_ms": statistics.median(lat) * 1000,
    }
    if detailed_times:
        full_lat = iter(lat)
        result["latencies"] = [next(full_lat) if not r[6] else 0.0 for r in requests]
        result["start_times"] = [r[0] for r in requests]
        result["queue_times"] = [0.0 for _ in requests]
        result["max_output_tokens_per_s"] = 60.0
        result["max_concurrent_requests"] = 3
    return result


def sse(obj) -> dict:
    return {"response": "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"}


def chunk(content=None, role=None, finish=None) -> dict:
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "mock-llama-8b",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def genai_perf() -> dict:
    t0 = 1_795_948_000_000_000_000
    ms = 1_000_000
    ok = {"timestamp": t0, "request_inputs": {"payload": '{"messages":[{"role":"user","content":"hi"}],'
                                                         '"model":"mock-llama-8b","stream":true}'},
          "response_timestamps": [t0 + 100 * ms, t0 + 120 * ms, t0 + 135 * ms, t0 + 150 * ms, t0 + 151 * ms,
                                  t0 + 152 * ms, t0 + 153 * ms],
          "response_outputs": [sse(chunk(role="assistant")), sse(chunk("Hello")), sse(chunk(" world")),
                               sse(chunk("!")), sse(chunk(finish="stop")),
                               sse({"id": "chatcmpl-1", "choices": [],
                                    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
                               {"response": "data: [DONE]\n\n"}]}
    t1 = t0 + 500 * ms
    merged = sse(chunk("b"))["response"] + sse(chunk("c"))["response"]
    split = sse(chunk("foo"))["response"]
    no_usage = {"timestamp": t1, "request_inputs": {"payload": "{}"},
                "response_timestamps": [t1 + 90 * ms, t1 + 110 * ms, t1 + 130 * ms, t1 + 131 * ms, t1 + 160 * ms,
                                        t1 + 161 * ms],
                "response_outputs": [sse(chunk("a")), {"response": merged}, {"response": split[:30]},
                                     {"response": split[30:]}, sse(chunk("d")), {"response": "data: [DONE]\n\n"}]}
    t2 = t0 + 900 * ms
    error_event = {"timestamp": t2, "request_inputs": {"payload": "{}"},
                   "response_timestamps": [t2 + 40 * ms],
                   "response_outputs": [{"response": 'event: error\ndata: {"error":{"message":"server overloaded",'
                                                     '"code":503}}\n\n'}]}
    t3 = t0 + 1200 * ms
    empty = {"timestamp": t3, "request_inputs": {"payload": "{}"},
             "response_timestamps": [t3 + 80 * ms, t3 + 81 * ms],
             "response_outputs": [sse(chunk(role="assistant")), {"response": "data: [DONE]\n\n"}]}
    t4 = t0 + 5000 * ms
    second = [{"timestamp": t4 + k * 100 * ms, "request_inputs": {"payload": "{}"},
               "response_timestamps": [t4 + k * 100 * ms + 70 * ms, t4 + k * 100 * ms + 85 * ms],
               "response_outputs": [sse(chunk("x")), sse(chunk("y"))]} for k in range(3)]
    return {"service_kind": "openai", "endpoint": "v1/chat/completions", "version": "2.58.0",
            "experiments": [
                {"experiment": {"mode": "concurrency", "value": 1}, "requests": [ok, no_usage, error_event, empty],
                 "window_boundaries": [t0, t0 + 1000 * ms, t0 + 2000 * ms]},
                {"experiment": {"mode": "concurrency", "value": 4}, "requests": second,
                 "window_boundaries": [t4, t4 + 1000 * ms]}]}


def aiperf_errors() -> list[dict]:
    t = 1_795_948_200_000_000_000
    ms = 1_000_000

    def md(i, start, end, phase="profiling", ack=True, cancelled=False):
        m = {"session_num": i, "x_request_id": f"req-{i}", "x_correlation_id": f"corr-{i}",
             "conversation_id": f"session_{i:06d}", "turn_index": 0, "credit_issued_ns": start - 1 * ms,
             "request_start_ns": start, "request_end_ns": end, "worker_id": "worker_a",
             "record_processor_id": "record_processor_a", "benchmark_phase": phase, "phase_index": 0,
             "was_cancelled": cancelled, "context_overflow_skip": False}
        if ack:
            m["request_ack_ns"] = start + 60 * ms
        if cancelled:
            m["cancellation_time_ns"] = start + 400 * ms
        return m

    def ok_metrics(latency_ms, ttft_ms, isl, osl, usage_osl):
        return {"request_latency": {"value": latency_ms, "unit": "ms"},
                "time_to_first_token": {"value": ttft_ms, "unit": "ms"},
                "inter_token_latency": {"value": (latency_ms - ttft_ms) / (osl - 1), "unit": "ms"},
                "input_sequence_length": {"value": isl, "unit": "tokens"},
                "output_sequence_length": {"value": osl, "unit": "tokens"},
                "output_token_count": {"value": osl, "unit": "tokens"},
                "usage_completion_tokens": {"value": usage_osl, "unit": "tokens"}}

    body = '{"error":{"message":"Mock server fail_after_requests=30 exceeded","type":"server_error"}}'
    return [
        {"metadata": md(0, t, t + 700 * ms, phase="warmup"), "metrics": ok_metrics(700.0, 110.0, 250, 30, 50)},
        {"metadata": md(1, t + 1000 * ms, t + 1800 * ms), "metrics": ok_metrics(800.0, 120.0, 260, 40, 66)},
        {"metadata": md(2, t + 1300 * ms, t + 1305 * ms, ack=False), "metrics": {"error_isl": {"value": 240,
                                                                                              "unit": "tokens"}},
         "error": {"code": 500, "type": "Internal Server Error", "message": body}},
        {"metadata": md(3, t + 1600 * ms, t + 2700 * ms), "metrics": {"error_isl": {"value": 255, "unit": "tokens"}},
         "error": {"type": "TimeoutError", "message": "TimeoutError()", "cause": "CancelledError()",
                   "cause_chain": ["TimeoutError", "CancelledError"]}},
        {"metadata": md(4, t + 1900 * ms, t + 2300 * ms, ack=False, cancelled=True),
         "metrics": {"error_isl": {"value": 270, "unit": "tokens"}},
         "error": {"code": 499, "type": "RequestCancellationError",
                   "message": "Request cancelled 0.400s after being sent"}},
    ]


QUEUE_FULL_BODY = ('{"error":{"message":"request rejected: queue_full","type":"server_overloaded","param":null,'
                   '"code":"queue_full"}}')
DEADLINE_EVENT = {"message": "request ended with timeout: deadline_exceeded", "type": "timeout",
                  "code": "deadline_exceeded"}


def guidellm_statuses() -> dict:
    """GuideLLM 0.8.1 records (the shapes of guidellm-0.8.1-errors.json) for the events serve-engine sends.

    A 503 queue_full: GuideLLM keeps httpx's HTTPStatusError repr, which names the status but not the body.
    A server deadline mid-stream: errored with the tokens streamed before it and the server's message.
    """
    t = 1_795_948_300.0

    def rec(i, start, end, status, out=None, first=None, error=None):
        timings = {"request_start": start, "first_token_iteration": first, "request_end": end if status ==
                   "completed" else None, "resolve_end": end}
        return {"type_": "generative_request_stats", "request_id": f"req-{i}", "prompt_tokens": 32,
                "output_tokens": out, "info": {"status": status, "error": error, "timings": timings}}
    ok = rec(0, t, t + 0.5, "completed", out=16, first=t + 0.1)
    full = rec(1, t + 0.2, t + 0.21, "errored", error=(
        "HTTPStatusError(\"Server error '503 Service Unavailable' for url 'http://127.0.0.1:8011/v1/completions'"
        "\\nFor more information check: https://developer.mozilla.org/en-US/docs/Web/HTTP/Status/503\")"))
    late = rec(2, t + 0.3, t + 2.3, "errored", out=7, first=t + 0.4,
               error=f"RuntimeError('error event: {DEADLINE_EVENT['message']}')")
    return {"metadata": {"version": 2, "guidellm_version": "0.8.1"}, "benchmarks": [
        {"type_": "generative_benchmark", "config": {"id_": "handmade", "strategy": {"type_": "constant", "rate": 4}},
         "requests": {"successful": [ok], "errored": [full, late], "incomplete": [], "total": None}}]}


def aiperf_statuses() -> list[dict]:
    """AIPerf 0.13.0 lines for the same events: a 503 error line, and a raw-export line (--export-level raw:
    payload and responses as SSE packets) whose stream ended with the server's deadline error event, which
    AIPerf counts as a success (no ``error``); its output is shorter than the max_tokens it asked for.
    """
    t = 1_795_948_400_000_000_000
    ms = 1_000_000
    perf0 = 5_000_000_000

    def md(i, start, end):
        return {"x_request_id": f"req-{i}", "request_start_ns": start, "request_end_ns": end,
                "benchmark_phase": "profiling", "was_cancelled": False}

    def packet(obj):
        return {"name": "data", "value": json.dumps(obj, separators=(",", ":"))}
    chunks = [{"perf_ns": perf0 + (100 + 20 * k) * ms,
               "packets": [packet({"choices": [{"index": 0, "delta": {"content": f" t{k}"}}]})]} for k in range(7)]
    chunks.append({"perf_ns": perf0 + 2000 * ms, "packets": [packet({"error": DEADLINE_EVENT})]})
    chunks.append({"perf_ns": perf0 + 2001 * ms, "packets": [{"name": "data", "value": "[DONE]"}]})
    return [
        {"metadata": md(0, t, t + 5 * ms), "metrics": {"error_isl": {"value": 32, "unit": "tokens"}},
         "error": {"code": 503, "type": "Service Unavailable", "message": QUEUE_FULL_BODY}},
        {"metadata": md(1, t + 100 * ms, t + 2102 * ms), "start_perf_ns": perf0,
         "payload": {"model": "servebench-tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                     "max_completion_tokens": 64},
         "status": 200, "responses": chunks},
    ]


if __name__ == "__main__":
    (DST / "vllm-serve-detailed.json").write_text(json.dumps(vllm_result(VLLM_REQUESTS)))
    old = vllm_result(VLLM_REQUESTS[:4], detailed_times=False)
    (DST / "vllm-old-benchmark-serving.json").write_text(json.dumps(old))
    lines = [vllm_result(VLLM_REQUESTS[:3]), vllm_result(VLLM_REQUESTS[3:])]
    (DST / "vllm-append-result.json").write_text("\n".join(json.dumps(x) for x in lines))
    (DST / "genai-perf-profile_export.json").write_text(json.dumps(genai_perf(), indent=1))
    (DST / "aiperf-errors-handmade.jsonl").write_text(
        "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in aiperf_errors()))
    (DST / "guidellm-statuses-handmade.json").write_text(json.dumps(guidellm_statuses(), indent=1))
    (DST / "aiperf-statuses-handmade.jsonl").write_text(
        "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in aiperf_statuses()))
