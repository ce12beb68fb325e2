"""Clients that retry: backoff, which outcomes are retried, and the logical request's deadline.

One user request (a *logical* request) is served by one or more *attempts*. Each attempt is its own
timing record, with its own ``request_id``, the shared ``logical_id`` and its ``attempt`` number. The
rules, the same in the simulator, the engine run and the load generator:

* An attempt that ends with a status in ``retry_on`` is retried while fewer than ``max_attempts``
  were sent. The retry starts ``backoff`` after the attempt's end (never before it: attempts of one
  logical request never overlap). A server's ``Retry-After`` raises the wait to at least what it
  asks (load generator only), and the generator's cap (``--max-retry-wait-s``) bounds every wait.
* Backoff before retry k (k = 1 for the first retry) is ``min(max_s, base_s * multiplier**(k-1))``;
  with ``jitter: full`` the wait is drawn uniformly from [0, that] (AWS's "full jitter").
* ``deadline_s`` D bounds the logical request from its first attempt's start: a retry whose wait
  would end at or after first start + D is not sent, and an attempt still running at the deadline
  is cut there (status ``timeout``, error ``client_deadline``; its tokens are wasted output).
* Partial output is never joined to a retry: the failed attempt keeps its tokens as wasted
  ``output_tokens`` in its own record, and the retry generates its answer from scratch.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servebench.records.statuses import CLIENT_DEADLINE_ERROR

RetryStatus = Literal["rejected", "timeout", "failed"]
RETRY_STATUSES: tuple[str, ...] = ("rejected", "timeout", "failed")
ERR_CLIENT_DEADLINE = CLIENT_DEADLINE_ERROR  # an attempt the logical deadline cut


class BackoffSpec(BaseModel):
    """Exponential backoff between attempts, capped at ``max_s``."""

    model_config = ConfigDict(extra="forbid")

    base_s: float = Field(0.0, ge=0, description="Wait before the first retry, s (0: retry at once).")
    multiplier: float = Field(2.0, ge=1, description="Each later wait is this many times the previous one.")
    max_s: float | None = Field(None, gt=0, description="Longest wait, s; None: unbounded.")
    jitter: Literal["full", "none"] = Field("full", description="full: wait uniformly in [0, backoff]; none: the backoff.")

    def delay_s(self, retry: int, rng: np.random.Generator | None) -> float:
        """Return the wait before retry number ``retry`` (1 for the first), drawing jitter from ``rng``.

        >>> BackoffSpec(base_s=0.5, multiplier=2, max_s=3, jitter="none").delay_s(4, None)
        3.0
        """
        if self.base_s == 0:
            return 0.0
        exponent = retry - 1
        # past ~1000 doublings the float overflows; the cap (or infinity) is the answer then
        raw = self.base_s * self.multiplier ** exponent if exponent * math.log2(max(self.multiplier, 1.0)) < 1000 \
            else math.inf
        cap = raw if self.max_s is None else min(raw, self.max_s)
        if self.jitter == "none" or cap == 0:
            return cap
        if rng is None:
            raise ValueError("full jitter needs a random generator")
        return float(rng.uniform(0.0, cap)) if math.isfinite(cap) else cap


class ClientSpec(BaseModel):
    """How clients treat a failed attempt; the defaults send one attempt and never retry."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(1, ge=1, le=100, description="Attempts per logical request, the first included.")
    backoff: BackoffSpec = Field(default_factory=BackoffSpec, description="Wait between attempts.")
    retry_on: list[RetryStatus] = Field(default_factory=lambda: list(RETRY_STATUSES),
                                        description="Attempt statuses that are retried.")
    deadline_s: float | None = Field(None, gt=0, description="The logical request's deadline after its first start, s.")

    @model_validator(mode="after")
    def _unique(self) -> "ClientSpec":
        if len(set(self.retry_on)) != len(self.retry_on):
            raise ValueError("retry_on names a status more than once")
        return self

    @property
    def retries(self) -> bool:
        """Return True when a failed attempt can be retried."""
        return self.max_attempts > 1 and bool(self.retry_on)

    def deadline_at(self, first_start_s: float) -> float:
        """Return the logical request's deadline on the clock (infinity without one)."""
        return math.inf if self.deadline_s is None else first_start_s + self.deadline_s

    def attempt_timeout(self, start_s: float, first_start_s: float,
                        server_timeout_s: float | None) -> tuple[float | None, bool]:
        """Return an attempt's timeout after its start and whether the client's deadline sets it.

        The client's remaining deadline wins when it is shorter than the server's timeout (or there is none).
        """
        left = self.deadline_at(first_start_s) - start_s
        if left == math.inf:
            return server_timeout_s, False
        if server_timeout_s is None or left < server_timeout_s:
            return left, True
        return server_timeout_s, False

    def next_start(self, attempt: int, status: str, error: str | None, end_s: float, first_start_s: float,
                   rng: np.random.Generator | None, retry_after_s: float | None = None,
                   max_wait_s: float | None = None) -> float | None:
        """Return when the next attempt starts after attempt number ``attempt`` ended, or None for no retry.

        ``retry_after_s`` (a server's Retry-After) makes the wait at least that long; ``max_wait_s``
        then caps the wait (the load generator's ``--max-retry-wait-s``), before the deadline is checked.

        >>> ClientSpec(max_attempts=2).next_start(1, "rejected", None, 5.0, 0.0, None, retry_after_s=1e8, max_wait_s=60)
        65.0
        """
        if status not in self.retry_on or attempt >= self.max_attempts or error == ERR_CLIENT_DEADLINE:
            return None
        wait = self.backoff.delay_s(attempt, rng)
        if retry_after_s is not None:
            wait = max(wait, retry_after_s)
        if max_wait_s is not None:
            wait = min(wait, max_wait_s)
        start = end_s + wait
        return start if start < self.deadline_at(first_start_s) else None
