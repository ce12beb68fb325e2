"""An OpenAI-compatible HTTP server (FastAPI) in front of the local engine, and a loopback runner for apps."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .errors import ConfigError


@contextmanager
def serve_in_background(app: Any, host: str = "127.0.0.1", port: int = 0,
                        log_level: str = "warning", start_timeout_s: float = 15.0) -> Iterator[str]:
    """Serve an ASGI ``app`` with uvicorn in a thread; yield its base URL; stop it on exit.

    ``port=0`` binds a free port. The socket is bound before uvicorn starts, so the URL is
    known at once and no other process can take the port in between.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot bind {host}:{port}: {exc.strerror}") from None
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
