"""Offered-load sweeps and simulator step traces: the numbers each chart draws, and the site's plotly figures.

Each chart's numbers come from one pure function (:func:`latency_by_load`, :func:`outcome_rates`,
:func:`trace_series`, :func:`series_of`); the report site and the CLI draw them here with plotly, the dashboard
with Vega-Lite (``figures.vegalite_sweep``). Nothing here reads or writes files.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.errors import ConfigError
from servebench.formatting import fmt, fmt_share
from servebench.output.figures.records import plot_label
from servebench.records.statuses import STATUS_WORDS
from servebench.records.steps import StepTrace, parse_columns
from servebench.serving.sweep import LOAD_AXES, SweepResult

MAX_TRACE_POINTS = 4000


def _load_title(result: SweepResult) -> str:
    return LOAD_AXES[result.mode][0]


def load_unit(result: SweepResult) -> str:
    """Return the unit of a sweep's load: requests/s for a rate sweep, users for a concurrency sweep."""
    return LOAD_AXES[result.mode][1]


@dataclass(frozen=True)
class Line:
    """One series of a chart: its name, y by x (None: no value there), colour and dash (plotly's names)."""

    name: str
    y: Sequence[float | None]
    color: str
    dash: str = "solid"


@dataclass(frozen=True)
class LoadMark:
    """A load marked on a chart by a vertical line (the capacity, a knee), its label on one side of the line."""

    load: float
    label: str
    color: str
    dash: str
    side: str  # 'left' or 'right': where the label sits, so two marks' labels never print over each other


def sided(marks: Sequence[tuple[float, str, str, str]]) -> list[LoadMark]:
    """Return (load, label, colour, dash) marks by load, the lower one's label left of its line when there are two.

    >>> [(m.label, m.side) for m in sided([(2.0, "knee", "red", "dot"), (1.5, "capacity", "green", "dash")])]
    [('capacity', 'left'), ('knee', 'right')]
    """
    ordered = sorted(marks, key=lambda m: m[0])
    return [LoadMark(x, label, color, dash, "left" if i == 0 and len(ordered) > 1 else "right")
            for i, (x, label, color, dash) in enumerate(ordered)]


def load_marks(result: SweepResult) -> list[LoadMark]:
    """Return the sweep's capacity and knee marks (those it found), labelled on opposite sides of their lines."""
    marks = []
    if result.capacity.load is not None:
        marks.append((result.capacity.load, f"capacity {capacity_reading(result).value} {load_unit(result)}",
                      "#2ca02c", "dash"))
    if result.knee_load is not None:
        marks.append((result.knee_load, f"knee {fmt(result.knee_load, 3)} {load_unit(result)}", "#d62728", "dot"))
    return sided(marks)


def draw_marks(fig: go.Figure, marks: Sequence[LoadMark], rows: Sequence[tuple[int, int]] = ()) -> None:
    """Draw each mark as a vertical line on the given subplots (row, col), or the whole figure; labelled on the first."""
    for m in marks:
        side = f"top {m.side}"
        for i, cell in enumerate(rows or [None]):
            text = {"annotation_text": m.label, "annotation_position": side} if i == 0 else {}
            where = {} if cell is None else {"row": cell[0], "col": cell[1]}
            fig.add_vline(x=m.load, line_color=m.color, line_dash=m.dash, **where, **text)


@dataclass(frozen=True)
class CapacityReading:
    """The usable capacity as a person should read it: rounded to what the sweep resolved, with its interval."""

    value: str  # e.g. "1.2", "at least 2", "below 0.25", "none found"
    interval: str  # e.g. "between 1.2 and 1.3 req/s"
    note: str  # whether the requests per point resolve the SLO attainment at that load
    low: float | None = None  # the interval's ends, in the sweep's unit (None: open on that side)
    high: float | None = None


def _decimals(width: float) -> int:
    """Return the decimals that show a step of ``width``: 0.05 -> 2, 0.5 -> 1, 5 -> 0."""
    return max(0, math.ceil(-math.log10(width))) if width > 0 else 3


def _wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Return the Wilson 95% interval of a share (successes of n)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def range_text(low: float, high: float) -> str:
    """Return 'low–high' outward-rounded to the decimals of its width, short enough for a metric.

    >>> range_text(0.84375, 0.875), range_text(0.5, 1.0625)
    ('0.84–0.88', '0.5–1.1')
    """
    digits = _decimals(high - low)
    scale = 10 ** digits
    return f"{math.floor(low * scale + 1e-9) / scale:.{digits}f}–{math.ceil(high * scale - 1e-9) / scale:.{digits}f}"


def capacity_reading(result: SweepResult) -> CapacityReading:
    """Return the capacity with the precision its requests support, and the interval it plausibly lies in.

    The search brackets capacity in [load, upper), but each point's SLO attainment is a share of a finite
    number of requests. The interval runs from the highest load whose attainment is clearly above the
    target (its Wilson 95% lower bound reaches it) to the lowest load clearly below it; the capacity is
    rounded down to that interval's width, so 0.9219 measured on 200 requests a point reads "0.9", not "0.92".
    """
    unit = LOAD_AXES[result.mode][1]
    cap = result.capacity
    if cap.load is None:
        below = "none found" if cap.upper is None else f"below {cap.upper:g}"
        return CapacityReading(below, f"below the lowest load tried ({cap.upper:g} {unit})" if cap.upper else "",
                               "Even the lowest load missed the SLOs: try lower loads.", None, cap.upper)
    if cap.upper is None:
        return CapacityReading(f"at least {cap.load:g}", f"at least {cap.load:g} {unit} (no load tried missed)",
                               "Every load tried met the SLOs: try higher loads to find the limit.", cap.load, None)
    target = result.slo_target
    bounds = {p.load: _wilson(round(p.slo_attainment * p.offered), p.offered) for p in result.points if p.offered}
    clear_meet = max((x for x, (lo, _) in bounds.items() if lo >= target), default=None)
    clear_miss = min((x for x, (_, hi) in bounds.items() if hi < target), default=None)
    low = cap.load if clear_meet is None else min(clear_meet, cap.load)
    high = cap.upper if clear_miss is None else max(clear_miss, cap.upper)
    digits = _decimals(high - low)
    value = f"{math.floor(cap.load * 10 ** digits + 1e-9) / 10 ** digits:.{digits}f}"  # down: never claim more
    interval = f"between {low:.3g} and {high:.3g} {unit}"
    at = next((p for p in result.points if p.load == cap.load and p.offered), None)
    note = ""
    if at is not None:
        good = round(at.slo_attainment * at.offered)
        lo, hi = bounds[at.load]
        share = (f"At {cap.load:.4g} {unit}, {good:,} of {at.offered:,} requests met the SLOs ({good / at.offered:.1%}; "
                 f"95% interval {lo:.1%} to {hi:.1%})")
        if lo < target <= hi:
            note = (f"{share}: with this many requests that cannot be told apart from the {target:.0%} target, so "
                    f"the capacity is only known {interval}. More requests per point would narrow it.")
        else:
            note = f"{share}, clear of the {target:.0%} target."
    return CapacityReading(value, interval, note, low, high)


FAILURE_AWARE_NOTE = ("Success-only latency can fall past saturation: once the server rejects or times out requests, "
                      "the slowest ones leave the success-only sample, so its percentiles shrink while users fare "
                      "worse. The failure-aware line counts every non-success as ∞ (drawn at the top, marked ∞) and "
                      "never falls that way.")


@dataclass(frozen=True)
class FailureAwareLine:
    """Latency p95 by load with every non-success counted as +infinity; an infinite p95 is drawn at ``top_s``."""

    p95_s: list[float | None]  # None: nothing measured at that load; math.inf: the failures reach the p95
    top_s: float  # above every finite latency of the sweep

    @property
    def infinite(self) -> list[bool]:
        return [v is not None and math.isinf(v) for v in self.p95_s]

    @property
    def drawn_s(self) -> list[float | None]:
        """Return the values as drawn: an infinite one at ``top_s`` (marked ∞ on the chart)."""
        return [None if v is None else self.top_s if math.isinf(v) else v for v in self.p95_s]


@dataclass(frozen=True)
class LatencyByLoad:
    """What the latency-against-load charts draw: success-only p50/p95/p99 of latency and TTFT, SLOs, marks."""

    scenario: str
    load_title: str
    loads: list[float]
    quantiles_s: dict[str, dict[str, list[float | None]]]  # 'latency' or 'ttft' -> 'p50', 'p95', 'p99' -> by load
    slo_s: dict[str, float | None]  # each metric's SLO limit
    failure_aware: FailureAwareLine | None  # drawn with latency
    marks: list[LoadMark]


QUANTILE_DASHES: dict[str, str] = {"p50": "solid", "p95": "dash", "p99": "dot"}
FAILURE_AWARE_NAME, FAILURE_AWARE_COLOR = "latency p95, failures as ∞", "#6a1b9a"


def latency_by_load(result: SweepResult) -> LatencyByLoad:
    """Return the sweep's latency and TTFT quantiles by load, with its SLOs, failure-aware p95, capacity and knee."""
    pts = sorted(result.points, key=lambda p: p.load)
    quantiles = {metric: {q: [getattr(p, f"{metric}_s")[q] for p in pts] for q in QUANTILE_DASHES}
                 for metric in ("latency", "ttft")}
    failure_aware = None
    if any(p.failure_aware_latency_s for p in pts):
        finite = [v for p in pts for v in (*p.latency_s.values(), *(p.failure_aware_latency_s or {}).values())
                  if v is not None and math.isfinite(v)]
        failure_aware = FailureAwareLine([(p.failure_aware_latency_s or {}).get("p95") for p in pts],
                                         1.08 * max(finite) if finite else 1.0)
    return LatencyByLoad(result.scenario, _load_title(result), [p.load for p in pts], quantiles,
                         {"latency": result.slo.latency_s, "ttft": result.slo.ttft_s}, failure_aware,
                         load_marks(result))


def latency_vs_load(result: SweepResult) -> go.Figure:
    """Return p50/p95/p99 latency and TTFT (successes) against offered load, capacity and knee marked."""
    d = latency_by_load(result)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Latency (successes)", "TTFT (successes)"))
    for row, metric in ((1, "latency"), (2, "ttft")):
        for q, dash in QUANTILE_DASHES.items():
            fig.add_trace(go.Scatter(x=d.loads, y=d.quantiles_s[metric][q], mode="lines+markers",
                                     name=f"{metric} {q}", line={"dash": dash}, legendgroup=metric), row=row, col=1)
        if metric == "latency" and d.failure_aware is not None:
            _failure_aware_line(fig, d.loads, d.failure_aware)
        if d.slo_s[metric] is not None:
            fig.add_hline(y=d.slo_s[metric], line_color="#7f7f7f", line_dash="longdash", row=row, col=1,
                          annotation_text=f"SLO {d.slo_s[metric]:g} s", annotation_position="bottom right")
    draw_marks(fig, d.marks, rows=((1, 1), (2, 1)))
    fig.update_yaxes(title_text="seconds", rangemode="tozero")
    fig.update_xaxes(title_text=d.load_title, row=2, col=1)
    fig.update_layout(title=f"{plot_label(d.scenario)}: latency and TTFT against offered load", height=620,
                      hovermode="x unified")
    return fig


def _failure_aware_line(fig: go.Figure, x: list[float], line: FailureAwareLine) -> None:
    """Add latency p95 with failures as +infinity to the top row; an infinite value is drawn at the top, marked ∞."""
    fig.add_trace(go.Scatter(
        x=x, y=line.drawn_s, mode="lines+markers+text", name=FAILURE_AWARE_NAME, legendgroup="failure-aware",
        line={"color": FAILURE_AWARE_COLOR, "width": 3},
        marker={"symbol": ["triangle-up" if inf else "circle" for inf in line.infinite]},
        text=["∞" if inf else "" for inf in line.infinite], textposition="top center",
        hovertemplate=[f"load {lx:g}: p95 {'∞ (failures reach it)' if inf else f'{v:.4g} s'}"
                       "<extra>failure-aware</extra>" if v is not None else ""
                       for lx, v, inf in zip(x, line.p95_s, line.infinite)]),
        row=1, col=1)


@dataclass(frozen=True)
class OutcomeRates:
    """What the outcomes-against-load chart draws: requests per second by outcome at each load, and the marks."""

    title: str
    load_title: str
    loads: list[float]
    lines: list[Line]
    marks: list[LoadMark]


def outcome_rates(result: SweepResult) -> OutcomeRates:
    """Return offered, attempted (when any point retried), completed, within-SLO, rejected and timed-out per second.

    Offered counts user requests; attempted counts what retrying clients sent, so the retry amplification
    shows as the gap between the two. Rejected and timed out count attempts, per second of the point's window.
    """
    pts = sorted(result.points, key=lambda p: p.load)
    per_s = [(p.window_s or 1.0) for p in pts]
    retried = any(p.attempted is not None and p.attempted > p.offered for p in pts)
    attempted = [Line("attempted (with retries)", [p.attempted_rps for p in pts], "#9467bd", "dot")] if retried else []
    lines = [Line("offered", [p.offered_rps for p in pts], "#1f77b4"), *attempted,
             Line("completed", [p.throughput_rps for p in pts], "#2ca02c"),
             Line("within SLOs", [p.goodput_rps for p in pts], "#17becf", "dash"),
             Line("rejected", [p.rejected / w for p, w in zip(pts, per_s)], "#ff7f0e"),
             Line("timed out", [p.timed_out / w for p, w in zip(pts, per_s)], "#d62728")]
    what = "offered vs attempted vs completed" if retried else "offered vs completed vs rejected"
    return OutcomeRates(f"{result.scenario}: {what}", _load_title(result), [p.load for p in pts], lines,
                        load_marks(result))


def outcomes_vs_load(result: SweepResult) -> go.Figure:
    """Return offered, attempted, completed, good (within SLOs), rejected and timed-out requests per second."""
    d = outcome_rates(result)
    fig = go.Figure()
    for line in d.lines:
        fig.add_trace(go.Scatter(x=d.loads, y=line.y, mode="lines+markers", name=line.name,
                                 line={"color": line.color, "dash": line.dash}))
    draw_marks(fig, d.marks)
    fig.update_layout(title=plot_label(d.title), xaxis_title=d.load_title, yaxis_title="requests per second",
                      yaxis_rangemode="tozero", hovermode="x unified")
    return fig


@dataclass(frozen=True)
class TraceSeries:
    """A step trace over time, sorted by start and thinned: running, waiting, KV tokens taken and computed."""

    t_s: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    kv_taken: np.ndarray  # reserved or block-rounded
    kv_computed: np.ndarray | None  # what is actually cached (None: the trace has no kv_tokens_held)


def trace_series(trace: StepTrace | Mapping[str, Any], max_points: int = MAX_TRACE_POINTS) -> TraceSeries:
    """Return a step trace's running sequences, waiting requests and KV tokens over time, at most ``max_points`` rows.

    ``trace`` is a ``StepTrace``, or a mapping of its columns (``start_s``, ``running``, ``waiting``,
    ``kv_tokens_used``, optionally ``kv_tokens_held``; old column names are read too). A long trace keeps each
    bucket's first start and largest values, so no peak is thinned away.
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
    if t.size > max_points:
        starts = np.linspace(0, t.size, max_points + 1).astype(np.int64)[:-1]
        t = t[starts]
        active, waiting, kv = (np.maximum.reduceat(a, starts) for a in (active, waiting, kv))
        held = np.maximum.reduceat(held, starts) if held is not None else None
    return TraceSeries(t, active, waiting, kv, held)


def trace_over_time(trace: StepTrace | Mapping[str, Any], kv_budget_tokens: int | None = None,
                    title: str = "Engine over time") -> go.Figure:
    """Return running sequences, waiting requests and KV tokens in use over time from a step trace (``trace_series``).

    KV "taken" is reserved or block-rounded; "computed" is what is actually cached.
    """
    d = trace_series(trace)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("Running sequences and waiting requests", "KV tokens in use"))
    fig.add_trace(go.Scatter(x=d.t_s, y=d.running, mode="lines", line_shape="hv", name="running"), row=1, col=1)
    fig.add_trace(go.Scatter(x=d.t_s, y=d.waiting, mode="lines", line_shape="hv", name="waiting"), row=1, col=1)
    fig.add_trace(go.Scatter(x=d.t_s, y=d.kv_taken, mode="lines", line_shape="hv", name="KV tokens taken"), row=2, col=1)
    if d.kv_computed is not None:
        fig.add_trace(go.Scatter(x=d.t_s, y=d.kv_computed, mode="lines", line_shape="hv", name="KV tokens computed",
                                 line={"dash": "dot"}), row=2, col=1)
    if kv_budget_tokens is not None:
        fig.add_hline(y=kv_budget_tokens, line_dash="dash", line_color="#7f7f7f", row=2, col=1,
                      annotation_text=f"budget {kv_budget_tokens:,}", annotation_position="bottom right")
    fig.update_yaxes(rangemode="tozero")
    fig.update_xaxes(title_text="time (s)", row=2, col=1)
    fig.update_layout(title=plot_label(title), height=560, hovermode="x unified")
    return fig


MS_PER_S = 1000.0


def sweep_frame(result: SweepResult) -> pd.DataFrame:
    """Return the points as a table for people: labelled columns, shares as percents, numbers by ``fmt``.

    TTFT and queue wait read in ms, as the dashboard's SLO inputs and every other page give them; latency in s.
    """
    unit = {"rate": "Load (req/s)", "users": "Users", "speedup": "Speedup (x)"}[result.mode]
    rows = []
    for p in sorted(result.points, key=lambda p: p.load):
        fa = (p.failure_aware_latency_s or {}).get("p95")
        rows.append({
            unit: fmt(p.load), "Found by": "search" if p.source == "search" else "grid",
            "Offered": fmt(p.offered), **{STATUS_WORDS[status]: fmt(count) for status, count in (
                ("success", p.completed), ("rejected", p.rejected), ("timeout", p.timed_out),
                ("cancelled", p.cancelled), ("failed", p.failed))},
            "Completed/s": fmt(p.throughput_rps), "Goodput (req/s)": fmt(p.goodput_rps),
            "SLO attainment": fmt_share(p.slo_attainment), "Meets SLOs": "yes" if p.meets_slo else "no",
            "TTFT p95 (ms)": _ms(p.ttft_s.get("p95")), "Latency p95 (s)": fmt(p.latency_s.get("p95")),
            "Latency p95, failures as ∞ (s)": fmt(fa), "Queue wait p95 (ms)": _ms(p.queue_wait_s.get("p95")),
            "Peak running": fmt(p.peak_active), "Preemptions": fmt(p.preemptions),
        })
    return pd.DataFrame(rows)


SWEEP_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (  # sweep_frame's columns in tables that fit a window
    ("Outcomes", ("Found by", "Offered", *(STATUS_WORDS[s] for s in ("success", "rejected", "timeout", "cancelled",
                                                                    "failed")))),
    ("Rates and SLOs", ("Completed/s", "Goodput (req/s)", "SLO attainment", "Meets SLOs")),
    ("Times and the engine", ("TTFT p95 (ms)", "Latency p95 (s)", "Latency p95, failures as ∞ (s)",
                              "Queue wait p95 (ms)", "Peak running", "Preemptions")),
)


def _ms(seconds: float | None) -> str:
    """Format a time in seconds as ms by ``fmt`` (None and ∞ as ``fmt`` gives them).

    >>> _ms(0.26), _ms(12.5), _ms(None), _ms(float("inf"))
    ('260', '12,500', '—', '∞')
    """
    return fmt(None if seconds is None else seconds * MS_PER_S)


def sweep_frames(result: SweepResult) -> list[tuple[str, pd.DataFrame]]:
    """Return ``sweep_frame`` as titled tables narrow enough for a 1,400 px window, each led by the load."""
    frame = sweep_frame(result)
    load = frame.columns[0]
    return [(title, frame[[load, *columns]]) for title, columns in SWEEP_TABLES]


@dataclass(frozen=True)
class SweepSeries:
    """One sweep's p95 TTFT, p95 latency and goodput (or throughput) by load, simulated or measured."""

    name: str
    loads: list[float]
    ttft_p95_s: list[float | None]
    latency_p95_s: list[float | None]
    rate_rps: list[float | None]  # goodput for a simulated or load --sweep result; throughput for validate-sweep
    measured: bool = False


def series_of(result: SweepResult, name: str, measured: bool = False) -> SweepSeries:
    """Return a sweep result (servebench sweep, or load --sweep when ``measured``) as a series."""
    pts = sorted(result.points, key=lambda p: p.load)
    return SweepSeries(name, [p.load for p in pts], [p.ttft_s.get("p95") for p in pts],
                       [p.latency_s.get("p95") for p in pts], [p.goodput_rps for p in pts], measured)


def series_of_validation(doc: Mapping[str, Any]) -> list[SweepSeries]:
    """Return a validate-sweep result's measured and simulated curves as two series."""
    pts = sorted(doc["points"], key=lambda p: p["rate_rps"])
    out = []
    def get(p: Mapping[str, Any], side: str, key: str) -> float | None:
        v = p[side].get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    for side in ("measured", "simulated"):
        out.append(SweepSeries(f"validate-sweep {side}", [float(p["rate_rps"]) for p in pts],
                               [get(p, side, "ttft_p95_s") for p in pts], [get(p, side, "latency_p95_s") for p in pts],
                               [get(p, side, "throughput_rps") for p in pts], measured=side == "measured"))
    return out
