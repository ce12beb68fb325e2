"""Import llmperf (ray-project) ``*_individual_responses.json``: durations only, no timestamps.

Each object holds ``ttft_s``, ``end_to_end_latency_s`` and token counts, but no start time, no request id
and no order other than completion order. servebench does not invent a timeline: every request is placed
on its own clock starting at 0 s (start = 0, first_token = ttft_s, end = end_to_end_latency_s). Per-request
latency, TTFT and request TPOT are exact; anything that needs requests on one clock (throughput per
second, concurrency, arrival pattern, goodput per second) is listed in ``metadata['unavailable_metrics']``.
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
    require_mapping,
)
from servebench.records.loaded import LoadedRecords
from servebench.records.statuses import failure_status

FORMAT = "llmperf"
TOOL = "llmperf"
RECORD_KEYS = ("end_to_end_latency_s", "ttft_s")
SUMMARY_MARKERS = ("results_num_completed_requests", "results_ttft_s_mean")


def _is_summary(v: Any) -> bool:
    return isinstance(v, Mapping) and any(k in v for k in SUMMARY_MARKERS)


def sniff(doc: Document) -> bool:
    """Return True for llmperf's individual-responses array (or its summary, to explain what to import)."""
    v = doc.value
    if doc.lines:
        return False
    if _is_summary(v):
        return True
    return (isinstance(v, list) and bool(v) and isinstance(v[0], Mapping)
            and all(k in v[0] for k in RECORD_KEYS))


def import_runs(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> list[Any]:
    """Return the single run in the file, as a list of one."""
    return [import_document(doc, source, options)]


def import_document(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> LoadedRecords:
    """Import every response; failures (non-null ``error_code``) are kept with their message."""
    if _is_summary(doc.value):
        raise InputFormatError(
            f"{source}: this is llmperf's *_summary.json (aggregates only); import the "
            "*_individual_responses.json llmperf wrote next to it")
    items = doc.value
    if not isinstance(items, list):
        raise InputFormatError(f"{source}: expected a JSON array of llmperf responses")
    records = []
    errored = 0
    for i, item in enumerate(items):
        rec = _record(require_mapping(item, source, f"[{i}]"), source, f"[{i}]")
        errored += rec["status"] != "success"
        records.append(rec)
    unavailable = list(CLOCK_METRICS) + ["request order (only completion order is kept)"]
    warnings = [
        f"{TOOL} records no timestamps, only durations: each request is placed on its own clock starting at 0 s "
        "(start = 0, first_token = ttft_s, end = end_to_end_latency_s). Latency, TTFT and request TPOT are "
        f"exact; unavailable: {', '.join(unavailable)}. Numbers the report gives for these are not meaningful "
        "for this file",
        f"{TOOL}'s inter_token_latency_s is (all chunk gaps including TTFT) / (SSE chunks including the final "
        "empty one), not a decode-only gap; servebench's request TPOT is (end - first_token) / "
        "(output_tokens - 1)",
        f"{TOOL} counts output tokens by re-tokenizing the generated text with its client tokenizer, not "
        "from the server's usage report",
        f"{TOOL} (at least git f1d6bed, the current ray-project HEAD) does not write requests that errored: its "
        "launcher divides by their zero latency and stops, so failures are usually missing from this file and "
        "cannot be recovered; compare the request count with the number you asked for",
    ]
    if errored:
        warnings.append(f"{TOOL}: {errored} errored response(s) carry zero placeholders for latency and tokens; "
                        "their end is start (0 s) and their wasted tokens are unknown")
    meta = {"tool": FORMAT, "runs": 1, "run_index": 0, "clock": "per-request (no timestamps)",
            "unavailable_metrics": unavailable}
    return finish(records, source, FORMAT, warnings, meta)


def _record(item: Mapping[str, Any], source: str, where: str) -> dict[str, Any]:
    code = item.get("error_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, (int, str))):
        raise InputFormatError(f"{source}: {where}.error_code: {code!r} is not an HTTP status")
    e2e = number(item.get("end_to_end_latency_s"), source, f"{where}.end_to_end_latency_s")
    ttft = number(item.get("ttft_s"), source, f"{where}.ttft_s", required=False)
    prompt = count(item.get("number_input_tokens"), source, f"{where}.number_input_tokens")
    assert e2e is not None
    if code is None:
        out = count(item.get("number_output_tokens"), source, f"{where}.number_output_tokens")
        if e2e < 0 or ttft is None or ttft < 0:
            raise InputFormatError(f"{source}: {where}: a successful response needs ttft_s and "
                                   f"end_to_end_latency_s >= 0 (got {ttft!r}, {e2e!r})")
        return {"start": 0.0, "first_token": ttft, "end": max(e2e, ttft), "status": "success",
                "prompt_tokens": prompt, "output_tokens": out}
    status_code = int(code) if str(code).isdigit() else None
    msg = str(item.get("error_msg") or "").strip()
    error = f"HTTP {code}: {msg}" if msg else f"HTTP {code}"
    return {"start": 0.0, "end": max(e2e, 0.0), "status": failure_status(status_code, msg),
            "prompt_tokens": prompt or None, "error": error}
