"""The report site's page of a production trace: what it asks of a server, its traffic over time, its prefix reuse."""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from servebench.analysis.trace_stats import TokenStats, trace_stats
from servebench.formatting import fmt
from servebench.output.figures.trace import hit_rate_by_capacity, trace_bins, trace_over_time
from servebench.output.site.html import Markup, join, key_values, note, page, section, table
from servebench.records.traces import Trace


def _tokens(stats: TokenStats) -> list[object]:
    return [fmt(stats.mean), f"{stats.p50:,}", f"{stats.p90:,}", f"{stats.p99:,}", f"{stats.max:,}"]


def trace_page(name: str, path: str, trace: Trace, site_title: str,
               embed: Callable[[go.Figure | None, object | None], Markup]) -> str:
    """Return the HTML page of a trace: ``trace stats``' numbers, arrivals and tokens over time, the hit-rate curve.

    ``embed`` turns a figure into its place on the page (the site numbers them).
    """
    stats = trace_stats(trace)
    failed = int(trace.failed.sum()) if trace.failed is not None else None
    parts: list[object] = [key_values([
        ("kind", f"trace ({trace.format})"), ("source", path), ("requests", f"{stats.requests:,}"),
        ("duration, s", fmt(stats.duration_s)), ("mean rate, requests/s", fmt(stats.rate_rps)),
        ("busiest 60 s, requests/s", fmt(stats.peak_rate_rps)),
        ("failed (as the trace marks them)", "not said" if failed is None else f"{failed:,}")])]
    parts.append(section("Tokens", table(["", "mean", "p50", "p90", "p99", "max"],
                                         [["prompt", *_tokens(stats.prompt_tokens)],
                                          ["output", *_tokens(stats.output_tokens)]],
                                         caption="Per request, nearest-rank percentiles, failed requests included"),
                         id_="tokens"))
    parts.append(section("Over time", embed(trace_over_time(trace_bins(trace), name), None), id_="over_time"))
    prefix = stats.prefix
    if prefix is None:
        parts.append(note("This trace names no prefix blocks, so its prefix reuse is unknown (a replay shares "
                          "nothing).", "info"))
    else:
        rows = [[f"{h.capacity_tokens:,}", fmt(None if h.token_hit_rate is None else 100 * h.token_hit_rate)]
                for h in prefix.hit_rate_by_capacity]
        parts.append(section(
            "Prefix reuse",
            embed(hit_rate_by_capacity(prefix, name), f"An LRU cache of prefix blocks ({prefix.block_tokens:,} tokens "
                                                      "each), replayed in arrival order (docs/traces.md)."),
            table(["cache capacity, tokens", "prompt tokens served, %"], rows,
                  caption=f"An unbounded cache serves {fmt(None if prefix.reusable_token_share is None else 100 * prefix.reusable_token_share)} %"),
            id_="prefix"))
    if trace.warnings:
        parts.append(section("Warnings", join(note(w, "warn") for w in trace.warnings), id_="warnings"))
    return page(name, join(parts), site_title=site_title)
