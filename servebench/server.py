"""An OpenAI-compatible HTTP server (FastAPI) in front of the local engine, and a loopback runner for apps."""

from __future__ import annotations

import asyncio
import itertools
import json
import queue
import socket
import threading
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from .engine.service import EngineService, RequestHandle, RequestRejected, TokenEvent
from .errors import ConfigError
from .scheduler import Outcome


def bind_socket(host: str, port: int) -> socket.socket:
    """Return a TCP socket bound to ``host:port`` (``port=0``: a free one), for uvicorn to listen on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return sock


@contextmanager
def serve_in_background(app: Any, host: str = "127.0.0.1", port: int = 0,
                        log_level: str = "warning", start_timeout_s: float = 15.0) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn in a thread; yield its base URL; stop it on exit.

    ``port=0`` binds a free port. The socket is bound before uvicorn starts, so the URL is
    known at once and no other process can take the port in between.
    """
    import uvicorn

    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, host=host, port=bound_port, log_level=log_level, lifespan="on",
                            timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"uvicorn-{bound_port}")
    thread.start()
    waited = 0.0
    while not server.started and thread.is_alive() and waited < start_timeout_s:
        time.sleep(0.01)
        waited += 0.01
    try:
        if not server.started:
            raise ConfigError(f"the server on {host}:{bound_port} did not start within {start_timeout_s:g} s")
        yield f"http://{host}:{bound_port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


# --------------------------------------------------------------------------- tokens as words


def encode(text: str, vocab: int) -> list[int]:
    """Map each whitespace-separated word to one token id (a stable CRC32 hash): one word, one token.

    Word-level, not the engine's byte-level demo mapping, so a load generator's prompt of N words
    is exactly N prompt tokens.

    >>> ids = encode("hello world  hello", 512)
    >>> len(ids), ids[0] == ids[2], all(0 <= i < 512 for i in ids)
    (3, True, True)
    """
    return [zlib.crc32(word.encode("utf-8")) % vocab for word in text.split()]


def decode(token_id: int) -> str:
    """Render one output token as text (a leading space and ``t<id>``)."""
    return f" t{token_id}"


# --------------------------------------------------------------------------- request bodies


class CompletionBody(BaseModel):
    """The fields of an OpenAI completion or chat request that the engine uses (others are ignored)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | list[int] | list[str] | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=1)
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


def _error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    """Return an OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code or status}},
                        status_code=status)


REJECT_STATUS = {"queue_full": 503}  # "try later"; any other rejection means the request can never fit


def create_app(service: EngineService, model_id: str | None = None, *, manage_service: bool = True) -> FastAPI:
    """Return the FastAPI app serving an :class:`~servebench.engine.service.EngineService`.

    With ``manage_service`` the app's lifespan starts the service (warm-up, engine thread) and
    stops it at shutdown, cancelling live requests. The model id defaults to ``servebench-<preset>``.
    """
    vocab = service.vocab_size
    max_positions = service.model.config.max_positions
    model_id = model_id or f"servebench-{service.model.config.name}"
    sched = service.scheduler_config
    # Each live stream waits for its next event in a worker thread (the handle's queue blocks);
    # size the pool to everything the engine can hold, running and waiting, so no stream starves.
    workers = sched.max_num_seqs + (sched.max_waiting if sched.max_waiting is not None else 256) + 4
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="servebench-stream")

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        if manage_service:
            service.start()
        try:
            yield
        finally:
            if manage_service:
                service.stop()
            pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="servebench serve-engine", lifespan=lifespan)
    counter = itertools.count(1)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": CREATED,
                                            "owned_by": "servebench", "max_model_len": max_positions}]}

    @app.get("/servebench/engine")
    async def engine_state() -> dict[str, Any]:
        """Running and waiting sequences and KV tokens held (to check cancelled requests freed their KV)."""
        return service.stats()

    async def complete(http: HTTPRequest, chat: bool) -> Any:
        try:
            body = CompletionBody.model_validate(await http.json())
        except ValueError as exc:
            return _error(400, f"invalid request body: {' '.join(str(exc).split())[:300]}", "invalid_request_error")
        if body.model is not None and body.model != model_id:
            return _error(404, f"model {body.model!r} does not exist; this server serves {model_id!r}",
                          "invalid_request_error", "model_not_found")
        prompt_ids = _prompt_ids(body, chat, vocab)
        if isinstance(prompt_ids, str):
            return _error(400, prompt_ids, "invalid_request_error")
        max_tokens = body.max_completion_tokens or body.max_tokens or 16
        if len(prompt_ids) + max_tokens > max_positions:
            return _error(400, f"{len(prompt_ids)} prompt + {max_tokens} output tokens exceed the model's "
                          f"{max_positions} positions", "invalid_request_error", "context_length_exceeded")
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{next(counter)}"
        try:
            handle = service.submit(prompt_ids, max_tokens, request_id=rid)
        except RequestRejected as exc:
            error = exc.outcome.error or "rejected"
            status = REJECT_STATUS.get(error, 400)
            kind = "server_overloaded" if status == 503 else "invalid_request_error"
            return _error(status, f"request rejected: {error}", kind, error)
        shape = _Shape(rid, model_id, chat, len(prompt_ids), max_tokens)
        events = _Events(handle, pool)
        if body.stream:
            return StreamingResponse(_stream(events, shape, body.include_usage),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return await _whole(events, shape, http)

    @app.post("/v1/completions")
    async def completions(http: HTTPRequest) -> Any:
        return await complete(http, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(http: HTTPRequest) -> Any:
        return await complete(http, chat=True)

    return app


class _Events:
    """One request's engine events, read off the event loop: token ids in batches, then the outcome."""

    def __init__(self, handle: RequestHandle, pool: ThreadPoolExecutor) -> None:
        self.handle = handle
        self.pool = pool

    async def next_batch(self, timeout_s: float | None = None) -> tuple[list[int], Outcome | None]:
        """Wait for at least one event; return the tokens ready now and the outcome if it came."""
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.pool, self.handle.next_event)
        first = await (asyncio.wait_for(fut, timeout_s) if timeout_s is not None else fut)
        tokens: list[int] = []
        event: TokenEvent | Outcome = first
        while True:
            if isinstance(event, Outcome):
                return tokens, event
            tokens.append(event.token_id)
            try:
                event = self.handle.next_event(timeout=0)
            except queue.Empty:
                return tokens, None

    def cancel_if_live(self) -> None:
        """Cancel the request if it has not ended (the client went away): its KV is freed."""
        if not self.handle.done:
            self.handle.cancel()


CREATED = 1_700_000_000  # a fixed "created" time: the weights are seeded, not trained


def _prompt_ids(body: CompletionBody, chat: bool, vocab: int) -> list[int] | str:
    """Return the prompt's token ids, or an error message."""
    if chat:
        if not body.messages:
            return "'messages' must be a non-empty list"
        parts = []
        for m in body.messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts: keep the text ones
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            if isinstance(content, str):
                parts.append(content)
        ids = encode(" ".join(parts), vocab)
    elif body.prompt is None:
        return "'prompt' is required"
    elif isinstance(body.prompt, str):
        ids = encode(body.prompt, vocab)
    elif all(isinstance(t, int) for t in body.prompt):
        ids = list(body.prompt)  # type: ignore[arg-type]
        if any(not 0 <= t < vocab for t in ids):
            return f"prompt token ids must be in [0, {vocab})"
    elif len(body.prompt) == 1:
        ids = encode(str(body.prompt[0]), vocab)
    else:
        return "a batch of prompts is not supported; send one prompt per request"
    if not ids:
        return "the prompt is empty; the engine needs at least one token"
    return ids


@dataclass(frozen=True)
class _Shape:
    """What every chunk of one response repeats."""

    rid: str
    model: str
    chat: bool
    prompt_tokens: int
    max_tokens: int

    def chunk(self, text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else \
                ({"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return {"id": self.rid, "object": obj, "created": CREATED, "model": self.model, "choices": [choice]}

    def usage(self, completion_tokens: int) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens}


def _sse(doc: Any) -> str:
    return f"data: {json.dumps(doc)}\n\n"


async def _stream(events: _Events, shape: _Shape, include_usage: bool) -> AsyncIterator[str]:
    """Yield one SSE chunk per token, usage if asked, then [DONE]; cancel the request if the client goes."""
    sent = 0
    try:
        if shape.chat:
            yield _sse(shape.chunk("", None, first=True))
        while True:
            tokens, outcome = await events.next_batch()
            for token in tokens:
                sent += 1
                yield _sse(shape.chunk(decode(token), "length" if sent >= shape.max_tokens else None))
            if outcome is None:
                continue
            if outcome.status != "success":
                yield _sse({"error": {"message": f"request ended with {outcome.status}: {outcome.error}",
                                      "type": outcome.status, "code": outcome.error}})
            elif include_usage:
                doc = shape.chunk(None, None)
                doc["choices"] = []
                doc["usage"] = shape.usage(outcome.output_tokens)
                yield _sse(doc)
            yield "data: [DONE]\n\n"
            return
    finally:
        events.cancel_if_live()  # the client disconnected (or the server stops): free the KV now


async def _whole(events: _Events, shape: _Shape, http: Any) -> Any:
    """Wait for the whole answer (cancelling if the client disconnects) and return one JSON body."""
    tokens: list[int] = []
    try:
        while True:
            try:
                batch, outcome = await events.next_batch(timeout_s=0.25)
            except TimeoutError:
                if await http.is_disconnected():
                    return Response(status_code=499)
                continue
            tokens.extend(batch)
            if outcome is None:
                continue
            if outcome.status != "success":
                return _error(504 if outcome.status == "timeout" else 500,
                              f"request ended with {outcome.status}: {outcome.error}", outcome.status, outcome.error)
            text = "".join(decode(t) for t in tokens)
            if shape.chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                          "finish_reason": "length"}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            return {"id": shape.rid, "object": "chat.completion" if shape.chat else "text_completion",
                    "created": CREATED, "model": shape.model, "choices": [choice],
                    "usage": shape.usage(outcome.output_tokens)}
    finally:
        events.cancel_if_live()
