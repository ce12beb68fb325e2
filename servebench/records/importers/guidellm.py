"""Import GuideLLM report JSON: one run per ``benchmarks[]`` entry, every listed request kept.

v0.7+ records carry ``info.timings`` (Unix epoch seconds, ``time.time()``); older records carry flat
``start_time`` / ``first_token_time`` / ``end_time``. Both are read. ``successful`` become ``success``,
``errored`` get the status :mod:`servebench.records.statuses` gives their error (the HTTP status read from
httpx's message, else its words), with the error text, ``incomplete`` become ``cancelled``; both keep
the tokens they streamed as wasted work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from servebench.errors import InputFormatError
from servebench.records.importers.common import (
    Document,
    ImportOptions,
    count,
    finish,
    mark_window,
    number,
    pick_run,
    require_list,
    require_mapping,
    window_warning,
)
from servebench.records.loaded import LoadedRecords
from servebench.records.statuses import failure_status

FORMAT = "guidellm"
TOOL = "GuideLLM"
GROUPS: tuple[tuple[str, str], ...] = (("successful", "success"), ("errored", "failed"), ("incomplete", "cancelled"))
CSV_MARKERS = ("Run Info", "Benchmark")
# httpx's HTTPStatusError: "Server error '503 Service Unavailable' for url ..." (GuideLLM keeps its repr)
_HTTPX_STATUS_RE = re.compile(r"(?:Client|Server|Informational|Redirect) error '(\d{3}) ")


def sniff(doc: Document) -> bool:
    """Return True for a GuideLLM report: an object whose ``benchmarks`` entries hold ``requests``."""
    v = doc.value
    if doc.lines or not isinstance(v, Mapping) or not isinstance(v.get("benchmarks"), list):
        return False
    meta = v.get("metadata")
    if isinstance(meta, Mapping) and "guidellm_version" in meta:
        return True
    first = v["benchmarks"][0] if v["benchmarks"] else None
    return isinstance(first, Mapping) and ("requests" in first or first.get("type_") == "generative_benchmark")


def sniff_csv(text_head: str) -> bool:
    """Return True for GuideLLM's aggregate CSV (three header rows starting with 'Run Info')."""
    first = text_head.split("\n", 1)[0]
    return first.startswith(CSV_MARKERS[0] + ",") and CSV_MARKERS[1] in first


def csv_error(source: str) -> InputFormatError:
    """Explain that GuideLLM's CSV holds only aggregates."""
    return InputFormatError(
        f"{source}: this is GuideLLM's aggregate CSV (one row per benchmark, no per-request records); "
        "import the JSON report GuideLLM wrote next to it (--output kind=json)")


def import_runs(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> list[Any]:
    """Return one LoadedRecords per benchmark in the report."""
    benchmarks = _benchmarks(doc, source)
    return [_import_benchmark(doc.value, b, i, len(benchmarks), source, options) for i, b in enumerate(benchmarks)]


def import_document(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> LoadedRecords:
    """Return the benchmark the user asked for (``options.run``), or the first with a warning if there are more."""
    benchmarks = _benchmarks(doc, source)
    idx, warnings = pick_run(benchmarks, options, source, FORMAT, "benchmark")
    loaded = _import_benchmark(doc.value, benchmarks[idx], idx, len(benchmarks), source, options)
    loaded.warnings[:0] = warnings
    return loaded


def _benchmarks(doc: Document, source: str) -> list[Any]:
    top = require_mapping(doc.value, source, "top level")
    return require_list(top.get("benchmarks"), source, "'benchmarks'")


def _import_benchmark(top: Mapping[str, Any], bench: Any, idx: int, n_runs: int, source: str,
                      options: ImportOptions) -> LoadedRecords:
    where = f"benchmarks[{idx}]"
    bench = require_mapping(bench, source, where)
    requests = require_mapping(bench.get("requests"), source, f"{where}.requests")
    records: list[dict[str, Any]] = []
    notes: dict[str, int] = {"end_fallback": 0, "partial": 0, "server_tokens": 0, "client_tokens": 0}
    listed: dict[str, int] = {}
    groups: list[str] = []
    for group, status in GROUPS:
        items = requests.get(group)
        if items is None:
            listed[group] = 0
            continue
        items = require_list(items, source, f"{where}.requests.{group}")
        listed[group] = len(items)
        for j, item in enumerate(items):
            records.append(_record(require_mapping(item, source, f"{where}.requests.{group}[{j}]"), status,
                                   source, f"{where}.requests.{group}[{j}]", notes))
            groups.append(group)
    sched = bench.get("scheduler_metrics") if isinstance(bench.get("scheduler_metrics"), Mapping) else {}
    m_start = number(sched.get("measure_start_time"), source, f"{where}.scheduler_metrics.measure_start_time",
                     required=False)
    m_end = number(sched.get("measure_end_time"), source, f"{where}.scheduler_metrics.measure_end_time",
                   required=False)
    inside = mark_window([{"start": r["start"], "group": g} for r, g in zip(records, groups)], m_start, m_end,
                         "drop")[0]
    measured = {g: sum(1 for r in inside if r["group"] == g) for g, _ in GROUPS}
    records, outside = mark_window(records, m_start, m_end, options.outside_window)
    warnings = _warnings(top, bench, listed, measured, outside, notes, options)
    return finish(records, source, FORMAT, warnings, _metadata(top, bench, idx, n_runs, listed, outside,
                                                                 m_start, m_end, options))


def _timing(rec: Mapping[str, Any], timings: Mapping[str, Any], names: tuple[str, ...], source: str,
            where: str) -> tuple[float | None, str | None]:
    """Return the first present time among ``names`` ("timings.X" in info.timings, else a record field)."""
    for name in names:
        holder, key = (timings, name[8:]) if name.startswith("timings.") else (rec, name)
        prefix = "info.timings." if holder is timings else ""
        v = number(holder.get(key), source, f"{where}.{prefix}{key}", required=False)
        if v is not None:
            return v, key
    return None, None


def _record(rec: Mapping[str, Any], status: str, source: str, where: str, notes: dict[str, int]) -> dict[str, Any]:
    info = rec.get("info") if isinstance(rec.get("info"), Mapping) else {}
    timings = info.get("timings") if isinstance(info.get("timings"), Mapping) else {}
    start, _ = _timing(rec, timings, ("timings.request_start", "request_start_time", "start_time"), source, where)
    if start is None:
        raise InputFormatError(f"{source}: {where}: no start time (info.timings.request_start, "
                               "request_start_time or start_time)")
    end, end_key = _timing(rec, timings, ("timings.request_end", "timings.resolve_end", "request_end_time", "end_time"),
                           source, where)
    if end is None:
        raise InputFormatError(f"{source}: {where}: no end time (info.timings.request_end, resolve_end, "
                               "request_end_time or end_time)")
    if end_key not in ("request_end", "end_time"):
        notes["end_fallback"] += 1
    first, _ = _timing(rec, timings, ("timings.first_token_iteration", "first_token_time"), source, where)
    error = info.get("error") if info.get("error") is not None else rec.get("error")
    error_text = str(error) if error is not None else None
    out_tokens = count(rec.get("output_tokens"), source, f"{where}.output_tokens")
    if status == "failed":
        status = failure_status(_http_status(error_text), error_text)
        if out_tokens:
            notes["partial"] += 1
    elif status == "cancelled":
        status = failure_status(client_cancelled=True)
        error_text = error_text or "cancelled by GuideLLM (incomplete)"
        if out_tokens:
            notes["partial"] += 1
    if status != "success" and error_text is None:
        error_text = "unspecified (GuideLLM gave no error text)"
    if status == "success":
        error_text = None
    notes["server_tokens" if status == "success" else "client_tokens"] += 1
    return {
        "request_id": _text(rec.get("request_id")),
        "start": start, "first_token": first, "end": max(end, start),
        "status": status,
        "prompt_tokens": count(rec.get("prompt_tokens"), source, f"{where}.prompt_tokens"),
        "output_tokens": out_tokens,
        "error": error_text,
    }


def _http_status(error_text: str | None) -> int | None:
    """Return the HTTP status in an httpx HTTPStatusError message, or None.

    >>> _http_status("HTTPStatusError(Server error '503 Service Unavailable' for url 'x')"), _http_status("x")
    (503, None)
    """
    m = _HTTPX_STATUS_RE.search(error_text or "")
    return int(m.group(1)) if m else None


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _totals(bench: Mapping[str, Any]) -> dict[str, Any]:
    metrics = bench.get("metrics") if isinstance(bench.get("metrics"), Mapping) else {}
    sched = bench.get("scheduler_metrics") if isinstance(bench.get("scheduler_metrics"), Mapping) else {}
    state = bench.get("scheduler_state") if isinstance(bench.get("scheduler_state"), Mapping) else {}
    return {"request_totals": metrics.get("request_totals"), "requests_made": sched.get("requests_made"),
            "cancelled_requests": state.get("cancelled_requests")}


def _warnings(top: Mapping[str, Any], bench: Mapping[str, Any], listed: dict[str, int], measured: dict[str, int],
              outside: dict[str, int], notes: dict[str, int], options: ImportOptions) -> list[str]:
    w = [f"{TOOL}: times are Unix epoch seconds from the client's time.time() (wall clock, not monotonic); "
         "TTFT is measured from request_start, not from when the request was queued"]
    w.append(f"{TOOL}: its time_per_output_token_ms is latency / output tokens (TTFT included) and its "
             "inter_token_latency_ms ends at the last token; servebench's request TPOT is "
             "(end - first_token) / (output_tokens - 1) with end = request_end, so values differ slightly")
    totals = _totals(bench)
    shown = dict(listed)
    rt, made = totals["request_totals"], totals["requests_made"]
    disagreements = []
    for label, src in (("metrics.request_totals", rt), ("scheduler_metrics.requests_made", made)):
        if isinstance(src, Mapping):
            vals = {g: src.get(g) for g in shown}
            if vals != shown:
                disagreements.append(f"{label} {vals['successful']}/{vals['errored']}/{vals['incomplete']}")
    if disagreements:
        n_meas = sum(measured.values())
        rt_vals = {g: rt.get(g) for g in shown} if isinstance(rt, Mapping) else None
        verdict = ("match metrics.request_totals, which leaves out requests started at or after measure_end_time"
                   if rt_vals == measured else
                   f"count {measured['successful']}/{measured['errored']}/{measured['incomplete']}, which does not "
                   "match metrics.request_totals either")
        w.append(f"{TOOL}'s request counts disagree: listed records {shown['successful']}/{shown['errored']}/"
                 f"{shown['incomplete']} (successful/errored/incomplete), {', '.join(disagreements)}. "
                 f"servebench imports every listed record; the {n_meas} that started inside the measured window "
                 f"{verdict}; requests_made also counts requests that were never listed and cannot be recovered")
    lost = _unaccounted(bench)
    if lost:
        w.append(lost)
    cancelled = totals["cancelled_requests"]
    if isinstance(cancelled, int) and cancelled > listed["incomplete"]:
        w.append(f"{TOOL}: scheduler_state.cancelled_requests = {cancelled}, but only {listed['incomplete']} "
                 "incomplete request(s) are listed; the others were queued but never sent and appear in no record")
    w.extend(window_warning(TOOL, outside, options.outside_window))
    if notes["end_fallback"]:
        w.append(f"{TOOL}: {notes['end_fallback']} request(s) have no request_end (errored or cut off); their end "
                 "is resolve_end, when GuideLLM gave up on them")
    if notes["partial"]:
        w.append(f"{TOOL}: {notes['partial']} non-successful request(s) streamed tokens before they ended; "
                 "those tokens are kept as wasted work (output_tokens on a non-success)")
    cfg = bench.get("config") if isinstance(bench.get("config"), Mapping) else {}
    if cfg.get("prefer_response_metrics") and notes["server_tokens"] and notes["client_tokens"]:
        w.append(f"{TOOL}: token counts of successful requests come from the server's usage report "
                 "(prefer_response_metrics), those of failed/cancelled requests from the client tokenizer; "
                 "they are not comparable")
    return w


def _unaccounted(bench: Mapping[str, Any]) -> str | None:
    """Say how many requests the scheduler created but never processed or cancelled (None: none, or no counts).

    Every created request should end processed or cancelled. GuideLLM 0.8.1 counts a cancelled request
    as processed too (processed = successful + errored + cancelled), so the unaccounted are created -
    processed; where processed leaves the cancelled out, created - processed - cancelled. A run at 10 or
    1,000 req/s created 100 and processed 99 with none cancelled: one request is in no count and no record.

    >>> _unaccounted({"scheduler_state": {"created_requests": 100, "processed_requests": 99,
    ...     "successful_requests": 99, "errored_requests": 0, "cancelled_requests": 0}})[:63]
    'GuideLLM: 1 request(s) created but never processed or cancelled'
    """
    state = bench.get("scheduler_state") if isinstance(bench.get("scheduler_state"), Mapping) else {}

    def n(key: str) -> int | None:
        v = state.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    created, processed, cancelled = n("created_requests"), n("processed_requests"), n("cancelled_requests") or 0
    if created is None or processed is None:
        return None
    finals = [n("successful_requests"), n("errored_requests"), n("cancelled_requests")]
    includes = None not in finals and processed == sum(finals)  # type: ignore[arg-type]
    outside = 0 if includes else cancelled
    lost = created - processed - outside
    if lost == 0:
        return None
    how = f"created {created} - processed {processed}" + ("" if includes else f" - cancelled {cancelled}")
    if lost < 0:
        return (f"{TOOL}: its scheduler counts {-lost} more request(s) finished than it created ({how} = {lost}); "
                "its counts do not add up, so they are not used")
    return (f"{TOOL}: {lost} request(s) created but never processed or cancelled ({how} = {lost}); they appear in "
            "no count and no record, so the import cannot include them (seen in GuideLLM 0.8.1 runs at high "
            "rates)")


def _metadata(top: Mapping[str, Any], bench: Mapping[str, Any], idx: int, n_runs: int, listed: dict[str, int],
              outside: dict[str, int], m_start: float | None, m_end: float | None,
              options: ImportOptions) -> dict[str, Any]:
    meta = top.get("metadata") if isinstance(top.get("metadata"), Mapping) else {}
    cfg = bench.get("config") if isinstance(bench.get("config"), Mapping) else {}
    strategy = cfg.get("strategy") if isinstance(cfg.get("strategy"), Mapping) else {}
    backend = cfg.get("backend") if isinstance(cfg.get("backend"), Mapping) else {}
    return {
        "tool": FORMAT, "tool_version": meta.get("guidellm_version"), "report_version": meta.get("version"),
        "run_index": idx, "runs": n_runs, "run_id": cfg.get("run_id"), "benchmark_id": cfg.get("id_"),
        "strategy": strategy.get("type_"), "rate": strategy.get("rate"),
        "model": backend.get("model"), "target": backend.get("target"),
        "clock": "unix epoch seconds (client wall clock)",
        "measured_window": [m_start, m_end],
        "warmup_duration_s": bench.get("warmup_duration"), "cooldown_duration_s": bench.get("cooldown_duration"),
        "outside_window": options.outside_window, "outside_window_counts": outside,
        "listed": listed, **_totals(bench),
        "unavailable_metrics": [],
    }
