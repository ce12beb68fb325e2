"""Stopping the child processes that tests start: politely first, then for sure."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    """Terminate ``proc`` and wait for it; kill it if it has not exited within ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)
