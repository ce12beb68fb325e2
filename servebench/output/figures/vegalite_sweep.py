"""Vega-Lite charts for the dashboard's Load sweep: latency and outcomes against load, the engine over time, overlays.

The numbers are those the report site's and the CLI's plotly figures draw (``figures.sweep``: :func:`latency_by_load`,
:func:`outcome_rates`, :func:`trace_series`, :func:`series_of`; ``figures.validate_sweep.validation_curves``). A
plotly figure of several panels is a chart per panel here (each fills the page's width; a Vega-Lite concatenation
of layered charts does not), the panels of one figure on a shared x range. Scenario and sweep names are text.

Those numbers are seconds; these charts draw TTFT and queue wait in milliseconds, as every page reads them
(``METRIC_UNITS``, ``MS_PANELS``), and latency in seconds, as the page's latency limit is typed. The site's and the
CLI's plotly figures stay in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from servebench.formatting import fmt
from servebench.output.figures.sweep import (
    FAILURE_AWARE_COLOR,
    FAILURE_AWARE_NAME,
    QUANTILE_DASHES,
    LatencyByLoad,
    Line,
    OutcomeRates,
    SweepSeries,
    TraceSeries,
)
from servebench.output.figures.validate_sweep import ValidationCurves
from servebench.output.figures.vegalite import RUN_COLORS, UNIT_SCALE, UNIT_WORDS, Spec, _title, _zoom, stacked_y
from servebench.output.figures.vegalite_lines import limit_layers, line_layers, mark_layers, series_frame
from servebench.output.safetext import safe_text
from servebench.serving.sweep import LOAD_AXES

QUANTILE_COLORS: dict[str, str] = {"p50": "#4c78a8", "p95": "#f58518", "p99": "#54a24b"}
METRIC_WORDS: dict[str, str] = {"latency": "Latency", "ttft": "TTFT"}
METRIC_UNITS: dict[str, str] = {"latency": "s", "ttft": "ms"}  # the unit each latency chart draws its metric in


X_HEADROOM = 1.1  # beyond the highest load: room for a mark's label right of its line and an ∞ at the last load


def _x(title: str, loads: Sequence[float]) -> Spec:
    """Return the load axis: from 0 to a tenth past the highest load, the same on every panel of one figure."""
    return {"field": "x", "type": "quantitative", "title": title,
            "scale": {"domain": [0, X_HEADROOM * max(loads, default=1)]}}


def _y(title: str, domain_max: float | None = None) -> Spec:
    y = stacked_y(title)  # the page stacks its charts on one load (or time) axis
    if domain_max is not None:
        y["scale"] = {"domain": [0, domain_max], "nice": False}
    return y


def in_unit(values: Sequence[float | None], unit: str) -> list[float | None]:
    """Return times in seconds in ``unit`` ('s' or 'ms'); a missing value stays None.

    >>> in_unit([0.26, None], "ms"), in_unit([1.5], "s")
    ([260.0, None], [1.5])
    """
    k = UNIT_SCALE[unit]
    return [None if v is None else v * k for v in values]


def latency_charts(d: LatencyByLoad, height: int = 320) -> dict[str, Spec]:
    """Return latency (s) and TTFT (ms) of the successes against load, keyed 'latency' and 'ttft': p50/p95/p99,
    SLO, marks.

    The latency chart also draws p95 with every non-success as ∞; an infinite value sits at ``top_s`` as a
    triangle labelled ∞, with headroom above it, so its label stays inside the plot and the marks' labels above.
    """
    charts = {}
    x = _x(d.load_title, d.loads)
    for metric, word in METRIC_WORDS.items():
        unit = METRIC_UNITS[metric]
        lines = [Line(f"{metric} {q}", in_unit(d.quantiles_s[metric][q], unit), QUANTILE_COLORS[q], dash)
                 for q, dash in QUANTILE_DASHES.items()]
        fa = d.failure_aware if metric == "latency" else None
        if fa is not None:
            lines.append(Line(FAILURE_AWARE_NAME, fa.drawn_s, FAILURE_AWARE_COLOR))
        frame = series_frame(d.loads, lines)
        top = None
        if fa is not None:
            shown = frame["series"] == FAILURE_AWARE_NAME
            frame.loc[shown, "text"] = ["∞ (failures reach it)" if inf else t
                                        for inf, t in zip(fa.infinite, frame.loc[shown, "text"])]
            top = 1.15 * max(fa.top_s, d.slo_s[metric] or 0.0)
        y = _y(UNIT_WORDS[unit], top)  # the failure-aware line (and its top) is latency's: in seconds
        layers = line_layers(lines, x, y, widths=[3 if line.name == FAILURE_AWARE_NAME else 2 for line in lines],
                             zoom=True)
        datasets = {"lines": frame}
        if fa is not None:
            datasets["infinite"] = pd.DataFrame({"x": [v for v, inf in zip(d.loads, fa.infinite) if inf],
                                                 "y": fa.top_s, "label": "∞"})
            layers += [{"data": {"name": "infinite"}, "mark": {"type": "point", "shape": "triangle-up", "filled": True,
                                                               "size": 110, "color": FAILURE_AWARE_COLOR},
                        "encoding": {"x": x, "y": y}},
                       {"data": {"name": "infinite"}, "mark": {"type": "text", "dy": -13, "fontSize": 15,
                                                              "color": FAILURE_AWARE_COLOR},
                        "encoding": {"x": x, "y": y, "text": {"field": "label"}}}]
        if d.slo_s[metric] is not None:
            (limit,) = in_unit([d.slo_s[metric]], unit)
            layers += limit_layers(limit, f"SLO {fmt(limit)} {unit}", y)
        layers += mark_layers(d.marks, x)
        note = ["successful requests; the failure-aware line counts every non-success as ∞ (drawn at the top, "
                "marked ∞)"] if fa is not None else ["successful requests"]
        charts[metric] = {"title": _title(f"{safe_text(d.scenario)}: {word} against offered load", note),
                          "height": height, "datasets": datasets, "layer": layers}
    return charts


def outcomes_chart(d: OutcomeRates, height: int = 360) -> Spec:
    """Return requests per second by outcome against load (offered, completed, within SLOs, ...), marks drawn."""
    x = _x(d.load_title, d.loads)
    layers = line_layers(d.lines, x, _y("requests per second"), zoom=True)
    return {"title": _title(safe_text(d.title)), "height": height,
            "datasets": {"lines": series_frame(d.loads, d.lines)},
            "layer": [*layers, *mark_layers(d.marks, x)]}


def trace_charts(s: TraceSeries, kv_budget_tokens: int | None = None, title: str = "Engine over time",
                 height: int = 340) -> dict[str, Spec]:
    """Return the engine over time, keyed 'sequences' (running, waiting) and 'kv' (taken, computed, the budget).

    Step lines of at most the rows ``trace_series`` kept, with no point or tooltip per row.
    """
    x = {"field": "x", "type": "quantitative", "title": "time (s)",
         "scale": {"domain": [float(s.t_s[0]), float(s.t_s[-1])] if s.t_s.size else [0, 1]}}
    panels = {"sequences": ("Running sequences and waiting requests", "count",
                            [Line("running", s.running, "#1f77b4"), Line("waiting", s.waiting, "#ff7f0e")]),
              "kv": ("KV tokens in use", "tokens",
                     [Line("KV tokens taken", s.kv_taken, "#2ca02c"),
                      *([Line("KV tokens computed", s.kv_computed, "#9467bd", "dot")]
                        if s.kv_computed is not None else [])])}
    charts = {}
    for key, (panel, y_title, lines) in panels.items():
        y = _y(y_title)
        layers = line_layers(lines, x, y, points=False, step=True, zoom=True)
        if key == "kv" and kv_budget_tokens is not None:
            layers += limit_layers(kv_budget_tokens, f"budget {kv_budget_tokens:,}", y)
        charts[key] = {"title": _title(f"{safe_text(title)}: {panel}"), "height": height,
                       "datasets": {"lines": series_frame(s.t_s, lines)}, "layer": layers}
    return charts


# (key, title, y title, the SweepSeries field drawn, the factor from its values to the y axis' unit)
OVERLAY_PANELS = (("ttft", "TTFT p95 (ms, successes)", "milliseconds", "ttft_p95_s", UNIT_SCALE["ms"]),
                  ("latency", "Latency p95 (s, successes)", "seconds", "latency_p95_s", 1.0),
                  ("rate", "Goodput or throughput (requests/s)", "requests per second", "rate_rps", 1.0))


def overlay_charts(series: Sequence[SweepSeries], mode: str = "rate", height: int = 340) -> dict[str, Spec]:
    """Return several sweeps on one load axis, keyed 'ttft', 'latency' and 'rate' (p95s and goodput).

    A sweep keeps its colour on all three; simulated sweeps are solid lines, measured ones dashed with diamonds.
    """
    loads = [x for s in series for x in s.loads]
    x = _x(LOAD_AXES[mode][0], loads)
    names = [safe_text(s.name) for s in series]
    charts = {}
    for key, panel, y_title, field, k in OVERLAY_PANELS:
        frame = pd.concat([series_frame(s.loads, [Line(s.name, [None if v is None else v * k
                                                                 for v in getattr(s, field)], "")]).assign(
            measured="measured" if s.measured else "simulated") for s in series], ignore_index=True)
        y = _y(y_title)
        by_sweep = {"field": "series", "type": "nominal", "title": None, "sort": names}
        color = {**by_sweep, "scale": {"domain": names, "range": [RUN_COLORS[i % len(RUN_COLORS)]
                                                                  for i in range(len(names))]},
                 "legend": {"orient": "bottom", "columns": 2, "labelLimit": 420}}
        kind = {"field": "measured", "type": "nominal", "title": None,
                "scale": {"domain": ["simulated", "measured"]}, "legend": None}
        charts[key] = {
            "title": _title(panel, ["solid: simulated, dashed: measured"]), "height": height,
            "datasets": {"lines": frame},
            "layer": [
                {"data": {"name": "lines"}, "mark": {"type": "line", "invalid": "break-paths-filter-domains"},
                 "params": _zoom("x"),
                 "encoding": {"x": x, "y": y, "color": color,
                              "strokeDash": {**kind, "scale": {**kind["scale"], "range": [[1, 0], [6, 4]]}}}},
                {"data": {"name": "lines"}, "mark": {"type": "point", "filled": True, "size": 50},
                 "encoding": {"x": x, "y": y, "color": {**color, "legend": None},
                              "shape": {**kind, "scale": {**kind["scale"], "range": ["circle", "diamond"]}},
                              "tooltip": [{"field": "series", "title": "sweep"},
                                          {"field": "x", "title": x["title"], "format": ".4~g"},
                                          {"field": "text", "title": y_title}]}}]}
    return charts


# validate-sweep's panels drawn in ms here (their plotly figure keeps seconds), by key, with their titles in ms
MS_PANELS: dict[str, str] = {"ttft": "TTFT (ms)", "queue_wait": "Queue wait (ms)"}


def validation_charts(d: ValidationCurves, height: int = 280) -> dict[str, Spec]:
    """Return measured and simulated against the offered rate, one chart per panel (TTFT and queue wait in ms,
    latency in s, throughput), both knees marked on each, their labels on opposite sides of their lines."""
    x = _x("Offered rate (requests/s)", d.rates_rps)
    charts = {}
    for key, (panel, lines) in d.panels.items():
        if key in MS_PANELS:
            panel = MS_PANELS[key]
            lines = [Line(line.name, in_unit(line.y, "ms"), line.color, line.dash) for line in lines]
        layers = line_layers(lines, x, _y(panel), legend_columns=2, zoom=True)
        charts[key] = {"title": _title(panel, [safe_text(d.title)] if key == next(iter(d.panels)) else []),
                       "height": height, "datasets": {"lines": series_frame(d.rates_rps, lines)},
                       "layer": [*layers, *mark_layers(d.knees, x)]}
    return charts
