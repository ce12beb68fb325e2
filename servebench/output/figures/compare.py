"""Metrics over time (throughput, TTFT and latency in equal bins): data in, plotly out."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.records.table import RecordTable
from servebench.analysis.summary import success_metrics

def over_time(table: RecordTable, window_start: float, window_end: float, bins: int = 60,
              unit_scale: float = 1.0, unit: str = "s") -> go.Figure:
    """Return throughput, TTFT and latency against time in equal bins (p50 and p95 of requests ending in each).

    A bin's percentiles are nearest-rank over the successes that end in it, so warm-up, drift and bursts show.
    """
    edges = np.linspace(window_start, window_end, bins + 1)
    width = edges[1] - edges[0]
    ok = table.is_success
    end = table.end[ok]
    m = success_metrics(table)
    which = np.clip(np.searchsorted(edges, end, side="right") - 1, 0, bins - 1)
    mids = (edges[:-1] + edges[1:]) / 2 - window_start
    done = np.bincount(which, minlength=bins) / width
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("Successful requests/s", f"TTFT ({unit})", f"Latency ({unit})"))
    fig.add_trace(go.Bar(x=mids, y=done, name="successes/s", marker_color="#1e88e5", showlegend=False), 1, 1)
    order = np.argsort(which, kind="stable")
    splits = np.searchsorted(which[order], np.arange(1, bins))
    for row, key in ((2, "ttft"), (3, "latency")):
        groups = np.split(m[key][order] * unit_scale, splits)
        for q, color in ((50, "#90caf9"), (95, "#0d47a1")):
            ys = [float(np.percentile(g, q, method="inverted_cdf")) if g.size else None for g in groups]
            fig.add_trace(go.Scatter(x=mids, y=ys, mode="lines+markers", name=f"p{q}", marker_color=color,
                                     legendgroup=f"p{q}", showlegend=row == 2, connectgaps=False), row, 1)
    fig.update_xaxes(title_text="seconds since the window start", row=3, col=1)
    fig.update_layout(height=620, margin=dict(l=50, r=10, t=40, b=40),
                      title=f"Over time ({bins} bins of {width:.3g} s)",
                      legend=dict(orientation="h", yanchor="bottom", y=1.02, x=1, xanchor="right"))
    return fig
