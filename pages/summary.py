"""Summary: the answer on one screen (outcomes, latency and TTFT over time and as CDFs, the eight headline numbers),
then the SLO, the full failure-aware report and its tables, for the records in use."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import streamlit as st

from pages._figures import cause_chart, cdf_series, over_time_charts, rate_curve_charts, record_charts
from pages._prefix_cache import show_prefix_cache
from pages._shared import (
    Dataset,
    build_beside,
    cached_report,
    chart_panel,
    engineer_view,
    guarded,
    metric,
    page_report,
    records_sidebar,
    show_reader_warnings,
    show_server_over_time,
    site_zip,
    slo_inputs,
    static_table,
    unit_choice,
)
from servebench.analysis.multirun import runs_table
from servebench.analysis.summary import Distribution, Report
from servebench.dashboard.overview_svg import cdf_picture, outcome_picture, over_time_picture
from servebench.dashboard.summary_tables import distribution_tables, slice_tables
from servebench.dashboard.wording import headline_title
from servebench.formatting import fmt, fmt_share, fmt_share_of
from servebench.output.figures.over_time import over_time_bins
from servebench.output.figures.retries import fairness_frame, logical_frame
from servebench.output.figures.summary import cause_frame, contract_cells, outcome_cells, slice_frame, status_frame
from servebench.output.plain import label
from servebench.output.safetext import safe_text
from servebench.records.extra_columns import SLICE_COLUMN, slice_choices
from servebench.records.loaders import encode_records
from servebench.records.statuses import STATUS_WORDS
from servebench.records.table import RecordTable


@st.fragment
def cause_panel(ds: Dataset, by_cause: dict[str, int]) -> None:
    """Non-successes by cause as a chart, drawn once its panel is opened."""
    box = chart_panel(st, "Non-success causes as a chart", "causes_chart_open")
    if box.open:
        box.vega_lite_chart(spec=cause_chart(ds.key, ds.window_start, ds.window_end, by_cause), key="cause_fig")


@st.fragment
def timeline_panels(ds: Dataset, unit: str) -> None:
    """Requests over the window, and throughput, TTFT and latency over time, each drawn once its panel is opened."""
    box = chart_panel(st, "Requests over the window (active, in service, waiting)", "timeline_open")
    if box.open:
        box.vega_lite_chart(spec=record_charts(ds.key, ds.window_start, ds.window_end, unit, ds.table)["timeline"],
                            key="timeline_fig")
    title = "Throughput, TTFT and latency over time (warm-up, drift, bursts)"
    if ds.server is not None:
        title += "; the server's running, waiting, KV use and preemptions"
    later = chart_panel(st, title, "over_time_open")
    if later.open:
        for name, spec in over_time_charts(ds.key, ds.window_start, ds.window_end, unit, ds.table).items():
            later.vega_lite_chart(spec=spec, key=f"over_time_{name}")
        show_server_over_time(ds, unit, later)


@st.fragment
def cdf_panel(ds: Dataset, unit: str) -> None:
    """The CDFs of latency, TTFT and TPOT and the stages, drawn once their panel is opened."""
    box = chart_panel(st, "CDFs of latency, TTFT and TPOT with p50, p95, p99 marked; where the time goes",
                      "cdfs_open")
    if box.open:
        charts = record_charts(ds.key, ds.window_start, ds.window_end, unit, ds.table)
        for col, (name, spec) in zip(box.columns(len(charts["cdfs"])), charts["cdfs"].items()):
            col.vega_lite_chart(spec=spec, key=f"cdf_{name}")
        if charts["stages"] is not None:
            box.vega_lite_chart(spec=charts["stages"], key="stage_fig")


@st.fragment
def downloads_panel(ds: Dataset, report: Report, slice_by: str, full_report: Callable[[], Report]) -> None:
    """The records and the report as files, offered once their panel is opened (five buttons less to draw first).

    The report file is ``full_report``'s, with the token times' ITL and stalls that the page's own report leaves out.
    """
    box = st.expander("Downloads: the records (CSV, Parquet, JSONL), the report (JSON), the report site (ZIP)",
                      key="downloads_open", on_change="rerun", icon=":material/download:")
    if not box.open:
        return
    stem = ds.source.name.rsplit(".", 1)[0]
    c = box.columns(5)
    for col, fmt_name, title, mime in zip(c, ("csv", "parquet", "jsonl"), ("CSV", "Parquet", "JSONL"),
                                          ("text/csv", "application/vnd.apache.parquet", "application/jsonl")):
        col.download_button(f"Records ({title})", lambda f=fmt_name: encode_records(ds.table, f),
                            file_name=f"{stem}.normalized.{fmt_name}", mime=mime, on_click="ignore")
    c[3].download_button("Report (JSON)", lambda: full_report().model_dump_json(indent=2),
                         file_name=f"{stem}.report.json", mime="application/json", on_click="ignore")
    c[4].download_button("Report site (ZIP)",
                         lambda: site_zip(ds, report.slo.slo if report.slo else None,
                                          None if slice_by == SLICE_COLUMN else slice_by),
                         file_name=f"{stem}.report-site.zip", mime="application/zip", on_click="ignore",
                         help="A static HTML site that works offline from file://.")


def show_distributions(rows: dict[str, Distribution | None], scale: float, title: str) -> None:
    """Show each metric's percentiles with their intervals, then its max and mean in a narrow table beside."""
    percentiles, extremes = distribution_tables(rows, scale)
    static_table(percentiles, title=title)
    static_table(extremes, width="content")


@st.cache_resource(max_entries=8, show_spinner=False)
def overview_pictures(key: str, window_start: float, window_end: float, unit: str,
                      _table: RecordTable) -> tuple[str, str]:
    """Return the overview's latency and TTFT p95 over time and their CDFs as SVG (per file, window and unit)."""
    bins = over_time_bins(_table, window_start, window_end)
    return over_time_picture(bins, unit), cdf_picture(cdf_series(key, window_start, window_end, _table), unit)


def show_overview(ds: Dataset, report: Report, unit: str, engineer: bool) -> None:
    """The answer on one screen: outcomes, latency and TTFT over time and as CDFs; the eight numbers beside them.

    The pictures are SVG in the page's Markdown, drawn with it (no chart library to load first); the same
    charts, interactive, are in the panels below.
    """
    cols = st.columns([5, 4], gap="medium")  # a number's label (Successful output tokens/s) fits its half
    left, right = cols[0].container(key="overview_charts"), cols[1].container(key="overview_numbers")
    left.markdown(outcome_picture(report.by_status, STATUS_WORDS), unsafe_allow_html=True)
    over_time, cdf = overview_pictures(ds.key, ds.window_start, ds.window_end, unit, ds.table)
    a, b = left.columns(2)
    if "active_requests" in ds.unavailable:
        a.info("No timestamps on a shared clock: nothing to draw over time for this file.")
    else:
        a.markdown(over_time, unsafe_allow_html=True)
    b.markdown(cdf, unsafe_allow_html=True)
    right.markdown(f"**{headline_title(engineer)}**")
    cells = contract_cells(report.summary, ds.unavailable, unit)
    for pair in (cells[i:i + 2] for i in range(0, len(cells), 2)):
        for col, cell in zip(right.columns(2), pair):
            metric(col, cell.key, cell.label, cell.text, cell.help)


st.title("Summary")
ds = records_sidebar()
show_reader_warnings(ds)
st.caption(f"{safe_text(ds.source.name)} · {len(ds.table):,} records · {ds.window_text()}")
engineer = engineer_view()
knobs = st.columns([1, 2, 2])
with knobs[0]:
    unit, scale = unit_choice()  # every time on the page in ms or s: headline numbers, tables, chart axes
slice_by = SLICE_COLUMN
if ds.table.extra:  # columns the schema does not know (gpu, model): any can be the breakdown
    slice_by = knobs[1].selectbox("Break down by", slice_choices(ds.table), key=f"slice_by:{ds.key}",
                                  format_func=safe_text,
                                  help="The column whose values split the report into slices: 'slice', or any "
                                       "column of the file the schema does not know.")
no_clock = ds.unavailable  # metrics an importer could not give (a file without timestamps)
overview_box = st.container(key="overview")  # filled once the report is built, below the SLO's inputs

if int(ds.loaded.metadata.get("runs") or 1) > 1:  # several benchmarks in one export: all of them at a glance
    with st.expander(f"All {ds.loaded.metadata['runs']} runs in this file (pick one under Import options)",
                     icon=":material/stacked_line_chart:"):
        runs = guarded(runs_table, ds.source.data, ds.source.name, ds.loaded.format)
        st.dataframe(runs, hide_index=True)
        for col, (name, spec) in zip(st.columns(2), rate_curve_charts(runs).items()):
            col.vega_lite_chart(spec=spec, key=f"rate_curve_{name}")
meta = ds.source.metadata
if meta:
    run = meta.get("run", {})
    st.success(safe_text(
        f"Timing run of **{meta.get('model', {}).get('name')}** on **{meta.get('runtime', {}).get('device_name')}**"
        f" ({meta.get('runtime', {}).get('dtype')}): {fmt(run.get('offered_requests'))} requests in "
        f"{fmt(run.get('wall_s'))} s, {fmt(run.get('steps'))} engine steps."), icon=":material/timer:")
    for note in run.get("notes", []):
        st.warning(safe_text(note, multiline=True))
    with st.expander("The run's metadata (metadata.json)"):
        st.json(meta, expanded=1)
st.subheader("Service-level objective")
st.caption("The limits change what the page shows (SLO attainment and goodput). A success counts as good when it "
           "meets every limit you set; failures always count as misses.")
slo = slo_inputs()
warmup_s = st.number_input("Warm-up, s (0: none)", min_value=0.0, value=0.0, step=1.0, key=f"warmup:{ds.key}",
                           help="Report the window's first seconds as the slice 'cold' and the rest as 'warm', "
                                "so a cold start is not averaged into the warmed service.") or None
report = guarded(page_report, ds, slo, slice_by, warmup_s)  # no token gaps: Summary shows none
slo_box = st.container()
outcome_box = st.container()

with overview_box:
    show_overview(ds, report, unit, engineer)

with outcome_box:
    st.subheader("Outcomes")
    st.caption("Offered = completed + failed + timed out + cancelled + rejected: every request is counted once.")
    cells = outcome_cells(report)
    for col, cell in zip(st.columns(len(cells)), cells):
        col.metric(cell.label, fmt(cell.count), help=cell.help)
    left, right = st.columns(2)
    static_table(status_frame(report), left)  # the counts above, with shares (no chart: same numbers)
    if report.by_cause:
        static_table(cause_frame(report).assign(cause=lambda f: f["cause"].map(safe_text)), right)
        with right:
            cause_panel(ds, report.by_cause)
    else:
        right.info("Every request succeeded: no causes to break down.")
    if report.duplicate_request_ids:
        st.warning(safe_text(f"{report.duplicate_request_ids} duplicate request IDs, e.g. "
                             f"{', '.join(report.duplicate_request_id_examples)}: a request may be counted twice."))

    st.subheader("Work and concurrency")
    c = st.columns(4)
    metric(c[0], "total_output_tokens", "Output tokens generated", fmt(report.total_output_tokens))
    metric(c[1], "successful_output_tokens", "Useful (successful) output tokens",
           fmt(report.successful_output_tokens))
    metric(c[2], "wasted_output_tokens", "Wasted output tokens", fmt(report.wasted_output_tokens),
           delta=fmt_share_of(report.wasted_output_tokens, report.total_output_tokens),
           delta_color="inverse", delta_arrow="off")
    metric(c[3], "total_prompt_tokens", "Prompt tokens", fmt(report.total_prompt_tokens))
    c = st.columns(4)
    if "active_requests" in no_clock:
        c[0].caption("No timestamps on a shared clock: concurrency over time is unknown for this file.")
    else:
        metric(c[0], "active_requests.peak", "Peak active requests", fmt(report.active_requests.peak))
        metric(c[1], "active_requests.share_of_window_at_peak", "Share of window at that peak",
               fmt_share(report.active_requests.share_of_window_at_peak),
               f"{fmt(report.active_requests.time_at_peak_s)} s at the peak.")
    if report.in_service is not None and "in_service" not in no_clock:
        metric(c[2], "in_service.peak", "Peak in service", fmt(report.in_service.peak))
        metric(c[3], "in_service.share_of_window_at_peak", "Share of window at that peak",
               fmt_share(report.in_service.share_of_window_at_peak),
               f"{fmt(report.in_service.time_at_peak_s)} s at the peak.")
    elif "in_service" not in no_clock:
        c[2].caption("No `admitted` times: in-service concurrency and queue wait are unknown.")
    if "active_requests" not in no_clock:
        timeline_panels(ds, unit)

    st.subheader("Percentiles with 95% confidence intervals")
    st.caption("Nearest rank. A '—' bound means the sample is too small to bound that side. "
               "Failure-aware rows count every non-success as ∞, so a tail made of failures shows as ∞.")
    show_distributions({
        f"Latency ({unit})": report.latency_s, f"TTFT ({unit})": report.ttft_s,
        f"Request TPOT ({unit})": report.request_tpot_s, f"Queue wait ({unit})": report.queue_wait_s,
        f"Prefill ({unit})": report.prefill_s,
    }, scale, "**Success-only**")
    show_distributions({
        f"Latency ({unit})": report.failure_aware_latency_s, f"TTFT ({unit})": report.failure_aware_ttft_s,
    }, scale, "**Failure-aware** (all requests)")
    cdf_panel(ds, unit)
    if report.prefix_cache is not None:
        st.subheader("Prefix cache")
        show_prefix_cache(report.prefix_cache, unit)

with slo_box:
    if report.slo is None:
        st.info("Set a limit above to see SLO attainment and goodput.")
    else:
        c = st.columns(3)
        metric(c[0], "slo.attainment", "SLO attainment", fmt_share(report.slo.attainment),
               f"{report.slo.good_requests:,} good requests of {report.offered:,}.")
        for col, title, key, value in (  # not 'label': that is output.plain's column labeller, used below
                (c[1], "Goodput (requests/s)", "slo.goodput_requests_per_second",
                 report.slo.goodput_requests_per_second),
                (c[2], "Goodput (output tokens/s)", "slo.goodput_output_tokens_per_second",
                 report.slo.goodput_output_tokens_per_second)):
            metric(col, key, title, "n/a" if key in no_clock else fmt(value))

if report.slices:
    st.subheader("Slices" if slice_by == SLICE_COLUMN else f"Slices by {safe_text(slice_by)}")
    counts, rates = slice_tables(slice_frame(report, unit).assign(slice=lambda f: f["slice"].map(safe_text)))
    static_table(counts.rename(columns=label))
    static_table(rates.rename(columns=label))

if report.logical is not None:
    st.subheader("Retries: logical requests")
    st.caption("Each attempt is one record; a logical request is a user's request and its retries "
               "(records that share a logical_id).")
    static_table(logical_frame(report.logical, unit))
if report.fairness is not None:
    st.subheader("Fairness across slices")
    static_table(fairness_frame(report.fairness, unit).assign(slice=lambda f: f["slice"].map(safe_text)).rename(
        columns=label))
    st.caption(f"Jain's index over goodput / weight (weights: {report.fairness.weights_from}): "
               f"{fmt(report.fairness.jain_index)} (1 = in proportion to weight); worst / best TTFT p95: "
               f"{fmt(report.fairness.ttft_p95_ratio)}.")

downloads_panel(ds, report, slice_by,
                partial(cached_report, ds.key, ds.window_start, ds.window_end, slo, ds.table, slice_by, warmup_s))
build_beside(ds, slo)  # Token timing's report, with the token gaps, while the browser draws this page
