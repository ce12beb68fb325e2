"""What the dashboard builds from a record set on screen: its report, and the static site to download.

Pure but for :class:`ReportsBeside`: a page caches :func:`report_for` per file, window, SLO, slicing column and
warm-up (the table is read and validated once per file, so an SLO or window change builds only a report), and
calls :func:`site_zip_of` only when the site is downloaded.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from servebench.analysis.summary import SLO, Report, build_report
from servebench.dashboard.sources import Dataset
from servebench.output.site.inputs import RunInput, unique_names
from servebench.output.site.pages import SiteOptions
from servebench.output.site.site import build_site, site_zip_bytes
from servebench.records.extra_columns import slice_by as sliced
from servebench.records.table import RecordTable


def report_for(table: RecordTable, window_start: float, window_end: float, slo: Sequence[float | None],
               slice_by: str = "slice", warmup_s: float | None = None, tokens: bool = True) -> Report:
    """Return the full report over a window with the SLO's three limits (TTFT, request TPOT, latency; None: none).

    ``slice_by`` names the column whose values are the slices; ``warmup_s`` reports the window's first seconds as
    the slice ``cold`` and the rest as ``warm``. ``tokens`` false leaves the token times out: no ITL, stalls or
    max stall (None, as for records without token times), every other number the same.
    """
    ttft_s, tpot_s, latency_s = slo
    if not tokens:
        table = without_token_times(table)
    return build_report(sliced(table, slice_by), window_start, window_end,
                        SLO(ttft_s=ttft_s, tpot_s=tpot_s, latency_s=latency_s), warmup_s=warmup_s)


def without_token_times(table: RecordTable) -> RecordTable:
    """Return the records without their token times and counts (the same arrays otherwise: no copy)."""
    if table.token_times is None and table.token_counts is None:
        return table
    return dataclasses.replace(table, token_times=None, token_counts=None)


V = TypeVar("V")


class ReportsBeside(Generic[V]):
    """Reports, and what a page draws from them, built in one worker thread while another page is drawn, by key;
    the ``max_entries`` latest are kept.

    Summary shows no number from token times, and their gaps were most of its report on records that carry
    them (1.2 million arrivals: about 0.1 to 0.2 s of the upload on 2 cores); the pages that show them (Token
    timing) get the full report, and the ITL CDF it draws, from here, built while the browser draws Summary.
    """

    def __init__(self, max_entries: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report-beside")
        self._futures: OrderedDict[Hashable, Future[V]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_entries = max_entries

    def start(self, key: Hashable, build: Callable[[], V]) -> None:
        """Build a value under ``key`` in the worker (after what it was given before), unless one is built or
        being built already."""
        with self._lock:
            if key in self._futures:
                self._futures.move_to_end(key)
                return
            self._futures[key] = self._pool.submit(build)
            while len(self._futures) > self._max_entries:
                self._futures.popitem(last=False)

    def get(self, key: Hashable) -> V | None:
        """Return the value built under ``key`` (waiting for it if under way), or None if none was started.

        A build that failed raises its error here, as building it in the caller would have.
        """
        with self._lock:
            future = self._futures.get(key)
        return None if future is None else future.result()


def run_input(ds: Dataset) -> RunInput:
    """Return a record set on screen as the site writer's input: a timing run's metadata and step trace kept."""
    kind = "timing run" if ds.source.metadata else "records"
    return RunInput(name=ds.source.name, path=ds.source.name, kind=kind, table=ds.table,
                    window_start=ds.window_start, window_end=ds.window_end, format=ds.loaded.format,
                    warnings=list(ds.loaded.warnings), metadata=ds.source.metadata or dict(ds.loaded.metadata) or None,
                    steps=ds.source.steps)


def site_zip_of(runs: Sequence[Dataset], slo: SLO | None, slice_by: str | None = None) -> bytes:
    """Return the static report site of ``runs`` (the first leads its title), zipped; runs sharing a name get suffixes."""
    inputs = [run_input(d) for d in runs]
    unique_names(inputs)
    title = f"servebench: {runs[0].source.name}" + (f" and {len(runs) - 1} more" if len(runs) > 1 else "")
    return site_zip_bytes(build_site(inputs, SiteOptions(title=title, slo=slo, slice_by=slice_by)))
