"""servebench.dashboard.reports: the report of the records on screen, and the site of several, without Streamlit."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from servebench.analysis.summary import SLO
from servebench.dashboard.reports import report_for, run_input, site_zip_of
from servebench.dashboard.sources import Dataset, RecordSource
from servebench.records.loaders import read_bytes
from servebench.records.window_zoom import full_table


def _dataset(name: str, recs: list[dict], metadata: dict | None = None) -> Dataset:
    data = json.dumps(recs).encode()
    loaded = read_bytes(data, name)
    table = full_table(loaded)
    return Dataset(RecordSource.of(name, data, "upload", metadata=metadata), loaded, table,
                   float(table.start.min()), float(table.end.max()))


RECS = [{"start": 0, "first_token": 0.25, "end": 1, "status": "success", "output_tokens": 4, "slice": "chat"},
        {"start": 1, "first_token": 1.5, "end": 3, "status": "success", "output_tokens": 5, "slice": "batch"},
        {"start": 2, "end": 4, "status": "timeout"}]


def test_a_report_counts_a_success_good_only_within_every_limit_set() -> None:
    ds = _dataset("r.json", RECS)
    plain = report_for(ds.table, 0.0, 4.0, (None, None, None))
    assert plain.slo is None and plain.offered == 3
    limited = report_for(ds.table, 0.0, 4.0, (0.3, None, None))
    assert limited.slo is not None and limited.slo.good_requests == 1  # only the 0.25 s TTFT
    assert limited.slo.attainment == pytest.approx(1 / 3)  # the timeout counts as a miss


def test_a_report_slices_by_the_column_asked_and_splits_off_the_warm_up() -> None:
    ds = _dataset("r.json", RECS)
    assert set(report_for(ds.table, 0.0, 4.0, (None, None, None)).slices) >= {"chat", "batch"}
    warm = report_for(ds.table, 0.0, 4.0, (None, None, None), warmup_s=1.5)
    assert set(warm.slices) == {"cold", "warm"}


def test_the_site_holds_every_run_and_a_timing_runs_metadata() -> None:
    a = _dataset("a.json", RECS)
    b = _dataset("a.json", RECS[:2], metadata={"run": {"steps": 3}})  # the same name: suffixed in the site
    assert run_input(a).kind == "records" and run_input(b).kind == "timing run"
    names = zipfile.ZipFile(io.BytesIO(site_zip_of([a, b], SLO(ttft_s=0.3)))).namelist()
    assert {"servebench-report/index.html", "servebench-report/run-01-a-json.html",
            "servebench-report/run-02-a-json-2.html"} <= set(names)
    index = zipfile.ZipFile(io.BytesIO(site_zip_of([a, b], None))).read("servebench-report/index.html").decode()
    assert "servebench: a.json and 1 more" in index
