"""Figures of token-level timing: the ITL CDF, the stall histogram, token ticks of the slowest requests.

The numbers come from pure functions (:func:`itl_series`, :func:`stall_bins`, :func:`token_ticks`,
:func:`prefill_values`) that the report site's plotly figures here and the dashboard's Vega-Lite charts
(``figures.vegalite_tokens``) both draw, so both show the same values. Each returns None when no
record carries token times. The chunked-vs-whole prefill values take two reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from servebench.analysis.summary import Report
from servebench.formatting import fmt, fmt_seconds, fmt_share
from servebench.output.figures.records import (
    MARKS,
    MAX_POINTS,
    CdfSeries,
    _layout,
    _titled,
    cdf_series,
    equal_bins,
    new_figure,
    plot_label,
    series_figure,
)
from servebench.records.table import RecordTable
from servebench.records.token_times import Gaps, flat, gaps

TOKEN_METRIC_LABELS: dict[str, str] = {"itl": "Inter-token latency (every gap)",
                                       "max_stall": "Longest stall per request (max gap)"}
STALL_COLOR = "#d62728"
PREFILL_COLORS: dict[str, str] = {"chunked prefill": "#2ca02c", "whole-prompt prefill": "#ff7f0e"}


def success_gaps(table: RecordTable) -> tuple[Gaps, np.ndarray] | None:
    """Return the gaps of every row and the successes' gaps (the ITL sample), or None without token times."""
    if table.token_times is None:
        return None
    g = gaps(table.token_times)
    return g, g.select(table.is_success)


def itl_series(table: RecordTable, marks: Sequence[float] = MARKS, max_points: int = MAX_POINTS) -> CdfSeries | None:
    """Return the CDF of every gap between consecutive tokens of successes (see ``cdf_series``)."""
    found = success_gaps(table)
    if found is None:
        return None
    g, itl = found
    without = int(np.count_nonzero(table.is_success & ~g.has_times))
    return cdf_series(itl, "ITL: every gap between tokens", marks=marks, left_out=without,
                      left_out_reason="successes without token_times", max_points=max_points)


def itl_cdf(table: RecordTable, marks: Sequence[float] = MARKS) -> go.Figure | None:
    """Return the CDF of every gap between consecutive tokens of successes, nearest-rank marks on it."""
    s = itl_series(table, marks)
    if s is None:
        return None
    fig = series_figure(s)
    fig.update_yaxes(title_text="share of gaps")
    return fig


@dataclass(frozen=True)
class StallBins:
    """Each success's longest gap between tokens, binned, with the stall threshold and how many exceed it."""

    edges_s: np.ndarray  # one more than counts; empty when no success has two token arrivals
    counts: np.ndarray
    n: int  # successes with two or more token arrivals
    threshold_s: float | None
    over: int  # of the n, those whose longest gap exceeds threshold_s

    @property
    def lines(self) -> list[str]:
        """Return the words under the chart's title: n, and how many stalled (the threshold in seconds)."""
        return self.lines_in(1.0, "s")

    def lines_in(self, scale: float, unit: str) -> list[str]:
        """Return :attr:`lines` with the threshold in ``unit``, ``scale`` times its seconds (1000 for ms)."""
        lines = [f"n = {fmt(self.n)} successes with two or more token arrivals"]
        if self.threshold_s is not None and self.n:
            threshold = fmt_seconds(self.threshold_s) if unit == "s" else f"{fmt(self.threshold_s * scale, 3)} {unit}"
            lines.append(f"{fmt(self.over)} ({fmt_share(self.over / self.n)}) stalled over {threshold}")
        return lines


def stall_bins(table: RecordTable, threshold_s: float | None = None, bins: int = 40) -> StallBins | None:
    """Return the histogram of each success's longest gap (max_stall_s) in ``bins`` equal bins.

    ``threshold_s`` defaults to 4x the median ITL, as the report's does. None without token times.
    """
    found = success_gaps(table)
    if found is None:
        return None
    g, itl = found
    stalls = g.max_gap[table.is_success & ~np.isnan(g.max_gap)]
    if threshold_s is None and itl.size:
        threshold_s = 4 * float(np.partition(itl, (itl.size + 1) // 2 - 1)[(itl.size + 1) // 2 - 1])
    if stalls.size == 0:
        return StallBins(np.zeros(0), np.zeros(0, dtype=np.int64), 0, threshold_s, 0)
    counts, edges = equal_bins(stalls, bins)
    over = int(np.count_nonzero(stalls > threshold_s)) if threshold_s is not None else 0
    return StallBins(edges, counts, int(stalls.size), threshold_s, over)


def stall_histogram(table: RecordTable, threshold_s: float | None = None, bins: int = 40) -> go.Figure | None:
    """Return a histogram of each success's longest gap (max_stall_s), the stall threshold drawn on it.

    The bins are :func:`stall_bins`'s; ``threshold_s`` defaults to 4x the median ITL, as the report's does.
    """
    h = stall_bins(table, threshold_s, bins)
    if h is None:
        return None
    fig = new_figure()
    if h.n == 0:
        fig.add_annotation(text="no success has two token arrivals", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        return _layout(fig, "Longest stall per request")
    fig.add_trace(go.Bar(x=(h.edges_s[:-1] + h.edges_s[1:]) / 2, y=h.counts, width=np.diff(h.edges_s),
                         marker_color="#1f77b4", name="requests", customdata=np.stack([h.edges_s[:-1], h.edges_s[1:]], 1),
                         hovertemplate="%{customdata[0]:.4g} to %{customdata[1]:.4g} s: %{y} requests<extra></extra>"))
    if h.threshold_s is not None:
        fig.add_vline(x=h.threshold_s, line_dash="dash", line_color=STALL_COLOR)
    fig.update_xaxes(title_text="longest gap between tokens, s")
    fig.update_yaxes(title_text="requests")
    fig.update_layout(showlegend=False, bargap=0)
    return _layout(fig, _titled("Longest stall per request (max_stall_s)", h.lines), height=420, top=110)


@dataclass(frozen=True)
class TickRow:
    """One slow request's token arrivals, in seconds since it started: the row of a token-tick chart."""

    label: str  # '1. <request id>', as the user wrote it (escape it where it is drawn)
    ticks_s: np.ndarray  # the arrivals drawn: all, or an even spread plus the longest gap's two ends
    end_s: float  # its last arrival
    longest_gap_s: tuple[float, float] | None  # the longest gap's two ends; None with one arrival


def token_ticks(table: RecordTable, count: int = 8, max_ticks: int = 400) -> list[TickRow] | None:
    """Return the token arrivals of the ``count`` slowest successes (by latency), slowest first.

    Rows with more than ``max_ticks`` tokens keep an even spread of them plus the longest gap's two ends.
    None when no success carries token times.
    """
    if table.token_times is None:
        return None
    f = flat(table.token_times)
    candidates = np.flatnonzero(table.is_success & f.present & (f.lengths > 0))
    if candidates.size == 0:
        return None
    latency = table.end[candidates] - table.start[candidates]
    slowest = candidates[np.argsort(-latency, kind="stable")[:count]]
    ids = table.request_id
    rows = []
    for rank, row in enumerate(slowest):
        times = f.values[f.offsets[row]:f.offsets[row + 1]] - table.start[row]
        worst = int(np.argmax(np.diff(times))) if times.size > 1 else None
        keep = np.arange(times.size)
        if times.size > max_ticks:
            keep = np.unique(np.concatenate([np.linspace(0, times.size - 1, max_ticks).round().astype(np.int64),
                                             [worst, worst + 1]]))
        name = ids[row] if ids[row] is not None else f"row {row + 1}"
        gap = None if worst is None else (float(times[worst]), float(times[worst + 1]))
        rows.append(TickRow(f"{rank + 1}. {name}", times[keep], float(times[-1]), gap))
    return rows


def token_timeline(table: RecordTable, count: int = 8, max_ticks: int = 400) -> go.Figure | None:
    """Return token ticks of the ``count`` slowest successes (by latency): one row each, time since start.

    A long blank between ticks is a stall the stream's reader waited through (rows from :func:`token_ticks`).
    """
    rows = token_ticks(table, count, max_ticks)
    if rows is None:
        return None
    fig = new_figure()
    for r in rows:
        y = plot_label(r.label)
        fig.add_trace(go.Scatter(x=[0.0, r.end_s], y=[y, y], mode="lines", line=dict(color="#ddd", width=1),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=r.ticks_s, y=[y] * r.ticks_s.size, mode="markers", showlegend=False,
                                 marker=dict(symbol="line-ns-open", size=10, color="#1f77b4"),
                                 hovertemplate="token at %{x:.4g} s after start<extra></extra>"))
        if r.longest_gap_s is not None:
            a, b = r.longest_gap_s
            fig.add_trace(go.Scatter(x=[a, b], y=[y, y], mode="lines", showlegend=False,
                                     line=dict(color=STALL_COLOR, width=3),
                                     hovertemplate=f"longest gap {b - a:.4g} s<extra></extra>"))
    fig.update_xaxes(title_text="seconds since the request started (its first tick is its TTFT)")
    fig.update_yaxes(autorange="reversed")
    lines = ["one tick per token (or chunk); red: each request's longest gap"]
    return _layout(fig, _titled(f"Token ticks of the {len(rows)} slowest successes", lines),
                   height=max(300, 60 + 40 * len(rows)), top=90)


def prefill_values(chunked: Report, whole: Report) -> dict[str, dict[str, float | None]]:
    """Return {policy: {metric: seconds}} of TTFT p95, ITL p99 and longest stall p95 for both prefill policies."""
    def row(r: Report) -> dict[str, float | None]:
        return {"TTFT p95": r.ttft_s.at(95), "ITL p99": r.itl_s.at(99) if r.itl_s else None,
                "longest stall p95": r.max_stall_s.at(95) if r.max_stall_s else None}

    return {"chunked prefill": row(chunked), "whole-prompt prefill": row(whole)}
