"""The report's fleet section: how requests spread over replicas, and what each replica served.

Records carry their replica in a ``replica`` column (a fleet simulation writes it,
``servebench.serving.fleet``; any record file may have one). Per replica: its requests, the peak
of its requests in flight (between start and end, as the report's ``active_requests``), its prompt
tokens served from its prefix cache over its prompt tokens, and the nearest-rank p95 of TTFT and
latency over its successes. For the fleet: the load imbalance (the busiest replica's requests over
the mean per replica) and the token hit rate over every replica. A replica with no request does not
appear in records, so it is not counted: the mean is over the replicas named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, Field

from servebench.analysis.percentiles import percentile
from servebench.analysis.timeline import active_timeline
from servebench.records.table import RecordTable

REPLICA_COLUMN = "replica"


class ReplicaReport(BaseModel):
    """One replica's share of the records."""

    requests: int = Field(description="Records on this replica.")
    in_flight_peak: int = Field(description="Most of its requests between start and end at once.")
    token_hit_rate: float | None = Field(
        description="Its cached_prompt_tokens / prompt_tokens, over records that say; None when none says.")
    ttft_p95_s: float | None = Field(description="Nearest-rank p95 TTFT of its successes; None without any.")
    latency_p95_s: float | None = Field(description="Nearest-rank p95 latency of its successes; None without any.")


class FleetReport(BaseModel):
    """Requests across replicas (the records' ``replica`` column)."""

    replicas: int = Field(description="Replicas named by the records.")
    load_imbalance: float = Field(description="The busiest replica's requests / the mean per replica (1: even).")
    token_hit_rate: float | None = Field(
        description="cached_prompt_tokens / prompt_tokens over every replica; None when no record says.")
    per_replica: dict[str, ReplicaReport] = Field(description="By replica, in the order of their names.")


def replica_labels(table: RecordTable) -> np.ndarray | None:
    """Return each record's replica as text (None where absent or blank), or None when the records have no ``replica``.

    Blank text (empty, or only white space) names no replica, as a blank CSV cell reads and as the
    DuckDB engine reads it, so a JSONL ``"replica": ""`` is no invisible replica of its own.
    """
    column = table.extra.get(REPLICA_COLUMN)
    if column is None:
        return None
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    values = arr.to_numpy(zero_copy_only=False) if pa.types.is_integer(arr.type) and arr.null_count == 0 else None
    if values is not None:
        if values.dtype == np.uint64 and values.size and int(values.max()) > np.iinfo(np.int64).max:
            return np.array(values.tolist(), dtype=object)  # Python's integers: past int64, none wraps negative
        return values.astype(np.int64)
    return np.array([None if v is None or (isinstance(v, str) and not v.strip()) else str(v)
                     for v in arr.to_pylist()], dtype=object)


def replica_names(labels: np.ndarray) -> list[Any]:
    """Return the replicas ``labels`` names (None: no replica), in the report's order: by value.

    >>> replica_names(np.array(["b", None, "a", "b"], dtype=object)), replica_names(np.array([2, 0, 10]))
    (['a', 'b'], [0, 2, 10])
    """
    named = labels[labels != None] if labels.dtype == object else labels  # noqa: E711 (elementwise)
    return sorted(set(named.tolist()), key=lambda v: (isinstance(v, str), v))


def fleet_report(table: RecordTable) -> FleetReport | None:
    """Return the fleet section, or None when no record names its replica."""
    labels = replica_labels(table)
    if labels is None:
        return None
    named = labels != None if labels.dtype == object else np.ones(labels.size, dtype=bool)  # noqa: E711
    if not named.any():
        return None
    names = replica_names(labels)
    ok = table.is_success
    ttft = table.first_token - table.start
    latency = table.end - table.start
    per: dict[str, ReplicaReport] = {}
    for name in names:
        rows = named & (labels == name)
        good = rows & ok
        per[str(name)] = ReplicaReport(
            requests=int(np.count_nonzero(rows)),
            in_flight_peak=active_timeline(table.start[rows], table.end[rows], 0.0, 1.0).peak,
            token_hit_rate=_hit_rate(table, rows), ttft_p95_s=percentile(ttft[good], 95),
            latency_p95_s=percentile(latency[good], 95))
    return fleet_of(per, _hit_rate(table, named))


def fleet_of(per_replica: dict[str, ReplicaReport], token_hit_rate: float | None) -> FleetReport:
    """Return the fleet section of its replicas' reports (in name order) and the fleet's token hit rate."""
    counts = [r.requests for r in per_replica.values()]
    return FleetReport(replicas=len(per_replica), load_imbalance=max(counts) * len(counts) / sum(counts),
                       token_hit_rate=token_hit_rate, per_replica=per_replica)


def with_idle_replicas(fleet: FleetReport | None, replicas: int) -> FleetReport | None:
    """Return a simulated fleet's section with each of its ``replicas`` (0 to replicas - 1), idle ones too.

    Records name only the replicas that served something; a simulation knows the fleet, so a replica
    the router never chose appears with no request, and the load imbalance is over the whole fleet
    (3 closed-loop users on 8 replicas: 8 replicas, not the 3 busy ones at an imbalance near 1).
    """
    names = [str(k) for k in range(replicas)]
    if fleet is None or not set(fleet.per_replica) <= set(names):
        return fleet
    idle = ReplicaReport(requests=0, in_flight_peak=0, token_hit_rate=None, ttft_p95_s=None, latency_p95_s=None)
    return fleet_of({name: fleet.per_replica.get(name, idle) for name in names}, fleet.token_hit_rate)


def hit_rate(cached_tokens: int, prompt_tokens: int) -> float | None:
    """Return cached prompt tokens over prompt tokens (exact integers, one rounding); None without prompt tokens."""
    return cached_tokens / prompt_tokens if prompt_tokens > 0 else None


def _hit_rate(table: RecordTable, rows: np.ndarray) -> float | None:
    """Return cached prompt tokens over prompt tokens of ``rows`` that say both; None when none does."""
    has = rows & (table.cached_prompt_tokens >= 0) & (table.prompt_tokens >= 0)
    return hit_rate(_exact_sum(table.cached_prompt_tokens[has]), _exact_sum(table.prompt_tokens[has]))


def _exact_sum(counts: np.ndarray) -> int:
    """Return the sum of non-negative counts as a Python int (Python's integers where int64 could wrap)."""
    if counts.size and int(counts.max()) > np.iinfo(np.int64).max // counts.size:
        return sum(counts.tolist())
    return int(counts.sum())
