"""A production trace in pictures: arrivals and token mix over time, and the prefix hit rate against cache size.

Data in, data out: :func:`trace_bins` turns a trace into equal time bins, :func:`trace_over_time` and
:func:`hit_rate_by_capacity` draw plotly figures; nothing here reads files or writes HTML.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.analysis.trace_stats import PEAK_WINDOW_S, PrefixStats, busiest_window
from servebench.output.figures.records import TEMPLATE, _layout, _titled, new_figure, plot_label
from servebench.records.traces import Trace

MAX_BINS = 120  # a chart of more bins than this is wider than it is readable
NICE_WIDTHS_S: tuple[float, ...] = (1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0)
COLORS = {"requests": "#1f77b4", "prompt": "#2ca02c", "output": "#ff7f0e", "peak": "#d62728", "lru": "#1f77b4",
          "reusable": "#7f7f7f"}


@dataclass(frozen=True)
class TraceBins:
    """A trace's arrivals, prompt tokens and output tokens per second, in equal bins of its span."""

    width_s: float
    mids_s: np.ndarray  # each bin's middle, seconds after the trace's first request
    requests_per_s: np.ndarray
    prompt_tokens_per_s: np.ndarray
    output_tokens_per_s: np.ndarray
    peak_window: tuple[float, int] | None  # the busiest 60 s (start, arrivals), as trace stats finds it


def bin_width_s(duration_s: float, max_bins: int = MAX_BINS) -> float:
    """Return the smallest round bin width (1 s to a day) that cuts a span into at most ``max_bins`` bins.

    >>> bin_width_s(3537.0), bin_width_s(600.0), bin_width_s(30.0), bin_width_s(604800.0)
    (30.0, 5.0, 1.0, 21600.0)
    """
    for width in NICE_WIDTHS_S:
        if duration_s / width <= max_bins:
            return width
    return float(math.ceil(duration_s / max_bins))


def trace_bins(trace: Trace, width_s: float | None = None) -> TraceBins:
    """Return the trace's arrivals and tokens per second by arrival, in bins of ``width_s`` (default: :func:`bin_width_s`).

    Each request counts in the bin of its arrival, failed ones too (a trace is the traffic offered); tokens are
    what the requests ask for, prompt and output apart.
    """
    t = trace.arrival_s
    duration = float(t[-1] - t[0]) if t.size else 0.0
    width = width_s if width_s is not None else bin_width_s(duration)
    bins = max(1, math.ceil(duration / width)) if duration > 0 else 1
    which = np.minimum(((t - t[0]) // width).astype(np.int64), bins - 1)
    per_s = 1.0 / width
    return TraceBins(
        width_s=width, mids_s=t[0] + (np.arange(bins) + 0.5) * width,
        requests_per_s=np.bincount(which, minlength=bins) * per_s,
        prompt_tokens_per_s=np.bincount(which, weights=trace.prompt_tokens, minlength=bins) * per_s,
        output_tokens_per_s=np.bincount(which, weights=trace.output_tokens, minlength=bins) * per_s,
        peak_window=busiest_window(t))


def trace_over_time(bins: TraceBins, title: str) -> go.Figure:
    """Return three rows on one time axis: requests, prompt tokens and output tokens per second (each on its own
    scale: a prompt often asks for a hundred times the tokens its answer does), the busiest minute shaded."""
    rows = (("requests/s", bins.requests_per_s, "requests"), ("prompt tokens/s", bins.prompt_tokens_per_s, "prompt"),
            ("output tokens/s", bins.output_tokens_per_s, "output"))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    fig.update_layout(template=TEMPLATE)
    for i, (name, values, color) in enumerate(rows, start=1):
        fig.add_trace(go.Scatter(x=bins.mids_s, y=values, mode="lines", line_shape="hvh", name=name,
                                 line={"color": COLORS[color]}), row=i, col=1)
        fig.update_yaxes(title_text=name, rangemode="tozero", row=i, col=1)
        if bins.peak_window is not None:
            fig.add_vrect(x0=bins.peak_window[0], x1=bins.peak_window[0] + PEAK_WINDOW_S, fillcolor=COLORS["peak"],
                          opacity=0.15, line_width=0, row=i, col=1)
    fig.update_xaxes(title_text="seconds after the first request", row=3, col=1)
    lines = [f"by arrival, in {bins.width_s:g} s bins"]
    if bins.peak_window is not None:
        start, count = bins.peak_window
        lines.append(f"shaded: the busiest minute, {count / PEAK_WINDOW_S:.3g} requests/s from {start:,.0f} s")
    fig = _layout(fig, _titled(plot_label(title), lines), height=620, top=90)
    fig.update_layout(showlegend=False)
    return fig


def hit_rate_by_capacity(prefix: PrefixStats, title: str) -> go.Figure:
    """Return the share of prompt tokens an LRU prefix cache serves against its size (log axis), under the share
    an unbounded cache serves."""
    caps = [h.capacity_tokens for h in prefix.hit_rate_by_capacity]
    rates = [None if h.token_hit_rate is None else 100 * h.token_hit_rate for h in prefix.hit_rate_by_capacity]
    fig = new_figure(go.Scatter(x=caps, y=rates, mode="lines+markers", name="LRU cache",
                                line={"color": COLORS["lru"]},
                                hovertemplate="%{x:,} tokens: %{y:.1f} %<extra></extra>"))
    if prefix.reusable_token_share is not None:
        fig.add_hline(y=100 * prefix.reusable_token_share, line_dash="dash", line_color=COLORS["reusable"],
                      annotation_text=f"unbounded cache: {100 * prefix.reusable_token_share:.1f} %",
                      annotation_position="bottom right")
    fig.update_xaxes(type="log", title_text=f"cache capacity, tokens (blocks of {prefix.block_tokens:,})")
    fig.update_yaxes(title_text="prompt tokens served from the cache, %", rangemode="tozero")
    return _layout(fig, plot_label(title))
