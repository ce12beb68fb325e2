"""The dashboard's charts as Vega-Lite specs on a canvas; those of a record set built once per file, window and unit.

Every page draws Vega-Lite (figures.vegalite, vegalite_tokens, vegalite_summary, vegalite_sweep,
vegalite_capacity), never plotly: a page that draws no plotly chart never makes the browser load plotly.js
(4.7 MB, about 2 s to compile on a 2-core machine), and a spec is built in milliseconds. A record set's charts
are keyed by the dataset's key (file digest and format), window and unit; the table is unhashed. The charts of
a sweep, a plan or the KV limit are built from the page's own result on each run (a few milliseconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import streamlit as st

from pages._shared import Dataset, itl_cdf
from servebench.dashboard.walkthrough_sweeps import ProfileSweep, run_profile_sweep
from servebench.output.figures import records as record_figs
from servebench.output.figures import sweep as sweep_figs
from servebench.output.figures import tokens as token_figs
from servebench.output.figures import vegalite, vegalite_capacity, vegalite_summary, vegalite_sweep, vegalite_tokens
from servebench.output.figures.over_time import over_time_bins
from servebench.output.figures.planner import cost_curves
from servebench.output.figures.records import CdfSeries
from servebench.output.figures.summary import ConcurrencyCurve
from servebench.output.figures.validate_sweep import validation_curves
from servebench.planning.planner import Evaluation
from servebench.records.steps import StepTrace
from servebench.records.table import RecordTable
from servebench.serving.experiments import PrefillSide
from servebench.serving.sweep import SweepResult

Spec = dict[str, Any]


@st.cache_resource(max_entries=16, show_spinner=False)
def record_charts(key: str, window_start: float, window_end: float, unit: str,
                  _table: RecordTable) -> dict[str, Any]:
    """Return the Summary's charts of a record set: ``timeline``, ``cdfs`` (latency, TTFT, TPOT), ``stages``."""
    means = record_figs.stage_means(_table)
    timeline = record_figs.timeline_series(_table, window_start, window_end, vegalite.TIMELINE_POINTS)
    cdfs = cdf_series(key, window_start, window_end, _table)
    return {"timeline": on_canvas(vegalite.timeline_chart(timeline)),
            "cdfs": {name: on_canvas(vegalite.cdf_chart(s, unit)) for name, s in cdfs.items()},
            "stages": None if means is None else on_canvas(vegalite.stage_chart(means, unit))}


@st.cache_resource(max_entries=16, show_spinner=False)
def cdf_series(key: str, window_start: float, window_end: float,
               _table: RecordTable) -> dict[str, record_figs.CdfSeries]:
    """Return a record set's CDFs of latency, TTFT and TPOT (``record_series``), thinned for Vega-Lite.

    Shared by Summary, Compare (each run's curve) and Token timing (TTFT), so each is sorted once per window.
    """
    return record_figs.record_series(_table, max_points=vegalite.LINE_POINTS)


def compare_cdfs(runs: Mapping[str, Dataset], unit: str) -> dict[str, Spec]:
    """Return Compare's overlaid CDFs of latency, TTFT and TPOT; ``runs`` maps a shown name to its records."""
    series = {name: cdf_series(d.key, d.window_start, d.window_end, d.table) for name, d in runs.items()}
    return {metric: on_canvas(vegalite.overlaid_cdf_chart({n: s[metric] for n, s in series.items()}, metric, unit))
            for metric in record_figs.COMPARED}


@st.cache_resource(max_entries=8, show_spinner=False)
def token_charts(key: str, window_start: float, window_end: float, threshold_s: float | None, unit: str,
                 _table: RecordTable, _itl: CdfSeries | None = None) -> dict[str, Spec | None]:
    """Return Token timing's charts of records with token times: ``ttft``, ``itl``, ``stall``, ``ticks``.

    Every chart reads in ``unit`` (ms or s): the TTFT and ITL CDFs, the stall histogram and the token ticks.
    ``_itl``: the ITL CDF's series when built already (``pages._shared.itl_beside``), else built here (``itl_cdf``).
    """
    itl = _itl if _itl is not None else itl_cdf(_table)
    bins = token_figs.stall_bins(_table, threshold_s)
    ticks = token_figs.token_ticks(_table)
    return {"ttft": on_canvas(vegalite.cdf_chart(cdf_series(key, window_start, window_end, _table)["ttft"], unit)),
            "itl": None if itl is None else on_canvas(vegalite.cdf_chart(itl, unit, y_title="share of gaps")),
            "stall": None if bins is None else on_canvas(vegalite_tokens.stall_chart(bins, unit)),
            "ticks": None if ticks is None else on_canvas(vegalite_tokens.ticks_chart(ticks, unit))}


def prefill_charts(chunked: PrefillSide, whole: PrefillSide, unit: str) -> dict[str, Spec]:
    """Return the prefill experiment's bars (key ``bars``) and each side's stall histogram (keyed by its label),
    times in ``unit``."""
    values = token_figs.prefill_values(chunked.report, whole.report)
    charts = {"bars": on_canvas(vegalite_tokens.prefill_chart(values, unit))}
    for side in (chunked, whole):
        bins = token_figs.stall_bins(side.records, side.report.stalls.threshold_s if side.report.stalls else None)
        if bins is not None:
            charts[side.label] = on_canvas(vegalite_tokens.stall_chart(bins, unit))
    return charts


def each_on_canvas(specs: Mapping[str, Spec]) -> dict[str, Spec]:
    """Return each of a figure's charts (keyed by name) drawn on a canvas (``on_canvas``)."""
    return {name: on_canvas(spec) for name, spec in specs.items()}


def on_canvas(spec: Spec) -> Spec:
    """Return ``spec`` drawn on a canvas (vega-embed reads ``usermeta.embedOptions``), not as SVG.

    Streamlit draws Vega-Lite as SVG; the browser's style, layout and paint of four SVG charts of 300-point lines
    were most of opening Summary's CDF panel (1.2 s, 0.85 s on a canvas, the same 2-core machine and load).
    """
    return {**spec, "usermeta": {"embedOptions": {"renderer": "canvas"}}}


@st.cache_resource(max_entries=16, show_spinner=False)
def cause_chart(key: str, window_start: float, window_end: float, _by_cause: Mapping[str, int]) -> Spec | None:
    """Return non-successes by cause; the counts depend on the window alone, not the SLO."""
    spec = vegalite.cause_chart(_by_cause)
    return None if spec is None else on_canvas(spec)


@st.cache_resource(max_entries=8, show_spinner=False)
def over_time_charts(key: str, window_start: float, window_end: float, unit: str,
                     _table: RecordTable) -> dict[str, Spec]:
    """Return throughput, TTFT and latency over time (``successes``, ``ttft``, ``latency``), built once opened."""
    bins = over_time_bins(_table, window_start, window_end)
    return each_on_canvas(vegalite_summary.over_time_charts(bins, unit))


@st.cache_resource(max_entries=16, show_spinner=False)
def percentile_charts(key: str, view: str, q: float, label: str, unit: str, _ok: np.ndarray, _fa: np.ndarray,
                      ok_value: float | None, fa_value: float | None) -> tuple[Spec, Spec]:
    """Return the Percentile explorer's CDF and histogram; ``key`` names the records, metric and slice.

    The values come in ``unit`` (already scaled); ``unit`` is part of the cache key with them.
    """
    shown = _ok if view == "success-only" else _fa
    value = ok_value if view == "success-only" else fa_value
    return (on_canvas(vegalite.percentile_cdf(_ok, _fa, q, ok_value, fa_value, label)),
            on_canvas(vegalite.percentile_histogram(shown, q, value, label)))


def rate_curve_charts(runs: Any) -> dict[str, Spec]:
    """Return a multi-run file's throughput (``rate``) and p95 times (``times``) against each run's rate."""
    return each_on_canvas(vegalite_summary.rate_curve_charts(runs))


def concurrency_chart(curve: ConcurrencyCurve) -> Spec:
    """Return the KV calculator's max concurrent sequences against prompt length, the request's prompt marked."""
    return on_canvas(vegalite_capacity.concurrency_chart(curve))


def cost_chart(evaluation: Evaluation, rates_rps: list[float], planned_rate_rps: float) -> Spec:
    """Return the planner's cheapest cost per hour against traffic, per GPU type and overall."""
    return on_canvas(vegalite_capacity.cost_chart(cost_curves(evaluation, rates_rps, planned_rate_rps)))


def sweep_charts(result: SweepResult) -> dict[str, Spec]:
    """Return a sweep's latency and TTFT against load (``latency``, ``ttft``) and its outcomes (``outcomes``)."""
    charts = vegalite_sweep.latency_charts(sweep_figs.latency_by_load(result))
    charts["outcomes"] = vegalite_sweep.outcomes_chart(sweep_figs.outcome_rates(result))
    return each_on_canvas(charts)


@st.cache_resource(max_entries=4, show_spinner="Sweeping the profile's scenario over load…")
def profile_sweep_chart(profile: str, loads: tuple[float, ...], _plan: ProfileSweep) -> tuple[SweepResult, Spec]:
    """Return a walk-through profile's sweep and its TTFT chart, the knee marked (keyed by profile and loads)."""
    result = run_profile_sweep(_plan)
    return result, sweep_charts(result)["ttft"]


def trace_charts(trace: StepTrace, kv_budget_tokens: int | None, title: str) -> dict[str, Spec]:
    """Return a step trace's running and waiting (``sequences``) and KV tokens (``kv``) over time, thinned."""
    series = sweep_figs.trace_series(trace, max_points=vegalite.TIMELINE_POINTS)
    charts = vegalite_sweep.trace_charts(series, kv_budget_tokens, title)
    return each_on_canvas(charts)


def overlay_charts(series: list[sweep_figs.SweepSeries], mode: str) -> dict[str, Spec]:
    """Return several sweeps' p95 TTFT, p95 latency and goodput against load (``ttft``, ``latency``, ``rate``)."""
    return each_on_canvas(vegalite_sweep.overlay_charts(series, mode))


def validation_charts(doc: Mapping[str, Any]) -> dict[str, Spec]:
    """Return a validate-sweep result's measured and simulated curves, a chart per metric, both knees marked."""
    return each_on_canvas(vegalite_sweep.validation_charts(validation_curves(doc)))
