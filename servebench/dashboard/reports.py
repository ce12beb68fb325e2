"""What the dashboard builds from a record set on screen: its report, and the static site to download.

Pure: a page caches :func:`report_for` per file, window, SLO, slicing column and warm-up (the table is read
and validated once per file, so an SLO or window change builds only a report), and calls :func:`site_zip_of`
only when the site is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence

from servebench.analysis.summary import SLO, Report, build_report
from servebench.dashboard.sources import Dataset
from servebench.output.site.inputs import RunInput, unique_names
from servebench.output.site.pages import SiteOptions
from servebench.output.site.site import build_site, site_zip_bytes
from servebench.records.extra_columns import slice_by as sliced
from servebench.records.table import RecordTable


def report_for(table: RecordTable, window_start: float, window_end: float, slo: Sequence[float | None],
               slice_by: str = "slice", warmup_s: float | None = None) -> Report:
    """Return the full report over a window with the SLO's three limits (TTFT, request TPOT, latency; None: none).

    ``slice_by`` names the column whose values are the slices; ``warmup_s`` reports the window's first seconds as
    the slice ``cold`` and the rest as ``warm``.
    """
    ttft_s, tpot_s, latency_s = slo
    return build_report(sliced(table, slice_by), window_start, window_end,
                        SLO(ttft_s=ttft_s, tpot_s=tpot_s, latency_s=latency_s), warmup_s=warmup_s)


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
