"""The HTTP side of the load generator: one request to an OpenAI-compatible endpoint, read into an HttpOutcome.

Server-sent events (``data: {...}`` lines ending with ``data: [DONE]``) from ``/v1/completions`` or
``/v1/chat/completions``; a chunk of answer or of reasoning (a reasoning model's thinking, streamed
beside the answer: :mod:`servebench.records.stream_chunks`) is output: the first of either kind is the
first token, every such chunk's arrival time is kept, and the first answer chunk is kept apart (the
first answer token). Prompt, output and reasoning token counts come from ``usage``. When and how
often requests are sent, deadlines and the run's records are :mod:`servebench.load.generator`'s concern.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Literal, Protocol

import httpx

from servebench.errors import ConfigError, ServebenchError
from servebench.records.statuses import failure_status
from servebench.records.stream_chunks import chunk_parts, reasoning_tokens_reported

API_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
ERROR_TEXT_CHARS = 200
CAUSE_CHARS = 2000  # how much of an error body the status rules read
RETRY_AFTER_CODES = (429, 503)  # the statuses whose Retry-After header the generator honours
RETRY_AFTER_TEXT_CHARS = 100  # how much of a Retry-After header an outcome keeps, as the server sent it
DELAY_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")  # ASCII only: str.isdigit and float() take other scripts too


class LoadError(ServebenchError):
    """The load generator cannot start: the endpoint is unreachable or reports no model."""


@dataclass
class HttpOutcome:
    """One HTTP request as the generator saw it, on the run's clock (seconds since t0).

    Not the scheduler's :class:`servebench.serving.scheduler.Outcome` (a server-side terminal state).
    """

    request_id: str
    intended_s: float
    status: str = "failed"
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float = math.nan
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (prefix cache hits)
    output_tokens: int | None = None
    output_tokens_source: Literal["usage", "chunks", "bound"] | None = None
    http_status: int | None = None
    error: str | None = None
    slice: str | None = None
    requested_prompt_words: int = 0
    requested_output_tokens: int = 0
    chunk_times_s: list[float] = field(default_factory=list)  # every chunk of answer or reasoning
    chunk_reasoning: list[bool] = field(default_factory=list)  # per chunk: it carried reasoning and no answer
    first_answer_s: float | None = None  # the first chunk carrying answer text (not reasoning)
    reasoning_bytes: int = 0  # UTF-8 bytes of reasoning text received (also counted in text_bytes)
    reported_reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    # usage.completion_tokens carried by each content chunk itself (continuous usage stats), else None
    chunk_usage_tokens: list[int | None] = field(default_factory=list)
    text_bytes: int = 0
    done_marker: bool = False
    reported_output_tokens: int | None = None
    warning: str | None = None
    worker: int | None = None  # which of several load-generator workers sent it (None: one generator)
    retry_after_s: float | None = None  # the server's Retry-After on a 429 or 503, in seconds (inf: beyond a float)
    retry_after_text: str | None = None  # that header as the server sent it (cut short), usable or not
    retry_wait_capped: bool = False  # the server asked to wait longer than the generator's cap; the retry went at the cap
    logical_id: str | None = None  # the user request this attempt serves (None: clients do not retry)
    attempt: int | None = None  # 1, 2, ... within its logical request
    retry_at_s: float | None = None  # when the next attempt of its logical request starts (None: none follows)

    @property
    def lag_s(self) -> float | None:
        """Actual minus intended send time (None if it was never sent)."""
        return None if self.sent_s is None else self.sent_s - self.intended_s

    @property
    def token_level_chunks(self) -> bool | None:
        """True when the server's count of output tokens equals the content chunks received."""
        if self.output_tokens_source != "usage":
            return None
        return self.output_tokens == len(self.chunk_times_s)

    def token_timing(self) -> tuple[list[float] | None, list[int] | None]:
        """Return the record's token_times (each content chunk's arrival) and token_counts, or (None, None).

        One token per chunk when the output count equals the chunks received; else the tokens each
        chunk carried, from the running ``usage.completion_tokens`` that every chunk reported (vLLM's
        continuous usage stats). Chunks whose sizes the server never said get no token times at all,
        rather than a guess.

        >>> o = HttpOutcome("r", 0.0, chunk_times_s=[0.5, 0.75], output_tokens=5, chunk_usage_tokens=[2, 5])
        >>> o.token_timing()
        ([0.5, 0.75], [2, 3])
        """
        times = self.chunk_times_s
        if not times or self.output_tokens is None:
            return None, None
        if self.output_tokens == len(times):
            return list(times), None
        running = self.chunk_usage_tokens
        if len(running) != len(times) or any(not isinstance(r, int) for r in running):
            return None, None
        counts = [running[0]] + [b - a for a, b in zip(running, running[1:])]  # type: ignore[operator]
        if min(counts) < 1 or running[-1] != self.output_tokens:
            return None, None
        return list(times), counts  # type: ignore[return-value]

    @property
    def reasoned(self) -> bool:
        """True when the reply showed reasoning: reasoning text, or reasoning tokens in its usage."""
        return self.reasoning_bytes > 0 or bool(self.reported_reasoning_tokens)

    def reasoning_tokens(self) -> int | None:
        """Return the reply's reasoning tokens: the server's usage count when it fits the output, else counted
        from the reasoning chunks where their tokens are known (``token_timing``), else None.

        >>> o = HttpOutcome("r", 0.0, chunk_times_s=[0.5, 0.6, 0.9], chunk_reasoning=[True, True, False], output_tokens=3)
        >>> o.reasoning_tokens(), HttpOutcome("r", 0.0, output_tokens=2, reported_reasoning_tokens=5).reasoning_tokens()
        (2, None)
        """
        reported = self.reported_reasoning_tokens
        if reported is not None and self.output_tokens is not None and reported <= self.output_tokens:
            return reported
        times, counts = self.token_timing()
        if times is None or len(self.chunk_reasoning) != len(times):
            return 0 if self.reasoning_bytes == 0 and reported is None and self.output_tokens is not None else None
        per_chunk = counts if counts is not None else [1] * len(times)
        return sum(c for c, thought in zip(per_chunk, self.chunk_reasoning) if thought)

    def reasoning_fields(self) -> dict[str, Any]:
        """Return the record's first_answer_token and reasoning_tokens (each left out when unknown).

        The first answer token is kept only where the record's ordering holds (first_token <= it <= end).
        """
        fields: dict[str, Any] = {"reasoning_tokens": self.reasoning_tokens()}
        fa, ft = self.first_answer_s, self.first_token_s
        if fa is not None and ft is not None and ft <= fa <= self.end_s:
            fields["first_answer_token"] = fa
        return fields


def parse_retry_after(value: str | None, now_utc: datetime | None = None) -> float | None:
    """Return a ``Retry-After`` header's wait in seconds: delta-seconds, or an HTTP-date less now; None if unusable.

    Delta-seconds are ASCII digits (a decimal fraction is honoured too); digits too many for a float
    ask for longer than any wait and read as infinity (the caller caps every wait). A date in the
    past waits 0 s. Negative, non-numeric or malformed values, and dates no calendar holds, are
    unusable: the caller's own backoff decides then.

    >>> parse_retry_after("2"), parse_retry_after(" 0.5 "), parse_retry_after("soon"), parse_retry_after(None)
    (2.0, 0.5, None, None)
    >>> parse_retry_after("-1"), parse_retry_after("1e9"), parse_retry_after("nan"), parse_retry_after("9" * 400)
    (None, None, None, inf)
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", datetime(2015, 10, 21, 7, 28, tzinfo=timezone.utc))
    10.0
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    if DELAY_SECONDS.fullmatch(text):
        return float(text)  # RFC 9110 says whole seconds; a fraction costs nothing to honour
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    try:
        seconds = (when - (now_utc or datetime.now(timezone.utc))).total_seconds()
    except OverflowError:
        return None
    return max(0.0, seconds)


def parse_sse_line(line: str) -> dict[str, Any] | Literal["done"] | None:
    """Parse one server-sent-event line: a JSON payload, "done" for ``[DONE]``, None for anything else.

    >>> parse_sse_line('data: {"a": 1}'), parse_sse_line("data: [DONE]"), parse_sse_line(": ping")
    ({'a': 1}, 'done', None)
    """
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return "done"
    if not payload:
        return None
    try:
        doc = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed SSE data {payload[:80]!r}: {exc.msg}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"SSE data is not a JSON object: {payload[:80]!r}")
    return doc


def reasoning_run(outcomes: Iterable[HttpOutcome]) -> bool:
    """Whether a run measured a reasoning model: some reply showed reasoning (its records then say first_answer_token
    and reasoning_tokens, 0 for a reply that thought nothing, so the time to first answer covers every reply)."""
    return any(o.reasoned for o in outcomes)


def apply_usage(out: HttpOutcome, usage: Any) -> None:
    """Copy prompt, cached prompt, completion and reasoning token counts from an OpenAI ``usage`` object, if well formed.

    ``prompt_tokens_details.cached_tokens`` (OpenAI's and vLLM's prefix-cache hits) is kept only when
    it is between 0 and ``prompt_tokens``; ``completion_tokens_details.reasoning_tokens`` is read
    beside the completion tokens, which include them.
    """
    if not isinstance(usage, dict):
        return
    reasoning = reasoning_tokens_reported(usage)
    if reasoning is not None:
        out.reported_reasoning_tokens = reasoning
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and not isinstance(prompt, bool) and prompt >= 0:
        out.prompt_tokens = prompt
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int) and not isinstance(cached, bool) and 0 <= cached <= prompt:
            out.cached_prompt_tokens = cached
    if isinstance(completion, int) and not isinstance(completion, bool) and completion >= 0:
        out.output_tokens = completion
        out.output_tokens_source = "usage"


def normalize_url(url: str) -> str:
    """Return the server's base URL without a trailing slash or ``/v1``."""
    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    if not base.startswith(("http://", "https://")):
        raise ConfigError(f"endpoint URL {url!r} must start with http:// or https://")
    return base


async def exchange(client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str],
                   out: HttpOutcome, now: Callable[[], float], stream: bool) -> None:
    """POST ``body`` and read the answer into ``out`` as it arrives (times from ``now``).

    Decides ``out.status`` for an answer that ended: success, or a failure status from
    :func:`~servebench.records.statuses.failure_status` (HTTP status, error event, malformed stream, no
    tokens). A deadline that cancels the call midway leaves what arrived so far (first token,
    chunk times, usage) in ``out``; so does a failure, whose content chunks are its wasted tokens.
    """
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        await read_answer(resp, out, now, stream)


class Answer(Protocol):
    """An HTTP answer being read: what :func:`read_answer` needs of it (an ``httpx.Response`` is one)."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_lines(self) -> AsyncIterator[str]: ...


async def read_answer(resp: Answer, out: HttpOutcome, now: Callable[[], float], stream: bool) -> None:
    """Read an answer whose request went out into ``out``: its status, then its stream or its whole body."""
    out.http_status = resp.status_code
    if resp.status_code != 200:
        text = (await resp.aread()).decode("utf-8", "replace")
        out.end_s = now()
        out.status = failure_status(resp.status_code, text[:CAUSE_CHARS])
        out.error = f"HTTP {resp.status_code}: {error_message(text)}"
        if resp.status_code in RETRY_AFTER_CODES and "retry-after" in resp.headers:
            header = resp.headers["retry-after"]
            out.retry_after_s = parse_retry_after(header)
            out.retry_after_text = header[:RETRY_AFTER_TEXT_CHARS]
        return
    if stream:
        await _read_stream(resp, out, now)
    else:
        await _read_whole(resp, out, now)


async def _read_stream(resp: Answer, out: HttpOutcome, now: Callable[[], float]) -> None:
    """Read server-sent events into ``out``; the answer is settled at ``[DONE]`` (or at the end of the body)."""
    finish_reason = None
    async for line in resp.aiter_lines():
        if out.done_marker:
            continue  # read to the end of the body so the connection can be reused
        try:
            event = parse_sse_line(line)
        except ValueError as exc:
            out.end_s, out.status, out.error = now(), "failed", str(exc)
            count_partial_tokens(out)
            return
        if event is None:
            continue
        if event == "done":
            out.done_marker = True
            out.end_s = now()
            _settle(out, finish_reason, streamed=True)  # final even if the deadline cuts the rest of the body
            continue
        if "error" in event:
            cause = json.dumps(event["error"])
            out.end_s, out.status = now(), failure_status(None, cause[:CAUSE_CHARS])
            out.error = f"error event: {error_message(cause)}"
            count_partial_tokens(out)
            return
        answer, reasoning = chunk_parts(event)
        if answer or reasoning:
            t = now()
            out.chunk_times_s.append(t)
            out.chunk_reasoning.append(not answer)
            usage = event.get("usage")
            running = usage.get("completion_tokens") if isinstance(usage, dict) else None
            out.chunk_usage_tokens.append(running if type(running) is int else None)
            thought = len(reasoning.encode("utf-8"))
            out.text_bytes += len(answer.encode("utf-8")) + thought
            out.reasoning_bytes += thought
            if out.first_token_s is None:
                out.first_token_s = t
            if answer and out.first_answer_s is None:
                out.first_answer_s = t
        for choice in event.get("choices") or ():
            if isinstance(choice, dict) and choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
        if event.get("usage"):
            apply_usage(out, event["usage"])
    if not out.done_marker:
        out.end_s = now()
        _settle(out, finish_reason, streamed=True)


async def _read_whole(resp: Answer, out: HttpOutcome, now: Callable[[], float]) -> None:
    """Read a non-streaming answer: one JSON body, so the first token arrives with the end."""
    raw = await resp.aread()
    out.end_s = now()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        out.status, out.error = "failed", f"response is not JSON: {exc.msg}"
        return
    apply_usage(out, doc.get("usage") if isinstance(doc, dict) else None)
    finish = None
    answer, reasoning = chunk_parts(doc) if isinstance(doc, dict) else ("", "")
    if answer or reasoning:
        out.reasoning_bytes = len(reasoning.encode("utf-8"))
        out.text_bytes = len(answer.encode("utf-8")) + out.reasoning_bytes
        out.first_token_s = out.end_s  # the whole answer arrives at once: TTFT equals latency
        out.first_answer_s = out.end_s if answer else None
        finish = next((c.get("finish_reason") for c in doc.get("choices") or () if isinstance(c, dict)), None)
    out.done_marker = True
    _settle(out, finish or "stop", streamed=False)


def count_partial_tokens(out: HttpOutcome) -> None:
    """On a non-success, keep the content chunks received as the (wasted) output token count.

    A usage report that arrived before the failure wins, unless it claims more than can have arrived.
    """
    check_usage(out, streamed=True)
    if out.output_tokens is None and out.chunk_times_s:
        out.output_tokens, out.output_tokens_source = len(out.chunk_times_s), "chunks"


def usage_problem(reported_tokens: int, max_tokens: int, text_bytes: int) -> str | None:
    """Say why a reported output token count cannot be true, or return None when it can.

    More than ``max_tokens`` was never allowed; more than the UTF-8 bytes of text received plus one is
    impossible, since every token renders to at least one byte save a final end-of-sequence token.

    >>> usage_problem(4, 4, 8), usage_problem(9, 4, 80), usage_problem(40, 64, 6)
    (None, 'above max_tokens 4', 'above the 6 bytes of text received + 1')
    """
    if max_tokens > 0 and reported_tokens > max_tokens:
        return f"above max_tokens {max_tokens}"
    if reported_tokens > text_bytes + 1:
        return f"above the {text_bytes} bytes of text received + 1"
    return None


def check_usage(out: HttpOutcome, streamed: bool) -> None:
    """Replace an impossible ``usage.completion_tokens`` with what was received; say so in ``out.warning``.

    Streamed: the content chunks received (each carries at least one token). Not streamed: the
    tightest bound, min(max_tokens, text bytes + 1).
    """
    if out.output_tokens_source != "usage" or out.output_tokens is None:
        return
    problem = usage_problem(out.output_tokens, out.requested_output_tokens, out.text_bytes)
    if problem is None:
        return
    out.reported_output_tokens = out.output_tokens
    if streamed:
        received, what = len(out.chunk_times_s), "content chunks received"
        out.output_tokens_source = "chunks"
    else:
        bounds = [out.text_bytes + 1] + ([out.requested_output_tokens] if out.requested_output_tokens > 0 else [])
        received, what = min(bounds) if out.text_bytes else 0, "bound from max_tokens and the text received"
        out.output_tokens_source = "bound"
    out.output_tokens = received if received > 0 else None
    out.warning = (f"usage.completion_tokens {out.reported_output_tokens} is impossible ({problem}); "
                   f"recorded {received} ({what})")


def _settle(out: HttpOutcome, finish_reason: str | None, streamed: bool) -> None:
    """Decide success or failure of an answer that arrived with HTTP 200."""
    check_usage(out, streamed)
    if out.output_tokens is None and out.chunk_times_s:
        out.output_tokens, out.output_tokens_source = len(out.chunk_times_s), "chunks"
    if streamed and not out.done_marker:
        out.status, out.error = "failed", "stream ended without [DONE]"
    elif out.first_token_s is None or not out.output_tokens:
        out.status, out.error = "failed", "the answer carried no output tokens"
        out.first_token_s = None
    else:
        out.status = "success"
        if finish_reason not in (None, "stop", "length"):
            out.status, out.error = "failed", f"finish_reason {finish_reason!r}"


def error_message(text: str) -> str:
    """Return the error message of an OpenAI-style error body, else the body, cut short."""
    msg = text
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            inner = doc.get("error", doc.get("detail", doc))
            if isinstance(inner, dict):
                inner = inner.get("message", inner)
            msg = inner if isinstance(inner, str) else json.dumps(inner)
    except (json.JSONDecodeError, TypeError):
        pass
    msg = " ".join(msg.split())
    return msg[:ERROR_TEXT_CHARS] if msg else "(empty body)"


def exc_text(exc: BaseException) -> str:
    """Return an exception as 'Type: message' on one line, cut short."""
    detail = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {detail}"[:ERROR_TEXT_CHARS] if detail else type(exc).__name__


async def discover_model(client: httpx.AsyncClient, base_url: str, headers: dict[str, str] | None = None) -> str:
    """Return the first model id that ``GET /v1/models`` reports."""
    url = normalize_url(base_url) + "/v1/models"
    try:
        resp = await client.get(url, headers=headers or {})
    except httpx.HTTPError as exc:
        raise LoadError(f"{url}: cannot reach the server ({exc_text(exc)})") from None
    if resp.status_code != 200:
        raise LoadError(f"{url}: HTTP {resp.status_code}: {error_message(resp.text)}")
    try:
        data = resp.json().get("data") or []
        return str(data[0]["id"])
    except (ValueError, AttributeError, LookupError, TypeError):
        raise LoadError(f"{url}: the answer lists no model ({resp.text[:120]!r}); pass --model") from None
