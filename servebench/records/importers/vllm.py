"""Import ``vllm bench serve --save-result --save-detailed`` JSON (also the older ``benchmark_serving.py``).

The file holds aligned per-request arrays (``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``latencies``, ``start_times``, ``errors``, ...) next to the tool's own summary (``completed``,
``failed``, ``mean_ttft_ms``, ...). ``--append-result`` writes one such object per line: each line is a run.

A request failed when ``errors[i]`` is non-empty. ``start_times`` are ``time.perf_counter()`` readings:
a relative clock. Older files lack ``start_times`` (then each request gets its own clock starting at 0)
or ``latencies`` (then end = start + ttft + sum(itls)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servebench.errors import InputFormatError
from servebench.records.importers.common import (
    CLOCK_METRICS,
    Document,
    ImportOptions,
    count,
    finish,
    number,
    pick_run,
    require_list,
    require_mapping,
)
from servebench.records.loaded import LoadedRecords
from servebench.records.statuses import failure_status
from servebench.records.token_times import fits, times_from_gaps

FORMAT = "vllm"
TOOL = "vLLM bench serve"
ARRAYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")
SUMMARY_KEYS = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
                "median_tpot_ms", "mean_itl_ms", "mean_e2el_ms", "median_e2el_ms", "max_concurrent_requests")
SETUP_KEYS = ("date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts",
              "request_rate", "burstiness", "max_concurrency")


def _is_result(v: Any) -> bool:
    if not isinstance(v, Mapping):
        return False
    if "ttfts" in v or ("input_lens" in v and "output_lens" in v):
        return True
    return "completed" in v and "request_throughput" in v and ("mean_ttft_ms" in v or "mean_e2el_ms" in v)


def sniff(doc: Document) -> bool:
    """Return True for a vLLM serving-benchmark result (one object, or one per line)."""
    if doc.lines:
        return bool(doc.value) and all(_is_result(v) for v in doc.value)
    return _is_result(doc.value)


def _results(doc: Document) -> list[Any]:
    return list(doc.value) if doc.lines else [doc.value]


def import_runs(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> list[Any]:
    """Return one LoadedRecords per result object (``--append-result`` files hold several)."""
    results = _results(doc)
    return [_import_result(r, i, len(results), source) for i, r in enumerate(results)]


def import_document(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> LoadedRecords:
    """Return the result the user asked for (``options.run``), or the first with a warning if there are more."""
    results = _results(doc)
    idx, warnings = pick_run(results, options, source, FORMAT, "result")
    loaded = _import_result(results[idx], idx, len(results), source)
    loaded.warnings[:0] = warnings
    return loaded


def _array(res: Mapping[str, Any], key: str, n: int | None, source: str, where: str) -> list[Any] | None:
    if key not in res or res[key] is None:
        return None
    arr = require_list(res[key], source, f"{where}'{key}'")
    if n is not None and len(arr) != n:
        raise InputFormatError(f"{source}: {where}'{key}' has {len(arr)} entries but 'ttfts' has {n}; "
                               "the per-request arrays must be aligned")
    return arr


def _import_result(res: Any, idx: int, n_runs: int, source: str) -> LoadedRecords:
    where = f"result {idx}: " if n_runs > 1 else ""
    res = require_mapping(res, source, f"{where or 'top level'}")
    ttfts = _array(res, "ttfts", None, source, where)
    if ttfts is None:
        raise InputFormatError(
            f"{source}: {where}no per-request arrays ('ttfts', 'input_lens', 'errors'): the result was saved "
            "without --save-detailed, so it holds only the tool's summary; rerun with --save-result --save-detailed")
    n = len(ttfts)
    arr = {k: _array(res, k, n, source, where) for k in ARRAYS}
    warnings: list[str] = []
    unavailable: list[str] = []
    starts = arr["start_times"]
    if starts is None:
        unavailable = list(CLOCK_METRICS)
        warnings.append(
            f"{TOOL}: the file has no 'start_times' (an older vLLM): each request is placed on its own clock "
            "starting at 0 s. Latency, TTFT and request TPOT are exact; throughput per second, concurrency and "
            f"the arrival pattern are unavailable ({', '.join(unavailable)})")
    else:
        warnings.append(
            f"{TOOL}: start_times are the client's time.perf_counter() readings, a relative clock with an "
            "arbitrary origin: they cannot be lined up with wall-clock logs, server timestamps or other runs")
    if arr["latencies"] is None:
        warnings.append(f"{TOOL}: the file has no 'latencies' (an older vLLM): end = start + ttft + sum(itls), "
                        "the arrival of the last streamed chunk")
    if arr["errors"] is None:
        warnings.append(f"{TOOL}: the file has no 'errors': a request counts as failed when it has no output "
                        "tokens and no TTFT")
    records = []
    notes = {"fail_no_end": 0, "fail_partial": 0, "empty_error": 0, "traceback": 0, "no_ttft": 0}
    for i in range(n):
        records.append(_record(arr, i, source, where, notes))
    _summary_checks(res, records, warnings)
    warnings.append(
        f"{TOOL}: its TPOT is (latency - ttft) / (output_len - 1) over successes, the same definition as "
        "servebench's request TPOT; its ITL pools every chunk gap of every request and is not carried over")
    if notes["fail_no_end"]:
        warnings.append(f"{TOOL}: {notes['fail_no_end']} failed request(s) have no recorded end (vLLM leaves "
                        "latency 0 on failure): their end is set to their start (or their last streamed chunk), "
                        "so failed-request latency is a lower bound")
    if notes["fail_partial"]:
        warnings.append(f"{TOOL}: {notes['fail_partial']} failed request(s) had streamed chunks; vLLM stores 0 "
                        "output tokens for every failure, so their wasted tokens are unknown")
    if notes["empty_error"]:
        warnings.append(f"{TOOL}: {notes['empty_error']} request(s) have an empty error but no output: imported "
                        "as failed")
    if notes["no_ttft"]:
        warnings.append(f"{TOOL}: {notes['no_ttft']} successful request(s) have no TTFT (a non-streaming endpoint): "
                        "their first token is set to their end, when the client received the whole response")
    if notes.get("itl_left_out"):
        warnings.append(f"{TOOL}: the itls of {notes['itl_left_out']} request(s) are not carried over as token_times: "
                        "their streamed chunks do not match output_lens one to one (chunks of several tokens, "
                        "whose sizes the file does not give), so their inter-token latency is not in the report")
    if notes["traceback"]:
        warnings.append(f"{TOOL}: {notes['traceback']} error(s) are Python tracebacks; the error text kept is "
                        "their last line (the exception)")
    queue = res.get("queue_times")
    if isinstance(queue, list) and any(isinstance(q, (int, float)) and q > 0 for q in queue):
        warnings.append(f"{TOOL}: requests waited in the client's --max-concurrency queue (queue_times); start is "
                        "when each request was sent, so that client-side wait is not in latency or TTFT")
    meta = {
        "tool": FORMAT, "run_index": idx, "runs": n_runs,
        "clock": "per-request (no start_times)" if starts is None else "relative seconds (client perf_counter)",
        **{k: res.get(k) for k in SETUP_KEYS if k in res},
        "tool_summary": {k: res.get(k) for k in SUMMARY_KEYS if k in res},
        "unavailable_metrics": unavailable,
    }
    return finish(records, source, FORMAT, warnings, meta)


def _record(arr: dict[str, list[Any] | None], i: int, source: str, where: str,
            notes: dict[str, int]) -> dict[str, Any]:
    def at(key: str) -> Any:
        a = arr[key]
        return None if a is None else a[i]

    ttft = number(at("ttfts"), source, f"{where}'ttfts'[{i}]", required=False) or 0.0
    itls_raw = at("itls")
    itls = [] if itls_raw is None else require_list(itls_raw, source, f"{where}'itls'[{i}]")
    itl_sum = sum(number(x, source, f"{where}'itls'[{i}]") or 0.0 for x in itls)
    latency = number(at("latencies"), source, f"{where}'latencies'[{i}]", required=False)
    start = 0.0 if arr["start_times"] is None else number(at("start_times"), source, f"{where}'start_times'[{i}]")
    assert start is not None
    out_len = count(at("output_lens"), source, f"{where}'output_lens'[{i}]")
    error = at("errors")
    if error is not None and not isinstance(error, str):
        raise InputFormatError(f"{source}: {where}'errors'[{i}]: {error!r} is not text")
    streamed_end = ttft + itl_sum if ttft > 0 else 0.0
    failed = bool(error) or (not out_len and ttft <= 0 and not latency)
    rec: dict[str, Any] = {"start": start, "prompt_tokens": count(at("input_lens"), source,
                                                                   f"{where}'input_lens'[{i}]")}
    if not failed:
        end = start + max(latency if latency is not None else streamed_end, ttft)
        if ttft <= 0:  # non-streaming endpoint: the client saw every token at the end
            notes["no_ttft"] += 1
        rec.update(first_token=start + ttft if ttft > 0 else end, end=end, status="success", output_tokens=out_len)
        _add_token_times(rec, itls, notes)
        return rec
    if not error:
        notes["empty_error"] += 1
        error = "no output (vLLM stored no error text)"
    end_offset = max(latency or 0.0, streamed_end)
    if end_offset <= 0:
        notes["fail_no_end"] += 1
    if ttft > 0:
        notes["fail_partial"] += 1
        rec["first_token"] = start + ttft
    error = error.strip()
    last_line = error.splitlines()[-1].strip() if error else error
    if error.startswith("Traceback"):
        notes["traceback"] += 1
        error = last_line  # a traceback ends with the exception: keep that line so causes group
    rec.update(end=start + end_offset, error=error,
               status=failure_status(None, last_line))  # an HTTP failure's text is its reason phrase
    if "first_token" in rec:
        _add_token_times(rec, itls, notes)
    return rec


def _add_token_times(rec: dict[str, Any], itls: list[Any], notes: dict[str, int]) -> None:
    """Carry vLLM's inter-token latencies (gaps between streamed chunks) as token_times, where they fit.

    A success needs one arrival per output token; chunks that carried several tokens (fewer arrivals
    than output_lens says) have no per-chunk counts in the file, so their times are left out.
    """
    if rec.get("first_token") is None or (not itls and rec.get("output_tokens") != 1):
        return
    times = times_from_gaps(rec["first_token"], itls, rec["end"])
    if times is not None and fits(times, rec):
        rec["token_times"] = times
        notes["itl_carried"] = notes.get("itl_carried", 0) + 1
    else:
        notes["itl_left_out"] = notes.get("itl_left_out", 0) + 1


def _summary_checks(res: Mapping[str, Any], records: list[dict[str, Any]], warnings: list[str]) -> None:
    ok = sum(1 for r in records if r["status"] == "success")
    bad = len(records) - ok
    completed, failed = res.get("completed"), res.get("failed")
    if isinstance(completed, int) and completed != ok:
        warnings.append(f"{TOOL}: the file says completed={completed}, but {ok} request(s) have no error and "
                        "some output; servebench uses the per-request arrays")
    if isinstance(failed, int) and failed != bad:
        warnings.append(f"{TOOL}: the file says failed={failed}, but {bad} request(s) failed by their per-request "
                        "fields; servebench uses the per-request arrays")
