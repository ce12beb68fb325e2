"""Vega-Lite charts for the dashboard's Token timing page: the stall histogram, token ticks, the prefill bars.

The numbers are those of the report site's plotly figures (``figures.tokens``: :func:`stall_bins`,
:func:`token_ticks`, :func:`prefill_values`); the ITL and TTFT CDFs are ``vegalite.cdf_chart`` of
``itl_series`` and ``record_series``. Specs keep their data under ``datasets`` as pandas frames; times are
drawn in ``unit`` ('ms', the page's default, or 's'), converted from the seconds those functions give. Request IDs
go through :func:`safe_text`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from servebench.formatting import fmt
from servebench.output.figures.tokens import PREFILL_COLORS, STALL_COLOR, StallBins, TickRow
from servebench.output.figures.vegalite import (
    CONFIG,
    COUNT_AXIS,
    SUCCESS_COLOR,
    UNIT_SCALE,
    UNIT_WORDS,
    Spec,
    _note,
    _number,
    _title,
    _zoom,
    wrapped,
)
from servebench.output.safetext import safe_text


def stall_chart(h: StallBins, unit: str = "s", height: int = 420) -> Spec:
    """Return the histogram of each success's longest gap in ``unit`` (s or ms), the stall threshold dashed red."""
    if h.n == 0:
        return _note(_title("Longest stall per request"), "no success has two token arrivals", height)
    k = UNIT_SCALE[unit]
    frame = pd.DataFrame({"lo": h.edges_s[:-1] * k, "hi": h.edges_s[1:] * k, "requests": h.counts})
    x = {"field": "lo", "type": "quantitative", "title": f"longest gap between tokens, {unit}"}
    layers: list[Spec] = [
        {"data": {"name": "bins"}, "mark": {"type": "bar", "color": SUCCESS_COLOR, "binSpacing": 0},
         "params": _zoom("x"),
         "encoding": {"x": {**x, "bin": "binned"}, "x2": {"field": "hi"},
                      "y": {"field": "requests", "type": "quantitative", "title": "requests", "axis": COUNT_AXIS},
                      "tooltip": [_number("lo", f"from, {unit}"), _number("hi", f"to, {unit}"),
                                  {"field": "requests", "format": ","}]}}]
    if h.threshold_s is not None:
        at = h.threshold_s * k
        layers.append({"data": {"values": [{"lo": at, "about": f"stall threshold {fmt(at)} {unit}"}]},
                       "mark": {"type": "rule", "color": STALL_COLOR, "strokeDash": [6, 4], "strokeWidth": 2},
                       "encoding": {"x": x, "tooltip": [{"field": "about", "title": "threshold"}]}})
    # the field's name under the title, not in it: the title fits a third of the page
    return {"title": _title("Longest stall per request", wrapped(["each success's longest gap (max_stall_s)",
                                                                   *h.lines_in(k, unit)])),
            "height": height,
            "datasets": {"bins": frame}, "layer": layers}


def ticks_chart(rows: Sequence[TickRow], unit: str = "s") -> Spec:
    """Return one row per slow request: a tick per token arrival, its longest gap in red; times in ``unit``."""
    k = UNIT_SCALE[unit]
    labels = [safe_text(r.label) for r in rows]
    ticks = pd.DataFrame({"request": np.repeat(labels, [r.ticks_s.size for r in rows]),
                          "t": np.concatenate([r.ticks_s for r in rows]) * k})
    spans = pd.DataFrame({"request": labels, "from": 0.0, "to": [r.end_s * k for r in rows]})
    gaps = pd.DataFrame([{"request": label, "from": r.longest_gap_s[0] * k, "to": r.longest_gap_s[1] * k,
                          "about": f"longest gap {fmt((r.longest_gap_s[1] - r.longest_gap_s[0]) * k)} {unit}"}
                         for label, r in zip(labels, rows) if r.longest_gap_s is not None]
                        or {"request": [], "from": [], "to": [], "about": []})
    x = {"field": "from", "type": "quantitative",
         "title": f"{UNIT_WORDS[unit]} since the request started (its first tick is its TTFT)"}
    y = {"field": "request", "type": "nominal", "title": None, "sort": labels, "axis": {"labelLimit": 260}}
    return {
        "title": _title(f"Token ticks of the {len(rows)} slowest successes",
                        ["one tick per token (or chunk); red: each request's longest gap"]),
        "height": {"step": 40}, "config": CONFIG, "datasets": {"ticks": ticks, "spans": spans, "gaps": gaps},
        "layer": [
            {"data": {"name": "spans"}, "mark": {"type": "rule", "color": "#ddd"},
             "encoding": {"x": x, "x2": {"field": "to"}, "y": y}},
            {"data": {"name": "ticks"}, "mark": {"type": "tick", "color": SUCCESS_COLOR, "thickness": 1, "size": 16},
             "params": _zoom("x"), "encoding": {"x": {**x, "field": "t"}, "y": y}},
            {"data": {"name": "gaps"}, "mark": {"type": "rule", "color": STALL_COLOR, "strokeWidth": 3},
             "encoding": {"x": x, "x2": {"field": "to"}, "y": y, "tooltip": [{"field": "about", "title": "gap"}]}},
        ],
    }


def prefill_chart(values: Mapping[str, Mapping[str, float | None]], unit: str = "s", height: int = 360) -> Spec:
    """Return grouped bars of TTFT p95, ITL p99 and longest stall p95 per prefill policy, each bar labelled.

    ``values`` are seconds (``prefill_values``), drawn in ``unit``. A metric a policy has no value for draws no bar.
    """
    k = UNIT_SCALE[unit]
    policies = list(values)
    metrics = list(next(iter(values.values())))
    rows = [{"metric": m, "policy": p, "value": v * k, "label": f"{fmt(v * k, 3)} {unit}"}
            for p, by_metric in values.items() for m, v in by_metric.items() if v is not None]
    title = _title("Chunked vs whole-prompt prefill, same seed and arrivals",
                   ["TTFT: what a new request waits; stalls: what running streams wait"])
    if not rows:
        return _note(title, "no values: neither policy had a success", height)
    x = {"field": "metric", "type": "nominal", "title": None, "sort": metrics, "axis": {"labelAngle": 0}}
    offset = {"field": "policy", "type": "nominal", "sort": policies}
    y = {"field": "value", "type": "quantitative", "title": UNIT_WORDS[unit]}
    return {
        "title": title, "height": height, "datasets": {"bars": pd.DataFrame(rows)}, "data": {"name": "bars"},
        "encoding": {"x": x, "xOffset": offset, "y": y},
        "layer": [
            {"mark": "bar", "encoding": {
                "color": {"field": "policy", "type": "nominal", "title": None, "legend": {"orient": "bottom"},
                          "scale": {"domain": policies, "range": [PREFILL_COLORS[p] for p in policies]}},
                "tooltip": [{"field": "policy"}, {"field": "metric"}, _number("value", UNIT_WORDS[unit])]}},
            {"mark": {"type": "text", "dy": -6}, "encoding": {"text": {"field": "label"}}},
        ],
    }
