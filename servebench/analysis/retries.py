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

Fairness across slices uses Jain's index over each slice's goodput divided by its weight:
``J = (sum x)^2 / (n * sum x^2)``, 1 when every slice gets goodput in proportion to its weight,
1/n when one slice gets it all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from servebench.records.statuses import CLIENT_DEADLINE_ERROR
from servebench.records.table import SUCCESS, RecordTable


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
    """Return the tenant weights of a run folder (its metadata.json's scenario, or a scenario file), or None."""
    p = Path(folder)
    if not p.is_dir():
        return None
    for name in ("metadata.json", "scenario.json", "scenario.yaml", "scenario.yml"):
        f = p / name
        if not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
            doc = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        except (OSError, ValueError, yaml.YAMLError):
            continue  # an unreadable file gives no weights; the report says 'equal'
        if isinstance(doc, Mapping):
            found = tenant_weights(doc)
            if found:
                return found
    return None
