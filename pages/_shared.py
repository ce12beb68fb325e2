"""What the dashboard's pages share: the current record set, its window, cached loading, error display.

The record set lives in ``st.session_state`` as a :class:`RecordSource` (bytes plus a name), so every
page (and a timing run that hands over its records) loads it through the same ``read_bytes`` path.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NoReturn, TypeVar

import streamlit as st
from streamlit import config as st_config

from servebench.appsafety import Sharing, upload_size_error
from servebench.errors import ServebenchError
from servebench.extra_columns import extra_columns_note, slice_by as sliced
from servebench.render import fmt_window
from servebench.importers import FORMATS as FOREIGN_FORMATS
from servebench.loaders import LoadedRecords, read_bytes, to_table
from servebench.records import RecordTable, default_window
from servebench.report.inputs import RunInput
from servebench.report.pages import SiteOptions
from servebench.report.site import build_site, site_zip_bytes
from servebench.safetext import safe_text
from servebench.summary import SLO, Report, build_report

REPO = Path(__file__).resolve().parent.parent
SAMPLE_DIR = REPO / "sample_data"
DEFAULT_SAMPLE = "requests_sample.csv"
RECORD_SUFFIXES = (".csv", ".json", ".jsonl", ".ndjson", ".parquet", ".pq")
SOURCE_KEY = "records_source"
T = TypeVar("T")


@dataclass(frozen=True)
class RecordSource:
    """A record file's bytes and where they came from ("sample", "upload" or "timing run")."""

    name: str
    data: bytes
    origin: str
    digest: str
    metadata: dict[str, Any] | None = None  # a timing run's frozen benchmark contract
    steps: list[dict[str, Any]] | None = None  # a timing run's step trace

    @classmethod
    def of(cls, name: str, data: bytes, origin: str, *, metadata: dict[str, Any] | None = None,
           steps: list[dict[str, Any]] | None = None) -> "RecordSource":
        return cls(name, data, origin, hashlib.sha256(data).hexdigest()[:16], metadata, steps)


@dataclass(frozen=True)
class Dataset:
    """The validated records on screen, the window they were validated over, and what the reader said."""

    source: RecordSource
    loaded: LoadedRecords
    table: RecordTable
    window_start: float
    window_end: float
    key: str = ""  # the file's digest and the format it was read with: the cache key of anything built from it

    @property
    def unavailable(self) -> frozenset[str]:
        """Return the metrics the importer said this file cannot give (no timestamps on a shared clock)."""
        return frozenset(self.loaded.metadata.get("unavailable_metrics") or [])


def fail(exc: ServebenchError) -> NoReturn:
    """Show a servebench error as one message (it names file, row and field) and stop the page."""
    st.error(safe_text(exc, multiline=True), icon="🚫")  # user text in it shows as written, never as controls
    st.stop()
    raise AssertionError("unreachable")  # st.stop raises; this keeps type checkers honest


def guarded(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call fn, turning a ServebenchError into an on-page message instead of a traceback."""
    try:
        return fn(*args, **kwargs)
    except ServebenchError as exc:
        fail(exc)


def sample_files() -> list[str]:
    """Return the record files shipped in sample_data/, by name."""
    return sorted(p.name for p in SAMPLE_DIR.iterdir() if p.is_file() and p.suffix.lower() in RECORD_SUFFIXES
                  and not p.name.startswith("profiles"))


def sample_source(name: str) -> RecordSource:
    """Return a sample file as a record source."""
    return RecordSource.of(name, (SAMPLE_DIR / name).read_bytes(), "sample")


def current_source() -> RecordSource:
    """Return the record set in use, starting with the default sample."""
    if SOURCE_KEY not in st.session_state:
        st.session_state[SOURCE_KEY] = sample_source(DEFAULT_SAMPLE)
    return st.session_state[SOURCE_KEY]


def set_source(source: RecordSource) -> None:
    """Make ``source`` the record set every page shows (callbacks and other pages only: it resets the sample picker)."""
    st.session_state[SOURCE_KEY] = source
    if source.origin != "sample":
        st.session_state["records_sample"] = None  # so picking the previous sample again is a change


READ_AS = ("auto", "csv", "json", "jsonl", "parquet", *FOREIGN_FORMATS)


@st.cache_resource(max_entries=8, show_spinner=False)
def _load(digest: str, name: str, fmt: str, _data: bytes) -> LoadedRecords:
    return read_bytes(_data, name, fmt)


def _import_format(loaded_format: str, run: int | None, drop_outside: bool) -> str | None:
    """Return the format string that re-reads another tool's export with the user's options, or None."""
    if loaded_format not in FOREIGN_FORMATS or (run is None and not drop_outside):
        return None
    options = ([f"run={run}"] if run is not None else []) + (["outside_window=drop"] if drop_outside else [])
    return f"{loaded_format}:{','.join(options)}"


def _import_options(src: RecordSource) -> tuple[LoadedRecords, str]:
    """Read the record set with the sidebar's format override and, for another tool's export, its options.

    Return the records and the format string they were read with. Errors show on the page, not inside
    the (collapsed) expander.
    """
    box = st.sidebar.expander("Import options")
    fmt = box.selectbox("Read as", READ_AS, key=f"fmt:{src.digest}",
                        help="auto-detects servebench records and the exports of " + ", ".join(FOREIGN_FORMATS))
    loaded = guarded(_load, src.digest, src.name, fmt, src.data)
    if loaded.format not in FOREIGN_FORMATS:
        box.caption(f"Read as servebench records ({loaded.format}).")
        return loaded, fmt
    runs = int(loaded.metadata.get("runs") or 1)
    run = None
    if runs > 1:
        run = int(box.number_input(f"Run in the file (0 to {runs - 1})", min_value=0, max_value=runs - 1,
                                   value=int(loaded.metadata.get("run_index") or 0), key=f"run:{src.digest}"))
    drop = box.toggle("Leave out warm-up and cool-down requests", key=f"drop:{src.digest}",
                      help="Requests outside the tool's measured window; kept with slice 'warmup' or 'cooldown' "
                           "by default.")
    again = _import_format(loaded.format, run, drop)
    if again is None:
        return loaded, fmt
    return guarded(_load, src.digest, src.name, again, src.data), again


@st.cache_resource(max_entries=16, show_spinner=False)
def _validate(key: str, window_start: float, window_end: float, _loaded: LoadedRecords) -> RecordTable:
    return to_table(_loaded, window_start, window_end)[0]


@st.cache_resource(max_entries=16, show_spinner="Building the report…")
def cached_report(key: str, window_start: float, window_end: float, slo: tuple[float | None, ...],
                  _table: RecordTable, slice_by: str = "slice") -> Report:
    """Return the full report for the current records, window, SLO and slicing column (cached per combination)."""
    ttft_s, tpot_s, latency_s = slo
    return build_report(sliced(_table, slice_by), window_start, window_end,
                        SLO(ttft_s=ttft_s, tpot_s=tpot_s, latency_s=latency_s))


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


def _on_upload() -> None:
    up = st.session_state.get("records_upload")
    if up is not None and upload_error(up) is None:
        set_source(RecordSource.of(up.name, up.getvalue(), "upload"))


def _on_sample() -> None:
    name = st.session_state.get("records_sample")
    if name:
        set_source(sample_source(name))


def _on_window(key: str) -> None:
    st.session_state[f"window:{key}"] = (st.session_state[f"ws:{key}"], st.session_state[f"we:{key}"])


def records_sidebar() -> Dataset:
    """Render the record picker (upload, sample, window) in the sidebar and return the validated records.

    A file that cannot be read or validated shows one error naming file, row and field, then stops the page.
    """
    with st.sidebar:
        st.subheader("Record set")
        st.file_uploader("Upload records", key="records_upload", on_change=_on_upload,
                         help="CSV, JSON, JSONL or Parquet with canonical fields, or another tool's export, "
                              f"up to {upload_limit_mb():,} MB.")
        too_big = upload_error(st.session_state.get("records_upload"), RECORDS_UPLOAD_HINT)
        if too_big:
            st.error(too_big, icon="🚫")
        samples = sample_files()
        src = current_source()
        index = samples.index(src.name) if src.origin == "sample" and src.name in samples else None
        st.selectbox("…or a sample", samples, index=index, key="records_sample", on_change=_on_sample,
                     placeholder="choose a sample file")
        st.caption(f"Showing **{safe_text(src.name)}** ({src.origin}, {len(src.data):,} bytes)")
    loaded, fmt = _import_options(src)
    key = f"{src.digest}:{fmt}"  # the same bytes read another way are another record set
    default_ws, default_we = guarded(default_window, loaded.rows)
    ws, we = st.session_state.get(f"window:{key}", (default_ws, default_we))
    with st.sidebar:  # one input per line: epoch clocks need the width
        st.number_input("Window start (s)", value=float(ws), key=f"ws:{key}", format="%.3f",
                        on_change=_on_window, args=(key,))
        st.number_input("Window end (s)", value=float(we), key=f"we:{key}", format="%.3f",
                        on_change=_on_window, args=(key,))
        st.caption(f"The data spans {fmt_window(default_ws, default_we)}; every record must lie in the window.")
    ws, we = st.session_state.get(f"window:{key}", (default_ws, default_we))
    table = guarded(_validate, key, float(ws), float(we), loaded)
    return Dataset(src, loaded, table, float(ws), float(we), key)


def site_zip(ds: Dataset, slo: SLO | None, slice_by: str | None = None) -> bytes:
    """Return the static report site for the records on screen, zipped (built only when downloaded)."""
    kind = "timing run" if ds.source.metadata else "records"
    run = RunInput(name=ds.source.name, path=ds.source.name, kind=kind, table=ds.table,
                   window_start=ds.window_start, window_end=ds.window_end, format=ds.loaded.format,
                   warnings=list(ds.loaded.warnings), metadata=ds.source.metadata or dict(ds.loaded.metadata) or None,
                   steps=ds.source.steps)
    files = build_site([run], SiteOptions(title=f"servebench: {ds.source.name}", slo=slo, slice_by=slice_by))
    return site_zip_bytes(files)


def show_reader_warnings(ds: Dataset) -> None:
    """Show what an importer could not carry over from another tool's file, and the file's extra columns."""
    extra = extra_columns_note(ds.table.extra, slice_hint="'Break down by' on the Summary page")
    if extra:
        st.info(safe_text(extra), icon=":material/view_column:")
    notes = ds.loaded.warnings
    if not notes:
        return
    label = f"Read as a **{ds.loaded.format}** export: {len(notes)} note{'s' if len(notes) > 1 else ''} on what " \
            "could not be carried over"
    with st.expander(label, expanded=len(notes) <= 2, icon=":material/warning:"):
        for w in notes:
            st.warning(safe_text(w, multiline=True))
