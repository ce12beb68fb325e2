"""The capacity planner's figure: cost per hour against traffic, per GPU type (data in, plotly out)."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from servebench.planning.planner import Evaluation, price


def cost_vs_traffic(evaluation: Evaluation, rates_rps: Sequence[float], planned_rate_rps: float) -> go.Figure:
    """Return the cheapest cost per hour meeting the SLOs at each rate, one line per GPU type and overall.

    Uses the capacities already found (no new simulation): replicas = ceil(rate / (capacity x
    (1 - headroom))) for each configuration simulated for this plan.
    """
    fig = go.Figure()
    gpus = sorted({c.gpu for c in evaluation.configs if c.capacity_rps > 0})
    plans = [price(evaluation, r) for r in rates_rps]
    for gpu in gpus:
        ys = []
        for p in plans:
            costs = [o.cost_per_hour_usd for o in p.options if o.gpu == gpu and o.meets_slo]
            ys.append(min(costs) if costs else None)
        fig.add_trace(go.Scatter(x=list(rates_rps), y=ys, mode="lines", name=gpu, line={"shape": "hv"}))
    best = [p.best.cost_per_hour_usd if p.best else None for p in plans]
    fig.add_trace(go.Scatter(x=list(rates_rps), y=best, mode="lines", name="cheapest", line={"shape": "hv",
                                                                                           "width": 4,
                                                                                           "dash": "dot",
                                                                                           "color": "black"}))
    fig.add_vline(x=planned_rate_rps, line_dash="dash", line_color="#7f7f7f", annotation_text="planned traffic",
                  annotation_position="top left")
    fig.update_layout(title="Cost per hour against traffic (cheapest configuration meeting the SLOs)",
                      xaxis_title="traffic (requests/s)", yaxis_title="USD per hour", yaxis_rangemode="tozero",
                      hovermode="x unified")
    return fig
