"""What the dashboard's pages share: the current record set, its window, cached loading, error display.

The record set lives in ``st.session_state`` as a :class:`RecordSource` (bytes plus a name), so every
page (and a timing run that hands over its records) loads it through the same ``read_bytes`` path.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, NoReturn, TypeVar

import pandas as pd
import streamlit as st
from streamlit import config as st_config
from streamlit.delta_generator import DeltaGenerator

from servebench.analysis.summary import SLO, Report
from servebench.dashboard.chart_code import chart_chunks, preload_script
from servebench.dashboard.reports import ReportsBeside, report_for, site_zip_of
from servebench.dashboard.server_view import read_server_metrics, server_charts
from servebench.dashboard.sharing import Sharing, upload_size_error
from servebench.dashboard.sources import (
    SERVER_TOKEN_FORMATS,
    Dataset,
    ReadAs,
    RecordSource,
    attach_scrapes,
    fallback_source,
    import_read_as,
    query_float,
    query_limit,
    record_files,
    scenario_files,
    sort_uploads,
    upload_sources,
)
from servebench.dashboard.windows import NO_CLOCK, shared_clock, span_text
from servebench.dashboard.wording import (
    DEFAULT_TIME_UNIT,
    ENGINEER_VIEW_HELP,
    ENGINEER_VIEW_KEY,
    ENGINEER_VIEW_LABEL,
    SLO_TPOT_HELP,
    SLO_TTFT_HELP,
    TIME_UNITS,
    UNIT_HELP,
    engineer_from_query,
    metric_help,
    ms_to_s,
    time_unit,
    unit_scale,
)
from servebench.errors import InputFormatError, RecordValidationError, ServebenchError
from servebench.output.figures import tokens as token_figs
from servebench.output.figures import vegalite
from servebench.output.figures.markdown_table import markdown_table
from servebench.output.figures.records import CdfSeries
from servebench.output.plain import GLOSSARY, export_label, for_people
from servebench.output.safetext import safe_text
from servebench.records.extra_columns import SLICE_COLUMN, extra_columns_note
from servebench.records.importers import FORMATS as FOREIGN_FORMATS
from servebench.records.loaders import LoadedRecords, read_bytes
from servebench.records.server_samples import ServerSamples
from servebench.records.table import RecordTable
from servebench.records.validation_report import bad_rows_text
from servebench.records.window_zoom import TrimmedRecords, full_table, trim
from servebench.serving.scenario import Scenario, load_scenario, scenario_from_bytes

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DIR = REPO / "sample_data"
SCENARIO_DIR = SAMPLE_DIR / "scenarios"
STEP_TRACE_KEY = "timing_run_steps"  # (name, step trace) of the last timing run: the Load sweep page fits on it
DEFAULT_SAMPLE = "requests_sample.csv"
SOURCE_KEY = "records_source"
T = TypeVar("T")


def fail(exc: ServebenchError) -> NoReturn:
    """Show a servebench error as one message (it names file, row and field) and stop the page."""
    # user text in it shows as written, never as controls; numpy reprs and CLI syntax become plain words
    st.error(safe_text(for_people(str(exc)), multiline=True), icon="🚫")
    st.stop()
    raise AssertionError("unreachable")  # st.stop raises; this keeps type checkers honest


def guarded(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call fn, turning a ServebenchError into an on-page message instead of a traceback."""
    try:
        return fn(*args, **kwargs)
    except ServebenchError as exc:
        fail(exc)


def chart_panel(parent: DeltaGenerator, title: str, key: str) -> DeltaGenerator:
    """Return a panel whose charts are built and drawn only once it is opened (it stays open for the session).

    Drawn in place, Summary's six charts took its first view from about 2.7 to 4.4 s on a 2-core machine, and
    Compare's six 0.9 s where a bare page's first load took 1.4 s (benchmarks/results/dashboard.md); the pages' metrics and tables give
    their key numbers without them.
    Call it in a fragment (``st.fragment``): opening the panel then reruns the panel alone, not the page
    (a whole page's rerun was about half the time of opening the CDF panel).
    """
    return parent.expander(title, key=key, on_change="rerun", icon=":material/bar_chart:")


def sample_files() -> list[str]:
    """Return the record files shipped in sample_data/, by name."""
    return record_files(SAMPLE_DIR)


def sample_scenarios() -> list[str]:
    """Return the scenario files shipped in sample_data/scenarios/, by name."""
    return scenario_files(SCENARIO_DIR)


def chosen_scenario(upload: Any, sample: str) -> Scenario:
    """Return the uploaded scenario (YAML or JSON) if there is one, else the named sample; errors stop the page."""
    if upload is None:
        return guarded(load_scenario, SCENARIO_DIR / sample)
    if (too_big := upload_error(upload)) is not None:
        fail(InputFormatError(too_big))
    return guarded(scenario_from_bytes, upload.getvalue(), upload.name)


def sample_source(name: str) -> RecordSource:
    """Return a sample file as a record source."""
    return RecordSource.of(name, (SAMPLE_DIR / name).read_bytes(), "sample")


RUNS_KEY = "held_runs"  # digest -> RecordSource: every record set held at once (what Compare offers)
LAST_GOOD_KEY = "last_good"  # (RecordSource, ReadAs, window) of the last record set that loaded and validated
READ_AS_KEY = "read_as"  # digest -> the ReadAs that record set was last read with


def held_runs() -> dict[str, RecordSource]:
    """Return the record sets held at once (uploads, samples picked, timing runs), oldest first."""
    return st.session_state.setdefault(RUNS_KEY, {})


def hold(source: RecordSource) -> None:
    """Keep ``source`` among the held record sets (and in the upload store, so a reload finds it)."""
    held_runs()[source.digest] = source
    if source.origin != "sample":
        _upload_store()[source.digest] = source


@st.cache_resource(show_spinner=False)
def _upload_store() -> dict[str, RecordSource]:
    """Uploads and timing runs by digest, for this server's lifetime: ``?run=DIGEST`` reopens one after a reload."""
    return {}


def current_source() -> RecordSource:
    """Return the record set in use: the URL's ``run``, else the default sample."""
    if SOURCE_KEY not in st.session_state:
        wanted = st.query_params.get("run")
        stored = _upload_store().get(wanted or "")
        if stored is not None:
            src = stored
        elif wanted and wanted in sample_files():
            src = sample_source(wanted)
        else:
            src = sample_source(DEFAULT_SAMPLE)
        st.session_state[SOURCE_KEY] = src
        hold(src)
    return st.session_state[SOURCE_KEY]


def set_source(source: RecordSource) -> None:
    """Make ``source`` the record set every page shows (callbacks and other pages only: it resets the sample picker)."""
    st.session_state[SOURCE_KEY] = source
    hold(source)
    if source.origin != "sample":
        st.session_state["records_sample"] = None  # so picking the previous sample again is a change


READ_AS = ("auto", "csv", "json", "jsonl", "parquet", *FOREIGN_FORMATS)


@st.cache_resource(max_entries=8, show_spinner=False)
def _load(digest: str, name: str, read_as_key: str, _data: bytes, _read_as: ReadAs) -> LoadedRecords:
    return read_bytes(_data, name, _read_as.fmt, _read_as.options)


def _read(src: RecordSource, read_as: ReadAs) -> LoadedRecords:
    """Read a record set as asked (cached per file and ReadAs); a ServebenchError propagates."""
    return _load(src.digest, src.name, read_as.key, src.data, read_as)


KEPT_KEY = "kept_import_options"  # widget key -> value of the sidebar's import options, never cleaned up


def _carried(key: str) -> str:
    """Return ``key`` with its widget's last value restored, so an import option holds on every page.

    Each page's widgets are its own to Streamlit: on a page switch the toggle drawn anew starts at its
    default, and a page without the sidebar drops the state. The last value is kept aside and set
    again (before the widget is drawn) on every run.
    """
    kept = st.session_state.setdefault(KEPT_KEY, {})
    if key in st.session_state:
        kept[key] = st.session_state[key]
    if key in kept:
        st.session_state[key] = kept[key]
    return key


def _import_options(src: RecordSource) -> tuple[LoadedRecords, ReadAs]:
    """Read the record set with the sidebar's format override and, for another tool's export, its options.

    Return the records and how they were read; a ServebenchError propagates.
    """
    box = st.sidebar.expander("Import options")
    fmt = box.selectbox("Read as", READ_AS, key=_carried(f"fmt:{src.digest}"),
                        help="auto-detects servebench records and the exports of " + ", ".join(FOREIGN_FORMATS))
    read_as = ReadAs(fmt)
    loaded = _read(src, read_as)
    if loaded.format not in FOREIGN_FORMATS:
        box.caption(f"Read as {export_label(loaded.format)}.")
        return loaded, read_as
    runs = int(loaded.metadata.get("runs") or 1)
    run = None
    if runs > 1:
        key = _carried(f"run:{src.digest}")
        first = {} if key in st.session_state else {"value": int(loaded.metadata.get("run_index") or 0)}
        run = int(box.number_input(f"Run in the file (0 to {runs - 1})", min_value=0, max_value=runs - 1,
                                   key=key, **first))
    drop = box.toggle("Leave out warm-up and cool-down requests", key=_carried(f"drop:{src.digest}"),
                      help="Requests outside the tool's measured window; kept with slice 'warmup' or 'cooldown' "
                           "by default.")
    server = loaded.format in SERVER_TOKEN_FORMATS and box.toggle(
        SERVER_TOKENS_LABEL, key=_carried(server_tokens_key(src)), help=SERVER_TOKENS_HELP)
    again = import_read_as(loaded.format, run, drop, server)
    return (loaded, read_as) if again is None else (_read(src, again), again)


SERVER_TOKENS_LABEL = "Count the server's output tokens"
SERVER_TOKENS_HELP = ("AIPerf counts output tokens with its client tokenizer, while each streamed chunk is one "
                      "server token, so its inter-chunk latencies fit only the server's count (its usage report). "
                      "On: output tokens are the server's, and each success keeps its token times (inter-token "
                      "latency on Token timing). Like `--format aiperf:tokens=server`.")


def server_tokens_key(src: RecordSource) -> str:
    """Return the widget key of the 'Count the server's output tokens' toggle for a record set."""
    return f"tokens:{src.digest}"


@st.cache_resource(max_entries=16, show_spinner=False)
def _validate(key: str, _loaded: LoadedRecords) -> RecordTable:
    """Validate every record once per file and format, with no window (the window only zooms)."""
    return full_table(_loaded)


@st.cache_resource(max_entries=32, show_spinner=False)
def _trim(key: str, window_start: float, window_end: float, _table: RecordTable) -> TrimmedRecords:
    return trim(_table, window_start, window_end)


@st.cache_resource(max_entries=16, show_spinner="Building the report…")
def cached_report(key: str, window_start: float, window_end: float, slo: tuple[float | None, ...],
                  _table: RecordTable, slice_by: str = "slice", warmup_s: float | None = None,
                  tokens: bool = True) -> Report:
    """Return the full report for the current records, window, SLO, slicing column and warm-up (cached per combination).

    ``warmup_s`` reports the window's first seconds as the slice ``cold`` and the rest as ``warm``; ``tokens``
    false leaves the token times' ITL and stalls out (Summary shows neither).
    """
    return report_for(_table, window_start, window_end, slo, slice_by, warmup_s, tokens)


@st.cache_resource(show_spinner=False)
def _reports_beside() -> ReportsBeside[Any]:
    return ReportsBeside(max_entries=16)  # a report and its ITL CDF for each of the 8 latest record sets


def sharing() -> Sharing:
    """Return where the dashboard listens (Streamlit's server.address) and whether remote work is allowed."""
    return Sharing.of(st_config.get_option("server.address"), os.environ)


def upload_limit_mb() -> int:
    """Return the largest upload the dashboard takes, in MB (server.maxUploadSize, .streamlit/config.toml)."""
    return int(st_config.get_option("server.maxUploadSize"))


def upload_error(up: Any, hint: str = "") -> str | None:
    """Return the message naming the size limit when an uploaded file is over it, else None."""
    return None if up is None else upload_size_error(up.name, up.size, upload_limit_mb(), hint)


RECORDS_UPLOAD_HINT = "Summarize larger files with `servebench summarize FILE`."


def _uploads() -> list[Any]:
    ups = st.session_state.get("records_upload")
    return [] if ups is None else list(ups) if isinstance(ups, (list, tuple)) else [ups]


SERVER_KEY = "server_metrics_files"  # record set digest -> RecordSource of the server's scrapes that go with it


SEEN_UPLOADS_KEY = "seen_upload_ids"  # the uploader's file ids already handled: a new id is the newest file
UPLOAD_DIGESTS_KEY = "upload_digests"  # the uploader's file id -> its bytes' digest: a held file is hashed once


def _on_upload() -> None:
    """Hold every uploaded file; show the newest; a file removed with its x is let go (back to the last good set).

    A server-metrics file (:func:`is_server_metrics_file`) is no record set: it joins the record set uploaded
    with it, else the one on screen.
    """
    held = held_runs()
    seen = st.session_state.setdefault(SEEN_UPLOADS_KEY, set())
    ups = [up for up in _uploads() if upload_error(up) is None]
    sources = upload_sources([(up.file_id, up.name, up.getvalue()) for up in ups],
                             st.session_state.setdefault(UPLOAD_DIGESTS_KEY, {}))
    uploads = sort_uploads(sources, held, fresh={i for i, up in enumerate(ups) if up.file_id not in seen})
    seen.update(up.file_id for up in ups)
    for src in uploads.records.values():
        if src.digest not in held:
            hold(src)
    for digest, src in list(held.items()):
        if src.origin == "upload" and digest not in uploads.records:
            del held[digest]
    if uploads.newest is not None:
        set_source(uploads.newest)
    current = st.session_state.get(SOURCE_KEY)
    if current is not None and current.digest not in held:
        st.session_state[SOURCE_KEY] = current = _fallback_source()
    attach_scrapes(st.session_state.setdefault(SERVER_KEY, {}), uploads.scrapes, current)


@st.cache_resource(max_entries=4, show_spinner=False)
def _server_samples(digest: str, name: str, _data: bytes) -> ServerSamples:
    return read_server_metrics(name, _data)


@st.cache_resource(max_entries=8, show_spinner=False)
def _server_charts(key: str, server_name: str, window_start: float, window_end: float, unit: str,
                   _table: RecordTable, _samples: ServerSamples) -> list[dict[str, Any]]:
    return server_charts(_table, _samples, window_start, window_end, unit)


def show_server_over_time(ds: Dataset, unit: str, where: Any = None) -> None:
    """Draw the server's running, waiting, KV use and preemptions under the client's TTFT and offered load."""
    if ds.server is None:
        return
    box = where or st
    box.caption(f"The server's own metrics ({safe_text(ds.server_name or '')}), on the records' time axis: "
                "every chart below spans the same window.")
    for i, spec in enumerate(_server_charts(ds.key, ds.server_name or "", ds.window_start, ds.window_end, unit,
                                            ds.table, ds.server)):
        box.vega_lite_chart(spec=spec, key=f"server_over_time_{i}")


def _with_server(ds: Dataset) -> Dataset:
    """Return ``ds`` with the server's metrics uploaded with it; a file that cannot be read is one error line."""
    scrape = st.session_state.get(SERVER_KEY, {}).get(ds.source.digest)
    if scrape is None:
        return ds
    try:
        samples = _server_samples(scrape.digest, scrape.name, scrape.data)
    except ServebenchError as exc:
        st.error(safe_text(for_people(str(exc))), icon="🚫")
        return ds
    st.sidebar.caption(f"Server metrics: **{safe_text(scrape.name)}** ({len(samples):,} samples)")
    return replace(ds, server=samples, server_name=scrape.name)


def _fallback_source() -> RecordSource:
    """Return the last good record set if still held, else the newest held one, else the default sample."""
    last = st.session_state.get(LAST_GOOD_KEY)
    return fallback_source(held_runs(), None if last is None else last[0], sample_source(DEFAULT_SAMPLE))


def _on_sample() -> None:
    name = st.session_state.get("records_sample")
    if name:
        set_source(sample_source(name))


def _on_window(key: str, origin_s: float) -> None:
    """Keep the window the sidebar's inputs give, in seconds from the first request, on the file's clock."""
    st.session_state[f"window:{key}"] = (origin_s + st.session_state[f"ws:{key}"],
                                         origin_s + st.session_state[f"we:{key}"])


def _query_float(name: str) -> float | None:
    return query_float(st.query_params, name)


def _window(key: str, default_ws: float, default_we: float) -> tuple[float, float]:
    """Return the window chosen for a record set: set in the sidebar, else from the URL, else the data's span."""
    chosen = st.session_state.get(f"window:{key}")
    if chosen is None:
        # the URL's window belongs to the record set the session opened with, so it is read once
        qs, qe = (None, None) if st.session_state.get("url_window_read") else (_query_float("ws"), _query_float("we"))
        st.session_state["url_window_read"] = True
        chosen = (default_ws if qs is None else qs, default_we if qe is None else qe)
        st.session_state[f"window:{key}"] = chosen
    return float(chosen[0]), float(chosen[1])


def _show_load_error(exc: ServebenchError, src: RecordSource) -> None:
    """Show why a record set cannot be used: the message, and for a record defect the first bad rows (up to 10)."""
    text = for_people(str(exc))
    if isinstance(exc, RecordValidationError):
        try:
            listed = bad_rows_text(_read(src, ReadAs(st.session_state.get(f"fmt:{src.digest}", "auto"))).rows)
        except ServebenchError:
            listed = None
        if listed and listed.count("\n- ") > 1:  # more than one bad row: list them so one pass fixes them all
            text = f"{text}\n\n{listed}"
    st.error(safe_text(text, multiline=True), icon="🚫")


def _dataset(src: RecordSource, loaded: LoadedRecords, read_as: ReadAs, window: tuple[float, float] | None,
             widgets: bool) -> Dataset:
    """Validate a record set once, then zoom to the window (the sidebar's inputs when ``widgets``)."""
    key = f"{src.digest}:{read_as.key}"  # the same bytes read another way are another record set
    full = _validate(key, loaded)
    default_ws, default_we = float(full.start.min()), float(full.end.max())
    ws, we = window if window is not None else _window(key, default_ws, default_we)
    shared = shared_clock(loaded.metadata.get("unavailable_metrics") or [])
    if widgets and not shared:  # every request on its own clock from 0 s: no time span to choose
        st.sidebar.caption(f"No window: {NO_CLOCK}, so there is no time span to choose; all {len(full):,} "
                           "records are used.")
        ws, we = default_ws, default_we
    elif widgets:
        help_ = "Seconds from the first request's start (the sidebar says when that was)."
        with st.sidebar:
            st.number_input("Window start (s)", value=ws - default_ws, key=f"ws:{key}", format="%.3f",
                            on_change=_on_window, args=(key, default_ws), help=help_)
            st.number_input("Window end (s)", value=we - default_ws, key=f"we:{key}", format="%.3f",
                            on_change=_on_window, args=(key, default_ws), help=help_)
            st.caption(f"{span_text(default_ws, default_we, len(full))} The window zooms: records not wholly "
                       "inside it are left out and counted.")
        ws, we = _window(key, default_ws, default_we)
    zoom = _trim(key, ws, we, full)
    return Dataset(src, loaded, zoom.table, ws, we, key, zoom=zoom, read_as=read_as, origin_s=default_ws)


def records_sidebar() -> Dataset:
    """Render the record picker (upload, samples, window) in the sidebar and return the records to show.

    A file that cannot be read or validated shows one error naming file, row and field (and the first bad
    rows); the page then goes on with the last record set that loaded, so a bad file never wipes it.
    """
    with st.sidebar:
        st.subheader("Record sets")
        st.file_uploader("Upload records", key="records_upload", on_change=_on_upload, accept_multiple_files=True,
                         help="One or more files: CSV, JSON, JSONL or Parquet with canonical fields, or another "
                              f"tool's export, up to {upload_limit_mb():,} MB each. Every file is kept for Compare. "
                              "A load run's server_metrics.parquet (or AIPerf's server_metrics_export.parquet) "
                              "goes with the records uploaded with it: Summary and Diagnosis then show the "
                              "server over time.")
        for up in _uploads():
            too_big = upload_error(up, RECORDS_UPLOAD_HINT)
            if too_big:
                st.error(too_big, icon="🚫")
        samples = sample_files()
        src = current_source()
        index = samples.index(src.name) if src.origin == "sample" and src.name in samples else None
        st.selectbox("…or a sample", samples, index=index, key="records_sample", on_change=_on_sample,
                     placeholder="choose a sample file")
        held = held_runs()
        if len(held) > 1:
            names = {d: f"{s.name} ({s.origin})" for d, s in held.items()}
            # a radio wraps a long file name; a select cut 'guidellm-0.8.1-errors.json (upload)' off at 1,400 px
            st.radio("Showing", list(names), index=list(names).index(src.digest) if src.digest in names else 0,
                         format_func=lambda d: safe_text(names[d]), key=f"showing:{src.digest}",
                         on_change=_on_showing, args=(f"showing:{src.digest}",),
                         help="Every record set you uploaded or opened is kept; Compare shows them side by side.")
        st.caption(f"Showing **{safe_text(src.name)}** ({src.origin}, {len(src.data):,} bytes)")
    try:
        loaded, read_as = _import_options(src)
        ds = _dataset(src, loaded, read_as, None, widgets=True)
    except ServebenchError as exc:
        _show_load_error(exc, src)
        last = st.session_state.get(LAST_GOOD_KEY)
        if last is None:
            st.stop()
        good, good_read_as, good_window = last
        st.info(safe_text(f"Still showing **{good.name}**, the last record set that loaded. Fix the file, or remove "
                          "it with its x, to go on."), icon=":material/history:")
        ds = guarded(lambda: _dataset(good, _read(good, good_read_as), good_read_as, good_window, widgets=False))
    else:
        st.session_state[LAST_GOOD_KEY] = (src, read_as, (ds.window_start, ds.window_end))
        st.session_state.setdefault(READ_AS_KEY, {})[src.digest] = read_as
        _share_state(ds)
    ds = _with_server(ds)
    if ds.zoom is not None and ds.zoom.left_out:
        if not len(ds.table):
            st.warning(f"The {ds.window_text()} keeps none of the "
                       f"{ds.zoom.total:,} records: widen it in the sidebar.", icon=":material/zoom_out:")
            st.stop()
        st.info(ds.zoom.note() or "", icon=":material/zoom_in:")
    return ds


def _on_showing(widget_key: str) -> None:
    digest = st.session_state.get(widget_key)
    if digest in held_runs():
        set_source(held_runs()[digest])


def _share_state(ds: Dataset) -> None:
    """Put the record set and window in the URL, so a link (or a reload) reopens this view."""
    st.query_params["run"] = ds.source.digest if ds.source.origin != "sample" else ds.source.name
    st.query_params["ws"] = repr(ds.window_start)  # full precision: epoch clocks need every digit
    st.query_params["we"] = repr(ds.window_end)


def dataset_of(src: RecordSource) -> Dataset:
    """Return a held record set read as it was last read, over its last window (for Compare; raises ServebenchError)."""
    read_as = st.session_state.get(READ_AS_KEY, {}).get(src.digest, ReadAs())
    loaded = _read(src, read_as)
    key = f"{src.digest}:{read_as.key}"
    window = st.session_state.get(f"window:{key}")
    if window is None:
        full = _validate(key, loaded)
        window = (float(full.start.min()), float(full.end.max()))
    return _dataset(src, loaded, read_as, (float(window[0]), float(window[1])), widgets=False)


def held_datasets(digests: Collection[str] | None = None) -> list[Dataset]:
    """Return every held record set that loads (or those of ``digests``), as last read and zoomed.

    Those that fail to load are left out.
    """
    out = []
    for src in held_runs().values():
        if digests is not None and src.digest not in digests:
            continue
        try:
            out.append(dataset_of(src))
        except ServebenchError:
            continue
    return out


def site_zip(ds: Dataset | list[Dataset], slo: SLO | None, slice_by: str | None = None) -> bytes:
    """Return the static report site for the record sets in use, zipped (built only when downloaded).

    Given one dataset, the site holds it and every other held record set that loads (like
    ``servebench report RUN...``), the one on screen first.
    """
    if isinstance(ds, Dataset):
        others = [d for d in held_datasets() if d.source.digest != ds.source.digest] if _in_streamlit() else []
        runs = [ds, *others]
    else:
        runs = list(ds)
    return site_zip_of(runs, slo, slice_by)


def _in_streamlit() -> bool:
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    return get_script_run_ctx() is not None


def show_reader_warnings(ds: Dataset) -> None:
    """Show what an importer could not carry over from another tool's file, and the file's extra columns."""
    extra = extra_columns_note(ds.table.extra, slice_hint="'Break down by' on the Summary page")
    if extra:
        st.info(safe_text(extra), icon=":material/view_column:")
    notes = ds.loaded.warnings
    if not notes:
        return
    label = f"Read as {export_label(ds.loaded.format)}: {len(notes)} note{'s' if len(notes) > 1 else ''} on " \
            "what could not be carried over"
    with st.expander(label, expanded=len(notes) <= 2, icon=":material/warning:"):
        for w in notes:
            st.warning(safe_text(for_people(w), multiline=True))


# Summary's SLO limits: (session key and URL parameter, label, step, the parameter in seconds an older link carries).
# TTFT and request TPOT are typed in ms, as every page shows them (seconds until 2026-12-03); latency in seconds.
SLO_FIELDS = (("slo_ttft_ms", "TTFT limit (ms)", 100.0, "slo_ttft"),
              ("slo_tpot_ms", "Request TPOT limit (ms)", 10.0, "slo_tpot"),
              ("slo_latency", "Latency limit (s)", 0.5, None))
SLO_HELP = {"slo_ttft_ms": SLO_TTFT_HELP, "slo_tpot_ms": SLO_TPOT_HELP}


def _slo_s(typed: list[float | None]) -> tuple[float | None, float | None, float | None]:
    """Return the limits as typed in SLO_FIELDS (0 or empty: none) in seconds, as the library takes them."""
    out = [ms_to_s(v or None) if seconds_name else v or None for (*_, seconds_name), v in zip(SLO_FIELDS, typed)]
    return out[0], out[1], out[2]


def current_slo() -> tuple[float | None, float | None, float | None]:
    """Return the SLO limits Summary's inputs hold in this session, in seconds (None: no limit), for other pages."""
    return _slo_s([st.session_state.get(name) for name, *_ in SLO_FIELDS])


def summary_report(ds: Dataset, slo: tuple[float | None, ...]) -> Report:
    """Return the report Summary shows for ``ds`` over its window with ``slo`` (its default slicing, no warm-up),
    with the token times' ITL and stalls.

    Called with the very arguments Summary passes to :func:`cached_report`, so a page opened after Summary
    (Compare, Token timing) reuses the report built there rather than building another over the same rows; for
    records with token times, Summary builds its own without them and this one beside (:func:`build_beside`).
    """
    beside = _reports_beside().get(_beside_key(ds, slo))
    if beside is not None:
        return beside
    return cached_report(ds.key, ds.window_start, ds.window_end, slo, ds.table, SLICE_COLUMN, None)


def page_report(ds: Dataset, slo: tuple[float | None, ...], slice_by: str, warmup_s: float | None) -> Report:
    """Return Summary's report: for records with token times, without their ITL and stalls, which it does not show.

    On 100,000 records with 1.2 million token arrivals the gaps were 0.1 to 0.2 s of an upload on 2 cores; the
    report with them (:func:`summary_report`, for Token timing and Compare) is built once Summary has been sent
    to the browser (:func:`build_beside`). Without token times both reports are the one cached report.
    """
    return cached_report(ds.key, ds.window_start, ds.window_end, slo, ds.table, slice_by, warmup_s,
                         ds.table.token_times is None)


def _beside_key(ds: Dataset, slo: tuple[float | None, ...]) -> tuple[Any, ...]:
    return ds.key, ds.window_start, ds.window_end, tuple(slo)


def _itl_key(ds: Dataset) -> tuple[Any, ...]:
    return "itl", ds.key, ds.window_start, ds.window_end  # the ITL CDF depends on the records alone, not the SLO


def build_beside(ds: Dataset, slo: tuple[float | None, ...]) -> None:
    """Start building :func:`summary_report`'s report, then Token timing's ITL CDF, in a worker thread, for
    records with token times.

    Call it at the end of Summary: the worker runs while the browser draws the page, and Token timing, opened
    next, finds both built (or waits for the rest) rather than building them then (the CDF of 1.2 million gaps
    took 0.1 s of its run).
    """
    if ds.table.token_times is None:
        return
    table, window_start, window_end = ds.table, ds.window_start, ds.window_end
    beside = _reports_beside()
    beside.start(_beside_key(ds, slo), lambda: report_for(table, window_start, window_end, slo, SLICE_COLUMN, None))
    beside.start(_itl_key(ds), lambda: itl_cdf(table))


def itl_cdf(table: RecordTable) -> CdfSeries | None:
    """Return Token timing's ITL CDF of ``table``: every gap between tokens of successes, thinned for a line."""
    return token_figs.itl_series(table, max_points=vegalite.LINE_POINTS)


def itl_beside(ds: Dataset) -> CdfSeries | None:
    """Return the ITL CDF of ``ds`` that :func:`build_beside` built (waiting for it if under way), or None if none
    was started (the caller builds it)."""
    return _reports_beside().get(_itl_key(ds))


def slo_inputs() -> tuple[float | None, float | None, float | None]:
    """Render the three SLO limits in a row (seeded once from the URL, written back to it); return them in seconds.

    A link from before TTFT and TPOT took ms (``slo_ttft=0.4``) still opens with its limits (400 ms), and is
    rewritten with the new parameters.
    """
    values = []
    for col, (name, text, step, seconds_name) in zip(st.columns(3), SLO_FIELDS):
        if name not in st.session_state:
            st.session_state[name] = query_limit(st.query_params, name, seconds_name)
        v = col.number_input(text, min_value=0.0, step=step, placeholder="no limit", key=name,
                             help=SLO_HELP.get(name))
        values.append(v)
        if seconds_name and seconds_name in st.query_params:
            del st.query_params[seconds_name]
        if v:
            st.query_params[name] = f"{v:.15g}"  # up to 15 digits: what was typed, not rounded to six
        elif name in st.query_params:
            del st.query_params[name]
    return _slo_s(values)


UNIT_KEPT = "unit_kept"  # the unit chosen, outside the widget's own key (see _kept_choice)
ENGINEER_KEPT = "engineer_view_kept"  # the view chosen, outside the widget's own key


def _keep(key: str, kept_key: str) -> None:
    st.session_state[kept_key] = st.session_state.get(key)


def _kept_choice(key: str, kept_key: str, initial: Callable[[], Any]) -> dict[str, Any]:
    """Give the widget ``key`` the choice kept under ``kept_key`` (else ``initial()``) before it is drawn; return the
    widget's arguments that keep the next choice (its key and callback).

    Streamlit drops a widget's value when the page that drew it is left, and the state of a widget drawn before
    ``st.navigation`` on the session's first rerun (it takes that run for a page change): each page's unit toggle
    came up unset after another page's, and the engineer toggle's first click was lost. A key of its own, set by
    the widget's callback, carries the choice through both.
    """
    kept = st.session_state.get(kept_key)
    st.session_state[key] = initial() if kept is None else kept
    return {"key": key, "on_change": _keep, "args": (key, kept_key)}


def unit_choice() -> tuple[str, float]:
    """Render the ms / s toggle (milliseconds unless the URL says s; kept in the URL); return the unit and factor."""
    kept = _kept_choice("unit", UNIT_KEPT, lambda: time_unit(st.query_params.get("unit")))
    unit = st.segmented_control("Time unit", list(TIME_UNITS), help=UNIT_HELP, **kept) or DEFAULT_TIME_UNIT
    st.session_state[UNIT_KEPT] = unit
    st.query_params["unit"] = unit
    return unit, unit_scale(unit)


def engineer_toggle() -> None:
    """Render the sidebar's engineer view toggle (on every page: app.py draws it; ``view=engineer`` in the URL)."""
    kept = _kept_choice(ENGINEER_VIEW_KEY, ENGINEER_KEPT, lambda: engineer_from_query(st.query_params))
    on = st.sidebar.toggle(ENGINEER_VIEW_LABEL, help=ENGINEER_VIEW_HELP, **kept)
    st.session_state[ENGINEER_KEPT] = on
    if on:
        st.query_params["view"] = "engineer"
    elif "view" in st.query_params:
        del st.query_params["view"]


def engineer_view() -> bool:
    """Return whether the engineer view is on: field keys and the spec's terms shown."""
    return bool(st.session_state.get(ENGINEER_VIEW_KEY))


def metric(where: Any, key: str, label: str, value: str, detail: str = "", **kwargs: Any) -> None:
    """Show one number with its one-line meaning as its help (and, in the engineer view, its field key below).

    ``key`` is the report's name for it (:data:`servebench.dashboard.wording.METRIC_MEANINGS`); ``detail``
    says how it is computed; ``kwargs`` go to ``st.metric`` (delta, delta_color, ...).
    """
    engineer = engineer_view()
    where.metric(label, value, help=metric_help(key, detail, engineer=engineer), **kwargs)
    if engineer:
        where.caption(f"`{key}`")


CHART_CODE_KEY = "chart_code"  # the hidden container of the script that loads the chart code once the page is idle


@st.cache_resource(show_spinner=False)
def _chart_preload() -> str | None:
    chunks = chart_chunks(Path(st.__file__).parent / "static" / "static" / "js")
    return None if chunks is None else preload_script(chunks)


def preload_chart_code() -> None:
    """Have the browser fetch and compile the chart code once the page is idle (servebench.dashboard.chart_code).

    Drawn hidden, on every page (app.py), before the page's own elements; nothing where the Streamlit build differs.
    """
    script = _chart_preload()
    if script is None:
        return
    st.html(f"<style>.st-key-{CHART_CODE_KEY} {{display: none}}</style>")  # style only: takes no room
    st.container(key=CHART_CODE_KEY).html(script, unsafe_allow_javascript=True)


def glossary() -> None:
    """Explain the metrics in plain words (a sidebar panel on every page), as one element: each is drawn."""
    with st.sidebar.expander("Glossary", icon=":material/menu_book:"):
        st.markdown("\n\n".join(f"**{term}**: {text}" for term, text in GLOSSARY.items()))


def static_table(frame: pd.DataFrame, where: Any = None, *, width: str = "stretch", title: str = "") -> None:
    """Show a small table as a Markdown table, every number formatted by ``fmt`` (thousands separators).

    An interactive grid (st.dataframe) is a canvas the browser loads code for and draws after the run has ended:
    Summary's nine grids were about a second of its first view on a 2-core machine
    (benchmarks/results/dashboard.md). A static ``st.table`` still loads 0.75 MB of Arrow code on a first
    visit; a Markdown table is drawn by the markdown element the page already uses. ``width`` "content" keeps
    a narrow table narrow; "stretch" lets it take the column. ``title``, Markdown, is a line above the table in
    the same element (one element less to draw).
    """
    (where or st).markdown(f"{title}\n\n{markdown_table(frame)}" if title else markdown_table(frame), width=width)
