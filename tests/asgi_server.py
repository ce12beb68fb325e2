"""An ASGI app served by uvicorn in a thread of the test process, on 127.0.0.1 and a free port."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from servebench.errors import ConfigError
from servebench.serving.engine.http_server import READ_TIMEOUT_S, bind_socket, http_url, make_server


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
