"""The Traces page's two charts as Vega-Lite specs: arrivals and tokens over time, and hit rate against cache size.

The numbers are those of the report's plotly figures (``figures.trace.trace_bins`` and ``trace_stats``' prefix
section); the page draws Vega-Lite because a page that draws plotly makes the browser load plotly.js
(``pages/_figures.py`` says why).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from servebench.analysis.trace_stats import PEAK_WINDOW_S, PrefixStats
from servebench.output.figures.trace import COLORS, TraceBins
from servebench.output.figures.vegalite import Spec, _title, stacked_y

RATES = (("requests/s", "requests_per_s", "requests"), ("prompt tokens/s", "prompt_tokens_per_s", "prompt"),
         ("output tokens/s", "output_tokens_per_s", "output"))
OVER_TIME_TITLE = "Arrivals and tokens over time"
HIT_RATE_TITLE = "Prefix cache hit rate against capacity"


def over_time_chart(bins: TraceBins, height_px: int = 150) -> Spec:
    """Return requests, prompt and output tokens per second, one above another on one time axis, the busiest
    minute shaded (each on its own scale: a prompt often asks for a hundred times its answer's tokens)."""
    lines = [f"by arrival, in {bins.width_s:g} s bins"]
    peak = pd.DataFrame({"x0": [], "x1": []})
    if bins.peak_window is not None:
        start, count = bins.peak_window
        lines.append(f"shaded: the busiest minute, {count / PEAK_WINDOW_S:.3g} requests/s from {start:,.0f} s")
        peak = pd.DataFrame({"x0": [start], "x1": [start + PEAK_WINDOW_S]})
    x = {"field": "x", "type": "quantitative", "title": "seconds after the first request"}
    rows = []
    for title, attr, color in RATES:
        rows.append({"height": height_px, "layer": [
            {"data": {"name": "peak"}, "mark": {"type": "rect", "color": COLORS["peak"], "opacity": 0.15},
             "encoding": {"x": {"field": "x0", "type": "quantitative"}, "x2": {"field": "x1"}}},
            {"data": {"name": attr}, "mark": {"type": "line", "interpolate": "step", "color": COLORS[color]},
             "encoding": {"x": x, "y": stacked_y(title)}},
        ]})
    datasets = {attr: pd.DataFrame({"x": bins.mids_s, "y": np.asarray(getattr(bins, attr), dtype=float)})
                for _, attr, _ in RATES}
    return {"title": _title(OVER_TIME_TITLE, lines), "datasets": {**datasets, "peak": peak},
            "vconcat": rows, "resolve": {"scale": {"x": "shared"}}}


def hit_rate_chart(prefix: PrefixStats, height_px: int = 320) -> Spec:
    """Return the share of prompt tokens an LRU prefix cache serves against its size (log axis), under the share
    an unbounded cache serves (dashed)."""
    points = [(h.capacity_tokens, 100 * h.token_hit_rate) for h in prefix.hit_rate_by_capacity
              if h.token_hit_rate is not None]
    x = {"field": "x", "type": "quantitative", "scale": {"type": "log"}, "axis": {"format": "~s"},
         "title": f"cache capacity, tokens (blocks of {prefix.block_tokens:,})"}
    y = {"field": "y", "type": "quantitative", "title": "prompt tokens served from the cache, %",
         "scale": {"domainMin": 0}}
    layers: list[Spec] = [{"data": {"name": "lru"}, "mark": {"type": "line", "point": True, "color": COLORS["lru"]},
                           "encoding": {"x": x, "y": y, "tooltip": [{"field": "x", "title": "tokens", "format": ","},
                                                                    {"field": "y", "title": "%", "format": ".1f"}]}}]
    datasets = {"lru": pd.DataFrame({"x": [p[0] for p in points], "y": [p[1] for p in points]})}
    subtitle = []
    if prefix.reusable_token_share is not None:
        share = 100 * prefix.reusable_token_share
        subtitle.append(f"dashed: an unbounded cache, {share:.1f} %")
        datasets["unbounded"] = pd.DataFrame({"y": [share]})
        layers.append({"data": {"name": "unbounded"}, "mark": {"type": "rule", "strokeDash": [6, 4],
                                                               "color": COLORS["reusable"]},
                       "encoding": {"y": {"field": "y", "type": "quantitative"}}})
    return {"title": _title(HIT_RATE_TITLE, subtitle), "height": height_px, "datasets": datasets, "layer": layers}
