"""An OpenAI-compatible HTTP server (FastAPI on uvicorn) in front of the local engine.

What it does as OpenAI and vLLM do (docs/server.md has the details): strict request types with
OpenAI-style JSON errors for every bad request; ``stop`` sequences, ``temperature``, ``top_p``,
``seed`` and ``logit_bias``; an EOS token that ends a reply unless ``ignore_eos`` (vLLM's
extension for fixed-length benchmarks); ``max_tokens`` defaulting to 16 on completions and to the
context left on chat; one SSE chunk per generated token. As a server: TCP_NODELAY on every
connection, a bound on the time to read a request's headers and body, the address announced only
once requests are accepted, and any client that leaves (streaming or not) has its request cancelled
and its KV freed. ``GET /metrics`` publishes the engine's numbers under vLLM's names (:mod:`.prom`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from servebench.errors import ServebenchError
from servebench.serving.engine.http_server import MAX_BODY_BYTES, READ_TIMEOUT_S, BodyDeadline, Receive
from servebench.serving.engine.logprobs import LogprobFormat, LogprobRecorder
from servebench.serving.engine.prom import CONTENT_TYPE as PROMETHEUS_TEXT
from servebench.serving.engine.prom import EngineMetrics
from servebench.serving.engine.request_body import (
    check_min_tokens,
    logprob_alternatives,
    parse_body,
    prompt_ids,
    prompt_text,
    sampling_params,
)
from servebench.serving.engine.request_rules import BadRequest, shown
from servebench.serving.engine.service import EngineService, RequestHandle, RequestRejected
from servebench.serving.engine.words import ReplyText, decode

MIN_BODY_BYTES = 2**20  # the least a model's body limit is
BODY_BYTES_PER_POSITION = 64  # a body may hold this many bytes per position of the model's context

REJECT_STATUS = {"queue_full": 503}  # "try later"; any other rejection means the request can never fit
# an admitted request that did not succeed: a deadline is 504; anything else (preempted into a full queue,
# the engine stopping) is 500, never 503, which clients read as a refusal to admit
OUTCOME_STATUS = {"timeout": 504}


def _error(status: int, message: str, kind: str, code: str, param: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    """Return an OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status, headers=headers)


def body_limit_bytes(max_positions: int) -> int:
    """Return the largest request body a model with ``max_positions`` takes, in bytes.

    64 bytes a position (a word, or a token id, with the JSON around it, many times over), at least
    1 MiB and at most 64 MiB: parsing JSON costs memory many times its size (64 MiB of small chat
    messages took 1.1 GB and 1.6 s of the event loop), so no body is let in far past what fits.

    >>> body_limit_bytes(2048), body_limit_bytes(131072), body_limit_bytes(10**7) == MAX_BODY_BYTES
    (1048576, 8388608, True)
    """
    return min(MAX_BODY_BYTES, max(MIN_BODY_BYTES, BODY_BYTES_PER_POSITION * max_positions))


def create_app(service: EngineService, model_id: str | None = None, *, manage_service: bool = True,
               body_timeout_s: float = READ_TIMEOUT_S, reasoning_tokens: int = 0) -> FastAPI:
    """Return the FastAPI app serving an :class:`~servebench.serving.engine.service.EngineService`.

    With ``manage_service`` the app's lifespan starts the service (warm-up, engine thread) and
    stops it at shutdown, cancelling live requests. The model id defaults to ``servebench-<preset>``.
    A request body must arrive whole within ``body_timeout_s`` and hold at most :func:`body_limit_bytes`.
    ``reasoning_tokens``: every chat reply's first tokens are reasoning (a request's ``reasoning.tokens`` wins).
    """
    vocab = service.vocab_size
    max_positions = service.model.config.max_positions
    sched = service.scheduler_config
    kv_tokens = sched.kv_budget_tokens if sched.policy == "reserve" else sched.num_blocks * sched.block_size_tokens
    context_tokens = min(max_positions, kv_tokens)  # the longest sequence the engine can ever hold
    eos = service.model.config.eos_token_id
    model_id = model_id or f"servebench-{service.model.config.name}"
    started = int(time.time())
    metrics = EngineMetrics(service.stats, model_id, kv_tokens, sched.prefix_caching)  # vLLM's names (prom.py)
    service.observer = metrics

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        if manage_service:
            service.start()
        try:
            yield
        finally:
            if manage_service:
                service.stop()

    app = FastAPI(title="servebench serve-engine", lifespan=lifespan)
    app.add_middleware(BodyDeadline, timeout_s=body_timeout_s, max_bytes=body_limit_bytes(max_positions))
    counter = itertools.count(1)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: HTTPRequest, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        message = f"{request.method} {request.url.path}: {exc.detail}"
        return _error(exc.status_code, message, "invalid_request_error", code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def server_error(request: HTTPRequest, exc: Exception) -> JSONResponse:  # a bug: uvicorn logs it
        return _error(500, f"internal error: {type(exc).__name__}", "server_error", "internal_error")

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": started,
                                            "owned_by": "servebench", "max_model_len": context_tokens}]}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        """The engine's running, waiting, KV use, preemptions, tokens and request times, as vLLM names them."""
        return Response(metrics.render(), media_type=PROMETHEUS_TEXT)

    @app.get("/servebench/engine")
    async def engine_state() -> dict[str, Any]:
        """Running and waiting sequences and KV tokens held (to check cancelled requests freed their KV)."""
        return {**service.stats(), "eos_token_id": eos}

    async def complete(http: HTTPRequest, chat: bool) -> Any:
        try:
            body = parse_body(await http.body())
            if body.model is not None and body.model != model_id:
                raise BadRequest(f"model {shown(body.model)} does not exist; this server serves {model_id!r}",
                                 "model_not_found", "model", status=404)
            alternatives = logprob_alternatives(body, chat)
            recorder = None if alternatives is None else LogprobRecorder(alternatives)
            ids = prompt_ids(body, chat, vocab, max_positions)
            sampling = sampling_params(body, vocab, recorder)
            requested = body.max_completion_tokens or body.max_tokens
            if requested is None and chat:  # chat: up to the context left, as OpenAI
                requested = context_tokens - len(ids)
                if requested < 1:
                    raise BadRequest(f"the prompt's {len(ids)} tokens leave no room in the {context_tokens}-token "
                                     "context", "context_length_exceeded", "messages")
            max_tokens = requested or 16  # completions: 16, OpenAI's legacy default
            if len(ids) + max_tokens > max_positions:
                raise BadRequest(f"{len(ids)} prompt + {max_tokens} output tokens exceed the model's "
                                 f"{max_positions} positions", "context_length_exceeded", "max_tokens")
            check_min_tokens(body, max_tokens)
            if body.reasoning is not None and not chat:
                raise BadRequest("reasoning: the completions endpoint has no reasoning field (a reasoning model's "
                                 "thinking streams as chat's delta.reasoning_content); use /v1/chat/completions",
                                 "unsupported_parameter", "reasoning")
        except BadRequest as exc:
            return _error(exc.status, exc.message, "invalid_request_error", exc.code, exc.param)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(counter)}"
        try:
            handle = service.submit(ids, max_tokens, request_id=rid, sampling=sampling)
        except RequestRejected as exc:
            error = exc.outcome.error or "rejected"
            status = REJECT_STATUS.get(error, 400)
            kind = "server_overloaded" if status == 503 else "invalid_request_error"
            return _error(status, f"request rejected: {error}", kind, error)
        except ServebenchError as exc:  # the engine is stopping or its thread failed
            return _error(503, f"the engine cannot take requests: {exc}", "server_error", "engine_unavailable")
        thinking = body.reasoning.tokens if body.reasoning is not None else (reasoning_tokens if chat and reasoning_tokens
                                                                              else None)
        shape = _Shape(rid, model_id, chat, len(ids), max_tokens, int(time.time()), thinking)
        reply = ReplyText(body.stop_sequences, None if sampling.ignore_eos else eos)
        echo = prompt_text(body, ids) if body.echo else ""
        extras = _Extras(body.include_usage, body.continuous_usage, echo, recorder,
                         None if recorder is None else LogprobFormat(chat, decode, offset=len(echo)))
        if body.stream:
            return StreamingResponse(_stream(handle, shape, reply, extras),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await _whole(handle, shape, reply, extras, http.receive)

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest) -> Any:
        return await complete(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest) -> Any:
        return await complete(http, chat=True)

    return app


def _cancel_if_live(handle: RequestHandle) -> None:
    """Cancel the request if it has not ended (the client went away): its KV is freed."""
    if not handle.done:
        handle.cancel()


@dataclass(frozen=True)
class _Shape:
    """What every chunk of one response repeats."""

    rid: str
    model: str
    chat: bool
    prompt_tokens: int
    max_tokens: int
    created: int
    reasoning_tokens: int | None = None  # chat: the reply's first tokens are reasoning (None: not a reasoning reply)

    def thinks(self, token_index: int) -> bool:
        """Whether the reply's token ``token_index`` (0-based) is reasoning."""
        return self.reasoning_tokens is not None and token_index < self.reasoning_tokens

    def chunk(self, text: str | None, finish: str | None, first: bool = False,
              logprobs: dict[str, Any] | None = None, reasoning: bool = False) -> dict[str, Any]:
        if self.chat:
            key = "reasoning_content" if reasoning else "content"  # vLLM's and SGLang's field for the thinking
            delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else \
                ({key: text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
            obj = "text_completion"
        return {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def usage(self, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
        """Return OpenAI's usage object; with prefix caching on, ``prompt_tokens_details.cached_tokens`` too."""
        usage: dict[str, Any] = {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                                 "total_tokens": self.prompt_tokens + completion_tokens}
        if cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
        if self.reasoning_tokens is not None:  # OpenAI's: the reasoning tokens, part of completion_tokens
            usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning_tokens, completion_tokens)}
        return usage


@dataclass
class _Extras:
    """What a request asked for beside its reply's text: usage, the echoed prompt, each token's logprobs."""

    include_usage: bool = False
    continuous_usage: bool = False  # usage so far in every chunk (vLLM's stream_options.continuous_usage_stats)
    echo: str = ""  # the prompt's text, shown before the reply's (completions' echo)
    recorder: LogprobRecorder | None = None
    logprobs: LogprobFormat | None = None

    def logprobs_of(self, first: int, count: int) -> dict[str, Any] | None:
        """Return the logprobs object of the reply's tokens ``first`` to ``first + count`` (None: not asked for)."""
        if self.recorder is None or self.logprobs is None:
            return None
        return self.logprobs.entries(self.recorder.tokens[first:first + count])


def _sse(doc: Any) -> str:
    return f"data: {json.dumps(doc)}\n\n"


def _finish(reply: ReplyText, shape: _Shape) -> tuple[str, str | None]:
    """Return the text the latest token leaves to show and the finish reason once the reply has ended."""
    if reply.finish is None and reply.tokens >= shape.max_tokens:
        reply.finish = "length"
        return reply.flush(), "length"
    return "", reply.finish


async def _stream(handle: RequestHandle, shape: _Shape, reply: ReplyText, extras: _Extras) -> AsyncIterator[str]:
    """Yield the echoed prompt if asked, one SSE chunk per token (with its logprobs if asked), usage if asked,
    then [DONE]; cancel the request if the client goes."""
    try:
        if shape.chat:
            yield _sse(shape.chunk("", None, first=True))
        elif extras.echo:
            yield _sse(shape.chunk(extras.echo, None))
        finished = False
        index = 0  # tokens the engine has sent
        while True:
            tokens, outcome = await handle.next_batch()
            for token in tokens:
                index += 1
                if finished:  # the engine sends nothing after the end; never show it if it did
                    continue
                text = reply.add(token)
                rest, finish = _finish(reply, shape)
                doc = shape.chunk(text + rest, finish, logprobs=extras.logprobs_of(index - 1, 1),
                                  reasoning=shape.thinks(index - 1))
                if extras.continuous_usage:
                    doc["usage"] = shape.usage(reply.tokens)
                yield _sse(doc)
                finished = finish is not None
            if outcome is None:
                continue
            if outcome.status != "success":
                yield _sse({"error": {"message": f"request ended with {outcome.status}: {outcome.error}",
                                      "type": outcome.status, "param": None, "code": outcome.error or outcome.status}})
            else:
                if not finished:  # the engine ended it without a token that says why
                    yield _sse(shape.chunk(reply.flush(), "stop"))
                if extras.include_usage:
                    doc = shape.chunk(None, None)
                    doc["choices"] = []
                    doc["usage"] = shape.usage(outcome.output_tokens, outcome.cached_prompt_tokens)
                    yield _sse(doc)
            yield "data: [DONE]\n\n"
            return
    finally:
        _cancel_if_live(handle)  # the client disconnected (or the server stops): free the KV now


async def _cancel_on_disconnect(receive: Receive, handle: RequestHandle) -> None:
    """Wait for the client to go away, then cancel its request (a non-streaming client included)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            _cancel_if_live(handle)
            return


async def _whole(handle: RequestHandle, shape: _Shape, reply: ReplyText, extras: _Extras, receive: Receive) -> Any:
    """Wait for the whole answer (cancelling if the client disconnects) and return one JSON body."""
    watcher = asyncio.create_task(_cancel_on_disconnect(receive, handle))
    parts: list[str] = []
    try:
        while True:
            tokens, outcome = await handle.next_batch()
            for token in tokens:
                parts.append(reply.add(token))
            if outcome is None:
                continue
            if outcome.status != "success":
                if watcher.done():
                    return Response(status_code=499)  # nobody is listening
                return _error(OUTCOME_STATUS.get(outcome.status, 500),
                              f"request ended with {outcome.status}: {outcome.error}", outcome.status,
                              outcome.error or outcome.status)
            parts.append(reply.flush())
            thought = "".join(parts[:shape.reasoning_tokens or 0])
            text = extras.echo + "".join(parts[shape.reasoning_tokens or 0:])
            finish = reply.finish or "length"
            logprobs = extras.logprobs_of(0, reply.tokens)
            if shape.chat:
                message = {"role": "assistant", "content": text}
                if shape.reasoning_tokens is not None:
                    message["reasoning_content"] = thought
                choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
            return {"id": shape.rid, "object": "chat.completion" if shape.chat else "text_completion",
                    "created": shape.created, "model": shape.model, "choices": [choice],
                    "usage": shape.usage(outcome.output_tokens, outcome.cached_prompt_tokens)}
    finally:
        watcher.cancel()
        _cancel_if_live(handle)

