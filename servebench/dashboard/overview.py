"""Summary's one-screen overview: latency and TTFT over time, and their CDFs, each one small Vega-Lite chart.

The overview answers "how did it go" before any table: the outcome bar (``figures.vegalite.outcome_bar``),
these two charts, and the eight headline numbers beside them, all within a 1,400 x 900 window. Each chart
draws both metrics (latency and TTFT) in one view so the overview costs two charts, not four: every chart
Streamlit embeds is a Vega view the browser builds on the first load. Pure: data in, spec out.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from servebench.output.figures.over_time import OverTimeBins
from servebench.output.figures.records import CdfSeries
from servebench.output.figures.vegalite import CONFIG, UNIT_SCALE, UNIT_WORDS, Spec, _note, _title

OVERVIEW_HEIGHT_PX = 330  # the whole chart (title, plot, axis, legend): beside the outcome bar, above the fold
METRIC_COLORS: dict[str, str] = {"latency": "#0d47a1", "ttft": "#ef6c00"}
METRIC_NAMES: dict[str, str] = {"latency": "Latency", "ttft": "TTFT"}


def over_time_p95_chart(b: OverTimeBins, unit: str = "ms", height: int = OVERVIEW_HEIGHT_PX) -> Spec:
    """Return latency p95 and TTFT p95 of the successes ending in each bin, against seconds since the window start.

    A bin in which no success ended breaks the lines.

    >>> from servebench.output.figures.over_time import OverTimeBins
    >>> b = OverTimeBins(1.0, np.array([0.5, 1.5]), np.array([1.0, 0.0]),
    ...                  {"latency": {95: [2.0, None]}, "ttft": {95: [0.25, None]}})
    >>> spec = over_time_p95_chart(b, "ms")
    >>> spec["datasets"]["lines"]["y"].tolist()[:2], spec["encoding"]["y"]["title"]
    ([2000.0, nan], 'p95, ms')
    """
    k = UNIT_SCALE[unit]
    names = [METRIC_NAMES[key] for key in METRIC_NAMES]
    ys = [np.array([np.nan if v is None else v * k for v in b.percentiles_s[key][95]], dtype=np.float64)
          for key in METRIC_NAMES]
    frame = pd.DataFrame({"x": np.tile(b.mids_s, len(names)), "y": np.concatenate(ys),
                          "metric": np.repeat(names, b.mids_s.size)})
    span = [0.0, float(b.mids_s[-1] + b.width_s / 2)] if b.mids_s.size else [0.0, 1.0]
    return {
        "title": _title(f"p95 over time ({unit})", [f"{b.mids_s.size} bins of {b.width_s:.3g} s, by end"]),
        "height": height, "config": CONFIG, "datasets": {"lines": frame}, "data": {"name": "lines"},
        "mark": {"type": "line", "invalid": "break-paths-filter-domains", "point": {"size": 12}},
        "encoding": {"x": {"field": "x", "type": "quantitative", "title": "s since the window start",
                           "scale": {"domain": span}},
                     "y": {"field": "y", "type": "quantitative", "title": f"p95, {unit}"},
                     "color": {"field": "metric", "type": "nominal", "title": None, "sort": names,
                               "scale": {"domain": names, "range": [METRIC_COLORS[k] for k in METRIC_NAMES]},
                               "legend": {"orient": "bottom", "direction": "horizontal"}},
                     "tooltip": [{"field": "metric"}, {"field": "x", "title": "s", "format": ".4~g"},
                                 {"field": "y", "title": f"p95 ({unit})", "format": ",.4~g"}]},
    }


def cdf_pair_chart(series: Mapping[str, CdfSeries], unit: str = "ms", height: int = OVERVIEW_HEIGHT_PX) -> Spec:
    """Return the CDFs of success latency and TTFT (``series['latency']``, ``series['ttft']``) on one chart.

    >>> from servebench.output.figures.records import cdf_series
    >>> s = {"latency": cdf_series(np.array([1.0, 2.0]), "latency"), "ttft": cdf_series(np.array([0.5]), "ttft")}
    >>> spec = cdf_pair_chart(s, "s")
    >>> sorted(set(spec["datasets"]["curves"]["metric"])), spec["encoding"]["x"]["title"]
    (['Latency', 'TTFT'], 'seconds')
    """
    k = UNIT_SCALE[unit]
    drawn = {METRIC_NAMES[key]: series[key] for key in METRIC_NAMES if series[key].n}
    title = _title(f"Latency and TTFT CDF ({unit})", [f"n = {series['latency'].n:,} successes"])
    if not drawn:
        return _note(title, "no successes: nothing to draw", height)
    colors = [METRIC_COLORS[key] for key in METRIC_NAMES if series[key].n]
    frame = pd.DataFrame({"x": np.concatenate([s.x for s in drawn.values()]) * k,
                          "share": np.concatenate([s.y for s in drawn.values()]),
                          "metric": np.repeat(list(drawn), [s.x.size for s in drawn.values()])})
    return {
        "title": title, "height": height, "config": CONFIG, "datasets": {"curves": frame}, "data": {"name": "curves"},
        "mark": {"type": "line", "interpolate": "step-after"},
        "encoding": {"x": {"field": "x", "type": "quantitative", "title": UNIT_WORDS[unit]},
                     "y": {"field": "share", "type": "quantitative", "title": "share of successes",
                           "scale": {"domain": [0, 1.02]}, "axis": {"format": "%"}},
                     "color": {"field": "metric", "type": "nominal", "title": None, "sort": list(drawn),
                               "scale": {"domain": list(drawn), "range": colors},
                               "legend": {"orient": "bottom", "direction": "horizontal"}}},
    }
