"""Vega-Lite charts for the dashboard's Summary, Percentile explorer and Compare: data in, a Vega-Lite spec out.

plotly.js is a 4.7 MB script that headless Chromium on a 2-core machine takes about 2 s to compile and
run the first time a page draws a plotly chart (benchmarks/results/dashboard.md), so the pages a user
opens draw these specs with Streamlit's built-in Vega-Lite instead, and a spec is built in
milliseconds where a validated plotly figure takes a tenth of a second. The numbers come from the same
functions as the report site's plotly figures (``figures.records``), so both show the same values.

Each spec keeps its data under ``datasets`` as pandas frames (Streamlit sends them to the browser as
Arrow); pass it as ``st.vega_lite_chart(spec=...)``. Times are drawn in ``unit`` ('s' or 'ms').
User text (slice names, causes) goes through :func:`safe_text`: Vega-Lite draws text, never markup.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from servebench.formatting import fmt
from servebench.output.figures.records import (
    MARKS,
    METRIC_TITLES,
    STAGE_COLORS,
    TIMELINE_COLORS,
    CdfSeries,
    StageMeans,
    TimelineSeries,
    cause_items,
    comparison_values,
    equal_bins,
)
from servebench.output.safetext import safe_text

Spec = dict[str, Any]
UNIT_SCALE: dict[str, float] = {"s": 1.0, "ms": 1000.0}
UNIT_WORDS: dict[str, str] = {"s": "seconds", "ms": "milliseconds"}
SUCCESS_COLOR, FAILURE_COLOR, NOTE_COLOR = "#1565c0", "#c62828", "#757575"
# Compare's runs, in order (Vega's tableau10): Streamlit's own palette starts with two blues
RUN_COLORS = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
              "#bab0ac")
# Points per line: a CDF a third of a page wide shows no more. Streamlit's Vega runs without eval (an
# expression interpreter), so every datum costs: with 2,000-point curves a window change on 100,000 records
# took the browser longer than with plotly; with these it takes less (benchmarks/results/dashboard.md).
LINE_POINTS = 300
TIMELINE_POINTS = 600
# the data hold no NaN or infinity, so Vega-Lite need not test every datum for them
CONFIG: Spec = {"mark": {"invalid": "show"}}


def _zoom(*encodings: str) -> list[Spec]:
    """Return the parameter that lets a reader drag to pan and scroll to zoom (double-click resets)."""
    return [{"name": "zoom", "select": {"type": "interval", "encodings": list(encodings)}, "bind": "scales"}]


def _title(text: str, lines: list[str] | None = None) -> Spec:
    return {"text": text, "subtitle": lines or [], "anchor": "start", "subtitleColor": NOTE_COLOR}


# Vega cuts a subtitle line wider than the plot with "…": a chart a third of a 1,400 px page (Summary's CDFs, Token
# timing's) cut "n = 2,701; 299 requests not in the curve (non-suc…" at about 50 characters, and showed 42 whole
NARROW_SUBTITLE_CHARS = 44


def wrapped(lines: Sequence[str], width: int = NARROW_SUBTITLE_CHARS) -> list[str]:
    """Return subtitle lines of at most ``width`` characters: broken at '; ' or ', ' first (the separator dropped
    at the line's end), else between words.

    >>> wrapped(["n = 2,701; 299 requests not in the curve (non-success)"], 30)
    ['n = 2,701', '299 requests not in the curve', '(non-success)']
    >>> wrapped(["p50 7,744 ms, p95 23,043 ms, p99 27,839 ms"], 30)
    ['p50 7,744 ms, p95 23,043 ms', 'p99 27,839 ms']
    """
    out: list[str] = []
    for line in lines:
        rows: list[str] = []
        for part in re.split(r"(?<=[;,]) ", line):  # '2,701' has no space after its comma: never split there
            if rows and len(rows[-1]) + 1 + len(part) <= width:
                rows[-1] += " " + part
            else:
                rows.append(part)
        rows[:-1] = [row[:-1] if row.endswith((";", ",")) else row for row in rows[:-1]]
        out += [piece for row in rows for piece in (textwrap.wrap(row, width) if len(row) > width else [row])]
    return out


# a stacked chart's y labels take this much width whatever their numbers, so charts one above another on one
# x axis start their plots at the same x and their axes line up (a KV budget's "65,536" is wider than "8")
Y_LABELS_PX = 56


COUNT_AXIS: Spec = {"format": ",d", "tickMinStep": 1}  # a count's axis: whole numbers only (no 0.5 requests)


POINT_PAD_PX = 8  # a point of size 36 reaches 3.4 px from its centre, a diamond of size 70 5.9: both fit in 8


def padded(axis: Spec) -> Spec:
    """Return an x or y encoding whose scale keeps ``POINT_PAD_PX`` clear at each end of the plot.

    A zoom clips marks to the plot, so a point or a diamond on its edge was cut in half.

    >>> padded({"field": "y", "scale": {"domain": [0, 1]}})
    {'field': 'y', 'scale': {'domain': [0, 1], 'padding': 8}}
    """
    return {**axis, "scale": {**axis.get("scale", {}), "padding": POINT_PAD_PX}}


def stacked_y(title: str) -> Spec:
    """Return the y encoding (field ``y``) of a chart drawn one above another with others on the same x axis."""
    return {"field": "y", "type": "quantitative", "title": title, "axis": {"minExtent": Y_LABELS_PX}}


def _number(field: str, title: str) -> Spec:
    return {"field": field, "type": "quantitative", "title": title, "format": ".4~g"}


def _note(title: Spec, text: str, height: int) -> Spec:
    """Return a chart that says why there is nothing to draw."""
    return {"title": title, "height": height, "data": {"values": [{}]},
            "mark": {"type": "text", "color": NOTE_COLOR, "fontSize": 13}, "encoding": {"text": {"value": text}}}


def timeline_chart(s: TimelineSeries, height: int = 380) -> Spec:
    """Return requests active (in service, waiting) over the window as step lines (from ``timeline_series``)."""
    names = list(s.counts)
    frame = pd.DataFrame({"t": np.tile(s.x, len(names)), "requests": np.concatenate(list(s.counts.values())),
                          "series": np.repeat(names, len(s.x))})
    return {
        "title": _title(s.title), "height": height, "config": CONFIG,
        "datasets": {"timeline": frame}, "data": {"name": "timeline"},
        "mark": {"type": "line", "interpolate": "step-after", "strokeWidth": 1.5}, "params": _zoom("x"),
        "encoding": {
            "x": {"field": "t", "type": "quantitative", "title": s.x_title, "scale": {"domain": list(s.x_range)}},
            "y": {"field": "requests", "type": "quantitative", "title": "requests", "axis": COUNT_AXIS},
            "color": {"field": "series", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
                      "scale": {"domain": names, "range": [TIMELINE_COLORS[n] for n in names]}},
        },
    }


# A CDF's y axis runs past 100% so a mark's label above its diamond stays inside the plot (a zoom clips marks to
# it): the label of a mark at 99% reaches MARK_LABEL_DY_PX + MARK_LABEL_FONT_PX = 19 px above it, and a plot at
# least CDF_MIN_PLOT_PX tall (Summary's, Token timing's: 420 px less the title's lines and the x axis) has
# (CDF_Y_TOP - 0.99) x 200 = 22 px there. The ticks stop at 100%.
CDF_Y_TOP = 1.1
CDF_MIN_PLOT_PX = 200
MARK_LABEL_DY_PX, MARK_LABEL_FONT_PX = -8, 11
SHARE_TICKS = [0, 0.2, 0.4, 0.6, 0.8, 1.0]


def mark_labels(marks: Sequence[tuple[float, float, int]]) -> list[str]:
    """Return each percentile mark's label; marks at the same value share one label on the highest ('p95, p99'), as
    their labels would be drawn a few pixels apart on one vertical and overlap.

    >>> mark_labels([(50, 0.02, 10), (95, 0.25, 95), (99, 0.25, 99)])
    ['p50', '', 'p95, p99']
    """
    labels: list[str] = []
    for i, (q, v, _) in enumerate(marks):
        labels.append(f"p{q:g}")
        if i and v == marks[i - 1][1]:  # the same value as the mark below: one label for both, on this one
            labels[i] = f"{labels[i - 1]}, {labels[i]}"
            labels[i - 1] = ""
    return labels


def cdf_chart(s: CdfSeries, unit: str = "s", height: int = 420, y_title: str = "share of counted requests") -> Spec:
    """Return one metric's CDF with its nearest-rank marks (p50, p95, p99) as a dotted rule and a labelled diamond.

    The title names the formula, the marked values in ``unit`` and how many requests the curve leaves out, in lines
    that fit a third of the page (:func:`wrapped`).
    """
    k = UNIT_SCALE[unit]
    marked = ", ".join(f"p{q:g} {fmt(v * k)} {unit}" for q, v, _ in s.marks)
    title = _title(s.title, wrapped([line for line in (s.formula, marked, s.subtitle) if line]))
    if s.n == 0:
        return _note(title, "no values: no request counted for this metric", height)
    x = padded({"field": "x", "type": "quantitative", "title": UNIT_WORDS[unit]})  # a mark at the largest value
    y = {"field": "share", "type": "quantitative", "title": y_title, "scale": {"domain": [0, CDF_Y_TOP]},
         "axis": {"format": "%", "values": SHARE_TICKS}}
    marks = pd.DataFrame({"x": [v * k for _, v, _ in s.marks], "share": [r / s.n for _, _, r in s.marks],
                          "mark": mark_labels(s.marks),
                          "about": [f"p{q:g} = {fmt(v * k)} {unit} (rank {r:,} of {s.n:,})" for q, v, r in s.marks]})
    return {
        "title": title, "height": height, "config": CONFIG,
        "datasets": {"cdf": pd.DataFrame({"x": s.x * k, "share": s.y}), "marks": marks},
        "layer": [
            {"data": {"name": "cdf"}, "mark": {"type": "line", "interpolate": "step-after", "color": SUCCESS_COLOR},
             "params": _zoom("x"),
             "encoding": {"x": x, "y": y}},  # no tooltip per point: the marks carry the numbers
            {"data": {"name": "marks"}, "mark": {"type": "rule", "color": "#999", "strokeDash": [2, 3]},
             "encoding": {"x": x}},
            {"data": {"name": "marks"}, "mark": {"type": "point", "shape": "diamond", "filled": True, "size": 70},
             "encoding": {"x": x, "y": y, "tooltip": [{"field": "about", "title": "mark"}]}},
            {"data": {"name": "marks"}, "mark": {"type": "text", "align": "right", "dx": -7, "dy": MARK_LABEL_DY_PX,
                                                 "fontSize": MARK_LABEL_FONT_PX},
             "encoding": {"x": x, "y": y, "text": {"field": "mark"}}},
        ],
    }


def overlaid_cdf_chart(by_run: Mapping[str, CdfSeries], metric: str, unit: str = "s", height: int = 380) -> Spec:
    """Return each run's CDF of one metric on one chart, a colour per run (each from ``record_series``).

    Runs keep their order (the baseline first); one with no value for the metric is named under the title.
    """
    k = UNIT_SCALE[unit]
    drawn = {safe_text(f"{name} (n={s.n:,})"): s for name, s in by_run.items() if s.n}
    colors = [RUN_COLORS[i % len(RUN_COLORS)] for i, s in enumerate(by_run.values()) if s.n]  # as on the bars
    empty = [safe_text(name) for name, s in by_run.items() if not s.n]
    title = _title(f"{METRIC_TITLES.get(metric, metric)} CDF (successes)",
                   wrapped([f"no values: {', '.join(empty)}"]) if empty else [])
    if not drawn:
        return _note(title, "no run has a value for this metric", height)
    frame = pd.DataFrame({"x": np.concatenate([s.x for s in drawn.values()]) * k,
                          "share": np.concatenate([s.y for s in drawn.values()]),
                          "run": np.repeat(list(drawn), [s.x.size for s in drawn.values()])})
    return {
        "title": title, "height": height, "config": CONFIG,
        "datasets": {"curves": frame}, "data": {"name": "curves"},
        "mark": {"type": "line", "interpolate": "step-after"}, "params": _zoom("x"),
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "title": UNIT_WORDS[unit]},
            "y": {"field": "share", "type": "quantitative", "title": "share of successes",
                  "scale": {"domain": [0, 1.02]}, "axis": {"format": "%"}},
            "color": {"field": "run", "type": "nominal", "title": None, "sort": list(drawn),
                      "scale": {"domain": list(drawn), "range": colors},
                      "legend": {"orient": "bottom", "direction": "vertical", "labelLimit": 360}},
        },
    }


def percentile_bars(percentiles_by_run: Mapping[str, Mapping[str, Mapping[float, float | None]]], unit: str = "s",
                    marks: tuple[float, ...] = MARKS, height: int = 300) -> dict[str, Spec]:
    """Return p50/p95/p99 per run as grouped bars, one chart each for latency, TTFT and request TPOT.

    The values are ``comparison_values``'s (the report's nearest-rank percentiles); a missing one draws no bar.
    Runs have the colours of :func:`overlaid_cdf_chart`'s. One chart per metric rather than one faceted chart:
    a facet has a fixed width, each of these fills its column.
    """
    k = UNIT_SCALE[unit]
    runs = [safe_text(name) for name in percentiles_by_run]
    shown = [f"p{q:g}" for q in marks]
    charts = {}
    for key, by_q in comparison_values(percentiles_by_run, marks).items():
        rows = [{"run": run, "mark": f"p{q:g}", "value": v * k}
                for q, values in by_q.items() for run, v in zip(runs, values) if v is not None]
        title = _title(f"{METRIC_TITLES[key]}: p50, p95, p99 per run", ["nearest rank, successful requests"])
        if not rows:
            charts[key] = _note(title, "no run has a value for this metric", height)
            continue
        charts[key] = {
            "title": title, "height": height, "datasets": {"bars": pd.DataFrame(rows)}, "data": {"name": "bars"},
            "mark": "bar", "encoding": {
                "x": {"field": "mark", "type": "nominal", "sort": shown, "title": None, "axis": {"labelAngle": 0}},
                "xOffset": {"field": "run", "type": "nominal", "sort": runs},
                "y": {"field": "value", "type": "quantitative", "title": UNIT_WORDS[unit]},
                "color": {"field": "run", "type": "nominal", "title": None,
                          "legend": {"orient": "bottom", "direction": "vertical", "labelLimit": 360},
                          "scale": {"domain": runs, "range": [RUN_COLORS[i % len(RUN_COLORS)] for i in range(len(runs))]}},
                "tooltip": [{"field": "run"}, {"field": "mark", "title": "percentile"}, _number("value", unit)]}}
    return charts


def stage_chart(means: StageMeans, unit: str = "s") -> Spec:
    """Return mean queue wait, prefill and decode per group as stacked bars (from ``stage_means``)."""
    k = UNIT_SCALE[unit]
    stages = list(means.means_s)
    rows = [{"group": safe_text(g), "stage": stage, "order": j, "mean": means.means_s[stage][i] * k,
             "p50": means.p50s_s[stage][i] * k}
            for i, g in enumerate(means.groups) for j, stage in enumerate(stages)]
    return {
        "title": _title("Where the time goes: queue wait, prefill, decode"),
        "height": {"step": 34}, "datasets": {"stages": pd.DataFrame(rows)},
        "data": {"name": "stages"}, "mark": "bar",
        "encoding": {
            "y": {"field": "group", "type": "nominal", "title": None, "sort": [safe_text(g) for g in means.groups]},
            "x": {"field": "mean", "type": "quantitative", "stack": "zero",
                  "title": f"mean {UNIT_WORDS[unit]} per successful request"},
            "color": {"field": "stage", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
                      "scale": {"domain": stages, "range": [STAGE_COLORS[s] for s in stages]}},
            "order": {"field": "order"},
            "tooltip": [{"field": "group"}, {"field": "stage"}, _number("mean", f"mean ({unit})"),
                        _number("p50", f"p50 ({unit})")],
        },
    }


def cause_chart(by_cause: Mapping[str, int], max_bars: int = 15) -> Spec | None:
    """Return non-success counts by cause, largest first, each bar labelled; None when there are none."""
    if not by_cause:
        return None
    items = cause_items(by_cause, max_bars)
    frame = pd.DataFrame({"cause": [safe_text(c) for c, _ in items], "requests": [n for _, n in items]})
    y = {"field": "cause", "type": "nominal", "title": None, "sort": list(frame["cause"]),
         "axis": {"labelLimit": 320}}
    x = {"field": "requests", "type": "quantitative", "title": "non-success requests", "axis": COUNT_AXIS,
         "scale": {"domain": [0, max(frame["requests"]) * 1.15]}}
    return {
        "title": _title("Non-success causes"), "height": {"step": 24},
        "datasets": {"causes": frame}, "data": {"name": "causes"},
        "encoding": {"y": y, "x": x},
        "layer": [{"mark": {"type": "bar", "color": "#d62728"},
                   "encoding": {"tooltip": [{"field": "cause"}, {"field": "requests", "format": ","}]}},
                  {"mark": {"type": "text", "align": "left", "dx": 3},
                   "encoding": {"text": {"field": "requests", "format": ","}}}],
    }


def _cdf_points(values: np.ndarray, n_total: int, max_points: int = LINE_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Return (x, y) of the empirical CDF of the finite values from y = 0, with y as a share of n_total."""
    finite = np.sort(values[np.isfinite(values)])
    if finite.size == 0:
        return finite, finite
    y = np.arange(1, finite.size + 1) / n_total
    if finite.size > max_points:
        idx = np.unique(np.linspace(0, finite.size - 1, max_points).round().astype(np.int64))
        finite, y = finite[idx], y[idx]
    # start the staircase at 0 so the first step is drawn
    return np.concatenate([finite[:1], finite]), np.concatenate([[0.0], y])


def percentile_cdf(success_values: np.ndarray, failure_aware_values: np.ndarray, q: float,
                   success_value: float | None, failure_aware_value: float | None, label: str,
                   height: int = 420) -> Spec:
    """Return the CDFs of one metric, success-only and failure-aware, with percentile q marked on each.

    The failure-aware curve counts non-successes as +infinity, so it stops below 1 at the success share.
    Values come in the unit ``label`` names (the caller scales them); a percentile at infinity is named in
    the title.
    """
    curves, rules, notes = [], [], []
    for name, values, value in (("success-only", success_values, success_value),
                                ("failure-aware", failure_aware_values, failure_aware_value)):
        if values.size == 0:
            continue
        x, y = _cdf_points(values, values.size)
        curves.append(pd.DataFrame({"x": x, "share": y, "view": name}))
        if value is not None and math.isfinite(value):
            rules.append({"x": value, "view": name, "about": f"p{q:g} {name}: {fmt(value)}"})
            notes.append(f"p{q:g} {name}: {fmt(value)} (dashed line)")
        elif value is not None:
            notes.append(f"p{q:g} {name} = ∞: non-successes reach it")
    views = ["success-only", "failure-aware"]
    color = {"field": "view", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
             "scale": {"domain": views, "range": [SUCCESS_COLOR, FAILURE_COLOR]}}
    x = {"field": "x", "type": "quantitative", "title": label}
    y = {"field": "share", "type": "quantitative", "title": "share of records counted",
         "scale": {"domain": [0, 1.02]}, "axis": {"format": "%"}}
    frame = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame({"x": [], "share": [], "view": []})
    layers: list[Spec] = [
        {"data": {"name": "curves"}, "mark": {"type": "line", "interpolate": "step-after"}, "params": _zoom("x"),
         "encoding": {"x": x, "y": y, "color": color}},
        {"data": {"values": [{"share": q / 100}]}, "mark": {"type": "rule", "color": NOTE_COLOR, "strokeDash": [2, 3]},
         "encoding": {"y": {"field": "share", "type": "quantitative"}}},
    ]
    if rules:  # the values are in the title: a label beside the line would leave the chart near its edge
        layers.append({"data": {"name": "rules"}, "mark": {"type": "rule", "strokeDash": [6, 4], "strokeWidth": 2},
                       "encoding": {"x": x, "color": color,
                                    "tooltip": [{"field": "about", "title": "percentile"}]}})
    return {"title": _title(f"CDF of {label}", notes), "height": height, "config": CONFIG,
            "datasets": {"curves": frame, "rules": pd.DataFrame(rules or {"x": [], "view": [], "about": []})},
            "layer": layers}


def percentile_histogram(values: np.ndarray, q: float, value: float | None, label: str,
                         bins: int = 60, height: int = 420) -> Spec:
    """Return a histogram of the finite values with percentile q marked; values at infinity are counted in the title.

    Binned here, so the browser gets ``bins`` bars rather than every value (100,000 records: 2 MB).
    """
    finite = values[np.isfinite(values)]
    n_inf = int(values.size - finite.size)
    counts, edges = equal_bins(finite, bins) if finite.size else (np.zeros(0, dtype=np.int64), np.zeros(1))
    frame = pd.DataFrame({"lo": edges[:-1], "hi": edges[1:], "records": counts})
    notes = [f"p{q:g} = {fmt(value)} (dashed line)"] if value is not None and math.isfinite(value) else []
    title = _title(f"Histogram of {label}", notes + ([f"{fmt(n_inf)} non-successes at ∞ not drawn"] if n_inf else []))
    x = {"field": "lo", "type": "quantitative", "title": label}
    layers: list[Spec] = [
        {"data": {"name": "bins"}, "mark": {"type": "bar", "color": SUCCESS_COLOR, "binSpacing": 0},
         "params": _zoom("x"),
         "encoding": {"x": {**x, "bin": "binned"}, "x2": {"field": "hi"},
                      "y": {"field": "records", "type": "quantitative", "title": "records", "axis": COUNT_AXIS},
                      "tooltip": [_number("lo", "from"), _number("hi", "to"), {"field": "records", "format": ","}]}}]
    if value is not None and math.isfinite(value):
        layers.append({"data": {"values": [{"lo": value, "about": f"p{q:g} = {fmt(value)}"}]},
                       "mark": {"type": "rule", "color": FAILURE_COLOR, "strokeDash": [6, 4], "strokeWidth": 2},
                       "encoding": {"x": x, "tooltip": [{"field": "about", "title": "percentile"}]}})
    return {"title": title, "height": height, "datasets": {"bins": frame}, "layer": layers}
