"""Percentile explorer: any nearest-rank percentile of any per-request metric, with its CI and the records behind it."""

from __future__ import annotations

import numpy as np
import streamlit as st

from pages._figures import percentile_charts
from pages._shared import guarded, records_sidebar, show_reader_warnings, unit_choice
from pages._url import keep
from servebench.analysis.contract import RECORD_METRICS, TOKEN_METRICS, metric_values, token_metric_values
from servebench.analysis.percentiles import estimate, nearest_rank
from servebench.formatting import fmt
from servebench.output.figures.summary import METRIC_LABELS
from servebench.output.figures.tokens import TOKEN_METRIC_LABELS

SHOWN_ROWS = 1_000
# the records grid shows what a metric is computed from (every field is in its CSV download): all ten fields
# and the value made a grid of 1,134 px in a 904 px column at a 1,400 px window
METRIC_FIELDS = {"latency": ("start", "end"), "ttft": ("start", "first_token"),
                 "tpot": ("first_token", "end", "output_tokens"), "queue_wait": ("start", "admitted"),
                 "prefill": ("admitted", "first_token"), "itl": ("first_token", "end", "output_tokens"),
                 "max_stall": ("first_token", "end", "output_tokens")}


def grid_columns(metric: str, view: str) -> list[str]:
    """Return the record fields the records grid shows for ``metric``: who, how it ended, and its inputs."""
    return ["request_id", "status", "slice", *METRIC_FIELDS[metric], *(["error"] if view == "failure-aware" else [])]


st.title("Percentile explorer")
ds = records_sidebar()
show_reader_warnings(ds)

DEFAULT_Q = 95.0


def _url_q() -> float:
    """Return the URL's percentile if it is one in (0, 100], else the default."""
    try:
        q = float(st.query_params.get("q", DEFAULT_Q))
    except ValueError:
        return DEFAULT_Q
    return q if 0 < q <= 100 else DEFAULT_Q


def _with_unit(label: str, unit: str) -> str:
    """Return a metric's label in ``unit``: 'Latency (s)' -> 'Latency (ms)'."""
    return label.replace("(s)", f"({unit})") if "(s)" in label else f"{label}, {unit}"


if "q_input" not in st.session_state:  # the URL's percentile, once: a link reopens the same view
    st.session_state.q_input = _url_q()
    st.session_state.q_slider = min(100.0, max(0.1, round(st.session_state.q_input, 1)))


def _from_slider() -> None:
    st.session_state.q_input = float(st.session_state.q_slider)


def _from_input() -> None:
    st.session_state.q_slider = min(100.0, max(0.1, round(float(st.session_state.q_input), 1)))


slices = sorted({s for s in ds.table.slice.tolist() if s is not None})
c1, c2, c3 = st.columns([2, 2, 3])
labels = {**METRIC_LABELS, **TOKEN_METRIC_LABELS}  # ITL and stalls when the records have token_times
metrics = RECORD_METRICS + (TOKEN_METRICS if ds.table.token_times is not None else ())
if "metric" not in st.session_state and st.query_params.get("metric") in metrics:
    st.session_state.metric = st.query_params["metric"]
# the unit is the toggle's (milliseconds by default), so a metric is named without one: "Latency", not "Latency (s)"
metric = c1.selectbox("Metric", metrics, format_func=lambda m: labels[m].removesuffix(" (s)"), key="metric")
chosen_slice = c2.selectbox("Slice", ["all records", *slices], key="slice")
view = c3.radio("Count", ["success-only", "failure-aware"], horizontal=True, key="view",
                help="Failure-aware counts every non-success as ∞, so the percentile is ∞ when failures reach it.")
c1, c2 = st.columns([3, 1])
c1.slider("Percentile", 0.1, 100.0, step=0.1, key="q_slider", on_change=_from_slider)
c2.number_input("Exact percentile", min_value=0.001, max_value=100.0, step=0.1, format="%.3f", key="q_input",
                on_change=_from_input, help="Any value in (0, 100], e.g. 99.9.")
q = float(st.session_state.q_input)
unit, scale = unit_choice()
keep("q", q, DEFAULT_Q)
keep("metric", metric, metrics[0])

table = ds.table if chosen_slice == "all records" else ds.table.take(ds.table.slice == chosen_slice)
values_of = token_metric_values if metric in TOKEN_METRICS else metric_values
ok_values, ok_index = guarded(values_of, table, metric)
fa_values, fa_index = guarded(values_of, table, metric, failure_aware=True)
(ok_est,) = guarded(estimate, ok_values, [q])
(fa_est,) = guarded(estimate, fa_values, [q])
est, counted = (ok_est, ok_index) if view == "success-only" else (fa_est, fa_index)
label = _with_unit(labels[metric], unit)


def _scaled(value: float | None) -> str:
    return fmt(None if value is None else value * scale)


st.subheader(f"p{q:g} of {label.lower()}")
c = st.columns(4)
c[0].metric(f"p{q:g} ({view}, {unit})", _scaled(est.value), help="Nearest rank: sorted[ceil(q n / 100) - 1].")
c[1].metric(f"95% CI low ({unit})", _scaled(est.ci_low), help="— : too few values to bound it from below.")
c[2].metric(f"95% CI high ({unit})", _scaled(est.ci_high), help="— : too few values to bound it from above.")
if metric == "itl":  # one value per gap between tokens, not per record
    c[3].metric("Gaps counted", f"{est.n:,}", help=f"Between the tokens of {len(table):,} records.")
else:
    c[3].metric("Records counted", f"{est.n:,} of {len(table):,}",
                help="The records this percentile is over: successes only, or every request (failure-aware).")
other = fa_est if view == "success-only" else ok_est
st.caption(f"The other view: p{q:g} {'failure-aware' if view == 'success-only' else 'success-only'} = "
           f"{_scaled(other.value)} {unit} over {other.n:,} records.")
if est.n == 0:
    st.info("No record counts toward this metric here (for queue wait and prefill the records need `admitted`).")
else:
    left, right = st.columns(2)
    cdf, hist = percentile_charts(f"{ds.key}:{ds.window_start!r}:{ds.window_end!r}:{metric}:{chosen_slice}", view, q,
                                  label, unit, ok_values * scale, fa_values * scale,
                                  None if ok_est.value is None else ok_est.value * scale,
                                  None if fa_est.value is None else fa_est.value * scale)
    left.vega_lite_chart(spec=cdf, key="pct_cdf")
    right.vega_lite_chart(spec=hist, key="pct_hist")
    shown = (ok_values if view == "success-only" else fa_values) * scale
    # built only when opened, and at most SHOWN_ROWS rows: the browser draws every row it is sent
    # a label of its own: one naming the count was a new panel, closed, whenever the metric or view changed it
    box = st.expander("The records counted", key="pct_records_open", on_change="rerun")
    if box.open:
        order = np.argsort(shown, kind="stable")
        rank = nearest_rank(q, len(order))  # 1-based, as the value above was picked
        lo = max(0, min(rank - 1 - SHOWN_ROWS // 2, len(order) - SHOWN_ROWS))
        near = order[lo:lo + SHOWN_ROWS]
        frame = table.take(counted[near]).to_arrow().to_pandas()
        frame = frame[[c for c in grid_columns(metric, view) if c in frame.columns]]
        frame.insert(0, label, shown[near])
        if len(order) > SHOWN_ROWS:
            box.caption(f"The {len(near):,} records around the p{q:g} rank ({rank:,} of {len(order):,}), by "
                        f"{label.lower()}, with the fields it is computed from; the download has every record "
                        "and field.")
        else:
            box.caption(f"All {len(order):,} by {label.lower()}, with the fields it is computed from; the download "
                        "has every field.")
        box.dataframe(frame, hide_index=True)

        def _all_csv() -> bytes:
            every = table.take(counted[order]).to_arrow().to_pandas()
            every.insert(0, label, shown[order])
            return every.to_csv(index=False).encode()

        box.download_button(f"All {len(order):,} records counted, every field (CSV)", _all_csv, on_click="ignore",
                            file_name=f"p{q:g}_{metric}_records.csv", mime="text/csv")
