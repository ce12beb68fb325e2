"""The report site's server-metrics section: the server over time under the client's TTFT, its signals, its histograms."""

from __future__ import annotations

from servebench.analysis.server_metrics import ServerMetricsReport
from servebench.output.server_metrics_text import histogram_rows, signal_rows
from servebench.output.site.html import Markup, note, section, table, tag


def server_metrics_section(sm: ServerMetricsReport, chart: Markup) -> Markup:
    """Return the section: the chart over time, each known signal over the window, the histograms beside the client."""
    parts: list[object] = [
        tag("p", f"Scraped from {', '.join(sm.endpoints)} ({', '.join(sm.servers) or 'no known names'}): "
                 f"{sm.scrapes} scrapes in the window, {sm.families} metric families, {sm.unknown_families} of them "
                 "not in servebench's table (kept in server_metrics.parquet).", class_="muted"),
        chart]
    if sm.signals:
        parts.append(table(["metric", "meaning (unit)", "over the window"], signal_rows(sm),
                           caption="Gauges: mean, p95 and max over the window's scrapes; counters: increase and rate"))
    if sm.histograms:
        parts.append(table(["measure", "observations", "server p50 / p95 / p99, ms", "server p95's bucket, ms",
                            "client p50 / p95 / p99, ms"], histogram_rows(sm),
                           caption="The server's histograms over the window (interpolated within a bucket) beside "
                                   "the client's percentiles"))
        parts.append(note(sm.note, "info"))
    return section("Server metrics", *parts, id_="server_metrics")
