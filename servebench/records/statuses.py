"""One status vocabulary for every source: the statuses, their words for people, and the failure mapping.

:data:`STATUSES` is the one list of a record's outcomes (the :data:`Status` type is derived from it) and
:data:`STATUS_WORDS` the one table of how each reads (Completed, Timed out, ...) in the terminal, the
figures, Compare and the dashboard. The load generator and every importer map a failure here.

The same server event must get the same status whichever tool measured it, or accepted and rejected
counts would depend on the tool. The rules, first match wins (``docs/importers.md`` has the table):

1. the client cancelled the request (a run's duration limit, Ctrl-C, a tool's cancellation) -> ``cancelled``;
2. the client's own deadline passed -> ``timeout``;
3. the HTTP status: 429 or 503 -> ``rejected``; 408 or 504 -> ``timeout``; 499 (client closed the
   request) -> ``cancelled``;
4. a cause that says the server refused admission ("rejected", "queue_full", "overloaded",
   "Too Many Requests", "Service Unavailable", "rate limit") -> ``rejected``;
5. a cause that says a deadline passed ("timeout", "timed out", "deadline") -> ``timeout``;
6. anything else -> ``failed``.

The cause itself is kept by the caller in the record's ``error``. This module imports nothing from
servebench, so the load generator and the importers can both use it.
"""

from __future__ import annotations

import re
from typing import Literal

STATUSES: tuple[str, ...] = ("success", "failed", "timeout", "cancelled", "rejected")  # this order everywhere
Status = Literal[STATUSES]  # type: ignore[valid-type]  # Literal["success", ..., "rejected"], from the one list
FailureStatus = Literal[STATUSES[1:]]  # type: ignore[valid-type]  # every status but success

# each status as people read it: the one table the terminal, figures, Compare and the dashboard use
STATUS_WORDS: dict[str, str] = {"success": "Completed", "failed": "Failed", "timeout": "Timed out",
                                "cancelled": "Cancelled", "rejected": "Rejected"}

REJECT_HTTP: frozenset[int] = frozenset({429, 503})
TIMEOUT_HTTP: frozenset[int] = frozenset({408, 504})
CANCEL_HTTP: frozenset[int] = frozenset({499})

_REJECTED_RE = re.compile(
    r"reject|queue[ _-]?full|overload|too many requests|service unavailable|rate[ _-]?limit", re.IGNORECASE)
_TIMEOUT_RE = re.compile(r"time[ _-]?out|timed out|deadline", re.IGNORECASE)

# The table in the docs, row by row: (status, what maps to it).
STATUS_TABLE: tuple[tuple[str, str], ...] = (
    ("cancelled", "the client cancelled the request: the run's duration limit, Ctrl-C, a tool's own "
                  "cancellation (GuideLLM incomplete, AIPerf `was_cancelled`), HTTP 499"),
    ("timeout", "a deadline passed: the client's per-request deadline, a read timeout (`ReadTimeout`, "
                "`TimeoutError`), HTTP 408 or 504, a server cause naming a timeout or deadline "
                "(`deadline_exceeded`)"),
    ("rejected", "the server refused admission: HTTP 429 or 503, or a cause saying `rejected`, "
                 "`queue_full`, `overloaded`, `Too Many Requests`, `Service Unavailable` or `rate limit`"),
    ("failed", "everything else: other HTTP statuses, connection errors, a stream closed early, malformed "
               "SSE, an error event with any other cause, a reply without output tokens"),
)


def failure_status(http_status: int | None = None, cause: str | None = None, *, client_cancelled: bool = False,
                   client_timeout: bool = False) -> FailureStatus:
    """Return the canonical status of a request that did not succeed (rules in the module docstring).

    ``cause`` is any text the source has: an exception, an error body, an error event's message,
    type and code. Admission refusals are checked before deadlines, so "rejected: timeout" is a refusal.

    >>> failure_status(503), failure_status(500, "request rejected: queue_full"), failure_status(cause="ReadTimeout()")
    ('rejected', 'rejected', 'timeout')
    >>> failure_status(200, '{"message": "request ended with timeout: deadline_exceeded"}'), failure_status(500)
    ('timeout', 'failed')
    >>> failure_status(cause="boom", client_cancelled=True), failure_status(499)
    ('cancelled', 'cancelled')
    """
    if client_cancelled:
        return "cancelled"
    if client_timeout:
        return "timeout"
    if http_status in REJECT_HTTP:
        return "rejected"
    if http_status in TIMEOUT_HTTP:
        return "timeout"
    if http_status in CANCEL_HTTP:
        return "cancelled"
    if cause:
        if _REJECTED_RE.search(cause):
            return "rejected"
        if _TIMEOUT_RE.search(cause):
            return "timeout"
    return "failed"

CLIENT_DEADLINE_ERROR = "client_deadline"  # error of an attempt the client's own deadline cut (a retrying client)
