"""Figures of the record set on screen, built once per file, format and window and then reused.

Building a plotly figure costs tens of milliseconds (validation), so a page that rebuilt its charts on
every rerun paid about a second per widget change on any file. Each builder here is keyed by the
dataset's key (file digest and format) and window; the table itself is passed unhashed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from servebench.output.figures import records as record_figs
from servebench.output.figures.compare import over_time
from servebench.output.figures.summary import percentile_cdf, percentile_histogram
from servebench.records.table import RecordTable


@st.cache_resource(max_entries=16, show_spinner=False)
def record_charts(key: str, window_start: float, window_end: float,
                  _table: RecordTable) -> dict[str, go.Figure | None]:
    """Return the Summary's charts of a record set: timeline, the CDFs (latency, TTFT, TPOT) in one, stages."""
    return {"timeline": record_figs.timeline_figure(_table, window_start, window_end),
            "cdfs": record_figs.cdf_panel(record_figs.record_cdfs(_table)),
            "stages": record_figs.stage_figure(_table)}


@st.cache_resource(max_entries=16, show_spinner=False)
def cause_chart(key: str, window_start: float, window_end: float, _by_cause: Mapping[str, int]) -> go.Figure | None:
    """Return non-successes by cause; the counts depend on the window alone, not the SLO."""
    return record_figs.cause_figure(_by_cause)


@st.cache_resource(max_entries=8, show_spinner=False)
def over_time_chart(key: str, window_start: float, window_end: float, _table: RecordTable) -> go.Figure:
    """Return throughput, TTFT and latency over time (built only when its panel is opened)."""
    return over_time(_table, window_start, window_end)


@st.cache_resource(max_entries=16, show_spinner=False)
def percentile_charts(key: str, view: str, q: float, label: str, unit: str, _ok: np.ndarray, _fa: np.ndarray,
                      ok_value: float | None, fa_value: float | None) -> tuple[go.Figure, go.Figure]:
    """Return the Percentile explorer's CDF and histogram; ``key`` names the records, metric and slice.

    The values come in ``unit`` (already scaled); ``unit`` is part of the cache key with them.
    """
    shown = _ok if view == "success-only" else _fa
    value = ok_value if view == "success-only" else fa_value
    return (percentile_cdf(_ok, _fa, q, ok_value, fa_value, label, unit),
            percentile_histogram(shown, q, value, label))
