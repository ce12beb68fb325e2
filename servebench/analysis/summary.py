"""The full failure-aware report, built on the spec's summary contract (:mod:`servebench.analysis.contract`)."""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Any, Generic, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.contract import REPORT_QUANTILES, contract_values, request_times, token_sum
from servebench.analysis.disagg import DisaggReport, disagg_report
from servebench.analysis.exact_sum import exact_total, mean_of
from servebench.analysis.fleet import FleetReport, fleet_report
from servebench.analysis.percentiles import (
    PercentileEstimate,
    estimate_ranks,
    estimate_sorted,
    select_ranks,
    sort_is_cheaper,
)
from servebench.analysis.retries import (
    AttemptIssue,
    attempt_issues,
    jain_index,
    logical_stats,
    normalised_goodput,
    warmup_slices,
)
from servebench.analysis.server_metrics import ServerMetricsReport
from servebench.analysis.timeline import Timeline, ascending, sorted_timeline, sorted_without
from servebench.errors import ConfigError
from servebench.records.arrow_masks import null_mask
from servebench.records.schema import MSG_EMPTY, SUCCESS
from servebench.records.table import STATUSES, RecordTable
from servebench.records.textcolumns import category_codes, duplicates
from servebench.records.token_times import Gaps, RunGaps, TokenRuns
from servebench.records.token_times import gaps as token_gaps


class Percentile(BaseModel):
    """A nearest-rank percentile and its distribution-free 95% confidence interval."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    q: float
    value: float | None
    ci_low: float | None = Field(description="None: the sample is too small to bound it from below.")
    ci_high: float | None = Field(description="None: the sample is too small to bound it from above.")


class Distribution(BaseModel):
    """Percentiles of one metric over the values it counts."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    n: int
    percentiles: list[Percentile]
    max: float | None
    mean: float | None

    def at(self, q: float) -> float | None:
        """Return the value of percentile q, if reported."""
        for p in self.percentiles:
            if p.q == q:
                return p.value
        raise KeyError(q)


class SLO(BaseModel):
    """Limits a successful request must meet to count as good; None means no limit."""

    model_config = ConfigDict(extra="forbid")
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    latency_s: float | None = Field(None, gt=0)
    itl_p99_s: float | None = Field(
        None, gt=0, description="Limit on a request's own p99 gap between tokens (needs token_times; a success "
                                "without them misses, one with a single arrival meets it).")
    stall_s: float | None = Field(
        None, gt=0, description="Not a goodput limit: a gap between tokens longer than this counts as a stall "
                                "(default: 4x the whole file's median ITL).")

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.latency_s, self.itl_p99_s))


class SLOResult(BaseModel):
    """Successes meeting every limit, as a share of all requests and per second of window."""

    slo: SLO
    good_requests: int
    attainment: float = Field(description="Good requests / all requests: failures count as misses.")
    goodput_requests_per_second: float
    goodput_output_tokens_per_second: float


class Concurrency(BaseModel):
    """Peak simultaneous requests and the share of the window spent at that peak."""

    peak: int
    share_of_window_at_peak: float
    time_at_peak_s: float


class PrefixCacheReport(BaseModel):
    """What a prefix cache served, over the records that say (``cached_prompt_tokens``), and what it saved."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    requests: int = Field(description="Records with cached_prompt_tokens (requests the server admitted).")
    prompt_tokens: int = Field(description="Prompt tokens of those records.")
    cached_prompt_tokens: int = Field(description="Prompt tokens served from the cache, not computed.")
    token_hit_rate: float | None = Field(description="cached_prompt_tokens / prompt_tokens; None with no prompt tokens.")
    requests_with_hit: int = Field(description="Records that reused at least one cached token.")
    ttft_hit_s: Distribution = Field(description="TTFT of successes with a hit.")
    ttft_miss_s: Distribution = Field(description="TTFT of successes without a hit.")
    prefill_hit_s: Distribution | None = Field(None, description="first_token - admitted, successes with a hit.")
    prefill_miss_s: Distribution | None = Field(None, description="first_token - admitted, successes without a hit.")
    prefill_s_per_prompt_token: float | None = Field(
        None, description="Prefill seconds per computed prompt token: summed prefill of successes without a hit "
                          "over their prompt tokens. None without such requests.")
    estimated_prefill_saved_s: float | None = Field(
        None, description="cached_prompt_tokens x prefill_s_per_prompt_token: compute the cache spared, "
                          "an estimate that assumes prefill time grows linearly with prompt tokens.")


class ReasoningReport(BaseModel):
    """A reasoning model's two first tokens: the first of either kind (TTFT) and the first of the answer (TTFA).

    Over records with ``first_answer_token`` or ``reasoning_tokens``; times and tokens over successes.
    """

    model_config = ConfigDict(ser_json_inf_nan="strings")
    requests: int = Field(description="Successes with first_answer_token.")
    ttfa_s: Distribution = Field(
        description="Time to first answer token: first_answer_token - start over those successes. TTFT (ttft_s) "
                    "counts the first token of either kind, so it ends where the thinking starts.")
    reasoning_s: Distribution = Field(
        description="first_answer_token - first_token over those successes: the thinking streamed before the answer.")
    requests_with_reasoning_tokens: int = Field(description="Successes with reasoning_tokens.")
    reasoning_tokens: int = Field(description="Reasoning tokens of those successes.")
    output_tokens: int = Field(description="Output tokens of those successes, their reasoning included.")
    reasoning_token_share: float | None = Field(
        description="reasoning_tokens / output_tokens; None without such successes.")


class Stalls(BaseModel):
    """Requests whose longest gap between tokens exceeds a threshold: what a reader sees as the stream freezing."""

    threshold_s: float
    threshold_rule: str = Field(description="'--stall-s' when given, else '4x median ITL' of the whole file.")
    requests: int = Field(description="Successes with at least two token arrivals.")
    stalled: int = Field(description="Those whose max_stall_s exceeds threshold_s.")
    share: float | None = Field(description="stalled / requests; None without such requests.")


class LogicalReport(BaseModel):
    """Logical requests (a user request and its retries) over records with ``logical_id`` (analysis.retries)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    logical_requests: int
    logical_successes: int = Field(description="Logical requests one of whose attempts succeeded.")
    success_fraction: float | None
    attempts: int = Field(description="Records: one per attempt.")
    amplification: float | None = Field(description="attempts / logical_requests: the load retries added (1: none).")
    retried: int = Field(description="Logical requests with more than one attempt.")
    partial_then_retry: int = Field(
        description="Logical requests whose user saw partial output (an attempt that failed after delivering tokens) "
                    "before a retry; those tokens are wasted, never joined to the retry's answer.")
    attempts_cut_by_deadline: int = Field(description="Attempts the client's own deadline ended (client_deadline).")
    user_latency_s: Distribution = Field(
        description="First attempt's start to final attempt's end, every logical request (success or not).")
    user_latency_success_s: Distribution = Field(description="The same over logical requests that succeeded.")
    inconsistent_attempts: list[AttemptIssue] = Field(
        default_factory=list,
        description="Attempt numbers that contradict one another (a number twice or skipped, two successes, a later "
                    "attempt starting first), each kind with its count and first example; the numbers above do not "
                    "use attempt numbers (analysis.retries.ATTEMPT_RULE).")

    def warnings(self) -> list[str]:
        """One line per kind of inconsistent attempts, for people."""
        return [issue.warning() for issue in self.inconsistent_attempts]


class SliceFairness(BaseModel):
    """One slice's share of the service."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    weight: float
    goodput_requests_per_second: float = Field(description="Good requests (meeting the SLO; successes without one) / window.")
    goodput_share: float | None = Field(description="This slice's good requests / all slices' good requests.")
    slo_attainment: float | None = Field(description="Good requests / the slice's requests; None without an SLO.")
    ttft_p95_s: float | None


class FairnessReport(BaseModel):
    """How evenly the slices (tenants, workload classes) were served (analysis.retries)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    weights_from: str = Field(description="'metadata' (the run's tenant weights) or 'equal'.")
    slices: dict[str, SliceFairness]
    jain_index: float | None = Field(
        description="Jain's index over goodput / weight: 1 = served in proportion to weight, 1/n = one slice got all; "
                    "None when no slice had goodput.")
    ttft_p95_ratio: float | None = Field(
        description="Worst slice's TTFT p95 / best slice's; None when a slice has none or the best is 0.")


class Report(BaseModel):
    """Everything servebench says about one set of records over one window."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    source: str | None
    window_start: float
    window_end: float
    window_s: float
    summary: dict[str, Any] = Field(description="The spec's eight contract fields, in order.")
    offered: int
    accepted: int = Field(description="Offered minus rejected.")
    completed: int = Field(description="Successful requests.")
    rejected: int
    timed_out: int
    by_status: dict[str, int]
    by_cause: dict[str, int] = Field(description="Non-success records by error text ('unspecified' if none).")
    latency_s: Distribution
    ttft_s: Distribution
    request_tpot_s: Distribution
    itl_s: Distribution | None = Field(
        None, description="Every gap between consecutive token arrivals of successes with token_times (the "
                          "inter-token latency); None when no record has token_times.")
    max_stall_s: Distribution | None = Field(None, description="Each such success's longest gap between tokens.")
    stalls: Stalls | None = Field(None, description="Share of those successes with a stall over a threshold.")
    queue_wait_s: Distribution | None = Field(None, description="admitted - start, successes with admitted.")
    prefill_s: Distribution | None = Field(None, description="first_token - admitted, successes with admitted.")
    failure_aware_latency_s: Distribution = Field(
        description="Latency over all requests with every non-success counted as +infinity.")
    failure_aware_ttft_s: Distribution
    slo: SLOResult | None
    total_output_tokens: int = Field(description="Tokens generated by all requests, success or not.")
    successful_output_tokens: int
    wasted_output_tokens: int = Field(description="Tokens generated by requests that did not succeed.")
    total_prompt_tokens: int | None
    active_requests: Concurrency = Field(description="Requests between start and end (queued or running).")
    in_service: Concurrency | None = Field(None, description="Requests between admitted and end.")
    duplicate_request_ids: int
    duplicate_request_id_examples: list[str]
    records_without_request_id: int
    prefix_cache: PrefixCacheReport | None = Field(
        None, description="Prefix-cache hits and their effect; None when no record has cached_prompt_tokens.")
    logical: LogicalReport | None = Field(None, description="Logical requests and retries; None when no record "
                                                            "has logical_id.")
    fairness: FairnessReport | None = Field(None, description="Service across slices; None with fewer than two.")
    reasoning: ReasoningReport | None = Field(
        None, description="Time to first answer token and reasoning tokens; None when no record has "
                          "first_answer_token or reasoning_tokens.")
    server_metrics: ServerMetricsReport | None = Field(
        None, description="The server's own Prometheus metrics over the window, beside the client's times; None "
                          "when the run kept none (servebench.analysis.server_metrics).")
    fleet: FleetReport | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Requests across replicas (servebench.analysis.fleet); left out when no record names its replica.")
    disaggregated: DisaggReport | None = Field(
        None, exclude_if=lambda v: v is None,
        description="Requests across prefill and decode instances and their KV transfers "
                    "(servebench.analysis.disagg); left out when no record names its prefill instance.")
    slices: dict[str, "Report"] = Field(default_factory=dict)

    def warnings(self) -> list[str]:
        """What people must be told about these records, one line each: records in no slice, inconsistent attempts."""
        found = []
        in_slices = sum(r.offered for r in self.slices.values())
        if self.slices and in_slices < self.offered:
            alone = self.offered - in_slices
            found.append(f"slice: {alone:,} of {self.offered:,} records have none (absent, or blank text): they count "
                         "in the whole report but in no slice's")
        return found + (self.logical.warnings() if self.logical is not None else [])


def _distribution(ordered: np.ndarray, infinite: int = 0, total: Fraction | None = None) -> Distribution:
    """Summarize values followed by ``infinite`` values of +inf (failure-aware).

    ``ordered``: sorted ascending, or holding its order statistics at the ranks read (``_select``).
    The mean is the exact sum's correctly rounded mean, the same for any row order; ``total``, the
    values' exact sum when known (``exact_total``).
    """
    ests: list[PercentileEstimate] = estimate_sorted(ordered, REPORT_QUANTILES, infinite=infinite)
    finite = ordered.size > 0 and infinite == 0 and bool(np.isfinite(ordered[-1]))
    return Distribution(
        n=int(ordered.size + infinite),
        percentiles=[Percentile(q=e.q, value=e.value, ci_low=e.ci_low, ci_high=e.ci_high) for e in ests],
        max=math.inf if infinite else float(ordered[-1]) if ordered.size else None,
        mean=mean_of(exact_total(ordered) if total is None else total, ordered.size) if finite else None,
    )


def _select(values: np.ndarray, infinites: tuple[int, ...] = (0,), *, with_total: bool = True) -> Fraction | None:
    """Partition ``values`` in place at every rank their distributions read, one per count of infinities after
    them; return their exact sum (None when one is not finite, or not ``with_total``)."""
    ranks = frozenset().union(*(estimate_ranks(REPORT_QUANTILES, values.size + k) for k in infinites))
    select_ranks(values, ranks)
    return exact_total(values) if with_total and values.size and np.isfinite(values[-1]) else None


def _concurrency(tl: Timeline) -> Concurrency:
    return Concurrency(peak=tl.peak, share_of_window_at_peak=tl.share_at_peak, time_at_peak_s=tl.time_at_peak_s)


_ROW_FIELDS = ("start", "end", "admitted", "first_token", "status", "output_tokens", "prompt_tokens",
               "error_code", "missing_request_id", "cached_prompt_tokens")


class _Rows:
    """The per-record arrays one report reads: a whole table's, or one slice's rows of it.

    A slice copies a column only when the report reads all of it; ``pick`` takes just the rows a
    mask selects (the successes' times), and a column that is one absent marker stays a marker.
    Fields: start, end, admitted, first_token, status, output_tokens, prompt_tokens, error_code
    (int32 into the error names, -1 where absent), missing_request_id (bool) and
    cached_prompt_tokens (-1 where absent).
    """

    def __init__(self, columns: Mapping[str, np.ndarray], index: np.ndarray | None = None) -> None:
        self._columns = columns
        self._index = index
        self._taken: dict[str, np.ndarray] = {}
        self._picked: tuple[np.ndarray, np.ndarray] | None = None  # the last mask picked by, and its table rows

    @classmethod
    def of(cls, table: RecordTable, error_code: np.ndarray) -> _Rows:
        """Take the table's columns as they are (views, no copies), with its error codes."""
        return cls({"start": table.start, "end": table.end, "admitted": table.admitted,
                    "first_token": table.first_token, "status": table.status, "output_tokens": table.output_tokens,
                    "prompt_tokens": table.prompt_tokens, "error_code": error_code,
                    "missing_request_id": null_mask(table.request_id_arrow),
                    "cached_prompt_tokens": table.cached_prompt_tokens})

    def take(self, rows: np.ndarray) -> _Rows:
        """Return the rows at these indices (of the whole table)."""
        return _Rows(self._columns, rows)

    def __getattr__(self, name: str) -> np.ndarray:
        if name not in _ROW_FIELDS:
            raise AttributeError(name)
        if name not in self._taken:
            self._taken[name] = self._at(name, self._index)
        return self._taken[name]

    def pick(self, name: str, mask: np.ndarray) -> np.ndarray:
        """Return the column's values at the rows ``mask`` selects (a mask over these rows, left unchanged after).

        The table rows of the last mask are kept, so the successes' columns are picked by one index.
        """
        if name in self._taken or self._index is None:
            return getattr(self, name)[mask]
        if self._picked is None or self._picked[0] is not mask:  # the successes' times share one mask
            self._picked = (mask, self._index[mask])
        return self._at(name, self._picked[1])

    def fresh(self, name: str) -> np.ndarray:
        """Return the column's values at these rows as a new array the caller may reorder.

        A slice's rows not yet taken are gathered straight into it (and not kept), so the array
        is not gathered and then copied. An absent column stays its read-only marker.
        """
        if self._columns[name].strides == (0,):
            return self._at(name, self._index)
        if name in self._taken or self._index is None:
            return getattr(self, name).copy()
        return self._at(name, self._index)

    def _at(self, name: str, index: np.ndarray | None) -> np.ndarray:
        base = self._columns[name]
        if index is None:
            return base
        if base.ndim == 1 and base.strides == (0,):  # an absent column's marker, seen once per row
            return np.broadcast_to(base[:1], index.size) if base.size else base
        return base[index]


def _slice_rows(table: RecordTable) -> dict[str, np.ndarray]:
    """Return each slice's row indices, by slice name."""
    if not table.has_slices:
        return {}
    codes, names = table.slice_codes()
    if len(names) <= 8:  # a pass per slice beats a sort for a few slices
        found = {name: np.flatnonzero(codes == k) for k, name in enumerate(names)}
    else:  # a stable counting sort of small integer codes, then each slice is a run
        order = np.argsort(codes.astype(np.int16) if len(names) < 2**15 else codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1) - 0.5)
        found = {name: order[bounds[k]:bounds[k + 1]] for k, name in enumerate(names)}
    return {name: rows for name, rows in sorted(found.items()) if rows.size}


def _slo_result(output_tokens: np.ndarray, requests: int, latency: np.ndarray, ttft: np.ndarray,
                tpot: np.ndarray, slo: SLO, window_s: float,
                itl_p99: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[SLOResult, int]:
    """Return goodput over the successes' aligned arrays (a non-success is never good) of ``requests`` records,
    and the good requests' output tokens."""
    good = np.ones(output_tokens.size, dtype=bool)
    if slo.itl_p99_s is not None and itl_p99 is not None:
        has_times, p99 = itl_p99  # a success without token times cannot show it met the limit
        with np.errstate(invalid="ignore"):
            good &= (has_times & ~(p99 > slo.itl_p99_s)) | (output_tokens <= 1)
    with np.errstate(invalid="ignore"):
        if slo.ttft_s is not None:
            good &= ttft <= slo.ttft_s
        if slo.latency_s is not None:
            good &= latency <= slo.latency_s
        if slo.tpot_s is not None:
            good &= (tpot <= slo.tpot_s) | (output_tokens <= 1)
    good_tokens = token_sum(output_tokens[good])
    return _slo_of(slo, int(np.count_nonzero(good)), good_tokens, requests, window_s), good_tokens


def _slo_of(slo: SLO, good_requests: int, good_tokens: int, requests: int, window_s: float) -> SLOResult:
    return SLOResult(slo=slo, good_requests=good_requests, attainment=good_requests / requests,
                     goodput_requests_per_second=good_requests / window_s,
                     goodput_output_tokens_per_second=good_tokens / window_s)


def _present_sum(counts: np.ndarray) -> int | None:
    """Return the exact sum of the token counts present (an absent count is -1), None when none is.

    Each absent count took 1 from the whole column's sum, so nothing is copied.
    """
    absent = int(np.count_nonzero(counts < 0))
    return None if absent == counts.size else token_sum(counts) + absent


def _positive(counts: np.ndarray) -> np.ndarray:
    """Return the counts above zero (an absent count is -1)."""
    return counts[counts > 0]


def _causes(error_code: np.ndarray, names: list[str]) -> dict[str, int]:
    """Count non-success records by error text ('unspecified' if none), most common first."""
    counts = np.bincount(error_code + 1, minlength=len(names) + 1)
    return _added(zip(["unspecified"] + names, counts.tolist()))  # an error named 'unspecified' adds to it


def _added(counts: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Add counts by cause; keep those above zero, most common first (then by name)."""
    by_name: dict[str, int] = {}
    for name, count in counts:
        if count:
            by_name[name] = by_name.get(name, 0) + count
    return dict(sorted(by_name.items(), key=lambda p: (-p[1], p[0])))


_REST = ("rows in no slice",)  # the group a merged report adds for them; a tuple is never a slice name
_PARALLEL_MIN_ROWS = 50_000  # below this, starting threads costs more than they save
# above this, the views (the file's slices) are reported one after another: each holds about 100 bytes a
# record of temporaries, and two at once raised a 10M-record report's peak by 0.25 GB and its system time
# (the kernel zeroing pages) for no less wall time on 2 cores (benchmarks/summary.py, docs/scale.md)
_VIEWS_AT_ONCE_MAX_ROWS = 2_000_000
T = TypeVar("T")
K = TypeVar("K")


def _run_beside(main: Callable[[], T], jobs: list[tuple[K, Callable[[], Any]]],
                parallel: bool) -> tuple[T, dict[K, Any]]:
    """Run ``main`` in this thread and ``jobs`` in worker threads; return main's result and the jobs'.

    When ``main`` ends, the jobs no worker has started yet are taken back and run here, so
    neither side waits idle for the other.
    """
    if not parallel:
        return main(), {key: job() for key, job in jobs}
    with ThreadPoolExecutor(max_workers=min(len(jobs), max(1, (os.cpu_count() or 1) - 1))) as pool:
        futures = [(key, job, pool.submit(job)) for key, job in jobs]
        first = main()
        done = {key: job() if future.cancel() else future.result() for key, job, future in reversed(futures)}
    return first, done


def build_report(table: RecordTable, window_start: float, window_end: float, slo: SLO | None = None,
                 *, by_slice: bool = True, weights: Mapping[str, float] | None = None,
                 warmup_s: float | None = None, token_runs: TokenRuns | None = None) -> Report:
    """Return the full report for validated records over [window_start, window_end].

    ``token_runs``: the records' token times as runs of shared step times (a simulation's), in place of
    their ``token_times`` column: the same report, without a value per token in memory.

    ``weights`` (slice -> weight, e.g. a run's tenant weights) normalise the fairness section's
    goodput; without them every slice weighs 1. ``warmup_s`` reports the records that start in the
    window's first ``warmup_s`` seconds as the slice ``cold`` and the rest as ``warm`` (in place
    of the records' own slices).

    The duplicate check and the slice reports run in worker threads beside the whole file's report
    (numpy's sorts and searches release the GIL). Each distribution is sorted once and every
    percentile and interval bound is then a lookup.
    """
    if len(table) == 0:
        raise ConfigError(MSG_EMPTY)
    if warmup_s is not None:
        if not warmup_s > 0:
            raise ConfigError(f"warmup_s {warmup_s!r} must be positive")
        table = table.with_columns(slice=warmup_slices(table, window_start, warmup_s))
    slice_rows = _slice_rows(table) if by_slice else {}
    error_code, error_names = category_codes(table.error_arrow)
    all_rows = _Rows.of(table, error_code)
    tokens = _Once(partial(_tokens, table, slo, token_runs))
    if table.token_times is None and token_runs is None:
        tokens.get()  # nothing to compute; an ITL SLO without token times is refused here
    common = dict(source=table.source, window_start=window_start, window_end=window_end, slo=slo,
                  error_names=error_names)

    # with slices, the whole file's report is merged from theirs (and from the rows in no slice), not measured again
    groups: dict[Any, np.ndarray] = dict(slice_rows)
    merge = bool(groups) and not bool((table.cached_prompt_tokens >= 0).any())  # the cache section is not merged
    if merge:
        rest = np.ones(len(table), dtype=bool)
        for rows in groups.values():
            rest[rows] = False
        if rest.any():
            groups[_REST] = np.flatnonzero(rest)
        del rest
    in_order = merge and ascending(table.start)  # then the whole file's starts need no merge
    kept: dict[Any, dict[str, Any] | None] = {key: {"start_needed": not in_order} if merge else None for key in groups}

    def group_report(key: Any) -> Report:
        return _report(all_rows.take(groups[key]), row_index=groups[key],
                       tokens=lambda: (tokens.get()[0], None), keep=kept[key], **common)

    def check_duplicates() -> list[tuple[str, int]]:
        # duplicates are a property of the whole file: slices skip the hashing
        return duplicates(table.request_id_arrow) if by_slice else []

    # largest groups first, the duplicate check last (the last queued are the first taken back)
    # the token gaps and the file's ITL (a slice's stall threshold) first: every report ends waiting on them
    by_size = sorted(groups, key=lambda k: -groups[k].size)
    first_view = partial(group_report, by_size[0]) if merge else lambda: _report(all_rows, tokens=tokens.get, **common)
    views = [(key, partial(group_report, key)) for key in (by_size[1:] if merge else by_size)]
    has_tokens = table.token_times is not None or token_runs is not None
    jobs: list[tuple[Any, Callable[[], Any]]] = [("", tokens.get)] if has_tokens else []
    parallel = len(table) >= _PARALLEL_MIN_ROWS and (os.cpu_count() or 1) > 1
    if len(table) > _VIEWS_AT_ONCE_MAX_ROWS:  # one view's temporaries at a time; the duplicate check beside them
        (first, results), beside = _run_beside(lambda: (first_view(), {key: job() for key, job in views}),
                                               jobs + [(None, check_duplicates)], parallel)
        results.update(beside)
    else:
        first, results = _run_beside(first_view, jobs + views + [(None, check_duplicates)], parallel)
    dups = results.pop(None)
    results.pop("", None)
    if merge:
        results[by_size[0]] = first
        whole = _merged([(results[key], kept.pop(key) or {}) for key in groups],
                        whole_start=table.start if in_order else None,
                        ok=table.is_success, tokens=tokens.get, **common)
    else:
        whole = first
    slices = {name: results[name] for name in slice_rows}
    if table.has_reasoning:
        slices = {name: r.model_copy(update={"reasoning": reasoning_of(table, slice_rows[name])})
                  for name, r in slices.items()}
    return whole.model_copy(update=dict(
        reasoning=reasoning_of(table) if table.has_reasoning else None,
        duplicate_request_ids=sum(c - 1 for _, c in dups),
        duplicate_request_id_examples=sorted(rid for rid, _ in dups)[:5], slices=slices,
        logical=_logical(table) if table.has_logical_ids else None,
        fairness=fairness_of(slices, window_end - window_start, weights) if len(slices) >= 2 else None,
        fleet=fleet_report(table), disaggregated=disagg_report(table)))


def _logical(table: RecordTable) -> LogicalReport:
    """Return the logical-request section (see servebench.analysis.retries)."""
    s = logical_stats(table)
    return LogicalReport(logical_requests=s.logical_requests, logical_successes=s.logical_successes,
                         success_fraction=s.success_fraction, attempts=s.attempts, amplification=s.amplification,
                         retried=s.retried, partial_then_retry=s.partial_then_retry,
                         attempts_cut_by_deadline=s.attempts_cut_by_deadline,
                         user_latency_s=_distribution(s.user_latency_s),
                         user_latency_success_s=_distribution(s.user_latency_success_s),
                         inconsistent_attempts=attempt_issues(table))


def fairness_of(slices: dict[str, Report], window_s: float, weights: Mapping[str, float] | None) -> FairnessReport:
    """Return the fairness section over slice reports: goodput shares, SLO attainment, TTFT p95, Jain's index."""
    good = {name: (r.slo.good_requests if r.slo is not None else r.completed) for name, r in slices.items()}
    total = sum(good.values())
    per_s = {name: g / window_s for name, g in good.items()}
    p95 = {name: r.ttft_s.at(95) for name, r in slices.items()}
    named = {name: float(weights[name]) for name in slices if weights and name in weights}
    out = {name: SliceFairness(weight=named.get(name, 1.0), goodput_requests_per_second=per_s[name],
                               goodput_share=good[name] / total if total else None,
                               slo_attainment=None if r.slo is None else r.slo.attainment, ttft_p95_s=p95[name])
           for name, r in slices.items()}
    known = [v for v in p95.values() if v is not None]
    ratio = max(known) / min(known) if len(known) == len(p95) and min(known) > 0 else None
    return FairnessReport(weights_from="metadata" if named else "equal", slices=out,
                          jain_index=jain_index(list(normalised_goodput(per_s, named).values())), ttft_p95_ratio=ratio)


class _Once(Generic[T]):
    """A value computed once, by the first thread that asks (a worker started early, or a report that needs it)."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._value: list[T] = []

    def get(self) -> T:
        with self._lock:  # a second caller waits for the first's result rather than computing it again
            if not self._value:
                self._value.append(self._compute())
        return self._value[0]


@dataclass(frozen=True)
class _Tokens:
    """Token gaps of the whole table, the stall threshold, and each row's p99 gap when an SLO needs it."""

    gaps: Gaps | RunGaps
    threshold_s: float | None
    threshold_rule: str
    itl_p99: np.ndarray | None


def _tokens(table: RecordTable, slo: SLO | None,
            runs: TokenRuns | None = None) -> tuple[_Tokens | None, Distribution | None]:
    """Return the token gaps and the whole file's ITL distribution, or (None, None) without token times."""
    stall_s = None if slo is None else slo.stall_s
    if table.token_times is None and runs is None:
        if slo is not None and slo.itl_p99_s is not None:
            raise ConfigError("an ITL SLO (--slo-itl) needs token_times in the records; this file has none")
        return None, None
    g = runs.gaps() if runs is not None else token_gaps(table.token_times)
    itl = _distribution(g.sorted_of(table.is_success))
    median = itl.at(50)
    if stall_s is not None:
        threshold, rule = stall_s, "--stall-s"
    else:
        threshold, rule = (None if median is None else 4 * median), "4x median ITL"
    p99 = g.row_percentile(99) if slo is not None and slo.itl_p99_s is not None else None
    return _Tokens(g, threshold, rule, p99), itl


def _token_fields(tokens: _Tokens, ok: np.ndarray, row_index: np.ndarray | None,
                  itl: Distribution | None) -> dict[str, Any]:
    """Return the report's itl_s, max_stall_s and stalls over these rows' successes."""
    g = tokens.gaps
    if row_index is None:
        chosen = ok
        max_gap = g.max_gap
    else:
        chosen = np.zeros(g.max_gap.size, dtype=bool)
        chosen[row_index[ok]] = True
        max_gap = g.max_gap[row_index]
    if itl is None:
        itl = _distribution(g.sorted_of(chosen))
    stalls = max_gap[ok & ~np.isnan(max_gap)]
    stalls.sort()
    counted = None
    if tokens.threshold_s is not None:
        stalled = int(stalls.size - np.searchsorted(stalls, tokens.threshold_s, side="right"))
        counted = Stalls(threshold_s=tokens.threshold_s, threshold_rule=tokens.threshold_rule,
                         requests=int(stalls.size), stalled=stalled,
                         share=stalled / stalls.size if stalls.size else None)
    return {"itl_s": itl, "max_stall_s": _distribution(stalls), "stalls": counted}


def _report(rows: _Rows, *, source: str | None, window_start: float, window_end: float, slo: SLO | None,
            error_names: list[str], tokens: Callable[[], Any] | None = None,
            row_index: np.ndarray | None = None, keep: dict[str, Any] | None = None) -> Report:
    """Return one report (no slices, no duplicate check) over rows in any order.

    ``tokens`` returns the table's token gaps and, for the whole file, its ITL distribution (a
    slice's rows are ``row_index`` of the table); it is asked for last, so that another thread can
    compute it meanwhile. ``keep`` receives the sorted arrays and exact counts that ``_merged``
    needs to build the whole file's report from its slices'.
    """
    window_s = window_end - window_start
    n = rows.start.size
    ok = rows.status == SUCCESS
    status = rows.status
    by_status = {name: int(np.count_nonzero(status == i)) for i, name in enumerate(STATUSES)}  # no int64 copy
    failures = n - by_status["success"]
    out = rows.output_tokens
    # every per-request time is computed over the successes only: m arrays, not n (memory at 10M records)
    every = failures == 0
    start_ok, first_ok = (rows.start, rows.first_token) if every else (rows.pick("start", ok),
                                                                       rows.pick("first_token", ok))
    out_ok = out if every else out[ok]
    latency, ttft, tpot = request_times(start_ok, rows.end if every else rows.pick("end", ok), first_ok, out_ok)

    itl_p99 = None
    if slo is not None and slo.itl_p99_s is not None and tokens is not None:  # the SLO needs the gaps now
        found = tokens()[0]
        if found is not None and found.itl_p99 is not None:
            pick = slice(None) if row_index is None else row_index
            itl_p99 = (found.gaps.has_times[pick][ok], found.itl_p99[pick][ok])
    slo_result, good_tokens = (_slo_result(out_ok, n, latency, ttft, tpot, slo, window_s, itl_p99)
                               if slo is not None and slo.any else (None, 0))
    # fresh arrays, so each is partitioned in place
    m = {"latency": latency, "ttft": ttft, "tpot": tpot if bool((out_ok > 1).all()) else tpot[out_ok > 1]}
    del tpot
    two_at_once = n >= _PARALLEL_MIN_ROWS
    totals = dict(zip(m, _select_each([(m["latency"], (0, failures)), (m["ttft"], (0, failures)), (m["tpot"], (0,))],
                                      two_at_once)))
    if keep is not None:
        keep.update(m, totals=totals, good_tokens=good_tokens, queue_wait=None, prefill=None, admitted=None,
                    admitted_end=None)
    adm_ok = rows.admitted if every else rows.pick("admitted", ok)
    has_adm = np.isfinite(adm_ok)
    wait = prefill = None
    if has_adm.any():
        if not has_adm.all():
            adm_ok, start_ok, first_ok = adm_ok[has_adm], start_ok[has_adm], first_ok[has_adm]
        stages = [adm_ok - start_ok, first_ok - adm_ok]
        stage_totals = _select_each([(v, (0,)) for v in stages], two_at_once)
        wait, prefill = (_distribution(v, total=t) for v, t in zip(stages, stage_totals))
        if keep is not None:
            keep.update(queue_wait=stages[0], prefill=stages[1])
            totals.update(queue_wait=stage_totals[0], prefill=stage_totals[1])
        del stages
    del adm_ok, start_ok, first_ok
    success_tokens = token_sum(out_ok)  # a success has at least one output token
    total_tokens = success_tokens + (0 if every else token_sum(_positive(out[~ok])))
    prompt = rows.prompt_tokens
    admitted = rows.fresh("admitted")
    adm_all = np.isfinite(admitted)
    in_service = None
    end = rows.fresh("end")
    if adm_all.any():
        unadmitted = n - int(np.count_nonzero(adm_all))
        _sort_each([admitted, end], two_at_once)
        admitted = admitted[:n - unadmitted]  # an absent admission is NaN, and NaNs sort last
        # the admitted records' ends are the sorted ends less the few never admitted: no second sort
        admitted_end = (sorted_without(end, rows.pick("end", ~adm_all)) if unadmitted * 4 <= n
                        else np.sort(rows.pick("end", adm_all)))
        in_service = _concurrency(sorted_timeline(admitted, admitted_end, window_start, window_end))
        if keep is not None:
            keep.update(admitted=admitted, admitted_end=admitted_end)
        del admitted, admitted_end
    else:
        end.sort()
    start = rows.start if ascending(rows.start) else np.sort(rows.start)  # records usually arrive in start order
    active = _concurrency(sorted_timeline(start, end, window_start, window_end))
    if keep is not None:
        keep.update(start=start if keep.pop("start_needed", True) else None, end=end)
    del start, end
    found, itl = tokens() if tokens is not None else (None, None)
    token_fields = {} if found is None else _token_fields(found, ok, row_index, itl)
    return _assemble(
        n=n, source=source, window_start=window_start, window_end=window_end, by_status=by_status,
        by_cause=_causes(rows.pick("error_code", ~ok), error_names), m=m, totals=totals, queue_wait_s=wait,
        prefill_s=prefill,
        token_fields=token_fields, slo=slo_result, total_output_tokens=total_tokens,
        successful_output_tokens=success_tokens,
        total_prompt_tokens=_present_sum(prompt),
        active_requests=active, in_service=in_service,
        records_without_request_id=int(np.count_nonzero(rows.missing_request_id)),
        prefix_cache=_prefix_cache(rows, ok))


def _assemble(*, n: int, window_start: float, window_end: float, by_status: dict[str, int],
              m: dict[str, np.ndarray], totals: dict[str, Fraction | None], token_fields: dict[str, Any],
              total_output_tokens: int, successful_output_tokens: int, **fields: Any) -> Report:
    """Return the Report of ``n`` records from their counts and their success distributions ``m``.

    ``m``'s arrays hold their order statistics at the ranks read (``_select``, with ``n - successes``
    infinities for latency and TTFT); ``totals``, their exact sums.
    """
    failures = n - by_status["success"]
    window_s = window_end - window_start
    return Report(
        window_start=window_start, window_end=window_end, window_s=window_s,
        summary=contract_values(n, successful_output_tokens, window_s, m, selected=True),
        offered=n, accepted=n - by_status["rejected"], completed=by_status["success"],
        rejected=by_status["rejected"], timed_out=by_status["timeout"], by_status=by_status,
        latency_s=_distribution(m["latency"], total=totals["latency"]),
        ttft_s=_distribution(m["ttft"], total=totals["ttft"]),
        request_tpot_s=_distribution(m["tpot"], total=totals["tpot"]), **token_fields,
        failure_aware_latency_s=_distribution(m["latency"], infinite=failures),
        failure_aware_ttft_s=_distribution(m["ttft"], infinite=failures),
        total_output_tokens=total_output_tokens, successful_output_tokens=successful_output_tokens,
        wasted_output_tokens=total_output_tokens - successful_output_tokens,
        duplicate_request_ids=0, duplicate_request_id_examples=[], **fields)


def _merged(parts: list[tuple[Report, dict[str, Any]]], *, whole_start: np.ndarray | None, ok: np.ndarray,
            tokens: Callable[[], Any], source: str | None, window_start: float, window_end: float,
            slo: SLO | None, error_names: list[str]) -> Report:
    """Return the report over groups of rows that together hold every row once, from the groups' reports.

    Counts and exact sums are added, each distribution's values are gathered from the groups' and
    partitioned again, and the sweeps' sorted starts and ends are merged from the groups' sorted runs
    (a stable sort of sorted runs is a merge), so the whole file is not measured a second time beside
    its slices; the result equals ``_report`` over the whole file, field for field (tests/test_summary.py).
    ``whole_start``: the file's starts when already in order (then the groups keep none), else None.
    """
    reports = [r for r, _ in parts]
    kept = [k for _, k in parts]

    def merged(key: str, *, ordered: bool = True) -> np.ndarray | None:
        """The groups' values of ``key`` as one array: sorted when ``ordered`` (their runs are), else gathered."""
        runs = [k.pop(key) for k in kept]  # popped: each group's run is freed once merged
        runs = [r for r in runs if r is not None]
        if not runs:
            return None
        if len(runs) == 1:
            return runs[0]
        out = np.concatenate(runs)
        del runs
        if ordered:
            out.sort(kind="stable")
        return out

    def summed(key: str) -> Fraction | None:
        parts = [k["totals"].get(key) for k in kept if key in k["totals"]]
        return None if not parts or any(p is None for p in parts) else sum(parts, Fraction(0))

    def added(field: str) -> int:
        return sum(getattr(r, field) for r in reports)

    n = added("offered")
    failures = n - added("completed")
    # the groups' values were sorted or partitioned (select_ranks): sorted runs are merged, else selected again
    sorted_runs = sort_is_cheaper()
    m = {key: merged(key, ordered=sorted_runs) for key in ("latency", "ttft", "tpot")}
    wait, prefill = merged("queue_wait", ordered=sorted_runs), merged("prefill", ordered=sorted_runs)
    totals = {key: summed(key) for key in ("latency", "ttft", "tpot", "queue_wait", "prefill")}
    if not sorted_runs:
        _select_each([(m["latency"], (0, failures)), (m["ttft"], (0, failures)), (m["tpot"], (0,))]
                     + [(v, (0,)) for v in (wait, prefill) if v is not None], two_at_once=n >= _PARALLEL_MIN_ROWS,
                     sums=False)
    admitted = merged("admitted")
    in_service = None if admitted is None else _concurrency(
        sorted_timeline(admitted, merged("admitted_end"), window_start, window_end))
    del admitted
    start = whole_start if whole_start is not None else merged("start")
    active = _concurrency(sorted_timeline(start, merged("end"), window_start, window_end))
    prompts = [r.total_prompt_tokens for r in reports if r.total_prompt_tokens is not None]
    found, itl = tokens()
    return _assemble(
        n=n, source=source, window_start=window_start, window_end=window_end,
        by_status={name: sum(r.by_status[name] for r in reports) for name in STATUSES},
        by_cause=_added(p for r in reports for p in r.by_cause.items()), m=m, totals=totals,
        queue_wait_s=None if wait is None else _distribution(wait, total=totals["queue_wait"]),
        prefill_s=None if prefill is None else _distribution(prefill, total=totals["prefill"]),
        token_fields={} if found is None else _token_fields(found, ok, None, itl),
        slo=_slo_of(slo, sum(r.slo.good_requests for r in reports if r.slo is not None),
                    sum(k["good_tokens"] for k in kept), n, window_end - window_start) if slo is not None and slo.any
        else None,
        total_output_tokens=added("total_output_tokens"), successful_output_tokens=added("successful_output_tokens"),
        total_prompt_tokens=sum(prompts) if prompts else None, active_requests=active, in_service=in_service,
        records_without_request_id=added("records_without_request_id"), prefix_cache=None)


def _select_each(jobs: list[tuple[np.ndarray, tuple[int, ...]]], two_at_once: bool,
                 sums: bool = True) -> list[Fraction | None]:
    """``_select`` each (values, infinities) in place, two at a time when asked; return their exact sums.

    ``sums=False`` skips the sums (None each), for values whose sums are known already.
    """
    def one(job: tuple[np.ndarray, tuple[int, ...]]) -> Fraction | None:
        return _select(*job, with_total=sums)

    if two_at_once and len(jobs) > 1 and (os.cpu_count() or 1) > 1:
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(one, jobs))
    return [one(job) for job in jobs]


def _sort_each(arrays: list[np.ndarray], two_at_once: bool) -> None:
    """Sort each array in place, two at a time when asked (numpy's sort releases the GIL)."""
    if two_at_once and len(arrays) > 1 and (os.cpu_count() or 1) > 1:
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(np.ndarray.sort, arrays))
    else:
        for values in arrays:
            values.sort()


def _distribution_of(values: np.ndarray) -> Distribution:
    """Summarize a fresh array of values (it is partitioned in place)."""
    return _distribution(values, total=_select(values))


def _prefix_cache(rows: _Rows, ok: np.ndarray) -> PrefixCacheReport | None:
    """Return the prefix-cache section over records with ``cached_prompt_tokens``, or None if none has it."""
    cached = rows.cached_prompt_tokens
    has = cached >= 0
    if not has.any():
        return None
    prompt = rows.prompt_tokens
    with_prompt = has & (prompt >= 0)
    prompt_total = token_sum(prompt[with_prompt])
    cached_total = token_sum(cached[has])
    hit = has & (cached > 0)
    ok_hit, ok_miss = ok & hit, ok & has & (cached == 0)
    ttft = rows.first_token - rows.start
    adm = np.isfinite(rows.admitted)
    prefill = rows.first_token - rows.admitted
    prefill_hit = _distribution_of(prefill[ok_hit & adm]) if (ok_hit & adm).any() else None
    miss_adm = ok_miss & adm
    prefill_miss = _distribution_of(prefill[miss_adm]) if miss_adm.any() else None
    per_token = saved = None
    miss_tokens = token_sum(prompt[miss_adm & (prompt > 0)])
    if miss_tokens > 0:
        per_token = float(prefill[miss_adm & (prompt > 0)].sum()) / miss_tokens
        saved = per_token * cached_total
    return PrefixCacheReport(
        requests=int(np.count_nonzero(has)), prompt_tokens=prompt_total, cached_prompt_tokens=cached_total,
        token_hit_rate=token_sum(cached[with_prompt]) / prompt_total if prompt_total > 0 else None,
        requests_with_hit=int(np.count_nonzero(hit)),
        ttft_hit_s=_distribution_of(ttft[ok_hit]), ttft_miss_s=_distribution_of(ttft[ok_miss]),
        prefill_hit_s=prefill_hit, prefill_miss_s=prefill_miss,
        prefill_s_per_prompt_token=per_token, estimated_prefill_saved_s=saved)


def reasoning_of(table: RecordTable, rows: np.ndarray | None = None) -> ReasoningReport | None:
    """Return the reasoning section over the table (or its ``rows``), None when no record there has
    first_answer_token or reasoning_tokens."""
    def col(values: np.ndarray) -> np.ndarray:
        return values if rows is None else values[rows]

    answer, reasoning = col(table.first_answer_token), col(table.reasoning_tokens)
    has_answer, has_tokens = np.isfinite(answer), reasoning >= 0
    if not (has_answer.any() or has_tokens.any()):
        return None
    ok = col(table.status) == SUCCESS
    timed = ok & has_answer
    counted = ok & has_tokens
    reasoning_total, output_total = token_sum(reasoning[counted]), token_sum(col(table.output_tokens)[counted])
    return ReasoningReport(
        requests=int(np.count_nonzero(timed)),
        ttfa_s=_distribution_of(answer[timed] - col(table.start)[timed]),
        reasoning_s=_distribution_of(answer[timed] - col(table.first_token)[timed]),
        requests_with_reasoning_tokens=int(np.count_nonzero(counted)), reasoning_tokens=reasoning_total,
        output_tokens=output_total, reasoning_token_share=reasoning_total / output_total if output_total else None)
