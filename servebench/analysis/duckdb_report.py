"""The full report out of core: the queries that compute every field of ``build_report`` over DuckDB's ``records``.

The numbers are the in-memory ``build_report``'s, bit for bit. Counts and token sums are exact
integers in SQL. Each distribution is streamed from DuckDB in sorted order (DuckDB sorts out of
core): the nearest ranks and interval ranks come from ``servebench.analysis.percentiles`` and are
picked from the stream, and the mean is the exact sum's correctly rounded mean, added chunk by
chunk (``servebench.analysis.sorted_stream``, ``servebench.analysis.exact_sum``). The gaps between
tokens (ITL) are a list column unnested in the sorted query. The prefix cache's prefill per prompt
token is a sum in row order, as numpy sums the masked array: its values are streamed ordered by
part and row. Peak concurrency is a running sum over start and end events grouped by time (a
departure before an arrival at the same time, as ``servebench.analysis.timeline``). The logical
requests (retries) are grouped by ``logical_id`` in SQL, their user latencies streamed sorted, and
their attempt numbers checked for the inconsistencies ``analysis.retries.attempt_issues`` lists.

The edge (files, staging, the connection) is ``servebench.analysis.duckdb_engine``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np

from servebench.analysis import retries
from servebench.analysis.duckdb_parts import lit, text_lit
from servebench.analysis.sorted_stream import PairwiseSum, PeakWalk, SortedSink, distribution, ranks_for
from servebench.analysis.summary import (
    SLO,
    Concurrency,
    LogicalReport,
    PrefixCacheReport,
    ReasoningReport,
    Report,
    SLOResult,
    Stalls,
    fairness_of,
)
from servebench.errors import ConfigError
from servebench.records.schema import MSG_EMPTY
from servebench.records.statuses import CLIENT_DEADLINE_ERROR
from servebench.records.table import STATUSES

BATCH_ROWS = 1 << 20
# Every field of the report this engine computes; a field build_report gains is refused until it is here.
COVERED_FIELDS = frozenset({
    "source", "window_start", "window_end", "window_s", "summary", "offered", "accepted", "completed", "rejected",
    "timed_out", "by_status", "by_cause", "latency_s", "ttft_s", "request_tpot_s", "itl_s", "max_stall_s", "stalls",
    "queue_wait_s", "prefill_s", "failure_aware_latency_s", "failure_aware_ttft_s", "slo", "total_output_tokens",
    "successful_output_tokens", "wasted_output_tokens", "total_prompt_tokens", "active_requests", "in_service",
    "duplicate_request_ids", "duplicate_request_id_examples", "records_without_request_id", "prefix_cache", "slices",
    "fairness", "logical", "reasoning",
    "server_metrics",  # not from the records: attached after either engine's report (analysis.record_sets)
    "fleet",  # records with a 'replica' column: servebench.analysis.duckdb_fleet, after this report
    "disaggregated",  # None without a 'prefill_replica' column; records with one are refused (duckdb_engine)
})


@dataclass(frozen=True)
class Metric:
    """One distribution: its value and which records count, as SQL over ``records`` (count: how many values)."""

    value: str
    where: str
    count: str = "count(*)"


TPOT = '("end" - first_token) / CAST(output_tokens - 1 AS DOUBLE)'
METRICS: dict[str, Metric] = {
    "latency": Metric('"end" - "start"', "status = 0"),
    "ttft": Metric('first_token - "start"', "status = 0"),
    "tpot": Metric(TPOT, "status = 0 AND output_tokens > 1"),
    "queue_wait": Metric('admitted - "start"', "status = 0 AND isfinite(admitted)"),
    "prefill": Metric("first_token - admitted", "status = 0 AND isfinite(admitted)"),
}
TOKEN_METRICS: dict[str, Metric] = {  # over successes with token times (a list column of gaps per record)
    "itl": Metric("unnest(gaps)", "status = 0 AND gaps IS NOT NULL", "sum(len(gaps))"),
    "max_stall": Metric("max_gap", "status = 0 AND max_gap IS NOT NULL"),
}
_HIT, _MISS = "cached_prompt_tokens > 0", "cached_prompt_tokens = 0"
CACHE_METRICS: dict[str, Metric] = {  # successes with and without a prefix-cache hit
    "ttft_hit": Metric('first_token - "start"', f"status = 0 AND {_HIT}"),
    "ttft_miss": Metric('first_token - "start"', f"status = 0 AND {_MISS}"),
    "prefill_hit": Metric("first_token - admitted", f"status = 0 AND {_HIT} AND isfinite(admitted)"),
    "prefill_miss": Metric("first_token - admitted", f"status = 0 AND {_MISS} AND isfinite(admitted)"),
}
MISS_WITH_PROMPT = f"status = 0 AND {_MISS} AND isfinite(admitted) AND prompt_tokens > 0"
_ANSWERED = "status = 0 AND isfinite(first_answer_token)"
REASONING_METRICS: dict[str, Metric] = {  # successes with a first answer token
    "ttfa": Metric('first_answer_token - "start"', _ANSWERED),
    "thinking": Metric("first_answer_token - first_token", _ANSWERED),
}
_WITH_REASONING_TOKENS = "status = 0 AND reasoning_tokens >= 0"

Group = int | None  # a slice code, or None for the whole set


def stream(con: duckdb.DuckDBPyConnection, value: str, where: str, sinks: dict[Group, Any], grouped: bool,
           order: str = "v", key: str = "g") -> None:
    """Stream ``value`` over the records ``where`` holds, sorted, into each group's sink.

    The group is the whole set, or (``grouped``) each value of ``key``: a slice code, or a replica's.
    """
    if not any(s.n for s in sinks.values()):
        return
    if grouped:
        sql = f"SELECT {key}, {value} AS v FROM records WHERE {where} AND {key} IS NOT NULL ORDER BY {key}, {order}"
    else:
        sql = f"SELECT {value} AS v FROM records WHERE {where} ORDER BY {order}"
    for batch in con.sql(sql).to_arrow_reader(BATCH_ROWS):
        v = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if not grouped:
            sinks[None].feed(v)
            continue
        g = batch.column(0).to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(g[1:] != g[:-1]) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, g.size]):
            sinks[int(g[a])].feed(v[a:b])


def _sorted_sinks(con: duckdb.DuckDBPyConnection, metric: Metric, counts: dict[Group, int],
                  extra_ranks: dict[Group, int]) -> dict[Group, SortedSink]:
    """Stream one metric's values sorted, for the whole set and each slice, into a sink per group.

    ``extra_ranks``: failures per group, whose failure-aware view reads ranks past the successes.
    """
    sinks = {g: SortedSink(n, ranks_for(n) | ranks_for(n + extra_ranks.get(g, 0))) for g, n in counts.items()}
    stream(con, metric.value, metric.where, {None: sinks[None]}, grouped=False)
    stream(con, metric.value, metric.where, {g: s for g, s in sinks.items() if g is not None}, grouped=True)
    return sinks


def timeline(con: duckdb.DuckDBPyConnection, begin: str, where: str, grouped: bool, window_start: float,
             window_end: float, key: str = "g") -> dict[Group, Concurrency]:
    """Peak open intervals [begin, end) and the time held at it, per group of ``key``, as ``active_timeline``.

    Events are streamed in time order, a departure before an arrival at the same time, and walked by
    a running sum in numpy; a span at the peak lasts until the next event (always a departure).
    """
    g = key if grouped else "CAST(NULL AS INTEGER)"
    cond = f"({where}) AND {key} IS NOT NULL" if grouped else where
    sql = f"""SELECT g, t, d FROM (
                SELECT {g} AS g, {begin} AS t, CAST(1 AS TINYINT) AS d FROM records WHERE {cond}
                UNION ALL SELECT {g} AS g, "end" AS t, CAST(-1 AS TINYINT) AS d FROM records WHERE {cond})
              ORDER BY g, t, d"""
    walks: dict[Group, PeakWalk] = {}
    for batch in con.sql(sql).to_arrow_reader(BATCH_ROWS):
        t = batch.column(1).to_numpy(zero_copy_only=False)
        d = batch.column(2).to_numpy(zero_copy_only=False)
        if not grouped:
            walks.setdefault(None, PeakWalk()).feed(t, d)
            continue
        k = batch.column(0).to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, k.size]):
            walks.setdefault(int(k[a]), PeakWalk()).feed(t[a:b], d[a:b])
    return {key: walk.result(window_start, window_end) for key, walk in walks.items()}


def grouped_sums(con: duckdb.DuckDBPyConnection, exprs: dict[str, str], grouped: bool,
                 where: str = "true", key: str = "g") -> dict[Group, dict[str, Any]]:
    """Evaluate aggregate expressions over the whole set and (``grouped``) each group of ``key``, in one scan.

    A sum over no rows is 0, as ``token_sum`` of nothing is; ``prompt_sum`` keeps None (no prompt tokens).
    """
    select = ", ".join(f"{e} AS {k}" for k, e in exprs.items())
    group = f"GROUP BY GROUPING SETS ((), ({key})) HAVING grouping({key}) = 1 OR {key} IS NOT NULL" if grouped else ""
    group_key = f"CASE WHEN grouping({key}) = 1 THEN NULL ELSE {key} END" if grouped else "NULL"
    rows = con.sql(f"SELECT {group_key} AS key, {select} FROM records WHERE {where} {group}").fetchall()
    out = {}
    for r in rows:
        d = dict(zip(["key", *exprs], r))
        out[d.pop("key")] = {k: (0 if v is None and k != "prompt_sum" else v) for k, v in d.items()}
    return out


def _good_sql(slo: SLO | None, tokens: bool) -> str:
    """SQL: a success meeting every limit of the SLO (as ``summary._slo_result``)."""
    good = ["status = 0"]
    if slo is not None and slo.ttft_s is not None:
        good.append(f'first_token - "start" <= {lit(slo.ttft_s)}')
    if slo is not None and slo.latency_s is not None:
        good.append(f'"end" - "start" <= {lit(slo.latency_s)}')
    if slo is not None and slo.tpot_s is not None:
        good.append(f"(output_tokens <= 1 OR {TPOT} <= {lit(slo.tpot_s)})")
    if slo is not None and slo.itl_p99_s is not None and tokens:  # no p99 (one arrival) meets it
        good.append(f"(output_tokens <= 1 OR (has_times AND (itl_p99 IS NULL OR itl_p99 <= {lit(slo.itl_p99_s)})))")
    return " AND ".join(good)


def _aggregates(con: duckdb.DuckDBPyConnection, slo: SLO | None, grouped: bool, tokens: bool,
                cached: bool, reasoning: bool = False) -> dict[Group, dict[str, Any]]:
    """Counts and exact token sums for the whole set and (``grouped``) each slice, in one scan."""
    good_sql = _good_sql(slo, tokens)
    produced = "CASE WHEN output_tokens > 0 THEN output_tokens ELSE 0 END"
    metrics = {**METRICS, **(TOKEN_METRICS if tokens else {}), **(CACHE_METRICS if cached else {}),
               **(REASONING_METRICS if reasoning else {})}
    exprs = {
        "n": "count(*)",
        **{f"status_{i}": f"count(*) FILTER (WHERE status = {i})" for i in range(len(STATUSES))},
        "total_tokens": f"sum({produced})",
        "success_tokens": f"sum({produced}) FILTER (WHERE status = 0)",
        "prompt_sum": "sum(prompt_tokens) FILTER (WHERE prompt_tokens >= 0)",
        "prompt_n": "count(*) FILTER (WHERE prompt_tokens >= 0)",
        "no_id": "count(*) FILTER (WHERE request_id IS NULL)",
        "good": f"count(*) FILTER (WHERE {good_sql})",
        "good_tokens": f"sum(output_tokens) FILTER (WHERE {good_sql})",
        "any_admitted": "count(*) FILTER (WHERE isfinite(admitted))",
        **{f"n_{m}": f"{metric.count} FILTER (WHERE {metric.where})" for m, metric in metrics.items()},
    }
    if cached:
        has = "cached_prompt_tokens >= 0"
        exprs.update({
            "pc_n": f"count(*) FILTER (WHERE {has})",
            "pc_prompt": f"sum(prompt_tokens) FILTER (WHERE {has} AND prompt_tokens >= 0)",
            "pc_cached": f"sum(cached_prompt_tokens) FILTER (WHERE {has})",
            "pc_cached_with_prompt": f"sum(cached_prompt_tokens) FILTER (WHERE {has} AND prompt_tokens >= 0)",
            "pc_hit": f"count(*) FILTER (WHERE {_HIT})",
            "pc_miss_tokens": f"sum(prompt_tokens) FILTER (WHERE {MISS_WITH_PROMPT})",
            "pc_miss_n": f"count(*) FILTER (WHERE {MISS_WITH_PROMPT})",
        })
    if reasoning:
        exprs.update({
            "rs_any": "count(*) FILTER (WHERE isfinite(first_answer_token) OR reasoning_tokens >= 0)",
            "rs_counted": f"count(*) FILTER (WHERE {_WITH_REASONING_TOKENS})",
            "rs_tokens": f"sum(reasoning_tokens) FILTER (WHERE {_WITH_REASONING_TOKENS})",
            "rs_output": f"sum(output_tokens) FILTER (WHERE {_WITH_REASONING_TOKENS})",
        })
    return grouped_sums(con, exprs, grouped)


def _causes(con: duckdb.DuckDBPyConnection, grouped: bool) -> dict[Group, dict[str, int]]:
    """Non-success records by error text ('unspecified' if none), most common first, per group."""
    sets = "GROUPING SETS ((error), (g, error)) HAVING grouping(g) = 1 OR g IS NOT NULL" if grouped else "error"
    key = "CASE WHEN grouping(g) = 1 THEN NULL ELSE g END" if grouped else "NULL"
    rows = con.sql(f"SELECT {key}, error, count(*) FROM records WHERE status <> 0 GROUP BY {sets}").fetchall()
    out: dict[Group, dict[str, int]] = {}
    for k, error, count in rows:
        by_name = out.setdefault(k, {})
        name = "unspecified" if error is None else error
        by_name[name] = by_name.get(name, 0) + int(count)
    return {k: dict(sorted(v.items(), key=lambda p: (-p[1], p[0]))) for k, v in out.items()}


def _duplicates(con: duckdb.DuckDBPyConnection) -> tuple[int, list[str]]:
    """Return the number of repeated request IDs (each beyond its first) and the first five repeated, sorted."""
    dup = ("SELECT request_id, count(*) AS c FROM records WHERE request_id IS NOT NULL "
           "GROUP BY request_id HAVING count(*) > 1")
    total = con.sql(f"SELECT coalesce(sum(c - 1), 0) FROM ({dup})").fetchall()[0][0]
    examples = [r[0] for r in con.sql(f"SELECT request_id FROM ({dup}) ORDER BY request_id LIMIT 5").fetchall()]
    return int(total), examples


def _stall_threshold(slo: SLO | None, itl_median: float | None) -> tuple[float | None, str]:
    """The stall threshold and its rule: ``--stall-s`` when given, else 4x the whole set's median ITL."""
    stall_s = None if slo is None else slo.stall_s
    if stall_s is not None:
        return stall_s, "--stall-s"
    return (None if itl_median is None else 4 * itl_median), "4x median ITL"


def _row_order_sums(con: duckdb.DuckDBPyConnection, value: str, where: str,
                    counts: dict[Group, int]) -> dict[Group, float]:
    """Sum a value over records in row order (part, then row), as numpy sums a masked copy of a column."""
    sums = {g: PairwiseSum(n) for g, n in counts.items()}
    stream(con, value, where, {None: sums[None]}, grouped=False, order="part, part_row")
    stream(con, value, where, {g: s for g, s in sums.items() if g is not None}, grouped=True,
            order="part, part_row")
    return {g: s.total() for g, s in sums.items()}


def _prefix_cache(a: dict[str, Any], sinks: dict[str, SortedSink], prefill_sum: float) -> PrefixCacheReport | None:
    """The prefix-cache section of one group, as ``summary._prefix_cache`` computes it."""
    if not a["pc_n"]:
        return None
    prompt_total, cached_total = int(a["pc_prompt"]), int(a["pc_cached"])
    per_token = saved = None
    miss_tokens = int(a["pc_miss_tokens"])
    if miss_tokens > 0:
        per_token = prefill_sum / miss_tokens
        saved = per_token * cached_total
    return PrefixCacheReport(
        requests=int(a["pc_n"]), prompt_tokens=prompt_total, cached_prompt_tokens=cached_total,
        token_hit_rate=int(a["pc_cached_with_prompt"]) / prompt_total if prompt_total > 0 else None,
        requests_with_hit=int(a["pc_hit"]),
        ttft_hit_s=distribution(sinks["ttft_hit"]), ttft_miss_s=distribution(sinks["ttft_miss"]),
        prefill_hit_s=distribution(sinks["prefill_hit"]) if a["n_prefill_hit"] else None,
        prefill_miss_s=distribution(sinks["prefill_miss"]) if a["n_prefill_miss"] else None,
        prefill_s_per_prompt_token=per_token, estimated_prefill_saved_s=saved)


def _reasoning(a: dict[str, Any], sinks: dict[str, SortedSink]) -> ReasoningReport | None:
    """The reasoning section of one group, as ``summary.reasoning_of`` computes it."""
    if not a["rs_any"]:
        return None
    reasoning_total, output_total = int(a["rs_tokens"]), int(a["rs_output"])
    return ReasoningReport(
        requests=int(a["n_ttfa"]), ttfa_s=distribution(sinks["ttfa"]), reasoning_s=distribution(sinks["thinking"]),
        requests_with_reasoning_tokens=int(a["rs_counted"]), reasoning_tokens=reasoning_total,
        output_tokens=output_total, reasoning_token_share=reasoning_total / output_total if output_total else None)


# The logical requests: one row per logical_id (first_row: its first record's place in part and row order), and
# one per record without a logical_id, a logical request of its own (as retries.logical_stats groups them).
_ORDINAL = "(CAST(part AS BIGINT) << 40) + part_row"  # part, then row: a part holds fewer than 2**40 rows
_DELIVERED = "status <> 0 AND (output_tokens > 0 OR isfinite(first_token))"  # a failed attempt that streamed tokens
_LOGICAL_SQL = f"""
    SELECT logical_id AS lid, min({_ORDINAL}) AS first_row, max("end") - min("start") AS latency,
           count(*) AS attempts, count(*) FILTER (WHERE status = 0) AS successes,
           coalesce(min("end") FILTER (WHERE {_DELIVERED}) < max("end"), false) AS partial,
           count(DISTINCT attempt) FILTER (WHERE attempt >= 1) AS numbers,
           max(attempt) FILTER (WHERE attempt >= 1) AS top_number
    FROM records WHERE logical_id IS NOT NULL GROUP BY logical_id
    UNION ALL
    SELECT NULL, {_ORDINAL}, "end" - "start", 1, CAST(status = 0 AS INTEGER), false, 0, NULL
    FROM records WHERE logical_id IS NULL"""


def _logical(con: duckdb.DuckDBPyConnection) -> LogicalReport:
    """The logical-request section, as ``summary._logical`` computes it (see ``analysis.retries``)."""
    con.sql(f"CREATE OR REPLACE TEMP TABLE logical AS {_LOGICAL_SQL}")
    n, ok, retried, partial, attempts, cut = con.sql(
        "SELECT count(*), count(*) FILTER (WHERE successes > 0), count(*) FILTER (WHERE attempts > 1), "
        "count(*) FILTER (WHERE partial), sum(attempts) FROM logical").fetchall()[0] + con.sql(
        f"SELECT count(*) FILTER (WHERE error = {text_lit(CLIENT_DEADLINE_ERROR)}) FROM records").fetchall()[0]
    every, succeeded = SortedSink(n, ranks_for(n)), SortedSink(ok, ranks_for(ok))
    _stream_logical(con, "true", every)
    _stream_logical(con, "successes > 0", succeeded)
    issues = _attempt_issues(con)
    con.sql("DROP TABLE logical")
    return LogicalReport(logical_requests=n, logical_successes=ok, success_fraction=ok / n if n else None,
                         attempts=int(attempts), amplification=int(attempts) / n if n else None, retried=retried,
                         partial_then_retry=partial, attempts_cut_by_deadline=cut,
                         user_latency_s=distribution(every), user_latency_success_s=distribution(succeeded),
                         inconsistent_attempts=issues)


def _stream_logical(con: duckdb.DuckDBPyConnection, where: str, sink: SortedSink) -> None:
    for batch in con.sql(f"SELECT latency FROM logical WHERE {where} ORDER BY latency").to_arrow_reader(BATCH_ROWS):
        sink.feed(batch.column(0).to_numpy(zero_copy_only=False).astype(np.float64, copy=False))


def _attempt_issues(con: duckdb.DuckDBPyConnection) -> list[retries.AttemptIssue]:
    """Each kind of inconsistent attempt numbers, in ``retries.attempt_issues``'s order, with its first example."""
    issues = []
    numbered = "FROM records WHERE logical_id IS NOT NULL AND attempt >= 1"

    def first(found_sql: str, order: str) -> tuple[Any, ...] | None:
        """How many logical requests ``found_sql`` (with a column lid) holds, and its first row by ``order``."""
        row = con.sql(f"""WITH found AS ({found_sql})
                          SELECT (SELECT count(DISTINCT lid) FROM found), found.* FROM found JOIN logical l USING (lid)
                          ORDER BY l.first_row, {order} LIMIT 1""").fetchall()
        return row[0] if row else None

    repeated = first(f"SELECT logical_id AS lid, attempt, count(*) AS times {numbered} GROUP BY ALL "
                     "HAVING count(*) > 1", "found.attempt")
    if repeated:
        count, lid, number, times = repeated
        issues.append(retries.repeated_issue(count, lid, number, times))
    skipped = first("SELECT lid FROM logical WHERE top_number > numbers", "found.lid")
    if skipped:
        count, lid = skipped
        numbers = [r[0] for r in con.sql(f"SELECT DISTINCT attempt {numbered} AND logical_id = {text_lit(lid)} "
                                         "ORDER BY attempt").fetchall()]
        issues.append(retries.missing_issue(count, lid, numbers))
    several = first("SELECT lid, successes FROM logical WHERE lid IS NOT NULL AND successes > 1", "found.lid")
    if several:
        count, lid, wins = several
        issues.append(retries.successes_issue(count, lid, wins))
    # in each logical request's numbered attempts by start (ties by number), a number below the one before it
    late = first(f"""SELECT * FROM (
                         SELECT logical_id AS lid, lag(attempt) OVER w AS later_number, lag("start") OVER w AS later_start,
                                attempt, "start", row_number() OVER w AS k
                         {numbered} WINDOW w AS (PARTITION BY logical_id ORDER BY "start", attempt))
                     WHERE later_number > attempt""", "found.k")
    if late:
        count, lid, later_number, later_start, number, start, _ = late
        issues.append(retries.order_issue(count, lid, (later_number, later_start), (number, start)))
    return issues


def report_from_connection(con: duckdb.DuckDBPyConnection, source: str | None, window_start: float,
                           window_end: float, slo: SLO | None, slice_names: Sequence[str], *,
                           tokens: bool = False, cached: bool = False, logical: bool = False,
                           reasoning: bool = False, weights: Mapping[str, float] | None = None) -> Report:
    """Return the full report over the validated table ``records`` (columns as in memory, ``g`` the slice code).

    ``slice_names[g]`` names slice code g; the codes are in name order, as the in-memory report sorts them.
    ``tokens``: some record has token_times (``records`` has gaps, max_gap, itl_p99, has_times);
    ``cached``: some record has cached_prompt_tokens (``records`` has it, and part and part_row);
    ``logical``: some record has logical_id (``records`` has it, attempt, part and part_row);
    ``reasoning``: some record has first_answer_token or reasoning_tokens (``records`` has both);
    ``weights``: slice -> weight for the fairness section, as ``build_report`` takes them.
    """
    if slo is not None and slo.itl_p99_s is not None and not tokens:
        raise ConfigError("an ITL SLO (--slo-itl) needs token_times in the records; this file has none")
    grouped = bool(slice_names)
    agg = _aggregates(con, slo, grouped, tokens, cached, reasoning)
    whole = agg.get(None)
    if whole is None or whole["n"] == 0:
        raise ConfigError(MSG_EMPTY)
    groups: list[Group] = [None, *[g for g in range(len(slice_names)) if g in agg]]
    failures = {g: agg[g]["n"] - agg[g]["status_0"] for g in groups}

    def sinks_of(metrics: dict[str, Metric]) -> dict[str, dict[Group, SortedSink]]:
        return {m: _sorted_sinks(con, metric, {g: agg[g][f"n_{m}"] for g in groups},
                                 failures if m in ("latency", "ttft") else {}) for m, metric in metrics.items()}

    sinks = sinks_of({**METRICS, **(TOKEN_METRICS if tokens else {}), **(CACHE_METRICS if cached else {}),
                      **(REASONING_METRICS if reasoning else {})})
    stalled: dict[Group, dict[str, Any]] = {}
    threshold, rule = None, ""
    if tokens:
        threshold, rule = _stall_threshold(slo, distribution(sinks["itl"][None]).at(50))
        if threshold is not None:
            stalled = grouped_sums(con, {"stalled": f"count(*) FILTER (WHERE max_gap > {lit(threshold)})"}, grouped,
                               where=TOKEN_METRICS["max_stall"].where)
    prefill_sums = (_row_order_sums(con, "first_token - admitted", MISS_WITH_PROMPT,
                                    {g: agg[g]["pc_miss_n"] for g in groups}) if cached else {})
    active = timeline(con, '"start"', "true", False, window_start, window_end)
    service = timeline(con, "admitted", "isfinite(admitted)", False, window_start, window_end)
    if grouped:
        active.update(timeline(con, '"start"', "true", True, window_start, window_end))
        service.update(timeline(con, "admitted", "isfinite(admitted)", True, window_start, window_end))
    causes = _causes(con, grouped)
    window_s = window_end - window_start

    def one(g: Group) -> Report:
        a = agg[g]
        n = a["n"]
        by_status = {name: int(a[f"status_{i}"]) for i, name in enumerate(STATUSES)}
        successes = by_status["success"]
        dist = {m: distribution(sinks[m][g]) for m in METRICS}
        has_adm = a["n_queue_wait"] > 0
        slo_result = None
        if slo is not None and slo.any:
            slo_result = SLOResult(slo=slo, good_requests=int(a["good"]), attainment=int(a["good"]) / n,
                                   goodput_requests_per_second=int(a["good"]) / window_s,
                                   goodput_output_tokens_per_second=int(a["good_tokens"]) / window_s)
        total_tokens, success_tokens = int(a["total_tokens"]), int(a["success_tokens"])
        empty = Concurrency(peak=0, share_of_window_at_peak=1.0, time_at_peak_s=float(window_end - window_start))
        summary = {
            "requests": n, "successes": successes, "non_success_fraction": 1 - successes / n,
            "successful_requests_per_second": successes / window_s,
            "successful_output_tokens_per_second": success_tokens / window_s,
            "success_latency_p95_s": dist["latency"].at(95), "success_ttft_p95_s": dist["ttft"].at(95),
            "success_request_tpot_p95_s": dist["tpot"].at(95),
        }
        token_fields: dict[str, Any] = {}
        if tokens:
            requests = int(a["n_max_stall"])
            counted = None
            if threshold is not None:
                k = int(stalled.get(g, {}).get("stalled", 0))
                counted = Stalls(threshold_s=threshold, threshold_rule=rule, requests=requests, stalled=k,
                                 share=k / requests if requests else None)
            token_fields = {"itl_s": distribution(sinks["itl"][g]), "max_stall_s": distribution(sinks["max_stall"][g]),
                            "stalls": counted}
        prefix = (_prefix_cache(a, {m: sinks[m][g] for m in CACHE_METRICS}, prefill_sums.get(g, 0.0))
                  if cached else None)
        return Report(
            source=source, window_start=window_start, window_end=window_end, window_s=window_s,
            summary=summary, offered=n, accepted=n - by_status["rejected"], completed=successes,
            rejected=by_status["rejected"], timed_out=by_status["timeout"], by_status=by_status,
            by_cause=causes.get(g, {}),
            latency_s=dist["latency"], ttft_s=dist["ttft"], request_tpot_s=dist["tpot"], **token_fields,
            queue_wait_s=dist["queue_wait"] if has_adm else None, prefill_s=dist["prefill"] if has_adm else None,
            failure_aware_latency_s=distribution(sinks["latency"][g], infinite=failures[g]),
            failure_aware_ttft_s=distribution(sinks["ttft"][g], infinite=failures[g]),
            slo=slo_result, total_output_tokens=total_tokens, successful_output_tokens=success_tokens,
            wasted_output_tokens=total_tokens - success_tokens,
            total_prompt_tokens=int(a["prompt_sum"]) if a["prompt_n"] else None,
            active_requests=active.get(g, empty),
            in_service=service.get(g, empty) if a["any_admitted"] else None,
            duplicate_request_ids=0, duplicate_request_id_examples=[],
            records_without_request_id=int(a["no_id"]), prefix_cache=prefix,
            reasoning=_reasoning(a, {m: sinks[m][g] for m in REASONING_METRICS}) if reasoning else None,
        )

    dups, examples = _duplicates(con)
    slices = {slice_names[g]: one(g) for g in groups if g is not None}
    return one(None).model_copy(update={
        "duplicate_request_ids": dups, "duplicate_request_id_examples": examples, "slices": slices,
        "logical": _logical(con) if logical else None,
        "fairness": fairness_of(slices, window_s, weights) if len(slices) >= 2 else None})


def uncovered_fields() -> list[str]:
    """Return the report's fields this engine does not compute (none, until ``build_report`` gains one)."""
    return sorted(set(Report.model_fields) - COVERED_FIELDS)


__all__ = ["COVERED_FIELDS", "METRICS", "Metric", "grouped_sums", "report_from_connection", "stream", "timeline",
           "uncovered_fields"]
