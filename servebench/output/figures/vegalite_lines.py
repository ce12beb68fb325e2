"""Pieces of the dashboard's Vega-Lite line charts: series by x, loads marked by a labelled line, a limit line.

The sweep, capacity and over-time charts (``vegalite_sweep``, ``vegalite_capacity``, ``vegalite_summary``) draw
their series from :class:`~servebench.output.figures.sweep.Line` lists, the same the site's plotly figures draw.
Every layer names its x field ``x`` and its y field ``y`` with the same titles, so the layers share one axis each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from servebench.formatting import fmt
from servebench.output.figures.sweep import Line, LoadMark
from servebench.output.figures.vegalite import NOTE_COLOR, Spec, _zoom, padded
from servebench.output.safetext import safe_text

DASHES: dict[str, list[int]] = {"solid": [1, 0], "dash": [6, 4], "dot": [2, 3], "longdash": [10, 4]}  # plotly's names
LABEL_Y_PX = -8  # a mark's label sits above the plot area, clear of the lines and the points' labels


def series_frame(x: Sequence[float], lines: Sequence[Line]) -> pd.DataFrame:
    """Return the lines as rows of (x, y, series, text): y is NaN where a line has no value, text is ``fmt(y)``."""
    ys = [np.array([np.nan if v is None else v for v in line.y], dtype=np.float64) for line in lines]
    y = np.concatenate(ys) if ys else np.zeros(0)
    return pd.DataFrame({"x": np.tile(np.asarray(x, dtype=np.float64), len(lines)), "y": y,
                         "series": np.repeat([safe_text(line.name) for line in lines], len(x)),
                         "text": [fmt(v) for v in y]})


def series_encoding(lines: Sequence[Line], widths: Sequence[float] | None = None,
                    legend_columns: int | None = None) -> Spec:
    """Return the colour and dash of each line by its name (one legend, below the chart); optionally its width."""
    names = [safe_text(line.name) for line in lines]

    def by_name(values: list) -> Spec:
        return {"field": "series", "type": "nominal", "title": None, "sort": names,
                "scale": {"domain": names, "range": values}}

    legend: Spec = {"orient": "bottom", "labelLimit": 360, **({"columns": legend_columns} if legend_columns else {})}
    encoding = {"color": {**by_name([line.color for line in lines]), "legend": legend},
                "strokeDash": {**by_name([DASHES[line.dash] for line in lines]), "legend": legend}}
    if widths is not None:
        encoding["strokeWidth"] = {**by_name(list(widths)), "legend": None}
    return encoding


def line_layers(lines: Sequence[Line], x: Spec, y: Spec, *, points: bool = True, step: bool = False,
                widths: Sequence[float] | None = None, legend_columns: int | None = None,
                dataset: str = "lines", zoom: bool = False) -> list[Spec]:
    """Return the lines from ``dataset`` (a :func:`series_frame`); with ``points``, a point per value with a tooltip;
    with ``zoom``, the reader drags along x to pan and scrolls to zoom.

    A missing value breaks its line. Long lines (a step trace, a curve of 160 prompts) get no points: every datum
    with a tooltip costs, and Streamlit's Vega evaluates it without ``eval``.
    """
    encoding = series_encoding(lines, widths, legend_columns)
    if points:  # a point on the plot's edge was cut in half (a zoom clips marks to the plot): room for its radius
        x, y = padded(x), padded(y)
    mark: Spec = {"type": "line", "invalid": "break-paths-filter-domains"}
    if step:
        mark["interpolate"] = "step-after"
    layers: list[Spec] = [{"data": {"name": dataset}, "mark": mark, "encoding": {"x": x, "y": y, **encoding},
                           **({"params": _zoom("x")} if zoom else {})}]
    if points:
        layers.append({"data": {"name": dataset}, "mark": {"type": "point", "filled": True, "size": 36},
                       "encoding": {"x": x, "y": y, "color": {**encoding["color"], "legend": None},
                                    "tooltip": [{"field": "series", "title": "line"},
                                                {"field": "x", "title": x["title"], "format": ".4~g"},
                                                {"field": "text", "title": y["title"]}]}})
    return layers


def mark_layers(marks: Sequence[LoadMark], x: Spec) -> list[Spec]:
    """Return each mark as a vertical line with its label above the plot, on the mark's side of the line."""
    layers: list[Spec] = []
    for m in marks:
        at = {"values": [{"x": m.load, "label": safe_text(m.label)}]}
        layers.append({"data": at, "mark": {"type": "rule", "color": m.color, "strokeDash": DASHES[m.dash],
                                            "strokeWidth": 1.5},
                       "encoding": {"x": x}})
        layers.append({"data": at, "mark": {"type": "text", "color": m.color, "fontWeight": "bold",
                                            "align": "right" if m.side == "left" else "left",
                                            "dx": -4 if m.side == "left" else 4, "baseline": "bottom",
                                            "clip": False},  # a zoom bound to the scales clips marks to the plot
                       "encoding": {"x": x, "y": {"value": LABEL_Y_PX}, "text": {"field": "label"}}})
    return layers


def limit_layers(value: float, label: str, y: Spec) -> list[Spec]:
    """Return a horizontal dashed grey line at ``value`` (an SLO, a budget), labelled just above it at the right."""
    at = {"values": [{"y": value, "label": safe_text(label)}]}
    return [{"data": at, "mark": {"type": "rule", "color": NOTE_COLOR, "strokeDash": DASHES["longdash"]},
             "encoding": {"y": y}},
            {"data": at, "mark": {"type": "text", "color": NOTE_COLOR, "align": "right", "baseline": "bottom", "dy": -3,
                                  "dx": -2, "clip": False},
             "encoding": {"x": {"value": "width"}, "y": y, "text": {"field": "label"}}}]
