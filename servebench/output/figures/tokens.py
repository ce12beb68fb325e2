"""Figures of token-level timing: the ITL CDF, the stall histogram, token ticks of the slowest requests.

Pure builders: validated records (with ``token_times``) in, ``plotly`` figures out; None when no
record carries token times. The chunked-vs-whole prefill comparison takes two reports.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from servebench.records.table import RecordTable
from servebench.analysis.summary import Report
from servebench.records.token_times import Gaps, flat, gaps
from servebench.output.plain import NO_DATA
from servebench.output.figures.records import MARKS, _layout, _titled, cdf_figure, new_figure, plot_label

TOKEN_METRIC_LABELS: dict[str, str] = {"itl": "Inter-token latency (every gap)",
                                       "max_stall": "Longest stall per request (max gap)"}
STALL_COLOR = "#d62728"


def success_gaps(table: RecordTable) -> tuple[Gaps, np.ndarray] | None:
    """Return the gaps of every row and the successes' gaps (the ITL sample), or None without token times."""
    if table.token_times is None:
        return None
    g = gaps(table.token_times)
    return g, g.select(table.is_success)


def itl_cdf(table: RecordTable, marks: Sequence[float] = MARKS) -> go.Figure | None:
    """Return the CDF of every gap between consecutive tokens of successes, nearest-rank marks on it."""
    found = success_gaps(table)
    if found is None:
        return None
    g, itl = found
    without = int(np.count_nonzero(table.is_success & ~g.has_times))
    fig = cdf_figure(itl, "ITL: each gap between consecutive tokens", marks=marks, left_out=without,
                     left_out_reason="successes without token_times")
    fig.update_yaxes(title_text="share of gaps")
    return fig


def stall_histogram(table: RecordTable, threshold_s: float | None = None, bins: int = 40) -> go.Figure | None:
    """Return a histogram of each success's longest gap (max_stall_s), the stall threshold drawn on it.

    ``threshold_s`` defaults to 4x the median ITL, as the report's does.
    """
    found = success_gaps(table)
    if found is None:
        return None
    g, itl = found
    stalls = g.max_gap[table.is_success & ~np.isnan(g.max_gap)]
    fig = new_figure()
    if stalls.size == 0:
        fig.add_annotation(text="no success has two token arrivals", showarrow=False, x=0.5, y=0.5,
                           xref="paper", yref="paper")
        return _layout(fig, "Longest stall per request")
    if threshold_s is None and itl.size:
        threshold_s = 4 * float(np.partition(itl, (itl.size + 1) // 2 - 1)[(itl.size + 1) // 2 - 1])
    fig.add_trace(go.Histogram(x=stalls, nbinsx=bins, marker_color="#1f77b4", name="requests",
                               hovertemplate="%{x} s: %{y} requests<extra></extra>"))
    lines = [f"n = {stalls.size:,} successes with two or more token arrivals"]
    if threshold_s is not None:
        over = int(np.count_nonzero(stalls > threshold_s))
        fig.add_vline(x=threshold_s, line_dash="dash", line_color=STALL_COLOR)
        lines.append(f"{over:,} ({over / stalls.size:.1%}) stalled over {threshold_s:.3g} s")
    fig.update_xaxes(title_text="longest gap between tokens, s")
    fig.update_yaxes(title_text="requests")
    fig.update_layout(showlegend=False)
    return _layout(fig, _titled("Longest stall per request (max_stall_s)", lines), height=420, top=110)


def token_timeline(table: RecordTable, count: int = 8, max_ticks: int = 400) -> go.Figure | None:
    """Return token ticks of the ``count`` slowest successes (by latency): one row each, time since start.

    A long blank between ticks is a stall the stream's reader waited through. Rows with more than
    ``max_ticks`` tokens show an even spread of them plus the longest gap's two ends.
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
    fig = new_figure()
    for rank, row in enumerate(slowest):
        times = f.values[f.offsets[row]:f.offsets[row + 1]] - table.start[row]
        keep = np.arange(times.size)
        if times.size > max_ticks:
            worst = int(np.argmax(np.diff(times))) if times.size > 1 else 0
            keep = np.unique(np.concatenate([np.linspace(0, times.size - 1, max_ticks).round().astype(np.int64),
                                             [worst, worst + 1]]))
        label = plot_label(ids[row] if ids[row] is not None else f"row {row + 1}")
        y = f"{rank + 1}. {label}"
        fig.add_trace(go.Scatter(x=[0.0, times[-1]], y=[y, y], mode="lines", line=dict(color="#ddd", width=1),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=times[keep], y=[y] * keep.size, mode="markers", showlegend=False,
                                 marker=dict(symbol="line-ns-open", size=10, color="#1f77b4"),
                                 hovertemplate="token at %{x:.4g} s after start<extra></extra>"))
        if times.size > 1:
            k = int(np.argmax(np.diff(times)))
            fig.add_trace(go.Scatter(x=times[k:k + 2], y=[y, y], mode="lines", showlegend=False,
                                     line=dict(color=STALL_COLOR, width=3),
                                     hovertemplate=f"longest gap {times[k + 1] - times[k]:.4g} s<extra></extra>"))
    fig.update_xaxes(title_text="seconds since the request started (its first tick is its TTFT)")
    fig.update_yaxes(autorange="reversed")
    lines = ["one tick per token (or chunk); red: each request's longest gap"]
    return _layout(fig, _titled(f"Token ticks of the {slowest.size} slowest successes", lines),
                   height=max(300, 60 + 40 * slowest.size), top=90)


def prefill_comparison(chunked: Report, whole: Report) -> go.Figure:
    """Return grouped bars of TTFT p95, ITL p99 and max_stall_s p95 for chunked vs whole-prompt prefill."""
    metrics = [("TTFT p95", lambda r: r.ttft_s.at(95)), ("ITL p99", lambda r: r.itl_s.at(99) if r.itl_s else None),
               ("longest stall p95", lambda r: r.max_stall_s.at(95) if r.max_stall_s else None)]
    fig = new_figure()
    for name, report, color in (("chunked prefill", chunked, "#2ca02c"), ("whole-prompt prefill", whole, "#ff7f0e")):
        values = [get(report) for _, get in metrics]
        fig.add_trace(go.Bar(name=name, x=[m for m, _ in metrics], y=values, marker_color=color,
                             text=[f"{v:.3g} s" if v is not None else NO_DATA for v in values], textposition="outside",
                             hovertemplate="%{x}: %{y:.4g} s<extra>" + name + "</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="seconds")
    return _layout(fig, _titled("Chunked vs whole-prompt prefill, same seed and arrivals",
                                ["TTFT: what a new request waits; stalls: what running streams wait"]),
                   height=420, top=100)
