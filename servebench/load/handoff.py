"""The generator's side of the sender process: start it, give it the plan and the go, read what it sent.

:mod:`servebench.load.sender` keeps the open-loop schedule in a process of its own and hands each
connection it wrote a request on to this process, which reads the answer here (h11 over the
non-blocking socket, the same answer rules as every request: :func:`servebench.load.client.read_answer`)
and says when the request ended, handing back a connection the server kept alive. Plain ``http://``
only: a TLS session cannot move between processes (``https://`` runs use the in-loop dispatcher).
"""

from __future__ import annotations

import asyncio
import codecs
import math
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h11
import httpx

from servebench.errors import WorkerError
from servebench.load import sender as wire
from servebench.load.client import HttpOutcome, exc_text, read_answer

READY_TIMEOUT_S = 30.0  # a fresh interpreter on a loaded machine; the sender imports the standard library only
STOP_TIMEOUT_S = 5.0
READ_BYTES = 65536
_PLACEHOLDER = h11.Request(method="POST", target="/", headers=[("Host", "x"), ("Content-Length", "0")])


@dataclass(slots=True)  # one per request offered, kept to the end of the run
class Handed:
    """What the sender did with one planned request: sent it (its connection), failed to, or never sent it."""

    index: int
    sent_s: float | None  # on the run's clock (s since t0); None when nothing was written
    waited: bool  # it found every connection slot busy
    sock: socket.socket | None = None  # the connection its answer arrives on (sent)
    error: str | None = None  # why it could not be sent (connect or write failed)


def request_bytes(url: str, body: bytes, headers: Mapping[str, str]) -> bytes:
    """Return one HTTP/1.1 POST of a JSON ``body`` to ``url`` as bytes, as the sender writes it.

    >>> request_bytes("http://127.0.0.1:8000/v1/completions", b"{}", {}).split(b"\\r\\n")[:2]
    [b'POST /v1/completions HTTP/1.1', b'Host: 127.0.0.1:8000']
    """
    u = httpx.URL(url)
    conn = h11.Connection(h11.CLIENT)
    head = [("Host", u.netloc.decode("ascii")), ("Content-Type", "application/json"), ("Accept", "*/*"),
            ("User-Agent", "servebench"), ("Content-Length", str(len(body))), *headers.items()]
    return conn.send(h11.Request(method="POST", target=u.raw_path, headers=head)) + \
        conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())


class SocketAnswer:
    """An answer read with h11 from a connection the sender wrote the request on (an :class:`client.Answer`).

    Connection failures read as httpx's errors, so a request ends the same way on either path.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.conn = h11.Connection(h11.CLIENT)
        self.conn.send(_PLACEHOLDER)  # the request went out from the sender: h11 needs only its method
        self.conn.send(h11.EndOfMessage())
        self.status_code = 0
        self.headers: dict[str, str] = {}

    async def start(self) -> None:
        """Read up to the answer's status line and headers."""
        while True:
            event = await self._next()
            if isinstance(event, h11.Response):
                self.status_code = event.status_code
                self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                return
            if not isinstance(event, h11.InformationalResponse):
                raise httpx.RemoteProtocolError("the server closed the connection without an answer")

    async def _next(self) -> Any:
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)) from None
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.loop.sock_recv(self.sock, READ_BYTES)
            except OSError as exc:
                raise httpx.ReadError(exc_text(exc)) from None
            self.conn.receive_data(data)

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            event = await self._next()
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    async def aread(self) -> bytes:
        return b"".join([c async for c in self._chunks()])

    async def aiter_lines(self) -> AsyncIterator[str]:
        """Yield the body's lines as text (split at ``\\n``, a trailing ``\\r`` dropped: SSE's line ends)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        async for chunk in self._chunks():
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.removesuffix("\r")
        pending += decoder.decode(b"", final=True)
        if pending:
            yield pending.removesuffix("\r")

    @property
    def reusable(self) -> bool:
        """True when the answer was read to its end and the server keeps the connection open."""
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE


class Handoff:
    """The sender process of one run, and the socket the two talk over."""

    def __init__(self, url: str, items: Iterable[tuple[int, float, float, bytes]], max_in_flight: int) -> None:
        u = httpx.URL(url)
        self._dir = tempfile.TemporaryDirectory(prefix="servebench-sender-")
        plan = str(Path(self._dir.name) / "plan.bin")
        wire.write_plan(plan, items)
        self.ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "servebench.load.sender", str(theirs.fileno()), plan, u.host,
             str(u.port or 80), str(max_in_flight)], pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            start_new_session=True)  # its own scheduling group (autogroup); Ctrl-C reaches it through this process
        theirs.close()
        self.t0: float | None = None
        self.ended = False
        self.nice: int | None = None  # the niceness the sender runs at (it asks for sender.NICE_WANTED)

    async def ready(self) -> None:
        """Wait until the sender has started (bounded)."""
        loop = asyncio.get_running_loop()
        self.ctrl.setblocking(False)
        try:
            data = await asyncio.wait_for(loop.sock_recv(self.ctrl, wire.MSG_BYTES), READY_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            raise WorkerError(f"the sender process did not start ({exc_text(exc)})") from None
        if data[:1] != b"R":
            raise WorkerError(f"the sender process did not start (exit code {self.process.poll()})")
        self.nice = wire.NICE.unpack(data[1:1 + wire.NICE.size])[0]

    async def run(self, t0: float, on_handed: Callable[[Handed], None]) -> None:
        """Give the go at origin ``t0`` (time.monotonic), pass each hand-off to ``on_handed``; return at the plan's end."""
        self.t0 = t0
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def pump() -> None:
            while not done.done():
                try:
                    data, fds, _, _ = socket.recv_fds(self.ctrl, wire.MSG_BYTES, 1)
                except BlockingIOError:
                    return
                except OSError as exc:
                    done.set_exception(WorkerError(f"the sender process failed: {exc_text(exc)}"))
                    return
                if not data:
                    done.set_exception(WorkerError(f"the sender process exited (exit code {self.process.poll()}) "
                                                   "before the end of the plan"))
                elif data[:1] == b"E":
                    done.set_result(None)
                else:
                    on_handed(self._handed(data, fds))

        self.ctrl.sendall(b"G" + wire.GO.pack(t0))
        loop.add_reader(self.ctrl.fileno(), pump)
        try:
            await done
        finally:
            loop.remove_reader(self.ctrl.fileno())
            self.ended = True

    def _handed(self, data: bytes, fds: list[int]) -> Handed:
        assert self.t0 is not None
        index, instant, waited = wire.HEAD.unpack(data[1:1 + wire.HEAD.size])
        sent = None if math.isnan(instant) else instant - self.t0
        kind = data[:1]
        if kind == b"S":
            sock = socket.socket(fileno=fds[0])
            sock.setblocking(False)
            return Handed(index, sent, bool(waited), sock=sock)
        if kind == b"F":
            return Handed(index, sent, bool(waited), error=data[1 + wire.HEAD.size:].decode("utf-8", "replace"))
        return Handed(index, None, bool(waited))  # U: not sent by its give-up instant

    async def exchange(self, handed: Handed, out: HttpOutcome, now: Callable[[], float], stream: bool) -> None:
        """Read the answer to a request the sender wrote into ``out``; hand the connection back when it can serve again."""
        assert handed.sock is not None
        answer = SocketAnswer(handed.sock)
        try:
            await answer.start()
            await read_answer(answer, out, now, stream)
        finally:
            self._finished(handed, answer.reusable)

    def _finished(self, handed: Handed, reusable: bool) -> None:
        """Tell the sender a request ended (a slot is free), with its connection when the server keeps it open."""
        sock, handed.sock = handed.sock, None
        if sock is None:
            return
        try:
            socket.send_fds(self.ctrl, [b"B"], [sock.fileno()] if reusable and not self.ended else [])
        except OSError:
            pass  # the sender has gone (the plan is done, or the run is stopping): nothing waits for the slot
        finally:
            sock.close()

    def release(self, handed: Handed) -> None:
        """Close a handed connection whose request ends without its answer read (a deadline, a stop)."""
        self._finished(handed, False)

    def close(self) -> None:
        """Stop the sender (if it still runs) and remove the plan file."""
        try:
            self.ctrl.send(b"X")
        except OSError:
            pass
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)
        self.ctrl.close()
        self._dir.cleanup()
