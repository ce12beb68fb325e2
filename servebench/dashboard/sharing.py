"""Whether the dashboard is served beyond this machine, and what it may then do (pure logic, no Streamlit).

The project's ``.streamlit/config.toml`` binds the dashboard to 127.0.0.1. Anyone who starts it on
another address (``./dev.sh app --server.address 0.0.0.0``) shares it: every page then shows a banner,
and the pages that start work on this machine (a timing run, a long sweep) ask for an explicit opt-in.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Mapping

from servebench.serving.sweep import MAX_WIDEN

REMOTE_WORK_ENV = "SERVEBENCH_ALLOW_REMOTE_WORK"
OPT_IN_VALUES = frozenset({"1", "true", "yes", "on"})
SHARED_SWEEP_MAX_REQUESTS = 50_000  # simulated requests (about 6 CPU-seconds) a shared sweep may start unasked
SWEEP_MAX_SEARCH = 10  # servebench.serving.sweep.sweep's default bisection steps
MIB = 1024 * 1024  # Streamlit's server.maxUploadSize counts megabytes of 2**20 bytes


def is_loopback(address: str | None) -> bool:
    """Return whether a listening address reaches this machine only (127.0.0.0/8, ::1, localhost, a Unix socket).

    An unset address means Streamlit listens on every interface, so it is not loopback.

    >>> [is_loopback(a) for a in ("127.0.0.1", "127.8.0.1", "::1", "[::1]", "localhost", "unix:///tmp/sb.sock")]
    [True, True, True, True, True, True]
    >>> [is_loopback(a) for a in ("0.0.0.0", "::", "", None, "192.168.1.5", "myhost")]
    [False, False, False, False, False, False]
    """
    if (address or "").startswith("unix://"):
        return True  # Streamlit on a Unix socket: no network address at all
    host = (address or "").strip().strip("[]").lower()
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # empty (every interface) or a host name that may resolve anywhere


def remote_work_allowed(env: Mapping[str, str]) -> bool:
    """Return whether the person serving the dashboard opted in to remote users starting work.

    >>> remote_work_allowed({"SERVEBENCH_ALLOW_REMOTE_WORK": "1"}), remote_work_allowed({})
    (True, False)
    """
    return env.get(REMOTE_WORK_ENV, "").strip().lower() in OPT_IN_VALUES


@dataclass(frozen=True)
class Sharing:
    """Where the dashboard listens and whether remote users may start work on this machine."""

    address: str
    shared: bool
    remote_work: bool

    @classmethod
    def of(cls, address: str | None, env: Mapping[str, str]) -> "Sharing":
        """Return the sharing state for Streamlit's ``server.address`` and the process environment."""
        return cls(address or "", not is_loopback(address), remote_work_allowed(env))

    @property
    def may_start_work(self) -> bool:
        """Return whether a page may start a timing run or a long sweep."""
        return not self.shared or self.remote_work

    @property
    def where(self) -> str:
        """Return the listening address in words."""
        return self.address if self.address else "every network interface"

    def banner(self) -> str | None:
        """Return the warning every page shows while the dashboard is shared, or None when it is local."""
        if not self.shared:
            return None
        work = ("remote users may start timing runs and long sweeps here" if self.remote_work else
                f"timing runs and long sweeps stay off unless it is started with {REMOTE_WORK_ENV}=1")
        return (f"**Shared on the network** (listening on {self.where}): anyone who can reach this machine can "
                f"open this page and see the records in use; {work}. Restart with `./dev.sh app` to keep it "
                "on this machine only.")

    def opt_in_message(self, what: str) -> str:
        """Return why ``what`` (e.g. "a timing run") cannot start from a shared dashboard, and how to allow it."""
        return (f"This dashboard is shared on the network (listening on {self.where}), so {what} does not start "
                f"from here: it would run on this machine for anyone who can reach it. To allow it, start the app "
                f"with `{REMOTE_WORK_ENV}=1` in its environment, e.g. `{REMOTE_WORK_ENV}=1 ./dev.sh app "
                f"--server.address 0.0.0.0`; or run it locally with `./dev.sh app`.")


def sweep_requests_bound(loads: int, requests_per_point: int, search: bool) -> int:
    """Return the most requests a sweep may simulate: every grid load, plus the search's widening and bisection.

    >>> sweep_requests_bound(3, 100, search=False), sweep_requests_bound(3, 100, search=True)
    (300, 1900)
    """
    simulations = loads + ((MAX_WIDEN + SWEEP_MAX_SEARCH) if search else 0)
    return simulations * requests_per_point


def is_long_sweep(loads: int, requests_per_point: int, search: bool) -> bool:
    """Return whether a sweep is long enough to need the opt-in on a shared dashboard."""
    return sweep_requests_bound(loads, requests_per_point, search) > SHARED_SWEEP_MAX_REQUESTS


def upload_size_error(name: str, size_bytes: int, limit_mb: int, hint: str = "") -> str | None:
    """Return the message for an upload over ``limit_mb`` megabytes (2**20 bytes), or None when it fits.

    >>> upload_size_error("big.csv", 3 * MIB, 2)
    'big.csv is 3.0 MB: the dashboard takes uploads up to 2 MB (server.maxUploadSize).'
    >>> upload_size_error("ok.csv", 2 * MIB, 2) is None
    True
    """
    if size_bytes <= limit_mb * MIB:
        return None
    message = f"{name} is {size_bytes / MIB:,.1f} MB: the dashboard takes uploads up to {limit_mb:,} MB " \
              "(server.maxUploadSize)."
    return f"{message} {hint}" if hint else message
