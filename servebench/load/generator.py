"""An asynchronous load generator for OpenAI-compatible completion endpoints (httpx, server-sent events).

Open loop: each planned request has an intended send time on the run's clock; a dispatcher starts it
then, whatever the responses do, so queueing in the server is real. Closed loop: ``users`` coroutines
each send, wait for the end, think, and send again. Every request sent ends in exactly one outcome:
success, or the status :mod:`servebench.records.statuses` gives its failure (rejected, timeout, cancelled,
failed; the cause in ``error``), with the content chunks it received before a failure kept as wasted
``output_tokens``. Planned requests the duration limit left unsent are counted, not dropped.

One clock: ``loop.time()`` (``time.monotonic``), in seconds since the run's origin ``t0``. A record's
``start`` is the *intended* send time (the arrival, as in the simulator, so the generator's own
delays are never dropped from what a user would have waited); the *actual* send time and the lag
between the two are kept beside it (:class:`HttpOutcome`, ``sends.jsonl``) and summarized in
:class:`GeneratorStats`, so a late generator is visible rather than blamed on the server.

This module plans and schedules requests and turns their outcomes into records, statistics and
files; :mod:`servebench.load.client` sends one request and reads its server-sent events.
"""

from __future__ import annotations

import asyncio
import json
import math
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.percentiles import percentile
from servebench.errors import ConfigError
from servebench.load.client import (
    API_PATHS,
    HttpOutcome,
    count_partial_tokens,
    discover_model,
    exc_text,
    exchange,
    normalize_url,
    reasoning_run,
)
from servebench.load.handoff import Handed, Handoff, request_bytes
from servebench.records import rundir
from servebench.records.schema import parse_objects, record_dict
from servebench.records.server_samples import ServerSamples
from servebench.records.statuses import failure_status
from servebench.records.table import RecordTable, default_window, validate
from servebench.records.token_times import fits
from servebench.serving.retry import ERR_CLIENT_DEADLINE, ClientSpec
from servebench.serving.send_lag import lag_threshold_s, sent_late
from servebench.serving.workload import (
    CancelSpec,
    Workload,
    WorkloadSpec,
    draw_workload,
)

MAX_RETRY_WAIT_S = 60.0  # default cap on any wait before a retry: a server may ask for days
# an arrival this close to the duration limit counts as at it, as on the event loop's clock (t0 + 0.49999999999999994,
# constant arrivals' 10 / 20 s, rounds to t0 + 0.5 there)
LIMIT_TOLERANCE_S = 1e-9

# Common English words that most tokenizers keep as one token each (with a leading space).
PROMPT_WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school",
    "state", "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week",
    "company", "system", "program", "question", "work", "number", "night", "point", "home", "water",
    "room", "mother", "area", "money", "story", "fact", "month", "lot", "right", "study", "book", "eye",
    "job", "word", "business", "issue", "side", "kind", "head", "house", "service", "friend", "father",
    "power", "hour", "game", "line", "end", "member", "law", "car",
)


class LoadConfig(BaseModel):
    """How to talk to the endpoint and the bounds every request loop obeys."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="Base URL of the server, e.g. http://127.0.0.1:8000 (no /v1 suffix needed).")
    api: Literal["completions", "chat"] = "completions"
    model: str | None = Field(None, description="Model name to send; None asks /v1/models for the first one.")
    stream: bool = True
    include_usage: bool = Field(True, description="Ask for usage in the last chunk (stream_options).")
    ignore_eos: bool = Field(True, description="Send ignore_eos so outputs run to max_tokens (vLLM, SGLang).")
    deadline_s: float = Field(30.0, gt=0, description="Per-request deadline, from the intended send time.")
    duration_s: float | None = Field(
        None, gt=0, description="Hard end of the run from t0: later arrivals are not sent, in-flight are cancelled.")
    max_in_flight: int = Field(256, ge=1, description="Generator capacity: open connections at once.")
    users: int | None = Field(None, ge=1, description="Closed loop with this many users; None: open loop.")
    api_key: str | None = None
    client: ClientSpec | None = Field(None, description="Retrying clients (serving.retry's rules; a 429 or 503's "
                                                        "Retry-After raises the wait); None: one attempt each.")
    jitter_seed: int = Field(0, description="Seed of the backoff's full jitter.")
    max_retry_wait_s: float = Field(
        MAX_RETRY_WAIT_S, gt=0, allow_inf_nan=False,
        description="Longest wait before a retry, s: a server's Retry-After above it (and any backoff) is cut to it.")
    sender: Literal["process", "loop"] = Field(
        "process", description="Open loop: who keeps the schedule. process: a sender process of its own that writes "
                               "each request at its time on a connection opened ahead and hands the connection over "
                               "(plain http, no retrying clients); loop: this process's event loop, which also "
                               "parses every stream (https, retries and closed loops always use it).")
    warmup_requests: int = Field(0, ge=0, le=10_000, description="Untimed requests sent one at a time before the "
                                                                 "measured schedule; never records.")


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send: its id, intended send time (open loop) or think time (closed), lengths."""

    request_id: str
    intended_s: float
    prompt: str | list[int]
    prompt_words: int
    max_tokens: int
    slice: str | None = None
    think_s: float = 0.0
    deadline_s: float | None = None
    cancel_after_s: float | None = None  # the client gives up this long after the request's arrival (None: never)
    trace_row: int | None = None  # a replayed trace's row this request is (records keep it as ``trace_row``)


class LagStats(BaseModel):
    """Schedule lag (actual minus intended send time) over the requests that were sent."""

    n: int
    p50_s: float | None
    p99_s: float | None
    max_s: float | None
    mean_s: float | None


class TtftStats(BaseModel):
    """TTFT percentiles over the successes, from one starting point (nearest rank, s)."""

    n: int
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None


class TtftBothWays(BaseModel):
    """TTFT from the intended send (the records' figure: a user arriving then waits all of it) and from the actual
    send (the server and network alone); the difference is the generator's own lag, reported beside them."""

    from_intended_s: TtftStats
    from_sent_s: TtftStats


class WarmupStats(BaseModel):
    """The untimed requests sent one at a time before the measured schedule (``--warmup-requests``)."""

    requests: int
    succeeded: int
    seconds: float = Field(description="From the first warm-up request's send to the last one's end.")
    first_error: str | None = None


class WorkerStats(BaseModel):
    """One of several workers: its share of the schedule, its own send lag, its clock against the coordinator's.

    ``clock_offset_s`` is the coordinator's monotonic clock minus the worker's, measured by pings
    before the run (``clock_uncertainty_s`` is half the best ping's round trip) and again after it.
    """

    worker: int
    host: str
    pid: int
    planned: int
    offered: int
    sent: int
    completed: int
    peak_in_flight: int
    waited_for_slot: int
    schedule_lag_s: LagStats
    start_late_s: float = Field(description="How far past the common origin the worker began (0: on time).")
    clock_offset_s: float = Field(description="Coordinator minus worker clock at the start, s.")
    clock_uncertainty_s: float = Field(description="Half the round trip of the best start ping, s.")
    clock_offset_end_s: float = Field(description="Coordinator minus worker clock after the run, s.")
    clock_uncertainty_end_s: float
    clock_drift_s: float = Field(description="End offset minus start offset, s.")


class GeneratorStats(BaseModel):
    """Offered, accepted, completed and rejected work, and the generator's own limits."""

    mode: Literal["open", "closed"]
    planned: int = Field(description="Requests in the plan.")
    offered: int = Field(description="Requests whose intended send time came before the run ended (one record each).")
    not_sent_duration_limit: int = Field(description="Planned requests never sent: the duration limit came first.")
    sent: int = Field(description="Requests that reached the wire (the rest waited for a slot past their limit).")
    accepted: int = Field(description="Offered minus rejected.")
    completed: int = Field(description="Successful requests.")
    rejected: int
    failed: int
    timed_out: int
    cancelled: int
    max_in_flight: int = Field(description="The generator's connection limit.")
    peak_in_flight: int = Field(description="Most requests on the wire at once.")
    waited_for_slot: int = Field(description="Requests that found every connection busy and waited.")
    schedule_lag_s: LagStats
    lag_warning: str | None = Field(None, description="Set when the generator was late enough to matter.")
    implausible_usage: int = Field(0, description="Replies whose usage.completion_tokens could not be true "
                                                  "(above max_tokens or the text received); what arrived was kept.")
    retry_waits_capped: int = Field(0, description="Retries sent at the cap on a retry's wait (--max-retry-wait-s) "
                                                   "though the server's Retry-After asked for longer.")
    warnings: list[str] = Field(default_factory=list, description="Everything the run should not hide, one line each.")
    ttft: TtftBothWays | None = Field(None, description="TTFT from the intended and from the actual send (None when "
                                                         "no success was sent).")
    sender: Literal["process", "loop"] | None = Field(None, description="Who kept the schedule: a sender process, or "
                                                                        "the event loop that parses the streams.")
    warmup: WarmupStats | None = Field(None, description="The untimed warm-up requests (None: none were sent).")
    sender_nice: int | None = Field(None, description="The niceness the sender process ran at: it asks for -10 and "
                                                      "keeps its default (0) where the system refuses.")
    run_s: float = Field(description="From t0 to the last outcome.")
    workers: list[WorkerStats] | None = Field(None, description="Per worker, when several shared the schedule "
                                                                "(None: one generator).")
    logical_offered: int | None = Field(None, description="User (logical) requests offered when clients retry; "
                                                          "offered then counts their attempts (None: no retries).")
    logical_completed: int | None = Field(None, description="Logical requests whose last attempt succeeded.")
    amplification: float | None = Field(None, description="Attempts per logical request (1: no retry was sent).")


@dataclass
class RunState:
    """What a run has gathered so far (readable by a caller after an interruption)."""

    outcomes: list[HttpOutcome] = field(default_factory=list)
    model: str | None = None
    started_utc: str = ""
    peak_in_flight: int = 0
    waited_for_slot: int = 0
    interrupted: bool = False  # set when the run was stopped (Ctrl-C, SIGTERM) before its plan was done
    stopped_by: str | None = None  # the signal that stopped it ("SIGINT", "SIGTERM"), when one did
    t0_monotonic_s: float | None = None  # the run's origin t0 on time.monotonic (server metrics are placed on it)
    trace_rows: dict[str, int] | None = None  # a trace replay's rows by request id (None: no trace)
    sender: Literal["process", "loop"] | None = None  # who kept the schedule
    warmup: WarmupStats | None = None  # the untimed requests before the origin
    sender_nice: int | None = None  # the sender process's niceness


class RunStopped(Exception):
    """A stop signal (SIGTERM) ended the run early; what it gathered is in its :class:`RunState`."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name}")
        self.signal_name = signal_name


@dataclass
class LoadResult:
    """Everything one load run produced."""

    outcomes: list[HttpOutcome]
    stats: GeneratorStats
    model: str
    config: LoadConfig
    started_utc: str
    stopped_by: str | None = None  # the signal that cut the run short (its outcomes are what it gathered)
    t0_monotonic_s: float | None = None  # the run's origin t0 on this process's time.monotonic
    trace_rows: dict[str, int] | None = None  # a trace replay's rows by request id: the records' trace_row


# --------------------------------------------------------------------------- pure helpers


def make_prompt(n_words: int, rng: np.random.Generator) -> str:
    """Return a prompt of ``n_words`` common words drawn with ``rng`` (distinct prompts, little prefix sharing)."""
    if n_words < 1:
        raise ConfigError(f"prompt length must be at least 1 word, got {n_words}")
    idx = rng.integers(0, len(PROMPT_WORDS), size=n_words)
    return " ".join(PROMPT_WORDS[i] for i in idx)


def plan_requests(intended_s: Sequence[float] | np.ndarray, prompt_words: Sequence[int] | np.ndarray,
                  output_tokens: Sequence[int] | np.ndarray, rng: np.random.Generator,
                  slices: Sequence[str | None] | None = None, id_prefix: str = "req",
                  think_s: Sequence[float] | np.ndarray | None = None,
                  deadline_s: Sequence[float | None] | None = None,
                  prompts: Sequence[str] | None = None,
                  cancel_after_s: Sequence[float] | np.ndarray | None = None,
                  trace_rows: Sequence[int] | np.ndarray | None = None) -> list[PlannedRequest]:
    """Pair arrival times with prompt and output lengths; prompts are drawn with ``rng`` unless given.

    A closed-loop plan passes NaN arrival times (users decide when to send) and ``think_s``.
    ``cancel_after_s``: each client's wait after its request's arrival before it gives up (NaN: never).
    ``trace_rows``: each request's row in the trace it replays.
    """
    n = len(intended_s)
    if len(prompt_words) != n or len(output_tokens) != n or (slices is not None and len(slices) != n):
        raise ConfigError(f"plan: {n} arrival times but {len(prompt_words)} prompt lengths and "
                          f"{len(output_tokens)} output lengths")
    times = np.asarray(intended_s, dtype=np.float64)
    closed = bool(n) and bool(np.all(np.isnan(times)))
    if n and not closed and (not np.all(np.isfinite(times)) or np.any(np.diff(times) < 0) or times[0] < 0):
        raise ConfigError("plan: arrival times must be finite, non-negative and sorted")
    plan = []
    for i in range(n):
        out = int(output_tokens[i])
        if out < 1:
            raise ConfigError(f"plan: request {i}: output length {out} must be at least 1")
        words = int(prompt_words[i])
        plan.append(PlannedRequest(
            request_id=f"{id_prefix}-{i:06d}", intended_s=float(times[i]),
            prompt=make_prompt(words, rng) if prompts is None else prompts[i],
            prompt_words=words, max_tokens=out, slice=None if slices is None else slices[i],
            think_s=0.0 if think_s is None else float(think_s[i]),
            deadline_s=None if deadline_s is None else deadline_s[i],
            cancel_after_s=None if cancel_after_s is None or math.isnan(cancel_after_s[i]) else float(cancel_after_s[i]),
            trace_row=None if trace_rows is None else int(trace_rows[i])))
    return plan


def trace_rows(plan: Sequence[PlannedRequest]) -> dict[str, int] | None:
    """Return each planned request's trace row by its id (None when the plan replays no trace)."""
    rows = {r.request_id: r.trace_row for r in plan if r.trace_row is not None}
    return rows or None


def workload_plan(spec: WorkloadSpec, rng: np.random.Generator, cancel: CancelSpec | None = None) -> list[PlannedRequest]:
    """Draw a workload (open-loop arrivals, or closed-loop lengths and think times) into a plan.

    ``cancel`` (a scenario's clients that give up) is drawn as the simulator and the engine draw it, so a
    seed cancels the same requests after the same waits on every clock.

    Prompt lengths are sent as that many words: exact for ``serve-engine``, approximate for a real
    tokenizer (the records take ``prompt_tokens`` from the server's ``usage``). With both
    ``num_requests`` and ``duration_s`` the plan holds every requested arrival: the duration is the
    run's limit (``LoadConfig.duration_s``), so the requests it cuts off are counted as never sent
    instead of vanishing from the plan.
    """
    if spec.num_requests is not None and spec.duration_s is not None:
        spec = spec.model_copy(update={"duration_s": None})
    drawn = draw_workload(spec, rng, cancel)  # the simulator's and the engine's draw
    wl, think = drawn.requests, drawn.think_s
    if len(wl) == 0:
        raise ConfigError("the workload produced no requests (raise --requests or --duration)")
    names = [wl.class_names[c] for c in wl.class_index.tolist()]
    slices = names if len(wl.class_names) > 1 else None
    deadlines = [wl.class_timeout_s[c] for c in wl.class_index.tolist()]
    if wl.has_turns:
        raise ConfigError("servebench load does not send conversations yet (a later turn waits for the previous "
                          "answer): simulate this workload, or drop 'conversation' from its classes")
    prompts = shared_prompts(wl) if wl.shares_content else None
    return plan_requests(wl.arrival_s, np.maximum(wl.prompt_tokens, 1), wl.output_tokens, rng,
                         slices=slices, think_s=think, deadline_s=deadlines, prompts=prompts,
                         cancel_after_s=drawn.cancel_after_s, trace_rows=wl.trace_row)


def shared_prompts(wl: Workload) -> list[str]:
    """Return prompts that share what the workload's prompts share (a document is the same words every time).

    Token id t becomes common word t mod the word list, so prefix caching on the server sees the
    sharing the simulator models (exactly on ``serve-engine``, one token per word): a trace's requests that
    name one block ID send that block's same words.
    """
    words = PROMPT_WORDS
    return [" ".join(words[t % len(words)] for t in content.token_ids(2**31)) or words[0]
            for content in wl.prompt_contents()]


def unsent_warning(planned: int, offered: int, duration_s: float | None, interrupted: bool = False) -> str | None:
    """Say how many planned requests the duration limit left unsent (as ``servebench run --max-wall-s`` does)."""
    unsent = planned - offered
    if unsent <= 0:
        return None
    limit = "the interruption" if interrupted else (
        f"the {duration_s:g} s duration limit" if duration_s is not None else "the end of the run")
    return (f"stopped at {limit}: {unsent} of {planned} planned requests never sent (not records; "
            "counted as not_sent_duration_limit)")


def usage_warning(outcomes: Sequence[HttpOutcome]) -> str | None:
    """Summarize the replies whose reported output token count was impossible (the first one as an example)."""
    bad = [o for o in outcomes if o.reported_output_tokens is not None]
    if not bad:
        return None
    return (f"{len(bad)} replies reported more output tokens than can have arrived; their records keep what was "
            f"received (sends.jsonl: reported_output_tokens). First: {bad[0].request_id}: {bad[0].warning}")


def request_body(config: LoadConfig, model: str, req: PlannedRequest) -> dict[str, Any]:
    """Return the JSON body of one request."""
    body: dict[str, Any] = {"model": model, "max_tokens": req.max_tokens, "stream": config.stream,
                            "temperature": 0.0}
    if config.api == "chat":
        text = req.prompt if isinstance(req.prompt, str) else " ".join(str(t) for t in req.prompt)
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = req.prompt
    if config.stream and config.include_usage:
        body["stream_options"] = {"include_usage": True}
    if config.ignore_eos:
        body["ignore_eos"] = True
    return body


def to_record(o: HttpOutcome, reasoning: bool = False, trace_row: int | None = None) -> dict[str, Any]:
    """Return the canonical timing record of an outcome (``start`` is the intended send time).

    With several workers the record also names its ``worker`` (an extra column, e.g. for ``--slice-by worker``);
    a trace replay's record its ``trace_row`` (an extra column: the request's row in the trace).
    ``reasoning``: the run measured a reasoning model (``client.reasoning_run``), so the record says its first
    answer token and reasoning tokens.
    """
    rec = record_dict(request_id=o.request_id, start=o.intended_s, first_token=o.first_token_s, end=o.end_s,
                      status=o.status, prompt_tokens=o.prompt_tokens, output_tokens=o.output_tokens,
                      slice=o.slice, error=o.error, cached_prompt_tokens=o.cached_prompt_tokens,
                      logical_id=o.logical_id, attempt=o.attempt, **(o.reasoning_fields() if reasoning else {}))
    times, counts = o.token_timing()  # each streamed chunk's arrival, and its tokens when it carried several
    if times is not None and fits(times, rec, counts):
        rec["token_times"] = times
        if counts is not None:
            rec["token_counts"] = counts
    if o.worker is not None:
        rec["worker"] = o.worker
    if trace_row is not None:
        rec["trace_row"] = trace_row
    return rec


def _trace_row(o: HttpOutcome, rows: dict[str, int] | None) -> int | None:
    """Return the trace row of an outcome's (logical) request, or None."""
    return None if rows is None else rows.get(o.logical_id or o.request_id)


def to_send_row(o: HttpOutcome) -> dict[str, Any]:
    """Return the sidecar row (sends.jsonl): what the canonical record has no field for."""
    return {
        "request_id": o.request_id, "intended_s": o.intended_s, "sent_s": o.sent_s, "lag_s": o.lag_s,
        "http_status": o.http_status, "requested_prompt_words": o.requested_prompt_words,
        "requested_output_tokens": o.requested_output_tokens, "output_tokens_source": o.output_tokens_source,
        "token_level_chunks": o.token_level_chunks, "reported_output_tokens": o.reported_output_tokens,
        "warning": o.warning, "chunk_times_s": o.chunk_times_s,
    } | ({} if o.attempt is None else retry_columns(o)) | ({} if o.worker is None else {"worker": o.worker})


def retry_columns(o: HttpOutcome) -> dict[str, Any]:
    """Return an attempt's retry columns in sends.jsonl: the server's Retry-After as read and as sent, the next start.

    A Retry-After beyond a float (infinity) is written as null beside its text, so the file stays JSON.
    """
    asked = o.retry_after_s if o.retry_after_s is None or math.isfinite(o.retry_after_s) else None
    return {"retry_after_s": asked, "retry_after": o.retry_after_text, "retry_at_s": o.retry_at_s,
            "retry_wait_capped": o.retry_wait_capped}


def capped_wait_warning(outcomes: Sequence[HttpOutcome]) -> str | None:
    """Say how many retries went sooner than the server's Retry-After asked, because every wait is capped."""
    capped = [o for o in outcomes if o.retry_wait_capped and o.retry_at_s is not None]
    if not capped:
        return None
    first = capped[0]
    longest = max(capped, key=lambda o: o.retry_after_s or 0.0)
    return (f"{len(capped)} retries were sent before the server's Retry-After ran out: it asked up to "
            f"{longest.retry_after_text!r}, above the cap on a retry's wait (--max-retry-wait-s); first: "
            f"{first.request_id} waited {first.retry_at_s - first.end_s:.3g} s (sends.jsonl: retry_wait_capped)")


def ttft_both_ways(outcomes: Sequence[HttpOutcome]) -> TtftBothWays | None:
    """Return TTFT over the sent successes from the intended and from the actual send (None: no such success).

    >>> o = HttpOutcome("r", 1.0, status="success", sent_s=1.25, first_token_s=1.5, end_s=2.0)
    >>> t = ttft_both_ways([o]); t.from_intended_s.p50_s, t.from_sent_s.p50_s
    (0.5, 0.25)
    """
    ok = [o for o in outcomes if o.status == "success" and o.sent_s is not None and o.first_token_s is not None]
    if not ok:
        return None

    def stats(ttft: list[float]) -> TtftStats:
        return TtftStats(n=len(ttft), p50_s=percentile(ttft, 50), p95_s=percentile(ttft, 95),
                         p99_s=percentile(ttft, 99))
    return TtftBothWays(from_intended_s=stats([o.first_token_s - o.intended_s for o in ok]),  # type: ignore[operator]
                        from_sent_s=stats([o.first_token_s - o.sent_s for o in ok]))  # type: ignore[operator]


def warmup_warning(warmup: WarmupStats | None) -> list[str]:
    """Say when warm-up requests failed (a warning, never an error: the measured run goes on)."""
    if warmup is None or warmup.succeeded == warmup.requests:
        return []
    return [(f"warm-up: {warmup.requests - warmup.succeeded} of {warmup.requests} untimed requests did not succeed "
             f"(first: {warmup.first_error}); the measured run went on")]


def lag_stats(outcomes: Sequence[HttpOutcome]) -> LagStats:
    """Summarize schedule lag over the sent requests (nearest-rank percentiles)."""
    lags = np.array([o.lag_s for o in outcomes if o.lag_s is not None], dtype=np.float64)
    if lags.size == 0:
        return LagStats(n=0, p50_s=None, p99_s=None, max_s=None, mean_s=None)
    return LagStats(n=int(lags.size), p50_s=percentile(lags, 50), p99_s=percentile(lags, 99),
                    max_s=float(lags.max()), mean_s=float(lags.mean()))


def lag_warning(lag: LagStats, outcomes: Sequence[HttpOutcome], mode: str) -> str | None:
    """Return a warning when p99 schedule lag exceeds 10 ms and 5% of the median request latency (open
    loop; the rule of :mod:`servebench.serving.send_lag`), or when requests never reached the wire (their lag
    is unknown, so the lag statistics leave them out).
    """
    warnings = []
    if mode == "open" and lag.p99_s is not None:
        lat = [o.end_s - o.intended_s for o in outcomes if o.status == "success"]
        p50_latency = percentile(lat, 50) if lat else None
        threshold = lag_threshold_s(p50_latency)
        if sent_late(lag.p99_s, p50_latency):
            warnings.append(f"the generator was late: p99 schedule lag {lag.p99_s:.3g} s (max {lag.max_s:.3g} s) is "
                            f"above {threshold:.3g} s; latencies include it (see sends.jsonl); lower the rate or "
                            "raise --max-in-flight")
    unsent = sum(o.sent_s is None for o in outcomes)
    if unsent:
        warnings.append(f"{unsent} requests never reached the wire: every generator connection stayed busy until "
                        "their deadline or the end of the run (they are records, but not in the lag statistics)")
    return "; ".join(warnings) or None


def generator_stats(outcomes: Sequence[HttpOutcome], mode: Literal["open", "closed"], planned: int,
                    max_in_flight: int, peak_in_flight: int, waited_for_slot: int,
                    duration_s: float | None = None, interrupted: bool = False) -> GeneratorStats:
    """Count outcomes into offered, accepted, completed, rejected work and the generator's limits.

    Conservation: planned = offered + not sent, and offered = the five statuses summed. With retrying
    clients offered counts attempts (one record each) and planned = logical requests offered + not sent.
    """
    counts = {s: 0 for s in ("success", "failed", "timeout", "cancelled", "rejected")}
    for o in outcomes:
        counts[o.status] += 1
    lag = lag_stats(outcomes)
    ends = [o.end_s for o in outcomes if math.isfinite(o.end_s)]
    lag_note = lag_warning(lag, outcomes, mode)
    retrying = any(o.logical_id is not None for o in outcomes)
    logical = {o.logical_id or o.request_id for o in outcomes}
    users = len(logical) if retrying else len(outcomes)
    warnings = [w for w in (unsent_warning(planned, users, duration_s, interrupted), usage_warning(outcomes),
                            lag_note, capped_wait_warning(outcomes))
                if w is not None]
    return GeneratorStats(
        logical_offered=users if retrying else None,
        logical_completed=len({o.logical_id for o in outcomes if o.status == "success"}) if retrying else None,
        amplification=len(outcomes) / users if retrying and users else None,
        mode=mode, planned=planned, offered=len(outcomes), not_sent_duration_limit=planned - users,
        sent=sum(o.sent_s is not None for o in outcomes), accepted=len(outcomes) - counts["rejected"],
        completed=counts["success"], rejected=counts["rejected"], failed=counts["failed"],
        timed_out=counts["timeout"], cancelled=counts["cancelled"], max_in_flight=max_in_flight,
        peak_in_flight=peak_in_flight, waited_for_slot=waited_for_slot, schedule_lag_s=lag, lag_warning=lag_note,
        implausible_usage=sum(o.reported_output_tokens is not None for o in outcomes), warnings=warnings,
        retry_waits_capped=sum(o.retry_wait_capped for o in outcomes),
        ttft=ttft_both_ways(outcomes),
        run_s=max(ends) if ends else 0.0)


# --------------------------------------------------------------------------- the run


class _Runner:
    """State shared by the dispatcher and the request coroutines of one run."""

    def __init__(self, config: LoadConfig, model: str, client: httpx.AsyncClient, t0: float,
                 on_outcome: Callable[[HttpOutcome], None] | None, state: RunState) -> None:
        self.config = config
        self.model = model
        self.client = client
        self.t0 = t0
        self.loop = asyncio.get_running_loop()
        self.slots = asyncio.Semaphore(config.max_in_flight)
        self.stop_at = math.inf if config.duration_s is None else t0 + config.duration_s
        self.url = normalize_url(config.url) + API_PATHS[config.api]
        self.headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.state = state
        self.on_outcome = on_outcome
        self.in_flight = 0
        self.jitter = np.random.default_rng([config.jitter_seed, 17])  # backoff jitter of retrying clients
        self.handoff: Handoff | None = None  # the sender process that keeps an open-loop schedule, when one does

    def now(self) -> float:
        return self.loop.time() - self.t0

    def _on_wire(self) -> None:
        self.in_flight += 1
        self.state.peak_in_flight = max(self.state.peak_in_flight, self.in_flight)

    async def one(self, req: PlannedRequest, intended_s: float) -> HttpOutcome:
        """Serve one planned request: one attempt, or (``config.client``) attempts until none is due; return the last.

        Attempts run one after another in this coroutine, so they never overlap; each waits until its
        start (the previous end plus backoff, at least the server's Retry-After) and is its own outcome.
        """
        if self.config.client is None:
            return await self._attempt(req, intended_s, req.request_id, None, intended_s)
        attempt, start_s = 1, intended_s
        while True:
            rid = req.request_id if attempt == 1 else f"{req.request_id}.{attempt}"
            out = await self._attempt(req, start_s, rid, attempt, intended_s)
            if out.retry_at_s is None:
                return out
            attempt, start_s = attempt + 1, out.retry_at_s
            delay = self.t0 + start_s - self.loop.time()
            if delay > 0:
                try:
                    await asyncio.sleep(delay)
                except asyncio.CancelledError:  # stopped while waiting: the retry it planned is never sent
                    out.retry_at_s, out.retry_wait_capped = None, False
                    raise

    def _next_start(self, out: HttpOutcome, first_s: float, cancel_after_s: float | None) -> float | None:
        """Return when the attempt after ``out`` starts (serving.retry's rules), or None; never past the run's end
        nor after the client has given up."""
        client = self.config.client
        if client is None or out.attempt is None or not math.isfinite(out.end_s):
            return None
        cap_s = self.config.max_retry_wait_s
        nxt = client.next_start(out.attempt, out.status, out.error, out.end_s, first_s, self.jitter,
                                retry_after_s=out.retry_after_s, max_wait_s=cap_s)
        if nxt is None or self.t0 + nxt >= self.stop_at:
            return None
        if cancel_after_s is not None and nxt >= first_s + cancel_after_s:
            return None
        out.retry_wait_capped = out.retry_after_s is not None and out.retry_after_s > cap_s
        return nxt

    async def _attempt(self, req: PlannedRequest, intended_s: float, request_id: str, attempt: int | None,
                       first_s: float, handed: Handed | None = None) -> HttpOutcome:
        """Send one attempt and record its outcome; never raises except on cancellation from outside.

        ``handed``: the sender process already wrote it (or could not): read its answer on that connection.
        """
        cfg = self.config
        out = HttpOutcome(request_id=request_id, intended_s=intended_s, slice=req.slice,
                          requested_prompt_words=req.prompt_words, requested_output_tokens=req.max_tokens,
                          logical_id=None if attempt is None else req.request_id, attempt=attempt)
        deadline_s = cfg.deadline_s if req.deadline_s is None else req.deadline_s
        by_client = False
        if cfg.client is not None:  # the logical request's deadline, from its first start, may come first
            left_s, by_client = cfg.client.attempt_timeout(intended_s, first_s, deadline_s)
            deadline_s = deadline_s if left_s is None else left_s
        deadline_at = self.t0 + intended_s + deadline_s
        gives_up_at = math.inf if req.cancel_after_s is None else self.t0 + first_s + req.cancel_after_s
        limit_at = min(deadline_at, self.stop_at, gives_up_at)
        on_wire = False
        try:
            async with asyncio.timeout_at(limit_at):
                if handed is not None:
                    self.state.waited_for_slot += handed.waited
                    out.sent_s = handed.sent_s
                    if handed.error is not None:
                        raise httpx.ConnectError(handed.error)
                    if handed.sock is None:
                        raise TimeoutError  # every slot stayed busy until its give-up instant: never sent
                    on_wire = True
                    self._on_wire()
                    assert self.handoff is not None
                    await self.handoff.exchange(handed, out, self.now, cfg.stream)
                else:
                    if self.slots.locked():
                        self.state.waited_for_slot += 1
                    async with self.slots:
                        out.sent_s = self.now()
                        on_wire = True
                        self._on_wire()
                        await exchange(self.client, self.url, request_body(cfg, self.model, req), self.headers, out,
                                       self.now, cfg.stream)
        except TimeoutError:
            if not out.done_marker:  # after [DONE] the answer is settled; only reading the rest of the body was cut
                out.end_s = self.now()
                if gives_up_at <= min(deadline_at, self.stop_at):
                    out.status = failure_status(client_cancelled=True)
                    out.error = f"the client gave up {req.cancel_after_s:.3g} s after the request's arrival"
                elif limit_at < deadline_at:
                    out.status = failure_status(client_cancelled=True)
                    out.error = f"run stopped at its duration limit ({cfg.duration_s:g} s)"
                else:
                    where = "while waiting for a generator connection slot" if out.sent_s is None else \
                        ("before the first token" if out.first_token_s is None else "while streaming")
                    out.status = failure_status(client_timeout=True)
                    out.error = ERR_CLIENT_DEADLINE if by_client else f"deadline {deadline_s:g} s passed {where}"
                count_partial_tokens(out)
        except asyncio.CancelledError:
            if not out.done_marker:
                out.end_s = self.now()
                out.status, out.error = failure_status(client_cancelled=True), "the generator was stopped"
                count_partial_tokens(out)
            self._finish(out)
            raise
        except httpx.HTTPError as exc:  # connection refused or closed mid-stream, a read timeout, ...
            out.end_s = self.now()
            out.error = exc_text(exc)
            out.status = failure_status(None, out.error)
            count_partial_tokens(out)
        finally:
            if on_wire:
                self.in_flight -= 1
        out.retry_at_s = self._next_start(out, first_s, req.cancel_after_s)
        self._finish(out)
        return out

    def _finish(self, out: HttpOutcome) -> None:
        if out.status != "success" and out.first_token_s is not None and out.first_token_s > out.end_s:
            out.first_token_s = None  # cannot happen on one clock; kept safe for the record's ordering rule
        self.state.outcomes.append(out)
        if self.on_outcome is not None:
            self.on_outcome(out)


def _client(config: LoadConfig, longest_deadline_s: float) -> httpx.AsyncClient:
    """Return an HTTP client sized to the generator's in-flight limit (environment proxies ignored).

    Its own timeouts lie beyond every request's deadline, which ends each request first.
    """
    limits = httpx.Limits(max_connections=config.max_in_flight, max_keepalive_connections=config.max_in_flight)
    timeout = httpx.Timeout(longest_deadline_s + 5.0)
    return httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)


async def run_load(config: LoadConfig, plan: Sequence[PlannedRequest],
                   on_outcome: Callable[[HttpOutcome], None] | None = None,
                   state: RunState | None = None, start_at: float | None = None) -> LoadResult:
    """Send ``plan`` to the endpoint, open loop (by intended times) or closed loop (``config.users``).

    The run ends by itself: at most ``len(plan)`` requests, each bounded by its deadline, and
    nothing after ``duration_s``. ``state``, if given, gathers outcomes as they finish, so a caller
    interrupted midway (Ctrl-C cancels in-flight requests into "cancelled" outcomes) can still
    build the result with :func:`result_from_state`. Raises
    :class:`~servebench.load.client.LoadError` when the endpoint is unreachable or lists no model.
    ``start_at`` fixes the run's origin t0 on this process's ``time.monotonic`` clock (asyncio's
    ``loop.time()``): several workers given one common instant share one schedule.
    """
    if not plan:
        raise ConfigError("the load plan has no requests")
    state = state if state is not None else RunState()
    state.trace_rows = trace_rows(plan)
    longest = max(config.deadline_s if r.deadline_s is None else r.deadline_s for r in plan)
    async with _client(config, longest) as client:
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        state.model = config.model or await discover_model(client, config.url, headers)
        if config.warmup_requests:
            state.warmup = await warm_up(client, config, state.model, plan, headers)
        handoff = None
        try:
            if uses_sender(config):
                handoff = Handoff(config.url, sender_plan(config, state.model, plan, headers), config.max_in_flight)
                await handoff.ready()
            loop = asyncio.get_running_loop()
            state.started_utc = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
            runner = _Runner(config, state.model, client, loop.time() if start_at is None else start_at, on_outcome,
                             state)
            state.t0_monotonic_s = runner.t0  # loop.time() is time.monotonic()
            state.sender = "process" if handoff is not None else "loop"
            if handoff is not None:
                runner.handoff = handoff
                state.sender_nice = handoff.nice
                await _open_loop_handed(runner, plan, handoff)
            elif config.users is None:
                await _open_loop(runner, plan)
            else:
                await _closed_loop(runner, plan, config.users)
        finally:
            if handoff is not None:
                handoff.close()
    return result_from_state(config, len(plan), state)


def uses_sender(config: LoadConfig) -> bool:
    """Return True when a sender process keeps the schedule: an open loop over plain http without retrying clients.

    A retry's time is known only when the attempt before it ends, a closed loop's user sends when its
    answer ends, and a TLS session cannot move between processes; those runs send from the event loop, as
    does every run off Linux (the hand-over needs Unix sequenced-packet sockets, which macOS lacks).
    """
    return (config.sender == "process" and config.users is None and config.client is None
            and normalize_url(config.url).startswith("http://") and sys.platform.startswith("linux"))


def sender_plan(config: LoadConfig, model: str, plan: Sequence[PlannedRequest],
                headers: dict[str, str]) -> Iterator[tuple[int, float, float, bytes]]:
    """Yield what the sender writes: per request offered (due before the duration limit) its index, due and
    give-up times from the origin, and its bytes. It gives up where the request's own limit comes: its
    deadline, the run's end, or its client giving up."""
    url = normalize_url(config.url) + API_PATHS[config.api]
    end_s = math.inf if config.duration_s is None else config.duration_s
    for i, req in enumerate(plan):
        if req.intended_s >= end_s - LIMIT_TOLERANCE_S:
            return
        deadline_s = config.deadline_s if req.deadline_s is None else req.deadline_s
        give_up_s = min(req.intended_s + deadline_s, end_s,
                        math.inf if req.cancel_after_s is None else req.intended_s + req.cancel_after_s)
        body = json.dumps(request_body(config, model, req), separators=(",", ":")).encode()
        yield i, req.intended_s, give_up_s, request_bytes(url, body, headers)


async def warm_up(client: httpx.AsyncClient, config: LoadConfig, model: str, plan: Sequence[PlannedRequest],
                  headers: dict[str, str]) -> WarmupStats:
    """Send ``config.warmup_requests`` requests one at a time (the plan's first ones, round again if it is shorter),
    untimed, before the run's origin; return how they went. None of them is a record."""
    url = normalize_url(config.url) + API_PATHS[config.api]
    n, ok, first_error = config.warmup_requests, 0, None
    loop = asyncio.get_running_loop()
    began = loop.time()
    for k in range(n):
        req = plan[k % len(plan)]
        out = HttpOutcome(request_id=f"warmup-{k}", intended_s=0.0, requested_output_tokens=req.max_tokens)
        try:
            async with asyncio.timeout(config.deadline_s if req.deadline_s is None else req.deadline_s):
                await exchange(client, url, request_body(config, model, req), headers, out, loop.time, config.stream)
        except TimeoutError:
            out.status, out.error = "timeout", "deadline passed"
        except httpx.HTTPError as exc:
            out.status, out.error = "failed", exc_text(exc)
        ok += out.status == "success"
        if out.status != "success" and first_error is None:
            first_error = out.error or out.status
    return WarmupStats(requests=n, succeeded=ok, seconds=loop.time() - began, first_error=first_error)


def warm_up_sync(config: LoadConfig, plan: Sequence[PlannedRequest]) -> WarmupStats:
    """Send ``config.warmup_requests`` untimed requests in a fresh event loop (``config.model`` must be set)."""
    async def send() -> WarmupStats:
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        async with _client(config, config.deadline_s) as client:
            return await warm_up(client, config, config.model or "", plan, headers)
    return asyncio.run(send())


def discover_model_sync(config: LoadConfig) -> str:
    """Return ``config.model``, or the first model the endpoint lists (one question for every worker)."""
    if config.model:
        return config.model

    async def ask() -> str:
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        async with _client(config, config.deadline_s) as client:
            return await discover_model(client, config.url, headers)
    return asyncio.run(ask())


def result_from_state(config: LoadConfig, planned: int, state: RunState) -> LoadResult:
    """Return the run's result from what it gathered (complete, or cut short by an interruption)."""
    mode: Literal["open", "closed"] = "open" if config.users is None else "closed"
    outcomes = sorted(state.outcomes, key=lambda o: (o.intended_s, o.request_id))
    stats = generator_stats(outcomes, mode, planned, config.max_in_flight, state.peak_in_flight,
                            state.waited_for_slot, config.duration_s, state.interrupted)
    stats = stats.model_copy(update={"sender": state.sender, "warmup": state.warmup, "sender_nice": state.sender_nice,
                                     "warnings": stats.warnings + warmup_warning(state.warmup)})
    return LoadResult(outcomes=outcomes, stats=stats, model=state.model or "unknown", config=config,
                      started_utc=state.started_utc, stopped_by=state.stopped_by if state.interrupted else None,
                      t0_monotonic_s=state.t0_monotonic_s, trace_rows=state.trace_rows)


async def _open_loop(runner: _Runner, plan: Sequence[PlannedRequest]) -> None:
    """Start each request at its intended time, whatever earlier requests are doing."""
    tasks: list[asyncio.Task[HttpOutcome]] = []
    try:
        for req in plan:
            due = runner.t0 + req.intended_s
            if due >= runner.stop_at:
                break
            delay = due - runner.loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(runner.one(req, req.intended_s)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _open_loop_handed(runner: _Runner, plan: Sequence[PlannedRequest], handoff: Handoff) -> None:
    """Serve the answers to what the sender process sends at each intended time (it keeps the schedule)."""
    tasks: list[asyncio.Task[HttpOutcome]] = []
    handed: list[Handed] = []

    def serve(h: Handed) -> None:
        req = plan[h.index]
        handed.append(h)
        tasks.append(asyncio.create_task(runner._attempt(req, req.intended_s, req.request_id, None, req.intended_s,
                                                         handed=h)))
    try:
        await handoff.run(runner.t0, serve)
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for h in handed:
            handoff.release(h)  # a connection whose task never ran is closed here


async def _closed_loop(runner: _Runner, plan: Sequence[PlannedRequest], users: int) -> None:
    """Run ``users`` users, each sending its next request when the previous one ended (plus think time)."""
    queue: Iterator[PlannedRequest] = iter(plan)

    async def user() -> None:
        for req in queue:  # a shared iterator: each request goes to exactly one user
            if req.think_s > 0:
                await asyncio.sleep(min(req.think_s, max(0.0, runner.stop_at - runner.loop.time())))
            intended = runner.now()
            if runner.t0 + intended >= runner.stop_at:
                return
            await runner.one(req, intended)

    tasks = [asyncio.create_task(user()) for _ in range(users)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def run_load_sync(config: LoadConfig, plan: Sequence[PlannedRequest],
                  on_outcome: Callable[[HttpOutcome], None] | None = None,
                  state: RunState | None = None,
                  stop_signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> LoadResult:
    """Run :func:`run_load` in a fresh event loop; a signal in ``stop_signals`` stops it as Ctrl-C does.

    Ctrl-C raises KeyboardInterrupt; a stop signal raises :class:`RunStopped`. Either way the
    requests in flight are cancelled into "cancelled" outcomes first, so ``state`` holds every
    outcome gathered (build the result with :func:`result_from_state`). The signals are caught
    only while the run lasts, and only from the main thread (elsewhere they keep their handlers).
    """
    state = state if state is not None else RunState()
    return asyncio.run(stoppable(run_load(config, plan, on_outcome, state), state, stop_signals))


async def stoppable(run: Awaitable[LoadResult], state: RunState, stop_signals: Sequence[signal.Signals]) -> LoadResult:
    """Await ``run``; a signal in ``stop_signals`` cancels it and raises RunStopped with what it gathered."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # asyncio.run runs this as its main task

    def stop(sig: signal.Signals) -> None:
        if state.stopped_by is None:  # a second signal must not cut short the cancelled requests' records
            state.stopped_by, state.interrupted = sig.name, True
            task.cancel()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in stop_signals:
            previous[sig] = signal.getsignal(sig)
            loop.add_signal_handler(sig, stop, sig)
    try:
        return await run
    except asyncio.CancelledError:
        if state.stopped_by is None:
            raise  # Ctrl-C, or a caller's cancellation: not ours to turn into RunStopped
        raise RunStopped(state.stopped_by) from None
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)  # remove_signal_handler leaves the default, not what was there


# --------------------------------------------------------------------------- results on disk


def records_table(outcomes: Sequence[HttpOutcome], source: str = "load",
                  trace_rows: dict[str, int] | None = None) -> tuple[RecordTable, float, float]:
    """Validate the outcomes as canonical records over [first start, last end] (``trace_rows``: a trace replay's
    rows by request id, kept as the extra column ``trace_row``)."""
    if not outcomes:
        raise ConfigError("the run produced no records (every planned arrival came after the duration limit)")
    extra = trace_rows is not None or any(o.worker is not None for o in outcomes)  # the extra columns a run writes
    reasoning = reasoning_run(outcomes)
    rows = parse_objects([to_record(o, reasoning, _trace_row(o, trace_rows)) for o in outcomes], source,
                         strict_keys=not extra, keep_extra=extra)
    ws, we = default_window(rows)
    if not we > ws:
        we = ws + 1e-9  # one instant request: a window of zero length has no rate
    return validate(rows, ws, we), ws, we


def run_metadata(result: LoadResult, workload: WorkloadSpec, seed: int, model_source: str,
                 cancel: CancelSpec | None = None) -> dict[str, Any]:
    """Return the run metadata of a load run (metadata.json): what was measured, and how (``cancel``: the clients
    that gave up, as drawn into the plan)."""
    from servebench import __version__

    cfg = result.config
    mode = "closed" if cfg.users is not None else "open"
    return {
        "kind": "servebench load",
        "servebench_version": __version__,
        "endpoint": {"url": normalize_url(cfg.url), "path": API_PATHS[cfg.api], "api": cfg.api,
                     "stream": cfg.stream, "include_usage": cfg.include_usage, "ignore_eos": cfg.ignore_eos},
        "model": {"name": result.model, "source": model_source},
        "workload": workload.model_dump(mode="json", exclude_none=True),
        "arrival_pattern": ({"kind": "trace", **workload.trace.model_dump(mode="json", exclude_none=True)}
                            if workload.trace is not None else
                            workload.arrival.model_dump(mode="json", exclude_none=True) if mode == "open"
                            else {"kind": "closed_loop", **workload.closed_loop.model_dump(mode="json")}),
        "prompt_unit": "words (one token each on serve-engine; prompt_tokens in records come from usage)",
        "seed": seed,
        "cancel": None if cancel is None else cancel.model_dump(mode="json"),
        "deadline_s": cfg.deadline_s,
        "duration_s": cfg.duration_s,
        "max_in_flight": cfg.max_in_flight,
        "max_retry_wait_s": cfg.max_retry_wait_s if cfg.client is not None else None,
        "clock": ("time.monotonic in seconds since the run's origin t0 (one clock, one process)"
                  if worker_count(result) is None else
                  "each worker's time.monotonic in seconds since the common origin t0, which the coordinator "
                  "placed on each worker's clock through the offset its pings measured; a record's times come "
                  "from one worker's clock; across workers they agree within generator.workers[].clock_uncertainty_s"),
        "record_start": "intended send time; actual send time and lag per request are in sends.jsonl",
        "end": "arrival of [DONE] (or the whole body when not streaming); timeouts end at the deadline",
        "started_utc": result.started_utc,
        "generator": result.stats.model_dump(mode="json"),
        "files": {"records": rundir.RECORDS, "sends": rundir.SENDS},
    }


def worker_count(result: LoadResult) -> int | None:
    """Return how many workers shared the run's schedule (None: one generator)."""
    return None if result.stats.workers is None else len(result.stats.workers)


def write_run(out_dir: str | Path, result: LoadResult, metadata: dict[str, Any],
              server_metrics: ServerSamples | None = None) -> Path:
    """Write the run folder (records, sends, metadata and the server's metrics: ``records.rundir``); return it."""
    d = Path(out_dir)
    reasoning = reasoning_run(result.outcomes)
    rows = result.trace_rows
    rundir.write_run(d, [to_record(o, reasoning, _trace_row(o, rows)) for o in result.outcomes], metadata=metadata,
                     sends=[to_send_row(o) for o in result.outcomes], server_metrics=server_metrics)
    return d


# --------------------------------------------------------------------------- sweep points


def measured_point(outcomes: Sequence[HttpOutcome], load: float, slo: Any, slo_target: float) -> Any:
    """Summarize one measured open-loop run as a :class:`servebench.serving.sweep.SweepPoint`.

    The metrics come from the same code as a simulated point. Fields only a server's step trace
    knows (running and waiting sequences, KV tokens, preemptions) stay None: a client cannot
    observe them, and 0 would be a false measurement.
    """
    from servebench.serving.sweep import point_from_records

    table, ws, we = records_table(outcomes)
    return point_from_records(table, ws, we, load, "rate", slo, slo_target)
