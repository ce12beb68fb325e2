"""Figures for offered-load sweeps and simulator step traces: data in, plotly out (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.errors import ConfigError
from servebench.records.steps import StepTrace, parse_columns
from servebench.serving.sweep import SweepResult

MAX_TRACE_POINTS = 4000


def _load_title(result: SweepResult) -> str:
    return "Offered load (requests/s)" if result.mode == "rate" else "Concurrent users"


def _mark_loads(fig: go.Figure, result: SweepResult, rows: Sequence[int] = (1,)) -> None:
    """Draw the capacity and the knee as vertical lines on the given subplot rows."""
    marks = []
    if result.capacity.load is not None:
        marks.append((result.capacity.load, "capacity", "#2ca02c", "dash"))
    if result.knee_load is not None:
        marks.append((result.knee_load, "knee", "#d62728", "dot"))
    for x, label, color, dash in marks:
        for r in rows:
            text = {"annotation_text": f"{label} {x:.3g}", "annotation_position": "top left"} if r == rows[0] else {}
            if len(rows) > 1 or r != 1:
                fig.add_vline(x=x, line_color=color, line_dash=dash, row=r, col=1, **text)
            else:
                fig.add_vline(x=x, line_color=color, line_dash=dash, **text)


def latency_vs_load(result: SweepResult) -> go.Figure:
    """Return p50/p95/p99 latency and TTFT (successes) against offered load, capacity and knee marked."""
    pts = sorted(result.points, key=lambda p: p.load)
    x = [p.load for p in pts]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Latency (successes)", "TTFT (successes)"))
    for row, metric, slo_value in ((1, "latency_s", result.slo.latency_s), (2, "ttft_s", result.slo.ttft_s)):
        for q, dash in (("p50", "solid"), ("p95", "dash"), ("p99", "dot")):
            y = [getattr(p, metric)[q] for p in pts]
            fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=f"{metric.removesuffix('_s')} {q}",
                                     line={"dash": dash}, legendgroup=metric), row=row, col=1)
        if slo_value is not None:
            fig.add_hline(y=slo_value, line_color="#7f7f7f", line_dash="longdash", row=row, col=1,
                          annotation_text=f"SLO {slo_value:g} s", annotation_position="bottom right")
    _mark_loads(fig, result, rows=(1, 2))
    fig.update_yaxes(title_text="seconds", rangemode="tozero")
    fig.update_xaxes(title_text=_load_title(result), row=2, col=1)
    fig.update_layout(title=f"{result.scenario}: latency and TTFT against offered load", height=620,
                      hovermode="x unified")
    return fig


def outcomes_vs_load(result: SweepResult) -> go.Figure:
    """Return offered, attempted, completed, good (within SLOs), rejected and timed-out requests per second.

    Offered counts user requests; attempted counts what retrying clients sent (drawn when any point
    has retries), so the retry amplification shows as the gap between the two. Rejected and timed
    out count attempts.
    """
    pts = sorted(result.points, key=lambda p: p.load)
    x = [p.load for p in pts]
    fig = go.Figure()
    per_s = [(p.window_s or 1.0) for p in pts]
    retried = any(p.attempted is not None and p.attempted > p.offered for p in pts)
    attempted = [("attempted (with retries)", [p.attempted_rps for p in pts], "#9467bd", "dot")] if retried else []
    series = (
        ("offered", [p.offered_rps for p in pts], "#1f77b4", "solid"),
        *attempted,
        ("completed", [p.throughput_rps for p in pts], "#2ca02c", "solid"),
        ("within SLOs", [p.goodput_rps for p in pts], "#17becf", "dash"),
        ("rejected", [p.rejected / w for p, w in zip(pts, per_s)], "#ff7f0e", "solid"),
        ("timed out", [p.timed_out / w for p, w in zip(pts, per_s)], "#d62728", "solid"),
    )
    for name, y, color, dash in series:
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines+markers", name=name, line={"color": color, "dash": dash}))
    _mark_loads(fig, result)
    what = "offered vs attempted vs completed" if retried else "offered vs completed vs rejected"
    fig.update_layout(title=f"{result.scenario}: {what}", xaxis_title=_load_title(result),
                      yaxis_title="requests per second", yaxis_rangemode="tozero", hovermode="x unified")
    return fig


def trace_over_time(trace: StepTrace | Mapping[str, Any], kv_budget_tokens: int | None = None,
                    title: str = "Engine over time") -> go.Figure:
    """Return running sequences, waiting requests and KV tokens in use over time from a step trace.

    ``trace`` is a ``StepTrace``, or a mapping of its columns (``start_s``, ``running``, ``waiting``,
    ``kv_tokens_used``, optionally ``kv_tokens_held``; old column names are read too).
    KV "taken" is reserved or block-rounded; "computed" is what is actually cached. Long traces are thinned to
    at most ``MAX_TRACE_POINTS`` rows, keeping each bucket's largest values.
    """
    if not isinstance(trace, StepTrace):
        trace = parse_columns({k: list(trace[k]) for k in trace.keys()}, "step trace")
    need = [c for c in ("start_s", "running", "waiting", "kv_tokens_used") if getattr(trace, c) is None]
    if need and len(trace):
        raise ConfigError(f"step trace lacks column(s) {', '.join(need)} to draw over time")
    t, active, waiting, kv = (np.asarray(getattr(trace, c), dtype=np.float64) if len(trace) else np.zeros(0)
                              for c in ("start_s", "running", "waiting", "kv_tokens_used"))
    held = np.asarray(trace.kv_tokens_held, dtype=np.float64) if trace.has("kv_tokens_held") else None
    order = np.argsort(t, kind="stable")
    t, active, waiting, kv = t[order], active[order], waiting[order], kv[order]
    held = held[order] if held is not None else None
    if t.size > MAX_TRACE_POINTS:
        edges = np.linspace(0, t.size, MAX_TRACE_POINTS + 1).astype(np.int64)
        starts = edges[:-1]
        t = t[starts]
        active, waiting, kv = (np.maximum.reduceat(a, starts) for a in (active, waiting, kv))
        held = np.maximum.reduceat(held, starts) if held is not None else None
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Running sequences and waiting requests", "KV tokens in use"))
    fig.add_trace(go.Scatter(x=t, y=active, mode="lines", line_shape="hv", name="running"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=waiting, mode="lines", line_shape="hv", name="waiting"), row=1, col=1)
    fig.add_trace(go.Scatter(x=t, y=kv, mode="lines", line_shape="hv", name="KV tokens taken"), row=2, col=1)
    if held is not None:
        fig.add_trace(go.Scatter(x=t, y=held, mode="lines", line_shape="hv", name="KV tokens computed",
                                 line={"dash": "dot"}), row=2, col=1)
    if kv_budget_tokens is not None:
        fig.add_hline(y=kv_budget_tokens, line_dash="dash", line_color="#7f7f7f", row=2, col=1,
                      annotation_text=f"budget {kv_budget_tokens:,}", annotation_position="bottom right")
    fig.update_yaxes(rangemode="tozero")
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_layout(title=title, height=560, hovermode="x unified")
    return fig
