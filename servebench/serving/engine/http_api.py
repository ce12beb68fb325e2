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
import logging
import socket
import threading
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import h11
import uvicorn
from fastapi import FastAPI
from fastapi import Request as HTTPRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.protocols.http.h11_impl import H11Protocol

from servebench.serving.engine.logprobs import MAX_LOGPROBS, LogprobFormat, LogprobRecorder
from servebench.serving.engine.model import SamplingParams
from servebench.serving.engine.prom import CONTENT_TYPE as PROMETHEUS_TEXT, EngineMetrics
from servebench.serving.engine.request_rules import BadRequest, check_implemented, check_unicode, shown
from servebench.serving.engine.service import EngineService, RequestHandle, RequestRejected
from servebench.errors import ConfigError, ServebenchError

log = logging.getLogger("servebench.serving.engine.http_api")

READ_TIMEOUT_S = 30.0  # a request's headers, and then its body, must arrive within this
MAX_BODY_BYTES = 64 * 2**20  # the most any body may hold, whatever the model
MIN_BODY_BYTES = 2**20  # the least a model's body limit is
BODY_BYTES_PER_POSITION = 64  # a body may hold this many bytes per position of the model's context
MAX_STOP_SEQUENCES = 4  # as OpenAI
MAX_STOP_CHARS = 256  # each stop sequence is matched after every token on the engine thread, at a cost that grows with it
MAX_LOGIT_BIAS = 300  # tokens one logit_bias may name, as OpenAI

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# --------------------------------------------------------------------------- sockets and uvicorn


def http_url(host: str, port: int) -> str:
    """Return the base URL of a server on ``host``:``port``, an IPv6 address in brackets.

    >>> http_url("127.0.0.1", 8011), http_url("::1", 8011)
    ('http://127.0.0.1:8011', 'http://[::1]:8011')
    """
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def bind_socket(host: str, port: int) -> socket.socket:
    """Return a TCP socket bound to ``host:port`` (``port=0``: a free one), for uvicorn to listen on.

    The socket is made with protocol IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted
    connections only when the listening socket says TCP (the protocol also sets it itself).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot bind {host}:{port}: {exc.strerror}") from None
    return sock


def _raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """Return a whole HTTP/1.1 error response that closes the connection (for the protocol layer)."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode("ascii") + body


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY on every connection and a bound on reading headers.

    A connection that has not delivered a request's complete headers ``header_timeout_s`` after it
    opened (or after the first bytes of a later request) gets 408 and is closed, with one log line.
    Idle kept-alive connections are uvicorn's ``timeout_keep_alive``; bodies are :class:`BodyDeadline`'s.
    """

    header_timeout_s: float = READ_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm_header_timer()  # a request has begun and its headers are not all here yet
        else:
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _on_header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        client = "%s:%d" % self.client if self.client else "a client"
        log.warning("%s sent no complete request headers within %g s: 408, connection closed",
                    client, self.header_timeout_s)
        self.transport.write(_raw_error(408, "Request Timeout", f"request headers not complete within "
                                        f"{self.header_timeout_s:g} s", "request_timeout"))
        self.transport.close()


class _Server(uvicorn.Server):
    """A uvicorn server that calls ``on_ready`` once its sockets listen (after the app's start-up)."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._on_ready is not None and not self.should_exit:
            self._on_ready()


def make_server(app: Any, sock: socket.socket, *, log_level: str = "warning",
                read_timeout_s: float = READ_TIMEOUT_S,
                on_ready: Callable[[], None] | None = None) -> uvicorn.Server:
    """Return a uvicorn server for ``app`` on a bound socket: TCP_NODELAY, bounded header reads.

    ``on_ready`` runs once the app's start-up (the engine's warm-up) is done and the socket
    listens, so whatever it announces can be connected to at once.
    """
    if not read_timeout_s > 0:
        raise ConfigError(f"read timeout must be positive, got {read_timeout_s}")
    protocol = type("TimedH11", (TimedH11Protocol,), {"header_timeout_s": read_timeout_s})
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, lifespan="on", http=protocol,
                            timeout_keep_alive=min(5.0, read_timeout_s), timeout_graceful_shutdown=2)
    return _Server(config, on_ready)


@contextmanager
def serve_in_background(app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                        start_timeout_s: float = 15.0, read_timeout_s: float = READ_TIMEOUT_S) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn in a thread; yield its base URL once it accepts requests; stop it on exit.

    ``port=0`` binds a free port. The socket is bound before uvicorn starts, so no other process
    can take the port in between.
    """
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    ready = threading.Event()
    server = make_server(app, sock, log_level=log_level, read_timeout_s=read_timeout_s, on_ready=ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name=f"uvicorn-{bound_port}")
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not ready.wait(0.01) and thread.is_alive() and time.monotonic() < deadline:
        pass
    try:
        if not ready.is_set():
            raise ConfigError(f"the server on {host}:{bound_port} did not start within {start_timeout_s:g} s")
        yield http_url(host, bound_port)
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
    return word_ids(text.split(), vocab)


def word_ids(words: list[str], vocab: int) -> list[int]:
    """Return each word's token id (CRC32 of its UTF-8, modulo ``vocab``)."""
    return [zlib.crc32(word.encode("utf-8")) % vocab for word in words]


def decode(token_id: int) -> str:
    """Render one output token as text (a leading space and ``t<id>``): one token, one word.

    >>> decode(7) + decode(42)
    ' t7 t42'
    """
    return f" t{token_id}"


class StopStrings:
    """A request's stop sequences, checked on the engine thread after each generated token.

    Called with the sequence's tokens and where its output starts; True once the output's text
    contains a stop sequence. Only the text a new occurrence could span is rebuilt (an occurrence
    must end in the newest token's text, or an earlier call would have found it).

    >>> check = StopStrings(("t2 t3",))
    >>> check([9, 1, 2], 1), check([9, 1, 2, 3], 1)
    (False, True)
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.longest = max(len(s) for s in stops)

    def __call__(self, tokens: list[int], start: int) -> bool:
        parts = [decode(tokens[-1])]
        size, i = 0, len(tokens) - 2
        while size < self.longest - 1 and i >= start:
            parts.append(decode(tokens[i]))
            size += len(parts[-1])
            i -= 1
        tail = "".join(reversed(parts))
        return any(s in tail for s in self.stops)


class ReplyText:
    """One reply's text as OpenAI shows it, token by token.

    Each token adds its word; text that could be the start of a stop sequence is held back until
    it is not. A stop sequence cuts the text where it begins; an EOS token (when not ignored) ends
    the reply without adding text. Either sets ``finish`` to "stop"; the tokens stay counted.

    >>> reply = ReplyText(("t3",), eos_token_id=None)
    >>> [reply.add(t) for t in (1, 2, 3)], reply.finish
    ([' t1', ' t2', ' '], 'stop')
    """

    def __init__(self, stops: tuple[str, ...], eos_token_id: int | None) -> None:
        self.stops = stops
        self.eos_token_id = eos_token_id
        self.text = ""
        self.shown = 0  # characters of text already released
        self.tokens = 0
        self.finish: str | None = None

    def add(self, token_id: int) -> str:
        """Take the next generated token; return the text it releases ("" if held back or cut)."""
        self.tokens += 1
        if self.finish is not None:
            return ""
        if token_id == self.eos_token_id:
            self.finish = "stop"
            return self.flush()
        before = len(self.text)
        self.text += decode(token_id)
        if self.stops:
            found = [i for i in (self.text.find(s, max(0, before - len(s) + 1)) for s in self.stops) if i >= 0]
            if found:
                self.finish = "stop"
                self.text = self.text[:min(found)]
                return self.flush()
            return self._release(len(self.text) - self._held())
        return self._release(len(self.text))

    def flush(self) -> str:
        """Release whatever is held back (the reply has ended)."""
        return self._release(len(self.text))

    def _held(self) -> int:
        """Return how many trailing characters could begin a stop sequence."""
        held = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.text)), held, -1):
                if self.text.endswith(s[:k]):
                    held = k
                    break
        return held

    def _release(self, upto: int) -> str:
        out = self.text[self.shown:upto] if upto > self.shown else ""
        self.shown = max(self.shown, upto)
        return out


# --------------------------------------------------------------------------- request bodies


class _Strict(BaseModel):
    """Strict types (no "3" for 3, no true for 1); unknown fields are ignored, as OpenAI servers do."""

    model_config = ConfigDict(extra="ignore", strict=True)


class TextPart(_Strict):
    """A chat content part; the engine reads text only."""

    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    """One chat message: a role and text content (a string, text parts, or none)."""

    role: str
    content: str | list[TextPart] | None = None


class ReasoningOption(_Strict):
    """servebench's request extension: think ``tokens`` tokens before the answer (chat only), as a reasoning model does."""

    tokens: int = Field(ge=0)


class StreamOptions(_Strict):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM's: usage, counted so far, in every chunk


class CompletionBody(_Strict):
    """The fields of an OpenAI completion or chat request that the engine uses, strictly typed."""

    model: str | None = None
    prompt: str | list[int] | list[str] | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    seed: int | None = Field(None, ge=-(2**63), lt=2**64)
    stop: str | list[str] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None  # chat: true or false; completions: how many alternatives (0 to 20)
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)  # chat only
    echo: bool | None = None  # completions only: the prompt's text before the reply's
    min_tokens: int | None = Field(None, ge=0)  # vLLM's; accepted only where it changes nothing (check_min_tokens)
    user: str | None = None
    reasoning: ReasoningOption | None = None  # the reply's first tokens are reasoning (servebench's own field)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def continuous_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.continuous_usage_stats)

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def _error(status: int, message: str, kind: str, code: str, param: str | None = None,
           headers: dict[str, str] | None = None) -> JSONResponse:
    """Return an OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status, headers=headers)


def _is_union_tag(part: object) -> bool:
    """Return True for the parts of a pydantic error location that name a union branch, not a field."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "none") or "[" in part
                                      or part[:1].isupper())


def parse_body(raw: bytes) -> CompletionBody:
    """Parse and strictly validate a request body; raise BadRequest saying what is wrong."""

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not valid JSON")

    try:
        doc = json.loads(raw, parse_constant=no_constant)
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", "invalid_json") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
        raise BadRequest(f"the request body is not valid JSON: {exc}", "invalid_json") from None
    check_unicode(doc)
    if isinstance(doc, dict):
        check_implemented(doc)
    try:
        return CompletionBody.model_validate(doc)
    except ValidationError as exc:
        # the most specific error names the field best: in a union, the branch that got furthest
        worst = max(exc.errors(), key=lambda e: len(e["loc"]))
        param = ".".join(str(p) for p in worst["loc"] if not _is_union_tag(p)) if isinstance(doc, dict) else None
        raise BadRequest(f"invalid request: {param or 'body'}: {worst['msg']}", "invalid_value", param) from None
    except RecursionError:
        raise BadRequest("the request body is nested too deeply", "invalid_json") from None


def prompt_ids(body: CompletionBody, chat: bool, vocab: int, max_positions: int) -> list[int]:
    """Return the prompt's token ids (one per word); raise BadRequest if there is none, or more than fit.

    A prompt must leave one of the model's ``max_positions`` for output: a longer one is refused
    before it is split into words, so a body of millions of words costs no more than the words that fit.
    """
    param = "messages" if chat else "prompt"
    limit = max_positions - 1
    if chat:
        if not body.messages:
            raise BadRequest("'messages' must be a non-empty list", param="messages")
        words: list[str] = []
        for m in body.messages:
            if isinstance(m.content, str):
                words.append(m.content)
            elif m.content is not None:
                words.extend(p.text for p in m.content)
        ids = _encode_within(" ".join(words), vocab, limit, param)
    elif body.prompt is None:
        raise BadRequest("'prompt' is required", param="prompt")
    elif isinstance(body.prompt, str):
        ids = _encode_within(body.prompt, vocab, limit, param)
    elif not body.prompt:
        ids = []
    elif all(isinstance(t, int) for t in body.prompt):
        ids = list(body.prompt)  # type: ignore[arg-type]
        if len(ids) > limit:
            raise _too_long(limit, param)
        if any(not 0 <= t < vocab for t in ids):
            raise BadRequest(f"prompt token ids must be in [0, {vocab})", param="prompt")
    elif len(body.prompt) == 1:
        ids = _encode_within(str(body.prompt[0]), vocab, limit, param)
    else:
        raise BadRequest("a batch of prompts is not supported; send one prompt per request", param="prompt")
    if not ids:
        raise BadRequest("the prompt is empty; the engine needs at least one token", param=param)
    return ids


def _encode_within(text: str, vocab: int, limit: int, param: str) -> list[int]:
    """Return :func:`encode` of ``text``, or raise BadRequest once it has more than ``limit`` words."""
    words = text.split(maxsplit=limit)  # at most limit + 1 pieces, the last holding the rest
    if len(words) > limit:
        raise _too_long(limit, param)
    return word_ids(words, vocab)


def _too_long(limit: int, param: str) -> BadRequest:
    return BadRequest(f"the prompt has more than {limit} tokens: with one output token it would exceed the "
                      f"model's {limit + 1} positions", "context_length_exceeded", param)


def prompt_text(body: CompletionBody, ids: list[int]) -> str:
    """Return the prompt as ``echo`` shows it: the text sent, or the token ids rendered as words."""
    if isinstance(body.prompt, str):
        return body.prompt
    if body.prompt and isinstance(body.prompt[0], str):
        return body.prompt[0]
    return "".join(decode(t) for t in ids)


def check_min_tokens(body: CompletionBody, max_tokens: int) -> None:
    """Refuse vLLM's ``min_tokens`` where it would change the reply: the engine does not implement it.

    It changes nothing at 0 or 1 (a reply has at least one token), nor with ``ignore_eos`` and no stop
    sequence, where every reply runs to ``max_tokens`` anyway (the fixed-length recipe of benchmark
    tools, which send both); above ``max_tokens`` it is a contradiction, as vLLM says too.
    """
    wanted = body.min_tokens or 0
    if wanted > max_tokens:
        raise BadRequest(f"min_tokens {wanted} is above max_tokens {max_tokens}", param="min_tokens")
    if wanted > 1 and not (body.ignore_eos and not body.stop_sequences):
        raise BadRequest("'min_tokens' is supported only where it changes nothing: with ignore_eos true and no stop "
                         "sequence every reply runs to max_tokens; leave it out, or send 0",
                         "unsupported_parameter", "min_tokens")


def logprob_alternatives(body: CompletionBody, chat: bool) -> int | None:
    """Return how many alternatives each token's logprobs should show, or None when none were asked for.

    Chat takes ``logprobs: true`` and ``top_logprobs: N``; completions ``logprobs: N`` and ``echo``
    (not both: echoed prompt tokens would need the prompt's logprobs, which the engine does not compute).
    """
    if chat:
        if body.echo:
            raise BadRequest("'echo' is not supported on chat completions", "unsupported_parameter", "echo")
        if body.logprobs is not None and not isinstance(body.logprobs, bool):
            raise BadRequest(f"invalid request: logprobs: chat takes true or false (and top_logprobs for "
                             f"alternatives), got {shown(body.logprobs)}", param="logprobs")
        if body.top_logprobs is not None and not body.logprobs:
            raise BadRequest("'top_logprobs' needs 'logprobs': true", param="top_logprobs")
        return (body.top_logprobs or 0) if body.logprobs else None
    if body.top_logprobs is not None:
        raise BadRequest("'top_logprobs' is a chat parameter; completions take 'logprobs': N", param="top_logprobs")
    if body.logprobs is None:
        return None
    if isinstance(body.logprobs, bool) or not 0 <= body.logprobs <= MAX_LOGPROBS:
        raise BadRequest(f"invalid request: logprobs: completions take a number of alternatives from 0 to "
                         f"{MAX_LOGPROBS}, got {shown(body.logprobs)}", param="logprobs")
    if body.echo:
        raise BadRequest("'echo' with 'logprobs' needs the prompt's logprobs, which this server does not compute; "
                         "ask for one of them", "unsupported_parameter", "echo")
    return body.logprobs


def sampling_params(body: CompletionBody, vocab: int, on_logits: LogprobRecorder | None = None) -> SamplingParams:
    """Return the engine's sampling for a request with the API's defaults (temperature 1, top_p 1).

    ``on_logits`` records each generated token's logprobs, when the request asked for them.
    """
    stops = body.stop_sequences
    if len(stops) > MAX_STOP_SEQUENCES:
        raise BadRequest(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}", param="stop")
    if any(s == "" for s in stops):
        raise BadRequest("a stop sequence must not be empty", param="stop")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
        longest = max(len(s) for s in stops)
        raise BadRequest(f"a stop sequence may hold at most {MAX_STOP_CHARS} characters, got {longest}", param="stop")
    if len(body.logit_bias or {}) > MAX_LOGIT_BIAS:
        raise BadRequest(f"'logit_bias' may name at most {MAX_LOGIT_BIAS} tokens, got {len(body.logit_bias or {})}",
                         param="logit_bias")
    bias: list[tuple[int, float]] = []
    for key, value in (body.logit_bias or {}).items():
        if not (key.isascii() and key.isdigit() and len(key) <= len(str(vocab)) and int(key) < vocab):
            raise BadRequest(f"logit_bias key {shown(key)} is not a token id in [0, {vocab})", param="logit_bias")
        if not -100 <= value <= 100:
            raise BadRequest(f"logit_bias value {value} for token {key} is outside [-100, 100]", param="logit_bias")
        bias.append((int(key), float(value)))
    return SamplingParams(temperature=1.0 if body.temperature is None else body.temperature,
                          top_p=1.0 if body.top_p is None else body.top_p, seed=body.seed,
                          ignore_eos=bool(body.ignore_eos), logit_bias=tuple(bias),
                          stop=StopStrings(stops) if stops else None, on_logits=on_logits)


REJECT_STATUS = {"queue_full": 503}  # "try later"; any other rejection means the request can never fit
# an admitted request that did not succeed: a deadline is 504; anything else (preempted into a full queue,
# the engine stopping) is 500, never 503, which clients read as a refusal to admit
OUTCOME_STATUS = {"timeout": 504}


# --------------------------------------------------------------------------- the request body, bounded


class BodyDeadline:
    """ASGI middleware: read each HTTP request's whole body within ``timeout_s`` before the app runs.

    A body not complete in time gets 408 and the connection is closed; one over ``max_bytes``
    gets 413. A client that leaves mid-body is logged in one line, never a traceback. The app then
    reads the body as usual, and later ``receive`` calls wait for the client's disconnect.
    """

    def __init__(self, app: Any, timeout_s: float = READ_TIMEOUT_S, max_bytes: int = MAX_BODY_BYTES) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"body timeout must be positive, got {timeout_s}")
        self.app = app
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = f"{scope.get('method', '?')} {scope.get('path', '?')}"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                log.warning("%s: request body not complete within %g s (%d bytes read): 408, connection closed",
                            where, self.timeout_s, size)
                await _send_error(send, 408, f"request body not complete within {self.timeout_s:g} s",
                                  "request_timeout")
                return
            if message["type"] == "http.disconnect":
                log.warning("%s: the client left before its request body was complete (%d bytes read)", where, size)
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                log.warning("%s: request body over %d bytes: 413, connection closed", where, self.max_bytes)
                await _send_error(send, 413, f"request body over {self.max_bytes} bytes", "request_too_large")
                return
            chunks.append(body)
            more = bool(message.get("more_body", False))
        whole: bytes | None = b"".join(chunks)

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message = {"type": "http.request", "body": whole, "more_body": False}
                whole = None
                return message
            return await receive()

        await self.app(scope, replay, send)


async def _send_error(send: Send, status: int, message: str, code: str) -> None:
    """Send an OpenAI-style JSON error and ask for the connection to close."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


# --------------------------------------------------------------------------- the app


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

