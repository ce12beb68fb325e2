"""The HTTP transport under the engine's API: sockets, uvicorn with bounded header reads, bounded bodies.

``make_server`` runs an ASGI app on a bound socket with TCP_NODELAY on every connection and a
deadline on each request's headers; ``BodyDeadline`` reads each body whole, within a deadline and a
size limit, before the app sees it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from servebench.errors import ConfigError

log = logging.getLogger("servebench.serving.engine.http_api")  # one logger for the whole server

READ_TIMEOUT_S = 30.0  # a request's headers, and then its body, must arrive within this
MAX_BODY_BYTES = 64 * 2**20  # the most any body may hold, whatever the model

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
