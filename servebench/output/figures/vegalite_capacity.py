"""Vega-Lite charts for the KV calculator and the capacity planner: the concurrency limit and cost against traffic.

The numbers come from ``figures.summary.concurrency_by_prompt`` (``capacity.kv.concurrency_curve`` over prompt
lengths) and ``figures.planner.cost_curves`` (the plan's capacities priced at each traffic level).
"""

from __future__ import annotations

import pandas as pd

from servebench.output.figures.planner import CostCurves
from servebench.output.figures.summary import ConcurrencyCurve
from servebench.output.figures.sweep import Line, LoadMark
from servebench.output.figures.vegalite import FAILURE_COLOR, RUN_COLORS, SUCCESS_COLOR, Spec, _title, _zoom
from servebench.output.figures.vegalite_lines import line_layers, mark_layers, series_frame


def concurrency_chart(c: ConcurrencyCurve, height: int = 380) -> Spec:
    """Return max concurrent sequences against prompt length on a log axis, the request's prompt marked.

    A prompt at which not one sequence fits has no place on a log axis: it is left out, and the title says from
    which prompt length that is.
    """
    fits = [(p, n) for p, n in zip(c.prompts, c.counts) if n > 0]
    none_fit = next((p for p, n in zip(c.prompts, c.counts) if n == 0), None)
    note = [f"not one sequence fits from {none_fit:,} prompt tokens"] if none_fit is not None else []
    x = {"field": "x", "type": "quantitative", "title": "prompt tokens", "axis": {"format": ",d"}}
    y = {"field": "y", "type": "quantitative", "title": "max concurrent sequences (log scale)",
         "scale": {"type": "log", "domain": [1, 2 * max(c.here, max((n for _, n in fits), default=1))]},
         "axis": {"values": c.ticks, "format": ",d"}}
    here = pd.DataFrame({"x": [c.prompt_tokens], "y": [c.here],
                         "label": [f"{c.here:,} at {c.prompt_tokens:,} tokens"]})
    return {
        "title": _title(f"Max concurrent sequences against prompt length (output cap {c.output_cap:,}, {c.policy})",
                        note),
        "height": height,
        "datasets": {"curve": pd.DataFrame({"x": [p for p, _ in fits], "y": [n for _, n in fits]}), "here": here},
        "layer": [
            {"data": {"name": "curve"}, "mark": {"type": "line", "interpolate": "step-after", "color": SUCCESS_COLOR},
             "params": _zoom("x"), "encoding": {"x": x, "y": y}},  # 160 points: no tooltip each
            {"data": {"name": "here"}, "mark": {"type": "point", "filled": True, "size": 110, "color": FAILURE_COLOR},
             "encoding": {"x": x, "y": y, "tooltip": [{"field": "label", "title": "this request"}]}},
            {"data": {"name": "here"}, "mark": {"type": "text", "align": "left", "dx": 8, "dy": -10,
                                                "color": FAILURE_COLOR, "fontWeight": "bold"},
             "encoding": {"x": x, "y": y, "text": {"field": "label"}}},
        ],
    }


def cost_chart(c: CostCurves, height: int = 400) -> Spec:
    """Return the cheapest cost per hour meeting the SLOs against traffic, per GPU type and (dotted) overall."""
    lines = [*(Line(gpu, ys, RUN_COLORS[i % len(RUN_COLORS)]) for i, (gpu, ys) in enumerate(c.by_gpu.items())),
             Line("cheapest", c.cheapest, "#000000", "dot")]
    x = {"field": "x", "type": "quantitative", "title": "traffic (requests/s)"}
    y = {"field": "y", "type": "quantitative", "title": "USD per hour"}
    layers = line_layers(lines, x, y, step=True, widths=[2] * len(c.by_gpu) + [4], zoom=True)
    planned = LoadMark(c.planned_rate_rps, "planned traffic", "#7f7f7f", "dash", "left")
    return {"title": _title("Cost per hour against traffic (cheapest configuration meeting the SLOs)"),
            "height": height, "datasets": {"lines": series_frame(c.rates_rps, lines)},
            "layer": [*layers, *mark_layers([planned], x)]}
