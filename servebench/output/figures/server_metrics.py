"""The server's own signals over time under the client's TTFT and offered load, on one time axis: data in, figure out.

Rows, each shown when it has data: the client's TTFT (one point per success, at its start), the
offered load (arrivals per second), the server's running and waiting requests, its KV-cache use and
its preemptions so far. Time is seconds since the window's start, the records' clock and the
scrapes' (a load run places both on it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.analysis.server_metrics import ServerTimeline, server_timeline
from servebench.output.figures.records import MAX_POINTS, _layout, new_figure, plot_label
from servebench.records.server_samples import ServerSamples
from servebench.records.table import RecordTable

ARRIVAL_BINS = 60
COLORS = {"TTFT": "#1f77b4", "offered": "#7f7f7f", "running": "#2ca02c", "waiting": "#d62728",
          "KV cache use": "#9467bd", "preemptions": "#ff7f0e"}


@dataclass(frozen=True)
class Line:
    """One trace: its name, the metric it comes from, x (s since the window's start), y, and how it is drawn."""

    name: str
    source: str
    x: np.ndarray
    y: np.ndarray
    markers: bool = False


@dataclass(frozen=True)
class Panel:
    """One row of the chart: its axis title and lines."""

    title: str
    lines: list[Line]


def server_panels(table: RecordTable, samples: ServerSamples, window_start: float, window_end: float,
                  max_points: int = MAX_POINTS) -> list[Panel]:
    """Return the chart's rows: client TTFT and offered load from the records, then the server's signals."""
    ok = table.is_success & np.isfinite(table.first_token)
    start, ttft = table.start[ok], (table.first_token - table.start)[ok]
    order = np.argsort(start, kind="stable")
    if order.size > max_points:  # every k-th by start time: the shape survives, the page stays light
        order = order[np.linspace(0, order.size - 1, max_points).astype(int)]
    panels = [Panel("client TTFT, s", [Line("TTFT", "records: first_token - start", start[order] - window_start,
                                            ttft[order], markers=True)])]
    span = max(window_end - window_start, 1e-9)
    edges = np.linspace(0.0, span, ARRIVAL_BINS + 1)
    counts, _ = np.histogram(np.clip(table.start - window_start, 0.0, span), bins=edges)
    panels.append(Panel("offered, req/s", [Line("offered", "records: arrivals per second", edges[:-1],
                                                counts / (edges[1] - edges[0]))]))
    tl: ServerTimeline = server_timeline(samples, window_start, window_end)
    requests = [Line(name, metric, t - window_start, v) for name, found in (("running", tl.running),
                                                                             ("waiting", tl.waiting))
                if found is not None for metric, t, v in [found]]
    if requests:
        panels.append(Panel("server requests", requests))
    if tl.kv_usage is not None:
        metric, t, v = tl.kv_usage
        panels.append(Panel("KV cache use (1: full)", [Line("KV cache use", metric, t - window_start, v)]))
    if tl.preemptions is not None:
        metric, t, v = tl.preemptions
        panels.append(Panel("preemptions so far", [Line("preemptions", metric, t - window_start, v - v[0])]))
    return panels


def server_timeline_figure(table: RecordTable, samples: ServerSamples | None, window_start: float,
                           window_end: float) -> go.Figure | None:
    """Return the client's TTFT and offered load above the server's signals, on one time axis (None: no samples)."""
    if samples is None or not len(samples):
        return None
    panels = server_panels(table, samples, window_start, window_end)
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04, figure=new_figure())
    for row, panel in enumerate(panels, start=1):
        for line in panel.lines:
            fig.add_trace(go.Scatter(
                x=line.x, y=line.y, name=line.name, mode="markers" if line.markers else "lines",
                line_shape=None if line.markers else "hv", marker=dict(size=4, color=COLORS[line.name]),
                line=dict(color=COLORS[line.name]),
                hovertemplate=f"{plot_label(line.source)}<br>%{{x:.3f}} s: %{{y:.4g}}<extra></extra>"),
                row=row, col=1)
        fig.update_yaxes(title_text=panel.title, rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="s since the window's start", range=[0.0, window_end - window_start],
                     row=len(panels), col=1)
    return _layout(fig, "The server over time, under the client's TTFT and offered load",
                   height=160 * len(panels) + 100)
