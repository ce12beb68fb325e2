"""Figures for a measured-vs-simulated sweep: data in, plotly out (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

PANELS: tuple[tuple[str, str], ...] = (("ttft", "TTFT (s)"), ("latency", "Latency (s)"),
                                       ("throughput_rps", "Throughput (requests/s)"),
                                       ("queue_wait", "Queue wait (s)"))
COLORS = {"measured": "#1f77b4", "simulated": "#ff7f0e"}


def measured_vs_simulated(doc: Mapping[str, Any]) -> go.Figure:
    """Return the measured and simulated curves overlaid, one panel per metric, with both knees marked.

    ``doc`` is a validate-sweep result as JSON data (``SweepValidation.model_dump(mode="json")``).
    """
    points: Sequence[Mapping[str, Any]] = doc["points"]
    rates = [p["rate_rps"] for p in points]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[t for _, t in PANELS], horizontal_spacing=0.1,
                        vertical_spacing=0.14)
    for i, (key, title) in enumerate(PANELS):
        row, col = i // 2 + 1, i % 2 + 1
        for side in ("measured", "simulated"):
            series = [(key, "p95", "solid"), (key, "p50", "dot")] if key != "throughput_rps" else [(key, "", "solid")]
            for metric, q, dash in series:
                name = f"{metric}_{q}_s" if q else metric
                ys = [_num(p[side].get(name)) for p in points]
                fig.add_trace(go.Scatter(
                    x=rates, y=ys, mode="lines+markers", name=f"{side} {q or 'throughput'}".strip(),
                    legendgroup=f"{side}{q}", showlegend=i == 0,
                    line={"color": COLORS[side], "dash": dash}), row=row, col=col)
        fig.update_xaxes(title_text="Offered rate (requests/s)", row=row, col=col)
        fig.update_yaxes(title_text=title, row=row, col=col)
    for side, key in (("measured", "measured_knee_rps"), ("simulated", "simulated_knee_rps")):
        x = doc.get(key)
        if x is not None:
            fig.add_vline(x=x, line={"color": COLORS[side], "dash": "dash"},
                          annotation_text=f"{side} knee {x:.3g}/s", annotation_position="top left", row=1, col=1)
    err = doc.get("knee_relative_error")
    sub = f"knee error {err:+.1%}" if isinstance(err, (int, float)) else "knee: not found both ways"
    fig.update_layout(title=f"Measured vs simulated sweep: {doc.get('scenario', '')} ({sub})", height=700,
                      legend={"orientation": "h", "y": -0.12})
    return fig


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) else None
