"""Logical requests (a user request and its retries) and fairness between slices, as plain numbers.

A retrying client writes one record per attempt, sharing a ``logical_id`` (see
:mod:`servebench.serving.retry`). Over those records:

* a logical request succeeds when one of its attempts succeeds;
* its user-visible latency runs from its first attempt's start to its final attempt's end;
* ``amplification`` = attempts / logical requests (1 when nobody retried);
* it "saw partial output then a retry" when an attempt that is not its last failed after
  delivering tokens (a ``first_token``, or ``output_tokens`` above 0): those tokens are wasted,
  never joined to the retry's answer;
* an attempt was cut by the deadline when its error is ``client_deadline``.

A record without a ``logical_id`` is a logical request of its own.

Attempt numbers do not enter these numbers: every record of a ``logical_id`` is one of its attempts,
whatever its ``attempt`` says (:data:`ATTEMPT_RULE`). Numbers that contradict one another (one number
twice, a number skipped, two successes, a later attempt starting before an earlier one) are listed
by :func:`attempt_issues` with their count and the first logical request showing each (the one
whose first record comes first), so the report can warn instead of staying silent.

Fairness across slices uses Jain's index over each slice's goodput divided by its weight:
``J = (sum x)^2 / (n * sum x^2)``, 1 when every slice gets goodput in proportion to its weight,
1/n when one slice gets it all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field

from servebench.records.rundir import read_settings
from servebench.records.schema import SUCCESS, shown
from servebench.records.statuses import CLIENT_DEADLINE_ERROR
from servebench.records.table import RecordTable


@dataclass(frozen=True)
class LogicalStats:
    """What the attempts of a record table say about their logical requests."""

    logical_requests: int
    logical_successes: int
    attempts: int
    retried: int  # logical requests with more than one attempt
    partial_then_retry: int
    attempts_cut_by_deadline: int
    user_latency_s: np.ndarray  # every logical request's first start to final end, sorted
    user_latency_success_s: np.ndarray  # the same over logical requests that succeeded, sorted

    @property
    def success_fraction(self) -> float | None:
        return self.logical_successes / self.logical_requests if self.logical_requests else None

    @property
    def amplification(self) -> float | None:
        return self.attempts / self.logical_requests if self.logical_requests else None


def logical_codes(table: RecordTable) -> np.ndarray:
    """Return each record's logical request as an integer code (records without logical_id: their own)."""
    n = len(table)
    enc = pc.dictionary_encode(table.logical_id_arrow)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    idx = enc.indices
    codes = idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    alone = np.flatnonzero(codes < 0)
    codes[alone] = len(enc.dictionary) + np.arange(alone.size)
    return codes if n else np.zeros(0, dtype=np.int64)


def logical_stats(table: RecordTable) -> LogicalStats:
    """Return the logical-request numbers over a table's records (see the module docstring)."""
    codes = logical_codes(table)
    k = int(codes.max()) + 1 if codes.size else 0
    first = np.full(k, np.inf)
    last = np.full(k, -np.inf)
    np.minimum.at(first, codes, table.start)
    np.maximum.at(last, codes, table.end)
    attempts = np.bincount(codes, minlength=k)
    ok = table.status == SUCCESS
    succeeded = np.bincount(codes, weights=ok.astype(np.float64), minlength=k) > 0
    # partial output then a retry: a failed attempt with tokens, ending before its logical request's last end
    delivered = ~ok & ((table.output_tokens > 0) | np.isfinite(table.first_token))
    not_last = table.end < last[codes]
    partial = np.bincount(codes[delivered & not_last], minlength=k) > 0
    errors = table.error
    cut = int(sum(1 for e in errors if e == CLIENT_DEADLINE_ERROR)) if len(table) else 0
    latency = last - first
    return LogicalStats(
        logical_requests=k, logical_successes=int(np.count_nonzero(succeeded)), attempts=len(table),
        retried=int(np.count_nonzero(attempts > 1)), partial_then_retry=int(np.count_nonzero(partial)),
        attempts_cut_by_deadline=cut, user_latency_s=np.sort(latency), user_latency_success_s=np.sort(latency[succeeded]))


# --------------------------------------------------------------------------- attempt numbers that disagree


ATTEMPT_RULE = ("the logical section does not use attempt numbers: a logical request is every record of its "
                "logical_id, succeeds if any does, and lasts from the earliest start to the latest end")
IssueKind = Literal["repeated_number", "missing_number", "several_successes", "out_of_order"]
_ISSUE_TEXT: dict[str, str] = {
    "repeated_number": "with one attempt number given twice",
    "missing_number": "with an attempt number skipped",
    "several_successes": "with more than one successful attempt",
    "out_of_order": "with a later attempt starting before an earlier one",
}


class AttemptIssue(BaseModel):
    """Logical requests whose attempts contradict one another in one way, and the first of them."""

    kind: IssueKind
    logical_requests: int = Field(description="Logical requests showing this inconsistency.")
    example_logical_id: str = Field(description="The first of them: the one whose first record comes first.")
    example: str = Field(description="What is wrong with it, e.g. 'attempt 1 appears 2 times'.")

    def warning(self) -> str:
        """One line for people: the count, the first example, and the rule the numbers follow."""
        n = self.logical_requests
        return (f"logical_id: {n:,} logical request{'s' if n != 1 else ''} {_ISSUE_TEXT[self.kind]} (first: "
                f"{self.example_logical_id!r}, {self.example}); {ATTEMPT_RULE}")


def repeated_issue(count: int, logical_id: str, attempt: int, times: int) -> AttemptIssue:
    """One attempt number given to several records of a logical request."""
    return AttemptIssue(kind="repeated_number", logical_requests=count, example_logical_id=logical_id,
                        example=f"attempt {attempt} appears {times} times")


def missing_issue(count: int, logical_id: str, numbers: Sequence[int]) -> AttemptIssue:
    """Attempt numbers with a gap (1 and 3), from the example's distinct numbers in ascending order."""
    missing, above = first_missing(numbers)
    return AttemptIssue(kind="missing_number", logical_requests=count, example_logical_id=logical_id,
                        example=f"no attempt {missing}, though there is an attempt {above}")


def successes_issue(count: int, logical_id: str, successes: int) -> AttemptIssue:
    """More than one successful attempt of a logical request (a client stops at its first success)."""
    return AttemptIssue(kind="several_successes", logical_requests=count, example_logical_id=logical_id,
                        example=f"{successes} successful attempts")


def order_issue(count: int, logical_id: str, later: tuple[int, float], earlier: tuple[int, float]) -> AttemptIssue:
    """A higher-numbered attempt (number, start) that starts before a lower-numbered one."""
    return AttemptIssue(kind="out_of_order", logical_requests=count, example_logical_id=logical_id,
                        example=f"attempt {later[0]} starts at {shown(later[1])} s, before attempt {earlier[0]} "
                                f"at {shown(earlier[1])} s")


def first_missing(numbers: Sequence[int]) -> tuple[int, int]:
    """Return the smallest attempt number missing below the largest, and the first number above it.

    ``numbers``: distinct, ascending, each at least 1, with a gap somewhere.

    >>> first_missing([1, 3]), first_missing([2, 3]), first_missing([1, 2, 5, 9])
    ((2, 3), (1, 2), (3, 5))
    """
    for expected, number in enumerate(numbers, start=1):
        if number != expected:
            return expected, int(number)
    raise ValueError(f"no attempt number is missing from {list(numbers)}")


def attempt_issues(table: RecordTable) -> list[AttemptIssue]:
    """Return each kind of inconsistency among the attempts of the table's logical requests (none: empty).

    Only records with a ``logical_id`` are checked, and attempt numbers only where records have one.
    In a logical request's attempts ordered by start (ties by number), a number below the one before
    it means a later attempt started first.
    """
    if not table.has_logical_ids:
        return []
    enc = pc.dictionary_encode(table.logical_id_arrow)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    names = enc.dictionary  # in order of first appearance: a lower code's first record comes first
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    named = codes >= 0
    issues: list[AttemptIssue] = []

    def first_code(mask_of_codes: np.ndarray) -> int:
        return int(np.flatnonzero(mask_of_codes)[0])

    numbered = named & (table.attempt >= 1)
    c, a, st = codes[numbered], table.attempt[numbered], table.start[numbered]
    by_number = np.lexsort((a, c))
    cn, an = c[by_number], a[by_number]
    new_run = np.r_[True, (cn[1:] != cn[:-1]) | (an[1:] != an[:-1])] if cn.size else np.zeros(0, dtype=bool)
    run_at = np.flatnonzero(new_run)
    run_len = np.diff(np.r_[run_at, cn.size])
    run_code, run_number = cn[run_at], an[run_at]
    repeated = np.zeros(len(names), dtype=bool)
    repeated[run_code[run_len > 1]] = True
    if repeated.any():
        k = first_code(repeated)
        j = int(np.flatnonzero((run_code == k) & (run_len > 1))[0])  # its smallest repeated number
        issues.append(repeated_issue(int(repeated.sum()), names[k].as_py(), int(run_number[j]), int(run_len[j])))
    distinct = np.bincount(run_code, minlength=len(names))
    top = np.zeros(len(names), dtype=np.int64)
    np.maximum.at(top, run_code, run_number)
    gap = top > distinct  # distinct numbers from 1 fill 1..top exactly when there are top of them
    if gap.any():
        k = first_code(gap)
        issues.append(missing_issue(int(gap.sum()), names[k].as_py(), run_number[run_code == k].tolist()))
    wins = np.bincount(codes[named & (table.status == SUCCESS)], minlength=len(names))
    several = wins > 1
    if several.any():
        k = first_code(several)
        issues.append(successes_issue(int(several.sum()), names[k].as_py(), int(wins[k])))
    by_start = np.lexsort((a, st, c))
    cs, as_, ss = c[by_start], a[by_start], st[by_start]
    drop = np.flatnonzero((cs[1:] == cs[:-1]) & (as_[1:] < as_[:-1]))  # the pair (i, i + 1) is out of order
    if drop.size:
        late = np.zeros(len(names), dtype=bool)
        late[cs[drop]] = True
        k = first_code(late)
        i = int(drop[cs[drop] == k][0])
        issues.append(order_issue(int(late.sum()), names[k].as_py(), (int(as_[i]), float(ss[i])),
                                  (int(as_[i + 1]), float(ss[i + 1]))))
    return issues


def jain_index(values: Sequence[float]) -> float | None:
    """Return Jain's fairness index of non-negative values, or None when there are none or all are 0.

    >>> jain_index([1, 1, 1]), jain_index([1, 0]), jain_index([0, 0])
    (1.0, 0.5, None)
    """
    x = np.asarray(values, dtype=np.float64)
    total_sq = float(np.sum(x * x))
    if x.size == 0 or total_sq == 0:
        return None
    return float(np.sum(x)) ** 2 / (x.size * total_sq)


def normalised_goodput(goodput: Mapping[str, float], weights: Mapping[str, float] | None) -> dict[str, float]:
    """Return each slice's goodput divided by its weight (weight 1 for a slice the weights do not name)."""
    w = weights or {}
    return {name: value / float(w.get(name, 1.0)) for name, value in goodput.items()}


def warmup_slices(table: RecordTable, window_start: float, warmup_s: float) -> np.ndarray:
    """Return each record's slice by when it started: ``cold`` in the first ``warmup_s`` of the window, else ``warm``."""
    return np.where(table.start < window_start + warmup_s, "cold", "warm").astype(object)


def tenant_weights(doc: Mapping[str, object]) -> dict[str, float] | None:
    """Return the tenant weights a scenario (or a run's metadata holding one under ``scenario``) names, or None."""
    scenario = doc.get("scenario") if isinstance(doc.get("scenario"), Mapping) else doc
    server = scenario.get("server") if isinstance(scenario, Mapping) else None
    tenants = server.get("tenants") if isinstance(server, Mapping) else None
    if not isinstance(tenants, Mapping) or not tenants:
        return None
    out: dict[str, float] = {}
    for name, spec in tenants.items():
        weight = spec.get("weight", 1.0) if isinstance(spec, Mapping) else 1.0
        if isinstance(name, str) and isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight > 0:
            out[name] = float(weight)
    return out or None


def read_tenant_weights(folder: str | Path) -> dict[str, float] | None:
    """Return the tenant weights of a run folder (its metadata.json's scenario, or a scenario file), or None.

    The first of :func:`servebench.records.rundir.read_settings`'s documents that names weights gives them;
    a document that cannot be read gives none, and the report says 'equal'.
    """
    for doc in read_settings(folder):
        found = tenant_weights(doc)
        if found:
            return found
    return None
