"""Figures of one record set: CDFs with nearest-rank marks, active requests over time, stages, outcomes.

Every builder takes validated data and returns a ``plotly.graph_objects.Figure``; nothing here reads or
writes files. Text that came from the user (slice names, causes) goes through :func:`plot_label`, since
plotly.js reads a subset of HTML in labels: escaped, a slice named ``<b>x</b>`` shows as typed.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from servebench.analysis.contract import success_metrics
from servebench.analysis.percentiles import nearest_rank, percentile
from servebench.analysis.timeline import active_counts
from servebench.formatting import fmt, fmt_count
from servebench.output.safetext import safe_text
from servebench.output.terminal import epoch_utc
from servebench.records.table import STATUSES, RecordTable

STATUS_COLORS: dict[str, str] = {
    "success": "#2ca02c", "failed": "#d62728", "timeout": "#ff7f0e", "cancelled": "#7f7f7f", "rejected": "#9467bd",
}
STAGE_COLORS: dict[str, str] = {"queue wait": "#ff7f0e", "prefill": "#1f77b4", "decode": "#2ca02c"}
MARKS: tuple[float, ...] = (50, 95, 99)
METRIC_TITLES: dict[str, str] = {"latency": "Latency", "ttft": "TTFT", "tpot": "Request TPOT"}
METRIC_FORMULAS: dict[str, str] = {
    "latency": "end - start", "ttft": "first_token - start", "tpot": "(end - first_token) / (output_tokens - 1)",
}
MAX_POINTS = 2000
_TEMPLATE_PARTS = ("autotypenumbers", "colorway", "font", "hovermode", "hoverlabel", "paper_bgcolor", "plot_bgcolor",
                   "xaxis", "yaxis", "title", "shapedefaults", "annotationdefaults")
# plotly_white's look for 2-D charts without its defaults for every trace type: validating the whole
# template costs ~70 ms a figure, a tenth of a second per chart on every page that draws one
TEMPLATE = {"layout": {k: v for k, v in pio.templates["plotly_white"].layout.to_plotly_json().items()
                       if k in _TEMPLATE_PARTS}}


def plot_label(text: object) -> str:
    """Return ``text`` escaped for a plotly label, so markup in user data is shown, not applied.

    >>> plot_label("<script>alert(1)</script>")
    '&lt;script&gt;alert(1)&lt;/script&gt;'
    """
    return html.escape(safe_text(text), quote=False)  # controls and bidi overrides shown, not applied


def new_figure(*data: go.Scatter | go.Bar) -> go.Figure:
    """Return a figure with servebench's template, set before any trace: set after them it costs ~100 ms."""
    return go.Figure(data=list(data) or None, layout={"template": TEMPLATE})


def _layout(fig: go.Figure, title: str, height: int = 360, top: int = 60) -> go.Figure:
    """Set the title, size, margins and legend of a figure made by :func:`new_figure`."""
    fig.update_layout(title=title, height=height, margin=dict(l=60, r=20, t=top, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0))
    if top > 60:  # a title of several lines: hang it from the top so it stays above the plot
        fig.update_layout(title=dict(yref="container", y=1.0, yanchor="top", pad=dict(t=12)))
    return fig


def _titled(title: str, lines: Sequence[str]) -> str:
    """Return a plotly title with each of ``lines`` as a small line below it (lines already escaped)."""
    return "<br>".join([title, *(f"<sup>{line}</sup>" for line in lines)])


def _thin(n: int, keep: Sequence[int], max_points: int) -> np.ndarray:
    """Return sorted indices into n points: an even spread of at most max_points, plus ``keep``."""
    if n <= max_points:
        return np.arange(n)
    spread = np.linspace(0, n - 1, max_points).round().astype(np.int64)
    return np.unique(np.concatenate([spread, np.asarray(keep, dtype=np.int64)]))


def equal_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``np.histogram``'s counts and edges of finite ``values`` in ``bins`` equal bins; values that span too
    little for that many bins of finite width (float noise: 1.0 and 1.0000000000000009, where numpy raises "Too many
    bins for data range") are binned as numpy bins equal values, over their value plus and minus 0.5.

    >>> counts, edges = equal_bins(np.array([1.0, 1.0 + 2**-52, 1.0 + 2**-51]), 40)
    >>> int(counts.sum()), float(edges[0]), float(edges[-1])
    (3, 0.5, 1.5000000000000004)
    """
    try:
        return np.histogram(values, bins=bins)
    except ValueError:
        if not values.size or not np.all(np.isfinite(values)):
            raise
        return np.histogram(values, bins=bins, range=(float(values.min()) - 0.5, float(values.max()) + 0.5))


@dataclass(frozen=True)
class CdfSeries:
    """One metric's empirical CDF, thinned for drawing, with its nearest-rank marks and the words around it."""

    title: str
    formula: str | None
    subtitle: str  # n, and how many requests the curve leaves out and why
    x: np.ndarray  # seconds, a staircase from (first value, 0)
    y: np.ndarray
    marks: tuple[tuple[float, float, int], ...]  # (q, value in seconds, rank): the value the report's tables show
    n: int


def cdf_series(values_s: np.ndarray, metric: str, *, left_out: int = 0, left_out_reason: str = "",
               marks: Sequence[float] = MARKS, max_points: int = MAX_POINTS) -> CdfSeries:
    """Return the empirical CDF of ``values_s``: at most ``max_points`` points plus every marked rank.

    A point at (x, k/n) means k of the n values are <= x; each mark sits on the value the nearest-rank
    rule picks. ``left_out`` counts requests the curve omits (non-successes, one-token requests for TPOT).
    """
    values = np.sort(np.asarray(values_s, dtype=np.float64))
    n = int(values.size)
    subtitle = f"n = {fmt(n)}"
    if left_out:
        subtitle += f"; {fmt_count(left_out, 'request')} not in the curve ({left_out_reason})"
    title = METRIC_TITLES.get(metric, metric)
    if n == 0:
        return CdfSeries(title, METRIC_FORMULAS.get(metric), subtitle, values, values, (), 0)
    ranks = [nearest_rank(q, n) for q in marks]
    idx = _thin(n, [r - 1 for r in ranks], max_points)
    xs = np.concatenate([[values[0]], values[idx]])
    ys = np.concatenate([[0.0], (idx + 1) / n])
    marked = tuple((float(q), float(percentile(values, q)), int(rank)) for q, rank in zip(marks, ranks))
    return CdfSeries(title, METRIC_FORMULAS.get(metric), subtitle, xs, ys, marked, n)


def cdf_figure(values_s: np.ndarray, metric: str, *, left_out: int = 0, left_out_reason: str = "",
               marks: Sequence[float] = MARKS, max_points: int = MAX_POINTS) -> go.Figure:
    """Return the empirical CDF of ``values_s`` with nearest-rank percentiles marked (see :func:`cdf_series`)."""
    return series_figure(cdf_series(values_s, metric, left_out=left_out, left_out_reason=left_out_reason,
                                    marks=marks, max_points=max_points))


def series_figure(s: CdfSeries) -> go.Figure:
    """Return a CDF as a plotly figure: each mark on the value the report's tables show, the left-out named."""
    lines = [s.formula] if s.formula else []
    fig = new_figure()
    if s.n == 0:
        fig.add_annotation(text="no values: no request counted for this metric", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
        return _layout(fig, _titled(s.title, [*lines, plot_label(s.subtitle)]), height=400, top=110)
    fig.add_trace(go.Scatter(x=s.x, y=s.y, mode="lines", line_shape="hv", name="CDF",
                             hovertemplate="%{x:.4g} s<br>share <= x: %{y:.3f}<extra></extra>"))
    marked = []
    for q, value, rank in s.marks:
        marked.append(f"p{q:g} {value:.4g} s")
        fig.add_trace(go.Scatter(
            x=[value], y=[rank / s.n], mode="markers+text", name=f"p{q:g}", text=[f"p{q:g}"],
            textposition="bottom right", cliponaxis=False, marker=dict(size=9, symbol="diamond"),
            hovertemplate=f"p{q:g} = %{{x:.6g}} s (rank {rank} of {s.n})<extra></extra>"))
    # one shapes list rather than add_vline per mark: add_vline re-walks the layout each call (~20 ms)
    fig.update_layout(showlegend=False, shapes=[
        dict(type="line", xref="x", yref="paper", x0=v, x1=v, y0=0, y1=1,
             line=dict(dash="dot", color="#999", width=1)) for _, v, _ in s.marks])
    fig.update_xaxes(title_text="seconds")
    fig.update_yaxes(title_text="share of counted requests", range=[0, 1.02])
    # short lines under the title, so the chart reads in a third of a page
    return _layout(fig, _titled(s.title, [*lines, ", ".join(marked), plot_label(s.subtitle)]), height=420, top=110)


def record_series(table: RecordTable, marks: Sequence[float] = MARKS,
                  max_points: int = MAX_POINTS) -> dict[str, CdfSeries]:
    """Return the CDFs of success latency, TTFT and request TPOT, keyed ``latency``, ``ttft``, ``tpot``."""
    m = success_metrics(table)
    failed = int(len(table) - np.count_nonzero(table.is_success))
    one_token = int(np.count_nonzero(table.is_success & (table.output_tokens == 1)))
    tpot_reason = "non-success or a single output token" if one_token else "non-success"
    return {
        "latency": cdf_series(m["latency"], "latency", left_out=failed, left_out_reason="non-success", marks=marks,
                              max_points=max_points),
        "ttft": cdf_series(m["ttft"], "ttft", left_out=failed, left_out_reason="non-success", marks=marks,
                           max_points=max_points),
        "tpot": cdf_series(m["tpot"], "tpot", left_out=failed + one_token, left_out_reason=tpot_reason,
                           marks=marks, max_points=max_points),
    }


def record_cdfs(table: RecordTable, marks: Sequence[float] = MARKS) -> dict[str, go.Figure]:
    """Return CDFs of success latency, TTFT and request TPOT, keyed ``latency``, ``ttft``, ``tpot``."""
    return {key: series_figure(s) for key, s in record_series(table, marks).items()}


def cdf_panel(figures: Mapping[str, go.Figure], height: int = 440) -> go.Figure:
    """Return CDF figures (from :func:`cdf_figure`) side by side in one figure.

    One chart rather than three: the browser's cost of drawing a chart is mostly per chart, not per point.
    Each CDF keeps its traces, marks and title lines (as an annotation over its column).
    """
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=len(figures), horizontal_spacing=0.07, figure=new_figure())
    shapes, notes = [], []
    for col, one in enumerate(figures.values(), start=1):
        axis = "" if col == 1 else str(col)
        for trace in one.data:
            fig.add_trace(trace, row=1, col=col)
        shapes += [shape.to_plotly_json() | {"xref": f"x{axis}"} for shape in one.layout.shapes]
        notes += [note.to_plotly_json() | {"xref": f"x{axis} domain", "yref": f"y{axis} domain"}
                  for note in one.layout.annotations]
        notes.append(dict(text=one.layout.title.text, xref=f"x{axis} domain", yref="paper", x=0, y=1.0,
                          xanchor="left", yanchor="bottom", align="left", showarrow=False, font=dict(size=15)))
        fig.update_xaxes(title_text="seconds", row=1, col=col)
        fig.update_yaxes(range=[0, 1.02], row=1, col=col)
    fig.update_yaxes(title_text="share of counted requests", row=1, col=1)
    fig.update_layout(showlegend=False, shapes=shapes, annotations=notes, height=height,
                      margin=dict(l=60, r=20, t=120, b=50))
    return fig


def _sample_times(times: np.ndarray, window_start: float, window_end: float,
                  max_points: int) -> tuple[np.ndarray, bool]:
    """Return the event times in the window (and its ends), or an even grid if there are too many."""
    inside = times[(times >= window_start) & (times <= window_end)]
    events = np.unique(np.concatenate([inside, [window_start, window_end]]))
    if events.size <= max_points:
        return events, False
    return np.linspace(window_start, window_end, max_points), True


@dataclass(frozen=True)
class TimelineSeries:
    """Requests active (and in service, waiting) at each drawn time, with the x axis's origin and title."""

    x: np.ndarray  # seconds from ``origin``
    counts: dict[str, np.ndarray]  # series name -> requests at each x
    x_title: str
    x_range: tuple[float, float]
    sampled: bool  # more events than points: counts on an even grid

    @property
    def title(self) -> str:
        return "Requests over the window" + (" (sampled on a grid)" if self.sampled else "")


TIMELINE_ACTIVE, TIMELINE_IN_SERVICE, TIMELINE_WAITING = ("active (start to end)", "in service (admitted to end)",
                                                          "waiting (queue)")
TIMELINE_COLORS = {TIMELINE_ACTIVE: "#444", TIMELINE_IN_SERVICE: STAGE_COLORS["prefill"],
                   TIMELINE_WAITING: STAGE_COLORS["queue wait"]}


def timeline_series(table: RecordTable, window_start: float, window_end: float,
                    max_points: int = MAX_POINTS) -> TimelineSeries:
    """Return requests active over the window and, where ``admitted`` exists, in service and waiting.

    Active is [start, end), in service [admitted, end), waiting = active - in service (so a request
    never admitted, such as a timeout in the queue, waits until it ends). Counts are exact at every
    event time; beyond ``max_points`` events they are sampled on an even grid. On a Unix epoch clock the
    x axis is seconds from the window start (named in UTC), since 1.8e9 s ticks tell nobody anything.
    """
    has_adm = np.isfinite(table.admitted)
    all_times = [table.start, table.end, table.admitted[has_adm]]
    times, sampled = _sample_times(np.concatenate(all_times), window_start, window_end, max_points)
    active = active_counts(table.start, table.end, times)
    counts = {TIMELINE_ACTIVE: active}
    if has_adm.any():
        in_service = active_counts(table.admitted[has_adm], table.end[has_adm], times)
        counts[TIMELINE_IN_SERVICE] = in_service
        counts[TIMELINE_WAITING] = active - in_service
    utc = epoch_utc(window_start)
    origin = window_start if utc is not None else 0.0
    x_title = "time, s" if utc is None else f"seconds from {utc} ({window_start:.3f} s)"
    return TimelineSeries(times - origin, counts, x_title, (window_start - origin, window_end - origin), sampled)


def timeline_figure(table: RecordTable, window_start: float, window_end: float,
                    max_points: int = MAX_POINTS) -> go.Figure:
    """Return requests active over the window and, where ``admitted`` exists, in service and waiting.

    The counts are :func:`timeline_series`'s: exact at every event time up to ``max_points`` events.
    """
    s = timeline_series(table, window_start, window_end, max_points)
    fig = new_figure()
    for name, y in s.counts.items():
        fig.add_trace(go.Scatter(x=s.x, y=y, mode="lines", line_shape="hv", name=name,
                                 line=dict(color=TIMELINE_COLORS[name])))
    fig.update_xaxes(title_text=s.x_title, range=list(s.x_range))
    fig.update_yaxes(title_text="requests", rangemode="tozero")
    return _layout(fig, s.title)


@dataclass(frozen=True)
class StageMeans:
    """Mean (and median) seconds of each stage, overall and per slice, for successes with ``admitted``."""

    groups: list[str]  # 'all (n=...)', then each slice
    means_s: dict[str, list[float]]  # stage -> mean per group
    p50s_s: dict[str, list[float]]  # stage -> median per group


def stage_means(table: RecordTable) -> StageMeans | None:
    """Return mean queue wait, prefill and decode of successes with ``admitted``, overall and per slice.

    Means add up exactly to the mean latency of the same requests, which medians would not. None when
    no success has an admission time. Group names are plain text (slice names as the user wrote them).
    """
    keep = table.is_success & np.isfinite(table.admitted)
    if not keep.any():
        return None
    sub = table.take(keep)
    stages = {
        "queue wait": sub.admitted - sub.start,
        "prefill": sub.first_token - sub.admitted,
        "decode": sub.end - sub.first_token,
    }
    groups: list[tuple[str, np.ndarray]] = [("all", np.ones(len(sub), dtype=bool))]
    labels = sub.slice
    named = labels != None  # noqa: E711 (element-wise)
    if named.any():
        groups += [(str(name), labels == name) for name in sorted(set(labels[named].tolist()))]
    return StageMeans([f"{g} (n={int(mask.sum())})" for g, mask in groups],
                      {stage: [float(v[mask].mean()) for _, mask in groups] for stage, v in stages.items()},
                      {stage: [float(percentile(v[mask], 50)) for _, mask in groups] for stage, v in stages.items()})


def stage_figure(table: RecordTable) -> go.Figure | None:
    """Return :func:`stage_means` as stacked bars (queue wait, prefill, decode); None without ``admitted``."""
    means = stage_means(table)
    if means is None:
        return None
    names = [plot_label(g) for g in means.groups]
    fig = new_figure()
    for stage, values in means.means_s.items():
        fig.add_trace(go.Bar(y=names, x=values, name=stage, orientation="h", marker_color=STAGE_COLORS[stage],
                             customdata=means.p50s_s[stage],
                             hovertemplate=f"{stage}: mean %{{x:.4g}} s, p50 %{{customdata:.4g}} s<extra></extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal")
    fig.update_xaxes(title_text="mean seconds per successful request")
    fig.update_yaxes(autorange="reversed")
    return _layout(fig, "Where the time goes: queue wait, prefill, decode",
                   height=max(220, 120 + 45 * len(names)))


def status_figure(by_status: Mapping[str, int]) -> go.Figure:
    """Return request counts by terminal status, every status shown even at zero."""
    names = list(STATUSES) + [s for s in by_status if s not in STATUSES]
    counts = [int(by_status.get(s, 0)) for s in names]
    fig = new_figure(go.Bar(x=names, y=counts, text=counts, textposition="outside", cliponaxis=False,
                           marker_color=[STATUS_COLORS.get(s, "#1f77b4") for s in names],
                           hovertemplate="%{x}: %{y}<extra></extra>"))
    fig.update_yaxes(title_text="requests", rangemode="tozero")
    return _layout(fig, "Outcomes by status", height=300)


def cause_items(by_cause: Mapping[str, int], max_bars: int = 15) -> list[tuple[str, int]]:
    """Return (cause, count) largest first, at most ``max_bars`` (the rest as one 'N other causes'), names cut at 60."""
    items = sorted(by_cause.items(), key=lambda kv: -kv[1])
    if len(items) > max_bars:
        rest = sum(v for _, v in items[max_bars - 1:])
        items = items[: max_bars - 1] + [(f"{len(items) - max_bars + 1} other causes", rest)]
    return [(k if len(k) <= 60 else k[:57] + "...", v) for k, v in items]


def cause_figure(by_cause: Mapping[str, int], max_bars: int = 15) -> go.Figure | None:
    """Return non-success counts by cause (error text), largest first; None when there are none."""
    if not by_cause:
        return None
    items = cause_items(by_cause, max_bars)
    labels = [plot_label(k) for k, _ in items]
    counts = [v for _, v in items]
    fig = new_figure(go.Bar(y=labels, x=counts, orientation="h", text=counts, textposition="outside",
                           cliponaxis=False, marker_color="#d62728", hovertemplate="%{y}: %{x}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    # leave room right of the longest bar for its outside label
    fig.update_xaxes(title_text="non-success requests", range=[0, max(counts) * 1.15])
    return _layout(fig, "Non-success causes", height=max(220, 100 + 28 * len(items)))


COMPARED: tuple[str, ...] = ("latency", "ttft", "tpot")
MARK_SHADES: tuple[str, ...] = ("#90caf9", "#1e88e5", "#0d47a1")  # p50, p95, p99


def comparison_values(percentiles_by_run: Mapping[str, Mapping[str, Mapping[float, float | None]]],
                      marks: Sequence[float] = MARKS) -> dict[str, dict[float, list[float | None]]]:
    """Return {latency|ttft|tpot: {q: [seconds per run, in the runs' order]}}; None where a run has no value.

    >>> comparison_values({"a": {"ttft": {50: 0.1}}, "b": {}}, marks=(50,))["ttft"]
    {50: [0.1, None]}
    """
    return {key: {q: [m.get(key, {}).get(q) for m in percentiles_by_run.values()] for q in marks}
            for key in COMPARED}


def comparison_figure(percentiles_by_run: Mapping[str, Mapping[str, Mapping[float, float | None]]],
                      marks: Sequence[float] = MARKS) -> go.Figure | None:
    """Return p50/p95/p99 of latency, TTFT and request TPOT per run, side by side (successes only).

    ``percentiles_by_run`` maps a run name to ``{"latency"|"ttft"|"tpot": {q: value}}``, e.g. read off
    each run's report, so the bars match its tables; a missing value (no successes) draws no bar.
    """
    if not percentiles_by_run:
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"{METRIC_TITLES[k]}, s" for k in COMPARED],
                        figure=new_figure())
    names = [plot_label(n) for n in percentiles_by_run]
    for col, by_q in enumerate(comparison_values(percentiles_by_run, marks).values(), start=1):
        for (q, ys), color in zip(by_q.items(), MARK_SHADES):
            fig.add_trace(go.Bar(x=names, y=ys, name=f"p{q:g}", marker_color=color, legendgroup=f"p{q:g}",
                                 showlegend=col == 1,
                                 hovertemplate=f"%{{x}}: p{q:g} %{{y:.4g}} s<extra></extra>"), row=1, col=col)
    _layout(fig, "Nearest-rank percentiles per run (successful requests)", height=400)
    fig.update_layout(barmode="group", margin=dict(t=90),
                      legend=dict(orientation="h", yanchor="bottom", y=1.12, xanchor="right", x=1.0))
    return fig


STEP_SHOWN = ("running", "waiting", "kv_tokens_used")  # step-trace columns drawn at first (records.steps names)


def step_trace_figure(steps: Sequence[Mapping[str, object]], max_points: int = MAX_POINTS) -> go.Figure | None:
    """Return a step trace's numeric columns over time: counts on the left axis, token counts on the right.

    ``steps`` are rows under the step-trace schema's names (``records.steps``: read through its reader), drawn
    against ``start_s``; None without it. ``STEP_SHOWN`` columns are shown; the others start hidden (click the legend).
    """
    if not steps:
        return None
    time_key = "start_s"
    if steps[0].get(time_key) is None:
        return None
    stride = max(1, -(-len(steps) // max_points))
    rows = list(steps[::stride])
    numeric = [k for k, v in steps[0].items()
               if k != time_key and isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not numeric:
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(specs=[[{"secondary_y": True}]], figure=new_figure())
    x = [r.get(time_key) for r in rows]
    shown = [k for k in numeric if k in STEP_SHOWN] or numeric
    for k in numeric:
        fig.add_trace(go.Scatter(x=x, y=[r.get(k) for r in rows], mode="lines", name=plot_label(k),
                                 line_shape="hv", visible=True if k in shown else "legendonly"),
                      secondary_y="token" in k.lower())
    fig.update_xaxes(title_text=f"{plot_label(time_key)}")
    fig.update_yaxes(title_text="count per step", secondary_y=False, rangemode="tozero")
    fig.update_yaxes(title_text="KV tokens", secondary_y=True, rangemode="tozero")
    every = f", every {stride}th step" if stride > 1 else ""
    return _layout(fig, f"Step trace ({len(steps)} steps{every})", height=380)


POINT_X_KEYS = ("rate", "rate_per_s", "offered_rate", "offered_rate_per_s", "arrival_rate", "concurrency",
                "users", "offered_load")


def points_figure(points: Sequence[Mapping[str, object]]) -> go.Figure | None:
    """Return latency-like columns (names with p50/p95/p99 and ttft/latency/tpot/wait) against offered load.

    A fallback for sweep outputs when no sweep-specific figure builder is available.
    """
    if not points:
        return None
    x_key = next((k for k in POINT_X_KEYS if k in points[0]), None)
    if x_key is None:
        return None
    cols = [k for k in points[0] if re.search(r"p(50|95|99)", k) and
            re.search(r"ttft|latency|tpot|wait", k) and isinstance(points[0][k], (int, float, type(None)))]
    if not cols:
        return None
    fig = new_figure()
    x = [p.get(x_key) for p in points]
    for k in cols:
        fig.add_trace(go.Scatter(x=x, y=[p.get(k) for p in points], mode="lines+markers", name=plot_label(k)))
    fig.update_xaxes(title_text=plot_label(x_key))
    fig.update_yaxes(title_text="seconds", rangemode="tozero")
    return _layout(fig, "Latency percentiles against offered load", height=400)
