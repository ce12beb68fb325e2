"""Import GenAI-Perf ``profile_export.json`` (written by perf_analyzer): one run per ``experiments[]`` entry.

Each request has ``timestamp`` (nanoseconds), ``request_inputs`` and aligned ``response_timestamps`` /
``response_outputs``. For the OpenAI service kind each output is ``{"response": "data: {...}\\n\\n"}``
(SSE text, sometimes several events in one response, sometimes one event split over two); for Triton
it is ``{"text_output": "..."}``. Like GenAI-Perf, responses without content (role-only, usage-only,
``[DONE]``) are ignored for timing: first token = the first response with non-empty content, end = the
last one. Unlike GenAI-Perf, a request with no content is kept as failed instead of being skipped,
and a stream that carries an error event gets the status :mod:`servebench.records.statuses` gives its cause,
keeping the content it streamed before as wasted tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from servebench.errors import InputFormatError
from servebench.records.importers.common import (
    Document,
    ImportOptions,
    cached_tokens,
    count,
    finish,
    number,
    pick_run,
    require_list,
    require_mapping,
)
from servebench.records.loaded import LoadedRecords
from servebench.records.statuses import failure_status

FORMAT = "genai-perf"
TOOL = "GenAI-Perf"


def sniff(doc: Document) -> bool:
    """Return True for a perf_analyzer/GenAI-Perf profile export (or GenAI-Perf's aggregate JSON)."""
    v = doc.value
    if doc.lines or not isinstance(v, Mapping):
        return False
    exps = v.get("experiments")
    if isinstance(exps, list):
        return not exps or (isinstance(exps[0], Mapping) and "requests" in exps[0])
    return _is_aggregate(v)


def _is_aggregate(v: Mapping[str, Any]) -> bool:
    return "input_config" in v and "request_latency" in v and "aiperf_version" not in v


def import_runs(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> list[Any]:
    """Return one LoadedRecords per experiment (one per concurrency or request-rate level)."""
    top, exps = _experiments(doc, source)
    return [_import_experiment(top, e, i, len(exps), source) for i, e in enumerate(exps)]


def import_document(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> LoadedRecords:
    """Return the experiment the user asked for (``options.run``), or the first with a warning if there are more."""
    top, exps = _experiments(doc, source)
    idx, warnings = pick_run(exps, options, source, FORMAT, "experiment")
    loaded = _import_experiment(top, exps[idx], idx, len(exps), source)
    loaded.warnings[:0] = warnings
    return loaded


def _experiments(doc: Document, source: str) -> tuple[Mapping[str, Any], list[Any]]:
    top = require_mapping(doc.value, source, "top level")
    if "experiments" not in top and _is_aggregate(top):
        raise InputFormatError(
            f"{source}: this is GenAI-Perf's aggregate profile_export_genai_perf.json (statistics only); import "
            "the perf_analyzer profile_export.json from the same artifacts folder")
    return top, require_list(top.get("experiments"), source, "'experiments'")


def _import_experiment(top: Mapping[str, Any], exp: Any, idx: int, n_runs: int, source: str) -> LoadedRecords:
    where = f"experiments[{idx}]"
    exp = require_mapping(exp, source, where)
    kind = str(top.get("service_kind") or "openai")
    requests = require_list(exp.get("requests"), source, f"{where}.requests")
    notes = {"chunk_counted": 0, "no_content": 0, "sse_error": 0, "no_end": 0}
    records = [_record(require_mapping(r, source, f"{where}.requests[{j}]"), kind, source,
                       f"{where}.requests[{j}]", notes) for j, r in enumerate(requests)]
    w = [f"{TOOL}: timestamps are perf_analyzer nanoseconds converted to seconds; first token = first response "
         "with non-empty content and end = last response with content (GenAI-Perf's definitions), so the "
         "final usage/[DONE] event is not counted in latency",
         f"{TOOL}'s inter_token_latency is (latency - TTFT) / (output tokens - 1) with tokens from its "
         "tokenizer; servebench's request TPOT has the same form but uses the token counts described below"]
    if notes["chunk_counted"]:
        w.append(f"{TOOL}: {notes['chunk_counted']} request(s) have no usage report in their stream, so their "
                 "output tokens are the number of responses with content (one per streamed chunk). GenAI-Perf "
                 "re-tokenizes the text instead; servebench has no tokenizer, so counts can differ when a chunk "
                 "holds more than one token. Prompt tokens are only known from a usage report")
    if notes["no_content"]:
        w.append(f"{TOOL}: {notes['no_content']} request(s) returned no content; GenAI-Perf skips them, "
                 "servebench keeps them as failed")
    if notes["sse_error"]:
        w.append(f"{TOOL}: {notes['sse_error']} request(s) carried an error event in the stream: imported with the "
                 "status of the event's cause (see the status table in docs/importers.md), the content chunks "
                 "before it kept as wasted tokens")
    if notes["no_end"]:
        w.append(f"{TOOL}: {notes['no_end']} failed request(s) have no response at all; their end is set to "
                 "their start, so their latency is unknown")
    experiment = exp.get("experiment") if isinstance(exp.get("experiment"), Mapping) else {}
    meta = {"tool": FORMAT, "tool_version": top.get("version"), "service_kind": kind,
            "endpoint": top.get("endpoint"), "run_index": idx, "runs": n_runs,
            "experiment_mode": experiment.get("mode"), "experiment_value": experiment.get("value"),
            "window_boundaries_ns": exp.get("window_boundaries"),
            "clock": "perf_analyzer nanoseconds", "unavailable_metrics": []}
    return finish(records, source, FORMAT, w, meta)


def _events(outputs: list[Any], kind: str, source: str, where: str) -> list[tuple[str, dict[str, Any] | None]]:
    """Return per response: its text content and the last usage report it carried (OpenAI SSE merged back)."""
    if kind != "openai":
        out = []
        for k, o in enumerate(outputs):
            o = require_mapping(o, source, f"{where}.response_outputs[{k}]")
            text = o.get("text_output", o.get("output", ""))
            out.append((text if isinstance(text, str) else json.dumps(text), None))
        return out
    raw = []
    for k, o in enumerate(outputs):
        o = require_mapping(o, source, f"{where}.response_outputs[{k}]")
        r = o.get("response", "")
        raw.append(r if isinstance(r, str) else json.dumps(r))
    # a response that does not start with an SSE field continues the previous one (split event)
    for k in range(len(raw) - 1, 0, -1):
        s = raw[k].lstrip()
        if s and not s.startswith(("data:", "event:", ":", "id:", "retry:", "{")):
            raw[k - 1] += raw[k]
            raw[k] = ""
    result: list[tuple[str, dict[str, Any] | None]] = []
    for k, r in enumerate(raw):
        text, usage = "", None
        for event in r.strip().split("\n\n"):
            is_error = False
            for line in event.splitlines():
                line = line.strip()
                if line.startswith("event:"):
                    is_error = "error" in line
                    continue
                payload = line[5:].strip() if line.startswith("data:") else line if line.startswith("{") else ""
                if not payload or payload == "[DONE]":
                    continue
                try:
                    obj = json.loads(payload)
                except json.JSONDecodeError:
                    if is_error:
                        raise _SSEError(payload[:300], payload[:300], result + [(text, usage)]) from None
                    raise InputFormatError(f"{source}: {where}.response_outputs[{k}]: response is not SSE JSON: "
                                           f"{payload[:80]!r}") from None
                if isinstance(obj, Mapping) and (is_error or obj.get("error") is not None):
                    err = obj.get("error", obj)
                    message = str(err.get("message", err) if isinstance(err, Mapping) else err)
                    code = err.get("code") if isinstance(err, Mapping) else None
                    raise _SSEError(message, json.dumps(err), result + [(text, usage)],
                                    code if isinstance(code, int) and not isinstance(code, bool) else None)
                text += _content(obj)
                if isinstance(obj, Mapping) and isinstance(obj.get("usage"), Mapping):
                    usage = dict(obj["usage"])
        result.append((text, usage))
    return result


class _SSEError(Exception):
    """An error event inside a streamed response, with the responses read before it."""

    def __init__(self, message: str, cause: str, before: list[tuple[str, dict[str, Any] | None]],
                 code: int | None = None) -> None:
        super().__init__(message)
        self.cause, self.before, self.code = cause, before, code


def _content(obj: Any) -> str:
    if not isinstance(obj, Mapping):
        return ""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    c = choices[0]
    for holder in (c.get("delta"), c.get("message")):
        if isinstance(holder, Mapping):
            text = holder.get("content") or holder.get("reasoning_content")
            if isinstance(text, str):
                return text
    text = c.get("text")
    return text if isinstance(text, str) else ""


def _record(req: Mapping[str, Any], kind: str, source: str, where: str, notes: dict[str, int]) -> dict[str, Any]:
    start_ns = number(req.get("timestamp"), source, f"{where}.timestamp")
    assert start_ns is not None
    stamps = require_list(req.get("response_timestamps", []), source, f"{where}.response_timestamps")
    outputs = require_list(req.get("response_outputs", []), source, f"{where}.response_outputs")
    if len(stamps) != len(outputs):
        raise InputFormatError(f"{source}: {where}: {len(stamps)} response_timestamps but {len(outputs)} "
                               "response_outputs; they must be aligned")
    times = [number(t, source, f"{where}.response_timestamps[{k}]") for k, t in enumerate(stamps)]
    start = start_ns / 1e9
    rec: dict[str, Any] = {"start": start}
    try:
        events = _events(outputs, kind, source, where)
    except _SSEError as exc:
        notes["sse_error"] += 1
        last = max((t for t in times if t is not None), default=start_ns)
        content = [t for t, (text, _) in zip(times, exc.before) if text and t is not None]
        rec.update(end=max(last, start_ns) / 1e9, status=failure_status(exc.code, exc.cause), error=str(exc))
        if content:  # streamed before the error: wasted work
            rec.update(first_token=content[0] / 1e9, output_tokens=len(content))
        return rec
    content_times = [t for t, (text, _) in zip(times, events) if text and t is not None]
    usage = next((u for _, u in reversed(events) if u), None)
    if usage:
        rec["prompt_tokens"] = count(usage.get("prompt_tokens"), source, f"{where}: usage.prompt_tokens")
        rec["cached_prompt_tokens"] = cached_tokens(usage, source, where)
    if not content_times:
        notes["no_content"] += 1
        if not times:
            notes["no_end"] += 1
        last = max((t for t in times if t is not None), default=start_ns)
        rec.update(end=max(last, start_ns) / 1e9, status="failed", error="no response with content")
        return rec
    out = count(usage.get("completion_tokens"), source, f"{where}: usage.completion_tokens") if usage else None
    if out is None:
        notes["chunk_counted"] += 1
        out = len(content_times)
    rec.update(first_token=content_times[0] / 1e9, end=content_times[-1] / 1e9, status="success",
               output_tokens=out)
    return rec
