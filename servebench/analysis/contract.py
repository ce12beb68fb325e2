"""The spec's eight-field summary contract: its fields, the per-request metrics, and ``summarize``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from servebench.analysis.percentiles import nearest_rank, percentile
from servebench.errors import ConfigError
from servebench.records.schema import MSG_EMPTY, parse_objects
from servebench.records.table import RecordTable, build_table, check_window, first_violation
from servebench.records.token_times import gaps as token_gaps

CONTRACT_FIELDS: tuple[str, ...] = (
    "requests", "successes", "non_success_fraction", "successful_requests_per_second",
    "successful_output_tokens_per_second", "success_latency_p95_s", "success_ttft_p95_s",
    "success_request_tpot_p95_s",
)
REPORT_QUANTILES: tuple[float, ...] = (50, 90, 95, 99)
# Human labels and one-line definitions of the contract fields, for tables and the dashboard.
CONTRACT_LABELS: dict[str, tuple[str, str]] = {
    "requests": ("Requests", "All records in the window."),
    "successes": ("Successes", "Records with status success."),
    "non_success_fraction": ("Non-success fraction", "1 - successes / requests."),
    "successful_requests_per_second": ("Successful requests/s", "Successes / window length."),
    "successful_output_tokens_per_second": ("Successful output tokens/s",
                                            "Output tokens of successes / window length."),
    "success_latency_p95_s": ("Latency p95 (s)", "Nearest-rank p95 of end - start over successes."),
    "success_ttft_p95_s": ("TTFT p95 (s)", "Nearest-rank p95 of first_token - start over successes."),
    "success_request_tpot_p95_s": ("Request TPOT p95 (s)",
                                   "Nearest-rank p95 of (end - first_token) / (output_tokens - 1) over "
                                   "successes with more than one output token."),
}


class ContractError(ValueError):
    """A rule of the summary contract failed; ``str()`` is exactly the spec's message."""

    def __init__(self, message: str, row: int | None = None, field: str | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.row = row
        self.field = field
        self.detail = detail


def summarize(records: Sequence[Any], window_start: float, window_end: float) -> dict[str, Any]:
    """Summarize per-request timing records by the spec's contract.

    Checks the window, then that records is a non-empty list, then each record in order, and
    raises ValueError with the first failing rule's exact message. The input is never changed.

    >>> summarize([{"start": 0, "first_token": 0.5, "end": 2.5, "status": "success", "output_tokens": 9}], 0, 10)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'requests': 1, 'successes': 1, 'non_success_fraction': 0.0, 'successful_requests_per_second': 0.1,
     'successful_output_tokens_per_second': 0.9, 'success_latency_p95_s': 2.5, 'success_ttft_p95_s': 0.5,
     'success_request_tpot_p95_s': 0.25}
    """
    try:
        check_window(window_start, window_end)
    except ValueError as exc:
        raise ContractError(str(exc)) from None
    if not isinstance(records, list) or len(records) == 0:
        raise ContractError(MSG_EMPTY)
    rows = parse_objects(records)
    violation, codes = first_violation(rows, float(window_start), float(window_end), optional_rules=False)
    if violation is not None:
        raise ContractError(violation.message, violation.row, violation.field, violation.detail)
    return contract_summary(build_table(rows, codes), float(window_start), float(window_end))


def request_times(start: np.ndarray, end: np.ndarray, first_token: np.ndarray,
                  output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return every record's latency, TTFT and request TPOT, (end - first_token) / (output_tokens - 1).

    TTFT is NaN without a first token; TPOT means something only where output_tokens > 1.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = end - first_token
        tpot /= output_tokens - 1
        return end - start, first_token - start, tpot


def _success_values(ok: np.ndarray, output_tokens: np.ndarray, latency: np.ndarray, ttft: np.ndarray,
                    tpot: np.ndarray) -> dict[str, np.ndarray]:
    """Keep the values the contract counts: successes, and for TPOT those with more than one token."""
    return {"latency": latency[ok], "ttft": ttft[ok], "tpot": tpot[ok & (output_tokens > 1)]}


def success_metrics(table: RecordTable) -> dict[str, np.ndarray]:
    """Return per-success latency, TTFT and request TPOT (TPOT only where output_tokens > 1)."""
    times = request_times(table.start, table.end, table.first_token, table.output_tokens)
    return _success_values(table.is_success, table.output_tokens, *times)


RECORD_METRICS: tuple[str, ...] = ("latency", "ttft", "tpot", "queue_wait", "prefill")


def metric_values(table: RecordTable, metric: str, *, failure_aware: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Return one metric's values in seconds and the indices of the records counted.

    Success-only counts successes (tpot: with more than one output token; queue_wait and prefill:
    with ``admitted``). Failure-aware also counts every non-success as +infinity, as the report's
    failure-aware view does; a metric that needs ``admitted`` counts nothing when no record has it.
    """
    if metric not in RECORD_METRICS:
        raise ConfigError(f"unknown metric '{metric}'; expected one of {', '.join(RECORD_METRICS)}")
    ok = table.is_success
    if metric in ("latency", "ttft", "tpot"):
        latency, ttft, tpot = request_times(table.start, table.end, table.first_token, table.output_tokens)
        vals = {"latency": latency, "ttft": ttft, "tpot": tpot}[metric]
        counted = ok & (table.output_tokens > 1) if metric == "tpot" else ok
    else:
        if not np.isfinite(table.admitted).any():
            return np.empty(0), np.empty(0, dtype=np.int64)
        counted = ok & np.isfinite(table.admitted)
        vals = (table.admitted - table.start if metric == "queue_wait"
                else table.first_token - table.admitted)
    if failure_aware:
        vals = np.where(ok, vals, np.inf)
        counted = counted | ~ok
    index = np.flatnonzero(counted)
    return vals[index].astype(np.float64), index


TOKEN_METRICS: tuple[str, ...] = ("itl", "max_stall")


def token_metric_values(table: RecordTable, metric: str, *,
                        failure_aware: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Return ``itl`` (every gap between tokens) or ``max_stall`` (each request's longest gap) values and rows.

    The rows name each value's record (for ``itl`` a record appears once per gap). Success-only
    counts successes with token_times; failure-aware adds every non-success once, as +infinity.
    No token_times: nothing is counted.
    """
    if metric not in TOKEN_METRICS:
        raise ConfigError(f"unknown token metric '{metric}'; expected one of {', '.join(TOKEN_METRICS)}")
    if table.token_times is None:
        return np.empty(0), np.empty(0, dtype=np.int64)
    g = token_gaps(table.token_times)
    ok = table.is_success
    if metric == "itl":
        rows = np.repeat(np.arange(len(table)), g.counts)
        keep = ok[rows]
        vals, index = g.values[keep], rows[keep]
    else:
        index = np.flatnonzero(ok & ~np.isnan(g.max_gap))
        vals = g.max_gap[index]
    if failure_aware:
        bad = np.flatnonzero(~ok)
        vals = np.concatenate([vals, np.full(bad.size, np.inf)])
        index = np.concatenate([index, bad])
    return vals.astype(np.float64), index


def contract_summary(table: RecordTable, window_start: float, window_end: float,
                     metrics: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Compute the eight contract fields from a validated table (``metrics``: success_metrics, if known)."""
    ok = table.is_success
    return contract_values(len(table), token_sum(table.output_tokens[ok]), window_end - window_start,
                            success_metrics(table) if metrics is None else metrics)


def token_sum(counts: np.ndarray) -> int:
    """Return the exact sum of non-negative token counts (each below 10**18), even past int64's range.

    >>> token_sum(np.array([10**18 - 1] * 10)) == 10 * (10**18 - 1)
    True
    """
    if counts.size and int(counts.max()) > np.iinfo(np.int64).max // counts.size:
        return sum(counts.tolist())  # the int64 sum could wrap: add Python integers
    return int(counts.sum())


def contract_values(requests: int, success_tokens: int, window_s: float, m: dict[str, np.ndarray],
                     *, selected: bool = False) -> dict[str, Any]:
    """Return the contract's eight fields.

    ``selected``: the metric arrays hold their report ranks (the report's ``_select``), so p95 is a lookup.
    """
    successes = int(m["latency"].size)

    def p95(values: np.ndarray) -> float | None:
        if selected and values.size:
            return float(values[nearest_rank(95, values.size) - 1])
        return percentile(values, 95)

    return {
        "requests": requests,
        "successes": successes,
        "non_success_fraction": 1 - successes / requests,
        "successful_requests_per_second": successes / window_s,
        "successful_output_tokens_per_second": success_tokens / window_s,
        "success_latency_p95_s": p95(m["latency"]),
        "success_ttft_p95_s": p95(m["ttft"]),
        "success_request_tpot_p95_s": p95(m["tpot"]),
    }
