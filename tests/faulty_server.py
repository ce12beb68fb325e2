"""A deliberately faulty OpenAI-compatible server on 127.0.0.1 (raw sockets, asyncio in a thread) for tests."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np

from servebench.load.generator import LoadConfig, LoadResult, plan_requests, run_load_sync


class LocalHTTPServer:
    """A raw-socket HTTP/1.1 server on 127.0.0.1 (port 0) in its own thread, for the tests' fake servers.

    ``with Server(...) as url`` starts it; every POST's path and body go to ``_answer(path, body, writer)``,
    which writes the reply and says whether the connection may be reused; any other method gets a 404. Leaving the block
    stops it and cancels answers still running (a stalled one must not outlive the loop).
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())
        self.loop.close()

    async def _serve(self) -> None:
        self.stop = asyncio.Event()
        self.handlers: set[asyncio.Task] = set()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        async with server:
            await self.stop.wait()
            server.close()
            for task in self.handlers:  # a stalled answer must not outlive the loop
                task.cancel()
            await asyncio.gather(*self.handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                length = 0
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                method, path = head[0].split()[:2]
                if method != "POST":  # only the API's POSTs are served (a GET of /metrics finds nothing)
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                if not await self._answer(path, body, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self.handlers.discard(task)

    async def _answer(self, path: str, body: bytes, writer: asyncio.StreamWriter) -> bool:
        raise NotImplementedError


class FaultyServer(LocalHTTPServer):
    """A server that misbehaves on purpose.

    Every POST streams ``chunks`` content chunks of one token each (chunked encoding), then does what
    ``fault`` says: ``error_event`` (a server-side deadline, as serve-engine sends it), ``close`` (drops
    the connection mid-body), ``garbage`` (malformed SSE data), ``stall`` (sends nothing more),
    ``lying_usage`` (usage claims ``usage_tokens`` tokens, then [DONE]), ``queue_full`` (HTTP 503 before
    any chunk) or ``deadline_504`` (HTTP 504 before any chunk).
    """

    def __init__(self, fault: str, chunks: int = 5, usage_tokens: int = 1000) -> None:
        super().__init__()
        self.fault, self.chunks, self.usage_tokens = fault, chunks, usage_tokens

    async def _answer(self, path: str, raw: bytes, writer: asyncio.StreamWriter) -> bool:
        """Write one answer; return False when the connection must not be reused."""
        if raw:
            json.loads(raw)  # a body that is not JSON fails here, as a real server refuses it
        if self.fault in ("queue_full", "deadline_504"):
            code, reason, err = (
                (503, "Service Unavailable", {"message": "request rejected: queue_full", "type": "server_overloaded",
                                              "code": "queue_full"}) if self.fault == "queue_full" else
                (504, "Gateway Timeout", {"message": "request ended with timeout: deadline_exceeded",
                                          "type": "timeout", "code": "deadline_exceeded"}))
            payload = json.dumps({"error": err}).encode()
            writer.write(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            await writer.drain()
            return True
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")

        def chunk(text: str) -> bytes:
            data = text.encode()
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"
        for i in range(self.chunks):
            writer.write(chunk(f"data: {json.dumps({'choices': [{'index': 0, 'text': f' t{i}'}]})}\n\n"))
            await writer.drain()
            await asyncio.sleep(0.002)
        if self.fault == "close":
            return False  # the caller closes the socket mid-body: no terminating chunk
        if self.fault == "stall":
            await asyncio.sleep(30)  # the client's deadline ends it first
            return False
        usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": self.usage_tokens}}
        tail = {
            "error_event": 'data: {"error": {"message": "request ended with timeout: deadline_exceeded", '
                           '"type": "timeout", "code": "deadline_exceeded"}}\n\ndata: [DONE]\n\n',
            "garbage": "data: {this is not json\n\n",
            "lying_usage": f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n",
        }[self.fault]
        writer.write(chunk(tail) + b"0\r\n\r\n")
        await writer.drain()
        return True


def faulty_run(fault: str, chunks: int = 5, n: int = 2, out: int = 20, **config: object) -> LoadResult:
    """Send ``n`` requests of ``out`` tokens at 200/s to a FaultyServer with ``fault``; return the run."""
    plan = plan_requests(np.arange(n) / 200.0, [5] * n, [out] * n, np.random.default_rng(1))
    with FaultyServer(fault, chunks=chunks) as url:
        return run_load_sync(LoadConfig(url=url, model="m", **config), plan)  # type: ignore[arg-type]
