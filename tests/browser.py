"""Shared helpers for tests that drive Debian's headless Chromium through Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest
from processes import stop

CHROMIUM = os.environ.get("SERVEBENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
REPO = Path(__file__).resolve().parent.parent


def require_chromium() -> None:
    """Skip the calling test, saying why, when Chromium or Playwright is not available."""
    if not (Path(CHROMIUM).exists() and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium chromium-driver)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@contextlib.contextmanager
def browser_page(viewport: tuple[int, int] = (1400, 1000)) -> Iterator["object"]:
    """Yield a Playwright page in headless Debian Chromium with a fresh profile; console errors are collected."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="sb-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.console_errors = []  # type: ignore[attr-defined]
            page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
            page.on("pageerror", lambda e: page.console_errors.append(str(e)))
            yield page
        finally:
            context.close()


def free_port() -> int:
    """Return a free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def streamlit_server(script: str = "app.py", timeout_s: float = 90) -> Iterator[str]:
    """Run ``streamlit run`` on a free port and yield its URL; stop it afterwards.

    The address (127.0.0.1), usage statistics (off), toolbar and file watcher (none) come from the project's
    .streamlit/config.toml, as with `./dev.sh app`, so the browser tests and benchmarks check what users get.
    """
    port = free_port()
    streamlit = shutil.which("streamlit", path=str(Path(sys.executable).parent)) or "streamlit"
    proc = subprocess.Popen(
        [streamlit, "run", str(REPO / script), "--server.headless", "true", "--server.port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                raise RuntimeError(f"streamlit exited early:\n{out}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError("streamlit did not become healthy in time")
        yield url
    finally:
        stop(proc, timeout_s=10)


def screenshot(page: "object", name: str) -> Path:
    """Save a full-page screenshot under test-artifacts/ and return its path."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path
