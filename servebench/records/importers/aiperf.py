"""Import AIPerf ``profile_export.jsonl``: one line per request, errors included.

Each line has ``metadata`` (``request_start_ns`` / ``request_end_ns`` in Unix epoch nanoseconds,
``x_request_id``, ``benchmark_phase``, ``was_cancelled``), ``metrics`` (``{name: {value, unit}}``) and,
on failures, ``error`` (``code``, ``type``, ``message``). Lines of the raw export
(``--export-level raw``: ``payload``, ``start_perf_ns`` and the server's ``responses``) are read too; only
there can a stream that ended with an error event be seen, which AIPerf counts as a success; a raw
line's token times are its content chunks' arrivals (``responses[].perf_ns`` after ``start_perf_ns``),
carried as ``token_times`` where they match the output tokens one to one, as the records export's
``inter_chunk_latency`` lists are. The
aggregate ``profile_export_aiperf.json`` holds no per-request data; importing it explains which file
to use instead.

A reasoning model's lines carry ``reasoning_token_count`` (AIPerf's tokenizer over the reasoning text;
``output_token_count`` leaves it out, ``output_sequence_length`` holds both) and
``time_to_first_output_token`` (``time_to_first_output`` before AIPerf 0.13), the time to the first
answer token, while ``time_to_first_token`` counts a token of either kind: they become
``reasoning_tokens`` and ``first_answer_token``. A raw line's reasoning chunks are output, as
``servebench load`` reads them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servebench.errors import InputFormatError
from servebench.records.importers.common import (
    Document,
    ImportOptions,
    cached_tokens,
    count,
    finish,
    number,
    require_list,
    require_mapping,
)
from servebench.records.loaded import LoadedRecords
from servebench.records.statuses import failure_status
from servebench.records.stream_chunks import chunk_parts, reasoning_tokens_reported
from servebench.records.token_times import fits, times_from_gaps

FORMAT = "aiperf"
TOOL = "AIPerf"
TIME_UNITS_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}
PROFILING = "profiling"


def _is_line(v: Any) -> bool:
    return isinstance(v, Mapping) and isinstance(v.get("metadata"), Mapping) \
        and ("metrics" in v or "responses" in v) and "request_start_ns" in v["metadata"]


def _is_aggregate(v: Any) -> bool:
    return isinstance(v, Mapping) and "aiperf_version" in v and "schema_version" in v


def sniff(doc: Document) -> bool:
    """Return True for AIPerf per-request JSON Lines (or its aggregate JSON, to explain what to import)."""
    if doc.lines:
        return bool(doc.value) and _is_line(doc.value[0])
    return _is_line(doc.value) or _is_aggregate(doc.value)


def import_runs(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> list[Any]:
    """Return the single run in the file, as a list of one."""
    return [import_document(doc, source, options)]


def import_document(doc: Document, source: str, options: ImportOptions = ImportOptions()) -> LoadedRecords:
    """Import every line; non-profiling (warm-up) requests are marked or dropped as the options say."""
    if _is_aggregate(doc.value):
        raise InputFormatError(
            f"{source}: this is AIPerf's aggregate profile_export_aiperf.json (statistics only); import the "
            "per-request profile_export.jsonl from the same artifacts folder (written with --export-level records)")
    lines = doc.value if doc.lines else [doc.value]
    records, phases = [], []
    notes = {"cancelled": 0, "failed": 0, "osl_server_diff": 0, "osl_client": 0, "osl_pairs": 0,
             "credit_gap_s": 0.0, "credit_n": 0, "end_gap_s": 0.0, "no_ttft": 0, "error_event": 0, "short": 0,
             "icl_carried": 0, "icl_left_out": 0, "raw_carried": 0, "raw_left_out": 0, "reasoned": 0,
             "reasoning_over": 0, "answer_early": 0}
    for i, line in enumerate(lines, start=1):
        where = f"line {i}"
        line = require_mapping(line, source, where)
        stream = _stream(line, source, where)
        rec, phase = _record(line, stream, source, where, notes)
        _add_token_times(rec, line, stream, source, where, notes, options)
        _add_reasoning(rec, line, stream, source, where, notes, options)
        records.append(rec)
        phases.append(phase)
    if not notes["reasoned"]:  # AIPerf 0.13 gives every streamed line a TTFO (= TTFT): no reasoning, no fields
        for rec in records:
            rec.pop("first_answer_token", None)
            rec.pop("reasoning_tokens", None)
    outside = sum(p != PROFILING for p in phases)
    if outside and options.outside_window == "drop":
        records = [r for r, p in zip(records, phases) if p == PROFILING]
    elif outside:
        records = [{**r, "slice": "measured" if p == PROFILING else p} for r, p in zip(records, phases)]
    return finish(records, source, FORMAT, _warnings(notes, outside, options), {
        "tool": FORMAT, "runs": 1, "run_index": 0, "clock": "unix epoch nanoseconds (client wall clock)",
        "phases": {p: phases.count(p) for p in sorted(set(phases))},
        "outside_window": options.outside_window, "unavailable_metrics": [],
    })


def _metric_s(metrics: Mapping[str, Any], name: str, source: str, where: str) -> float | None:
    m = metrics.get(name)
    if not isinstance(m, Mapping):
        return None
    unit = str(m.get("unit", "ms"))
    if unit not in TIME_UNITS_S:
        raise InputFormatError(f"{source}: {where}: metrics.{name}.unit {unit!r} is not a time unit "
                               f"({', '.join(TIME_UNITS_S)})")
    v = number(m.get("value"), source, f"{where}: metrics.{name}.value", required=False)
    return None if v is None else v * TIME_UNITS_S[unit]


def _add_token_times(rec: dict[str, Any], line: Mapping[str, Any], stream: _Stream | None, source: str, where: str,
                     notes: dict[str, Any], options: ImportOptions) -> None:
    """Carry a success's chunk arrivals as token_times, where they fit: a records line's inter_chunk_latency
    list (ms between streamed chunks), or a raw line's content chunks (their perf_ns).

    AIPerf counts output tokens with its client tokenizer, while each chunk is one server token: the
    arrivals fit only where the two counts agree, or with ``tokens=server`` (output tokens from the
    server's usage, as many as the chunks). A raw line has no client count: its output tokens are the
    server's usage (else its chunks).
    """
    metrics = line.get("metrics")
    icl = metrics.get("inter_chunk_latency") if isinstance(metrics, Mapping) else None
    if rec.get("status") != "success" or rec.get("first_token") is None:
        return
    if not isinstance(icl, Mapping):
        if stream is not None and stream.content_s and not metrics:
            times = [rec["start"] + at_s for at_s in stream.content_s]  # the first is first_token, the last end
            carried = fits(times, rec)
            if carried:
                rec["token_times"] = times
            notes["raw_carried" if carried else "raw_left_out"] += 1
        return
    gaps_ms = require_list(icl.get("value"), source, f"{where}: metrics.inter_chunk_latency.value")
    if options.tokens == "server":
        server = _metric_count(metrics, ("usage_completion_tokens",), source, where)  # type: ignore[arg-type]
        if server is not None:
            rec["output_tokens"] = server
    gaps_s = [g / 1000 if isinstance(g, (int, float)) and not isinstance(g, bool) else g for g in gaps_ms]
    times = times_from_gaps(rec["first_token"], gaps_s, rec["end"])
    if times is not None and fits(times, rec):
        rec["token_times"] = times
        notes["icl_carried"] += 1
    else:
        notes["icl_left_out"] += 1


def _add_reasoning(rec: dict[str, Any], line: Mapping[str, Any], stream: _Stream | None, source: str, where: str,
                   notes: dict[str, Any], options: ImportOptions) -> None:
    """Give a success its first answer token (start + AIPerf's time to first output token; a raw line: its first
    answer chunk) and its reasoning tokens (AIPerf's reasoning_token_count; tokens=server, or a raw line: the
    server's usage; else a raw line's reasoning chunks where they match the output tokens one to one).

    A count above the output tokens, or a first answer before the first token, is left out and counted.
    """
    if rec.get("status") != "success" or rec.get("first_token") is None:
        return
    metrics = line.get("metrics") or {}
    client = _metric_count(metrics, ("reasoning_token_count",), source, where)
    server = _metric_count(metrics, ("usage_reasoning_tokens",), source, where)
    if server is None and stream is not None:
        server = reasoning_tokens_reported(stream.usage)
    count = (server if server is not None else client) if options.tokens == "server" or stream is not None \
        else (client if client is not None else server)
    out = rec.get("output_tokens")
    if count is None and stream is not None and stream.content_s and len(stream.content_s) == out:
        count = sum(stream.reasoning)
    if stream is not None and any(stream.reasoning):
        notes["reasoned"] = 1
    if count is not None:
        if count > 0:
            notes["reasoned"] = 1
        if out is None or count <= out:
            rec["reasoning_tokens"] = count
        else:
            notes["reasoning_over"] += 1
    ttfo = _metric_s(metrics, "time_to_first_output_token", source, where)
    if ttfo is None:
        ttfo = _metric_s(metrics, "time_to_first_output", source, where)
    if ttfo is None and stream is not None:
        ttfo = stream.first_answer_s
    if ttfo is not None:
        answer = min(rec["start"] + ttfo, rec["end"])  # as first_token: AIPerf's latency ends at its last response
        if answer >= rec["first_token"]:
            rec["first_answer_token"] = answer
        else:
            notes["answer_early"] += 1


def _output_count(metrics: Mapping[str, Any], source: str, where: str) -> int | None:
    """AIPerf's output tokens, reasoning included: output_sequence_length, else output_token_count (which leaves
    reasoning out) plus reasoning_token_count."""
    osl = _metric_count(metrics, ("output_sequence_length",), source, where)
    if osl is not None:
        return osl
    out = _metric_count(metrics, ("output_token_count",), source, where)
    reasoning = _metric_count(metrics, ("reasoning_token_count",), source, where)
    return out if out is None or reasoning is None else out + reasoning


def _metric_count(metrics: Mapping[str, Any], names: tuple[str, ...], source: str, where: str) -> int | None:
    for name in names:
        m = metrics.get(name)
        if isinstance(m, Mapping) and m.get("value") is not None:
            return count(m.get("value"), source, f"{where}: metrics.{name}.value")
    return None


@dataclass
class _Stream:
    """What a raw-export line's responses show: content arrivals, the last usage report, an error event."""

    content_s: list[float] = field(default_factory=list)  # chunks of answer or reasoning, since the request was sent
    reasoning: list[bool] = field(default_factory=list)  # per chunk: it carried reasoning and no answer
    first_answer_s: float | None = None  # the first chunk carrying answer text
    last_s: float | None = None
    usage: Mapping[str, Any] | None = None
    error: Any = None


def _response_texts(resp: Any) -> tuple[Any, list[str]]:
    """Return a raw response's perf_ns and its SSE data payloads (SSE packets, text, or a plain string)."""
    if isinstance(resp, str):
        return None, _data_lines(resp)
    if not isinstance(resp, Mapping):
        return None, []
    packets = resp.get("packets")
    if isinstance(packets, list):
        return resp.get("perf_ns"), [str(p.get("value", "")) for p in packets
                                     if isinstance(p, Mapping) and p.get("name") == "data"]
    text = resp.get("text")
    return resp.get("perf_ns"), _data_lines(text) if isinstance(text, str) else []


def _data_lines(text: str) -> list[str]:
    lines = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
    return lines if lines else [text.strip()]


def _stream(line: Mapping[str, Any], source: str, where: str) -> _Stream | None:
    """Read a raw-export line's responses; None when the line has none."""
    if "responses" not in line:
        return None
    responses = require_list(line.get("responses"), source, f"{where}: responses")
    t0 = number(line.get("start_perf_ns"), source, f"{where}: start_perf_ns", required=False)
    st = _Stream()
    for k, resp in enumerate(responses):
        perf_ns, payloads = _response_texts(resp)
        t = number(perf_ns, source, f"{where}: responses[{k}].perf_ns", required=False)
        at_s = None if t is None or t0 is None else (t - t0) / 1e9
        if at_s is not None:
            st.last_s = at_s
        for payload in payloads:
            if not payload or payload == "[DONE]":
                continue
            try:
                obj = json.loads(payload)
            except json.JSONDecodeError:
                continue  # AIPerf itself parsed the stream; a fragment it kept is not ours to judge
            if not isinstance(obj, Mapping):
                continue
            if obj.get("error") is not None:
                st.error = obj["error"]
                continue
            answer, thought = chunk_parts(obj)
            if (answer or thought) and at_s is not None:
                st.content_s.append(at_s)
                st.reasoning.append(not answer)
                if answer and st.first_answer_s is None:
                    st.first_answer_s = at_s
            if isinstance(obj.get("usage"), Mapping):
                st.usage = obj["usage"]
    return st


def _requested_tokens(line: Mapping[str, Any]) -> int | None:
    payload = line.get("payload")
    if not isinstance(payload, Mapping):
        return None
    for key in ("max_completion_tokens", "max_tokens"):
        v = payload.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _record(line: Mapping[str, Any], stream: _Stream | None, source: str, where: str,
            notes: dict[str, Any]) -> tuple[dict[str, Any], str]:
    md = require_mapping(line.get("metadata"), source, f"{where}: metadata")
    metrics = line.get("metrics") or {}
    metrics = require_mapping(metrics, source, f"{where}: metrics")
    start_ns = number(md.get("request_start_ns"), source, f"{where}: metadata.request_start_ns")
    end_ns = number(md.get("request_end_ns") if md.get("request_end_ns") is not None
                    else md.get("cancellation_time_ns"), source, f"{where}: metadata.request_end_ns")
    assert start_ns is not None and end_ns is not None
    start, end = start_ns / 1e9, end_ns / 1e9
    credit = number(md.get("credit_issued_ns"), source, f"{where}: metadata.credit_issued_ns", required=False)
    if credit is not None and credit <= start_ns:
        notes["credit_gap_s"] += (start_ns - credit) / 1e9
        notes["credit_n"] += 1
    phase = str(md.get("benchmark_phase") or PROFILING)
    prompt = _metric_count(metrics, ("input_sequence_length", "error_isl", "usage_prompt_tokens"), source, where)
    rec: dict[str, Any] = {"request_id": _text(md.get("x_request_id")), "start": start, "end": max(end, start),
                           "prompt_tokens": prompt}
    error = line.get("error")
    if stream is not None and stream.usage is not None and prompt is None:
        prompt = count(stream.usage.get("prompt_tokens"), source, f"{where}: usage.prompt_tokens")
        rec["prompt_tokens"] = prompt
    if stream is not None and isinstance(stream.usage, dict):
        rec["cached_prompt_tokens"] = cached_tokens(stream.usage, source, where)
    if error is None and not md.get("was_cancelled"):
        ttft = _metric_s(metrics, "time_to_first_token", source, where)
        out = _output_count(metrics, source, where)
        server = _metric_count(metrics, ("usage_completion_tokens",), source, where)
        latency = _metric_s(metrics, "request_latency", source, where)
        if stream is not None:  # a raw-export line: times and counts from the responses themselves
            server = server if server is not None or stream.usage is None else count(
                stream.usage.get("completion_tokens"), source, f"{where}: usage.completion_tokens")
            if out is None:
                out = server if server is not None else (len(stream.content_s) or None)
            if ttft is None and stream.content_s:
                ttft = stream.content_s[0]
            if latency is None and stream.content_s:
                latency = stream.content_s[-1]
            if stream.error is not None:  # AIPerf calls this a success; the server said otherwise
                return _error_event(rec, stream, out, ttft, _requested_tokens(line), notes), phase
        if out is not None and server is not None:
            notes["osl_pairs"] += 1
            notes["osl_server_diff"] += server - out
            notes["osl_client"] += out
        if latency is not None:  # AIPerf's latency ends at the last response; request_end_ns can be later
            notes["end_gap_s"] = max(notes["end_gap_s"], rec["end"] - (start + latency))
            rec["end"] = start + max(latency, 0.0)
        if ttft is None:  # non-streaming: the client saw every token at the end
            notes["no_ttft"] += 1
        rec.update(status="success", output_tokens=out,
                   first_token=rec["end"] if ttft is None else min(start + ttft, rec["end"]))
        return rec, phase
    err = require_mapping(error or {}, source, f"{where}: error")
    code = err.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    etype, msg = str(err.get("type") or ""), str(err.get("message") or "")
    text = " ".join(p for p in (f"HTTP {code}" if code else "", f"{etype}:" if etype else "", msg) if p)
    cancelled = bool(md.get("was_cancelled")) or etype == "RequestCancellationError"
    status = failure_status(code, f"{etype} {msg}", client_cancelled=cancelled)
    notes["cancelled"] += status == "cancelled"
    notes["failed"] += 1
    rec.update(status=status, error=text or "unspecified (AIPerf gave no error details)")
    if stream is not None and stream.content_s:  # a raw-export line shows the tokens streamed before the error
        rec["output_tokens"] = len(stream.content_s)
    return rec, phase


def _error_event(rec: dict[str, Any], stream: _Stream, out: int | None, ttft: float | None,
                 requested: int | None, notes: dict[str, Any]) -> dict[str, Any]:
    """Give a stream that ended with an error event the event's status, keeping its tokens as wasted work."""
    cause = json.dumps(stream.error) if not isinstance(stream.error, str) else stream.error
    message = stream.error.get("message", cause) if isinstance(stream.error, Mapping) else cause
    code = stream.error.get("code") if isinstance(stream.error, Mapping) else None
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    notes["error_event"] += 1
    if requested is not None and out is not None and out < requested:
        notes["short"] += 1
    start = rec["start"]
    if stream.last_s is not None:
        rec["end"] = max(rec["end"], start + stream.last_s)
    if ttft is not None and start + ttft <= rec["end"]:
        rec["first_token"] = start + ttft
    rec.update(status=failure_status(code, cause), output_tokens=out, error=f"error event: {message}")
    return rec


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _warnings(notes: dict[str, Any], outside: int, options: ImportOptions) -> list[str]:
    w = [f"{TOOL}: times are Unix epoch nanoseconds from the client (wall clock); start is request_start_ns "
         "(when the request was sent), first token is start + time_to_first_token, and a success ends at "
         "start + request_latency (its last response; request_end_ns, when the connection finished, was up to "
         f"{1000 * notes['end_gap_s']:.3f} ms later); failures end at request_end_ns",
         f"{TOOL}'s inter_token_latency is (request_latency - TTFT) / (output tokens - 1), the same definition "
         "as servebench's request TPOT; its inter_chunk_latency lists (gaps between streamed chunks) become "
         "token_times where the chunks match the output tokens one to one"]
    if notes["icl_left_out"]:
        w.append(f"{TOOL}: the inter_chunk_latency of {notes['icl_left_out']} success(es) is not carried over: their "
                 "chunks (one server token each) do not match AIPerf's client-tokenizer output count; "
                 "--format aiperf:tokens=server counts the server's tokens instead and carries them")
    if notes["raw_carried"] or notes["raw_left_out"]:
        w.append(f"{TOOL}: the raw export's content chunks (their arrival, responses[].perf_ns) become token_times: "
                 f"{notes['raw_carried']} success(es) carried"
                 + (f"; {notes['raw_left_out']} not, their chunks do not match the server's output tokens (usage) one "
                    "to one" if notes["raw_left_out"] else ""))
    if options.tokens == "server":
        w.append(f"{TOOL}: tokens=server: a success's output tokens are the server's usage_completion_tokens, "
                 "not AIPerf's client-tokenizer count")
    if notes["reasoned"]:
        w.append(f"{TOOL}: a reasoning model: TTFT is AIPerf's time_to_first_token (a token of either kind), "
                 "first_answer_token is start + time_to_first_output_token (the first answer token), "
                 "reasoning_tokens AIPerf's reasoning_token_count (tokens=server: the server's usage_reasoning_tokens)"
                 + (f"; {notes['reasoning_over']} count(s) above their output tokens left out"
                    if notes["reasoning_over"] else "")
                 + (f"; {notes['answer_early']} first answer(s) before their first token left out"
                    if notes["answer_early"] else ""))
    if notes["failed"]:
        w.append(f"{TOOL}: its {notes['failed']} non-successful request(s) keep only their input length "
                 "(error_isl); their TTFT and any streamed tokens are not in the export")
    if notes["credit_n"]:
        mean_ms = 1000 * notes["credit_gap_s"] / notes["credit_n"]
        w.append(f"{TOOL}: requests were scheduled (credit_issued_ns) on average {mean_ms:.2f} ms before they "
                 "were sent; that client-side delay is not part of latency or TTFT here")
    if notes["no_ttft"]:
        w.append(f"{TOOL}: {notes['no_ttft']} successful request(s) have no time_to_first_token (non-streaming): "
                 "their first token is set to their end, when the client received the whole response")
    if notes["error_event"]:
        short = f", {notes['short']} of them shorter than the max_tokens they asked for" if notes["short"] else ""
        w.append(f"{TOOL} counts a stream that ends with an error event as a success: {notes['error_event']} "
                 f"request(s) did{short}; servebench gives them the status of the event's cause (see the status "
                 "table in docs/importers.md) and keeps the tokens they received as wasted work")
    if notes["cancelled"]:
        w.append(f"{TOOL} discards the partial stream of cancelled requests: the TTFT and tokens of "
                 f"{notes['cancelled']} cancelled request(s) are unknown, so wasted tokens are undercounted")
    if notes["osl_pairs"] and notes["osl_server_diff"] and options.tokens == "client":
        pct = 100 * notes["osl_server_diff"] / max(1, notes["osl_client"])
        w.append(f"{TOOL}: output tokens are AIPerf's client-tokenizer counts (output_sequence_length); the "
                 f"server's usage report (usage_completion_tokens) differs by {notes['osl_server_diff']:+d} "
                 f"tokens in total ({pct:+.1f}%)")
    if outside:
        what = "dropped" if options.outside_window == "drop" else \
            "kept and marked with their phase as slice (profiling ones: slice 'measured')"
        w.append(f"{TOOL}: {outside} request(s) belong to a non-profiling phase (warm-up); {what}")
    return w
