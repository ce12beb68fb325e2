"""Rich tables for people reading reports in a terminal (formatting only, no metric maths)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.table import Table

from servebench.analysis.diagnosis import Headline
from servebench.analysis.disagg import DisaggReport
from servebench.analysis.fleet import FleetReport
from servebench.analysis.summary import (
    Distribution,
    FairnessReport,
    LogicalReport,
    PrefixCacheReport,
    ReasoningReport,
    Report,
)
from servebench.formatting import NO_DATA, fmt, fmt_share
from servebench.output.safetext import safe_markup

user_text = safe_markup  # every user-supplied string in a table or line goes through this


EPOCH_RANGE_S: tuple[float, float] = (1e9, 4e9)  # 2001 to 2096: a clock this far from 0 is Unix epoch seconds


def epoch_utc(t_s: float) -> str | None:
    """Return ``t_s`` as a UTC date and time when it looks like Unix epoch seconds, else None.

    >>> epoch_utc(1795947574.931), epoch_utc(12.5)
    ('2026-11-29 10:19:34.931 UTC', None)
    """
    if not EPOCH_RANGE_S[0] <= t_s < EPOCH_RANGE_S[1]:
        return None
    return datetime.fromtimestamp(round(t_s, 3), timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def fmt_window(window_start_s: float, window_end_s: float) -> str:
    """Format an observation window so both ends stay distinct, even on an epoch clock.

    >>> fmt_window(0.095315, 614.792)
    '0.095315 to 614.792 s (614.697 s)'
    >>> fmt_window(1795947574.9312, 1795947585.0396)
    '1795947574.931 to 1795947585.040 s (10.1084 s, from 2026-11-29 10:19:34.931 UTC)'
    """
    length = f"{window_end_s - window_start_s:g} s"
    utc = epoch_utc(window_start_s)
    if utc is None:
        return f"{window_start_s:g} to {window_end_s:g} s ({length})"
    return f"{window_start_s:.3f} to {window_end_s:.3f} s ({length}, from {utc})"


def summary_table(summary: dict[str, Any], title: str = "Summary (spec contract)",
                  unavailable: frozenset[str] = frozenset()) -> Table:
    """Return the eight contract fields as a two-column table; ``unavailable`` ones show as n/a."""
    t = Table(title=title)
    t.add_column("field")
    t.add_column("value", justify="right")
    for key, value in summary.items():
        t.add_row(key, "n/a (the file has no timestamps)" if key in unavailable else fmt(value))
    return t


def distribution_table(rows: dict[str, Distribution | None], title: str) -> Table:
    """Return percentiles with their 95% confidence intervals, one metric per row."""
    t = Table(title=title)
    t.add_column("metric")
    t.add_column("n", justify="right")
    qs: list[float] = []
    for d in rows.values():
        if d is not None:
            qs = [p.q for p in d.percentiles]
            break
    for q in qs:
        t.add_column(f"p{q:g} [95% CI]", justify="right")
    t.add_column("max", justify="right")
    for name, d in rows.items():
        if d is None:
            continue
        cells = [f"{fmt(p.value)} [{fmt(p.ci_low)}, {fmt(p.ci_high)}]" for p in d.percentiles]
        t.add_row(name, str(d.n), *cells, fmt(d.max))
    return t


def print_token_timing(console: Console, report: Report) -> None:
    """Print inter-token latency, each request's longest stall, and the share of requests that stalled."""
    console.print(distribution_table({"itl_s": report.itl_s, "max_stall_s": report.max_stall_s,
                                      "request_tpot_s": report.request_tpot_s},
                                     "Token timing (successes with token_times): every gap, the longest per request"))
    st = report.stalls
    if st is not None and st.share is not None:
        console.print(f"Stalls over {fmt(st.threshold_s)} s ({st.threshold_rule}): {st.stalled:,} of "
                      f"{st.requests:,} requests ({st.share:.1%})")


def print_report(console: Console, report: Report, unavailable: frozenset[str] = frozenset(),
                 *, slice_by: str | None = None) -> None:
    """Print a report as a few tables; metrics an importer marked ``unavailable`` show as n/a.

    ``slice_by`` names the column the slices come from, when it is not ``slice``.
    """
    console.print(f"[bold]{user_text(report.source or 'records')}[/]  window "
                  f"{fmt_window(report.window_start, report.window_end)}")
    console.print(summary_table(report.summary, unavailable=unavailable))
    counts = Table(title="Outcomes")
    counts.add_column("offered")
    counts.add_column("accepted")
    counts.add_column("completed")
    counts.add_column("rejected")
    counts.add_column("timed out")
    counts.add_column("by status")
    counts.add_row(str(report.offered), str(report.accepted), str(report.completed), str(report.rejected),
                   str(report.timed_out), ", ".join(f"{k} {v}" for k, v in report.by_status.items() if v))
    console.print(counts)
    if report.by_cause:
        causes = Table(title="Non-success causes")
        causes.add_column("cause")
        causes.add_column("count", justify="right")
        for k, v in report.by_cause.items():
            causes.add_row(user_text(k), str(v))
        console.print(causes)
    rs = report.reasoning
    console.print(distribution_table({
        "latency_s": report.latency_s, "ttft_s": report.ttft_s,
        "ttfa_s": rs.ttfa_s if rs is not None and rs.requests else None, "request_tpot_s": report.request_tpot_s,
        "queue_wait_s": report.queue_wait_s, "prefill_s": report.prefill_s,
    }, "Successful requests"))
    if rs is not None:
        print_reasoning(console, rs)
    console.print(distribution_table({
        "latency_s": report.failure_aware_latency_s, "ttft_s": report.failure_aware_ttft_s,
    }, "Failure-aware (every non-success counts as +inf)"))
    if report.itl_s is not None:
        print_token_timing(console, report)
    if report.server_metrics is not None:
        from servebench.output.server_metrics_text import print_server_metrics
        print_server_metrics(console, report.server_metrics)
    work = Table(title="Work and concurrency")
    for col in ("output tokens", "successful", "wasted", "peak active", "share at peak", "peak in service",
                "share at peak"):
        work.add_column(col, justify="right")
    ins = report.in_service
    work.add_row(str(report.total_output_tokens), str(report.successful_output_tokens),
                 str(report.wasted_output_tokens), str(report.active_requests.peak),
                 f"{report.active_requests.share_of_window_at_peak:.1%}",
                 str(ins.peak) if ins else NO_DATA, f"{ins.share_of_window_at_peak:.1%}" if ins else NO_DATA)
    console.print(work)
    if report.prefix_cache is not None:
        print_prefix_cache(console, report.prefix_cache)
    if report.slo is not None:
        s = report.slo
        console.print(f"SLO {s.slo.model_dump(exclude_none=True)}: {s.good_requests} good requests, "
                      f"attainment {s.attainment:.1%}, goodput {fmt(s.goodput_requests_per_second)} req/s")
    if report.duplicate_request_ids:
        console.print(f"[red]data quality:[/] {report.duplicate_request_ids} duplicate request IDs, "
                      f"e.g. {user_text(', '.join(report.duplicate_request_id_examples))}")
    for name, sub in report.slices.items():
        title = f"Slice '{name}'" if slice_by is None else f"{slice_by} = '{name}'"
        console.print(summary_table(sub.summary, title=user_text(title)))
    if report.logical is not None:
        print_logical(console, report.logical)
    if report.fairness is not None:
        print_fairness(console, report.fairness)
    if report.fleet is not None:
        print_fleet(console, report.fleet)
    if report.disaggregated is not None:
        print_disaggregated(console, report.disaggregated)


def print_fleet(console: Console, fl: FleetReport) -> None:
    """Print the fleet section: each replica's requests, in-flight peak, token hit rate, TTFT and latency p95."""
    idle = [name for name, r in fl.per_replica.items() if r.requests == 0]  # a simulated fleet's unchosen replicas
    shown = ", ".join(idle[:10]) + (f" and {len(idle) - 10:,} more" if len(idle) > 10 else "")
    table = Table(title=f"Fleet: {fl.replicas} replica{'s' if fl.replicas != 1 else ''}, load imbalance "
                        f"{fmt(fl.load_imbalance)} (busiest / mean requests), token hit rate "
                        f"{NO_DATA if fl.token_hit_rate is None else f'{fl.token_hit_rate:.1%}'}",
                  caption=user_text(f"{len(idle):,} replica{'s' if len(idle) != 1 else ''} took no request: {shown}")
                  if idle else None)
    for col in ("replica", "requests", "in-flight peak", "token hit rate", "TTFT p95, s", "latency p95, s"):
        table.add_column(col, justify="left" if col == "replica" else "right")
    for name, r in fl.per_replica.items():
        if r.requests == 0:
            continue
        table.add_row(user_text(name), f"{r.requests:,}", f"{r.in_flight_peak:,}",
                      NO_DATA if r.token_hit_rate is None else f"{r.token_hit_rate:.1%}", fmt(r.ttft_p95_s),
                      fmt(r.latency_p95_s))
    console.print(table)


def print_disaggregated(console: Console, pd: DisaggReport) -> None:
    """Print the disaggregated section: requests per prefill and decode instance, and the KV transfer times."""
    def spread(counts: dict[str, int]) -> str:
        return " / ".join(f"{n:,}" for n in counts.values()) or NO_DATA
    decode = (f"per decode instance {spread(pd.decode_requests)} (busiest {fmt(pd.decode_load_imbalance)}x)"
              if pd.decode_requests else "no request reached a decode instance")
    console.print(f"[bold]Disaggregated[/]: requests per prefill instance {spread(pd.prefill_requests)} (busiest "
                  f"{fmt(pd.prefill_load_imbalance)}x the mean), {decode}; {pd.transfers:,} KV transfers, p50 "
                  f"{fmt(pd.kv_transfer_p50_s)} s, p95 {fmt(pd.kv_transfer_p95_s)} s, max {fmt(pd.kv_transfer_max_s)} s")


def print_reasoning(console: Console, rs: ReasoningReport) -> None:
    """Print what a reasoning model's report adds: TTFT is its first token of either kind, TTFA its first answer."""
    share = NO_DATA if rs.reasoning_token_share is None else f"{rs.reasoning_token_share:.1%}"
    thinking = rs.reasoning_s.at(50)
    console.print(f"[bold]Reasoning[/]: ttft_s is the first token of either kind, ttfa_s the first answer token "
                  f"({rs.requests:,} successes say it; thinking before the answer, p50 "
                  f"{NO_DATA if thinking is None else fmt(thinking) + ' s'}); {rs.reasoning_tokens:,} of "
                  f"{rs.output_tokens:,} output tokens were reasoning ({share}, {rs.requests_with_reasoning_tokens:,} "
                  "successes say)")


def print_headline(console: Console, headline: Headline | None) -> None:
    """Print a diagnosis's one answer (the load measured, the capacity it implies, the limit that binds)."""
    if headline is not None:
        console.print(f"[bold]answer:[/] {user_text(headline.text)}")


def print_logical(console: Console, lg: LogicalReport) -> None:
    """Print the logical-request section: successes, attempts, amplification, user-visible latency."""
    console.print(f"[bold]Logical requests[/]: {lg.logical_successes:,} of {lg.logical_requests:,} succeeded "
                  f"({fmt_share(lg.success_fraction)}) in {lg.attempts:,} attempts: amplification "
                  f"{fmt(lg.amplification)}; "
                  f"{lg.retried:,} retried, {lg.partial_then_retry:,} saw partial output then a retry, "
                  f"{lg.attempts_cut_by_deadline:,} attempts cut by the client's deadline")
    console.print(distribution_table({"user_latency_s": lg.user_latency_s,
                                      "user_latency_success_s": lg.user_latency_success_s},
                                     "User-visible latency: first attempt's start to final attempt's end"))


def print_fairness(console: Console, fr: FairnessReport) -> None:
    """Print the fairness section: each slice's goodput share, SLO attainment and TTFT p95; Jain's index."""
    table = Table(title=f"Fairness across slices (weights: {fr.weights_from})")
    for col in ("slice", "weight", "goodput, req/s", "goodput share", "SLO attainment", "TTFT p95, s"):
        table.add_column(col, justify="left" if col == "slice" else "right")
    for name, s in fr.slices.items():
        table.add_row(user_text(name), fmt(s.weight), fmt(s.goodput_requests_per_second),
                      fmt_share(s.goodput_share), fmt_share(s.slo_attainment), fmt(s.ttft_p95_s))
    console.print(table)
    console.print(f"Jain's index over goodput / weight: {fmt(fr.jain_index)} (1 = in proportion to weight); "
                  f"worst / best TTFT p95: {fmt(fr.ttft_p95_ratio)}")


def print_prefix_cache(console: Console, pc: PrefixCacheReport) -> None:
    """Print the prefix-cache section: hit rate, TTFT and prefill with and without a hit, prefill saved."""
    rate = NO_DATA if pc.token_hit_rate is None else f"{pc.token_hit_rate:.1%}"
    saved = NO_DATA if pc.estimated_prefill_saved_s is None else f"{fmt(pc.estimated_prefill_saved_s)} s"
    console.print(f"[bold]Prefix cache[/]: {pc.cached_prompt_tokens:,} of {pc.prompt_tokens:,} prompt tokens "
                  f"from the cache (token hit rate {rate}); {pc.requests_with_hit:,} of {pc.requests:,} requests "
                  f"had a hit; estimated prefill saved {saved}")
    console.print(distribution_table({"ttft_hit_s": pc.ttft_hit_s, "ttft_miss_s": pc.ttft_miss_s,
                                      "prefill_hit_s": pc.prefill_hit_s, "prefill_miss_s": pc.prefill_miss_s},
                                     "Prefix cache: requests with and without a hit (successes)"))
