"""The Traces page's two charts as Vega-Lite specs: arrivals and tokens over time, and hit rate against cache size.

The numbers are those of the report's plotly figures (``figures.trace.trace_bins`` and ``trace_stats``' prefix
section); the page draws Vega-Lite because a page that draws plotly makes the browser load plotly.js
(``pages/_figures.py`` says why).
"""

from __future__ import annotations

import pandas as pd

from servebench.analysis.trace_stats import PEAK_WINDOW_S, PrefixStats
from servebench.output.figures.trace import COLORS, TraceBins
from servebench.output.figures.vegalite import Spec, _title, stacked_y

RATES = (("requests/s", "requests_per_s", "requests"), ("prompt tokens/s", "prompt_tokens_per_s", "prompt"),
         ("output tokens/s", "output_tokens_per_s", "output"))
OVER_TIME_TITLE = "Arrivals and tokens over time"
HIT_RATE_TITLE = "Prefix cache hit rate against capacity"


def over_time_charts(bins: TraceBins, height_px: int = 240) -> list[Spec]:
    """Return requests, prompt tokens and output tokens per second as three charts to stack on one time axis (each
    on its own scale: a prompt often asks for a hundred times its answer's tokens), the busiest minute shaded.

    Three charts, not one ``vconcat``: Streamlit stretches a single chart to the page's width, never a compound one.
    Only the last shows the time axis's numbers, and none its title (the first chart's subtitle says it): Streamlit
    sizes a chart's box to its ``height``, and an axis title below the plot spills over the chart under it.
    """
    lines = [f"by arrival, in {bins.width_s:g} s bins; x: seconds after the first request"]
    peak = pd.DataFrame({"x0": [], "x1": []})
    if bins.peak_window is not None:
        start, count = bins.peak_window
        lines.append(f"shaded: the busiest minute, {count / PEAK_WINDOW_S:.3g} requests/s from {start:,.0f} s")
        peak = pd.DataFrame({"x0": [start], "x1": [start + PEAK_WINDOW_S]})
    domain = [float(bins.mids_s[0] - bins.width_s / 2), float(bins.mids_s[-1] + bins.width_s / 2)]
    charts = []
    for i, (title, attr, color) in enumerate(RATES):
        last = i == len(RATES) - 1
        x = {"field": "x", "type": "quantitative", "scale": {"domain": domain}, "title": None,
             "axis": {"labels": last}}
        charts.append({
            "title": _title(OVER_TIME_TITLE, lines) if i == 0 else _title(title.capitalize()),
            "height": height_px, "datasets": {"rate": pd.DataFrame({"x": bins.mids_s, "y": getattr(bins, attr)}),
                                              "peak": peak},
            "layer": [
                {"data": {"name": "peak"}, "mark": {"type": "rect", "color": COLORS["peak"], "opacity": 0.15},
                 "encoding": {"x": {"field": "x0", "type": "quantitative", "scale": {"domain": domain}},
                              "x2": {"field": "x1"}}},
                {"data": {"name": "rate"}, "mark": {"type": "line", "interpolate": "step", "color": COLORS[color]},
                 "encoding": {"x": x, "y": stacked_y(title)}},
            ]})
    return charts


def hit_rate_chart(prefix: PrefixStats, height_px: int = 320) -> Spec:
    """Return the share of prompt tokens an LRU prefix cache serves against its size (log axis), under the share
    an unbounded cache serves (dashed). The x axis is named in the subtitle (``over_time_charts`` says why)."""
    points = [(h.capacity_tokens, 100 * h.token_hit_rate) for h in prefix.hit_rate_by_capacity
              if h.token_hit_rate is not None]
    x = {"field": "x", "type": "quantitative", "scale": {"type": "log"}, "axis": {"format": "~s"}, "title": None}
    y = {"field": "y", "type": "quantitative", "title": "prompt tokens hit, %",
         "scale": {"domainMin": 0}}
    layers: list[Spec] = [{"data": {"name": "lru"}, "mark": {"type": "line", "point": True, "color": COLORS["lru"]},
                           "encoding": {"x": x, "y": y, "tooltip": [{"field": "x", "title": "tokens", "format": ","},
                                                                    {"field": "y", "title": "%", "format": ".1f"}]}}]
    datasets = {"lru": pd.DataFrame({"x": [p[0] for p in points], "y": [p[1] for p in points]})}
    subtitle = [f"share of prompt tokens an LRU cache serves; x: its capacity in tokens, log scale (blocks of "
                f"{prefix.block_tokens:,})"]
    if prefix.reusable_token_share is not None:
        share = 100 * prefix.reusable_token_share
        subtitle.append(f"dashed: an unbounded cache, {share:.1f} %")
        datasets["unbounded"] = pd.DataFrame({"y": [share]})
        layers.append({"data": {"name": "unbounded"}, "mark": {"type": "rule", "strokeDash": [6, 4],
                                                               "color": COLORS["reusable"]},
                       "encoding": {"y": {"field": "y", "type": "quantitative"}}})
    return {"title": _title(HIT_RATE_TITLE, subtitle), "height": height_px, "datasets": datasets, "layer": layers}
