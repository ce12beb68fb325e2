"""Vega-Lite charts for Summary's over-time panel and a multi-run file's rate curve.

Over time: ``figures.over_time.over_time_bins`` (60 equal bins of the window), a chart per quantity on one time
axis, times in ``unit``. The rate curve: the rows of ``analysis.multirun.runs_table``, one per run.
"""

from __future__ import annotations

import pandas as pd

from servebench.output.figures.over_time import OverTimeBins
from servebench.output.figures.sweep import Line
from servebench.output.figures.vegalite import UNIT_SCALE, Spec, _number, _title, _zoom, stacked_y
from servebench.output.figures.vegalite_lines import line_layers, series_frame

OVER_TIME_COLORS: dict[int, str] = {50: "#90caf9", 95: "#0d47a1"}
OVER_TIME_TITLES: dict[str, str] = {"ttft": "TTFT", "latency": "Latency"}


def over_time_charts(b: OverTimeBins, unit: str = "s", height: int = 280) -> dict[str, Spec]:
    """Return successes per second (bars), then TTFT and latency p50 and p95 (lines), keyed 'successes', 'ttft',
    'latency', against seconds since the window start; a bin in which no success ended breaks the lines."""
    span = [0.0, float(b.mids_s[-1] + b.width_s / 2)] if b.mids_s.size else [0.0, 1.0]
    x = {"field": "x", "type": "quantitative", "title": "seconds since the window start", "scale": {"domain": span}}
    bins = pd.DataFrame({"x": b.mids_s - b.width_s / 2, "x2": b.mids_s + b.width_s / 2, "y": b.successes_per_s})
    charts = {"successes": {
        "title": _title(f"Successful requests/s ({b.mids_s.size} bins of {b.width_s:.3g} s)",
                        ["each success counted in the bin it ended in"]),
        "height": height, "datasets": {"bins": bins}, "data": {"name": "bins"},
        "mark": {"type": "bar", "color": "#1e88e5", "binSpacing": 0}, "params": _zoom("x"),
        "encoding": {"x": {**x, "bin": "binned"}, "x2": {"field": "x2"},
                     "y": stacked_y("successes/s"),
                     "tooltip": [_number("x", "from (s)"), _number("x2", "to (s)"), _number("y", "successes/s")]}}}
    k = UNIT_SCALE[unit]
    for key, title in OVER_TIME_TITLES.items():
        lines = [Line(f"p{q}", [None if v is None else v * k for v in values], OVER_TIME_COLORS[q])
                 for q, values in b.percentiles_s[key].items()]
        layers = line_layers(lines, x, stacked_y(unit), zoom=True)
        charts[key] = {"title": _title(f"{title} ({unit}) of the successes ending in each bin", ["nearest rank"]),
                       "height": height, "datasets": {"lines": series_frame(b.mids_s, lines)}, "layer": layers}
    return charts


RATE_LINES = (("successful req/s", "#1f77b4"), ("latency p95 (s)", "#ff7f0e"), ("TTFT p95 (s)", "#2ca02c"))


def rate_curve_charts(frame: pd.DataFrame, height: int = 300) -> dict[str, Spec]:
    """Return throughput ('rate') and p95 latency and TTFT ('times') against each run's rate (or its index)."""
    rated = frame["rate (req/s)"].notna().all()
    xs = [float(v) for v in (frame["rate (req/s)"] if rated else frame.index)]
    x = {"field": "x", "type": "quantitative", "title": "offered rate (req/s)" if rated else "run"}
    values = {name: [None if pd.isna(v) else float(v) for v in frame[name]] for name, _ in RATE_LINES}
    panels = {"rate": ("Successful requests/s", "requests per second", RATE_LINES[:1]),
              "times": ("p95 latency and TTFT (s)", "seconds", RATE_LINES[1:])}
    charts = {}
    for key, (title, y_title, names) in panels.items():
        lines = [Line(name, values[name], color) for name, color in names]
        layers = line_layers(lines, x, stacked_y(y_title))
        charts[key] = {"title": _title(title), "height": height, "datasets": {"lines": series_frame(xs, lines)},
                       "layer": layers}
    return charts
