"""A measured-vs-simulated sweep: the numbers its charts draw (one pure function), and the CLI's plotly figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from servebench.output.figures.sweep import Line, LoadMark, draw_marks, sided

PANELS: tuple[tuple[str, str], ...] = (("ttft", "TTFT (s)"), ("latency", "Latency (s)"),
                                       ("throughput_rps", "Throughput (requests/s)"),
                                       ("queue_wait", "Queue wait (s)"))
COLORS = {"measured": "#1f77b4", "simulated": "#ff7f0e"}


@dataclass(frozen=True)
class ValidationCurves:
    """A validate-sweep result as drawn: each panel's measured and simulated lines by rate, and both knees."""

    title: str
    rates_rps: list[float]
    panels: dict[str, tuple[str, list[Line]]]  # key ('ttft', ...) -> (its title, its lines)
    knees: list[LoadMark]  # the lower knee's label left of its line, so the two never overlap


def validation_curves(doc: Mapping[str, Any]) -> ValidationCurves:
    """Return the measured and simulated p95 and p50 (or throughput) per panel, and the knees found both ways.

    ``doc`` is a validate-sweep result as JSON data (``SweepValidation.model_dump(mode="json")``).
    """
    points: Sequence[Mapping[str, Any]] = doc["points"]
    panels = {}
    for key, title in PANELS:
        lines = []
        for side in ("measured", "simulated"):
            quantiles = [("p95", "solid"), ("p50", "dot")] if key != "throughput_rps" else [("", "solid")]
            for q, dash in quantiles:
                name = f"{key}_{q}_s" if q else key
                lines.append(Line(f"{side} {q or 'throughput'}", [_num(p[side].get(name)) for p in points],
                                  COLORS[side], dash))
        panels[key] = (title, lines)
    knees = [(doc[key], f"{side} knee {doc[key]:.3g}/s", COLORS[side], "dash")
             for side, key in (("measured", "measured_knee_rps"), ("simulated", "simulated_knee_rps"))
             if doc.get(key) is not None]
    err = doc.get("knee_relative_error")
    sub = f"knee error {err:+.1%}" if isinstance(err, (int, float)) else "knee: not found both ways"
    return ValidationCurves(f"Measured vs simulated sweep: {doc.get('scenario', '')} ({sub})",
                            [p["rate_rps"] for p in points], panels, sided(knees))


def measured_vs_simulated(doc: Mapping[str, Any]) -> go.Figure:
    """Return the measured and simulated curves overlaid (``validation_curves``), one panel per metric, knees marked."""
    d = validation_curves(doc)
    fig = make_subplots(rows=2, cols=2, subplot_titles=[title for title, _ in d.panels.values()],
                        horizontal_spacing=0.1, vertical_spacing=0.14)
    for i, (title, lines) in enumerate(d.panels.values()):
        row, col = i // 2 + 1, i % 2 + 1
        for line in lines:
            fig.add_trace(go.Scatter(x=d.rates_rps, y=line.y, mode="lines+markers", name=line.name,
                                     legendgroup=line.name, showlegend=i == 0,
                                     line={"color": line.color, "dash": line.dash}), row=row, col=col)
        fig.update_xaxes(title_text="Offered rate (requests/s)", row=row, col=col)
        fig.update_yaxes(title_text=title, row=row, col=col)
    draw_marks(fig, d.knees, rows=[(1, 1)])
    fig.update_layout(title=d.title, height=700, legend={"orientation": "h", "y": -0.12})
    return fig


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) else None
