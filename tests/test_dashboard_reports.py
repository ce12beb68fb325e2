"""servebench.dashboard.reports: the report of the records on screen, and the site of several, without Streamlit."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from servebench.analysis.summary import SLO, Report
from servebench.dashboard.reports import ReportsBeside, report_for, run_input, site_zip_of
from servebench.dashboard.sources import Dataset, RecordSource
from servebench.errors import ConfigError
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


def _token_records(n: int, seed: int) -> list[dict]:
    """n records in two slices, most of them successes that streamed every token (some with a long pause)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    recs = []
    for i in range(n):
        start = float(i) * 0.1
        if rng.uniform() < 0.15:
            recs.append({"start": start, "end": start + 2, "status": "timeout", "slice": "chat"})
            continue
        gaps = rng.lognormal(-4, 0.6, int(rng.integers(2, 30)))
        gaps[rng.integers(0, gaps.size)] *= 1 + 20 * rng.uniform()  # a stall now and then
        times = (start + 0.2 + np.concatenate([[0.0], np.cumsum(gaps)])).round(6).tolist()
        recs.append({"start": start, "first_token": times[0], "end": times[-1], "status": "success",
                     "output_tokens": len(times), "token_times": times,
                     "slice": "chat" if i % 3 else "batch"})
    return recs


def test_the_token_figures_of_summary_s_report_are_those_of_a_report_without_slices_or_slo() -> None:
    """Token timing reuses the report Summary built (SLO, slices): ITL, stalls and request TPOT read the same as
    the report over the window alone it built before (build_report without slices or SLO)."""
    from servebench.analysis.summary import build_report

    for seed in (1, 2, 3):
        ds = _dataset("tokens.json", _token_records(300, seed))
        alone = build_report(ds.table, ds.window_start, ds.window_end, by_slice=False)
        summary = report_for(ds.table, ds.window_start, ds.window_end, (0.25, 0.02, None), "slice", None)
        assert summary.slices and summary.slo is not None and alone.itl_s is not None
        for field in ("itl_s", "max_stall_s", "stalls", "request_tpot_s"):
            assert getattr(summary, field) == getattr(alone, field), field


TOKEN_RECS = [{"start": 0, "first_token": 0.25, "end": 1, "status": "success", "output_tokens": 4,
               "token_times": [0.25, 0.5, 0.75, 1.0]},
              {"start": 1, "first_token": 1.5, "end": 3, "status": "success", "output_tokens": 3,
               "token_times": [1.5, 2.0, 3.0]},
              {"start": 2, "end": 4, "status": "timeout"}]


def test_a_report_without_token_times_leaves_out_only_their_itl_and_stalls() -> None:
    """Summary's report (tokens=False) differs from the full report in the token fields alone."""
    ds = _dataset("r.json", TOKEN_RECS)
    full = report_for(ds.table, 0.0, 4.0, (0.3, None, None))
    light = report_for(ds.table, 0.0, 4.0, (0.3, None, None), tokens=False)
    assert full.itl_s is not None and full.stalls is not None and full.max_stall_s is not None
    assert light.itl_s is None and light.stalls is None and light.max_stall_s is None
    token_fields = {"itl_s", "max_stall_s", "stalls"}
    assert light.model_dump(exclude=token_fields) == full.model_dump(exclude=token_fields)
    assert ds.table.token_times is not None  # the table itself is left as it was


def test_reports_beside_are_built_once_and_kept_for_the_latest_keys() -> None:
    beside = ReportsBeside(max_entries=2)
    ds = _dataset("r.json", TOKEN_RECS)
    builds: list[str] = []

    def build(name: str) -> Report:
        builds.append(name)
        return report_for(ds.table, 0.0, 4.0, (None, None, None))

    assert beside.get("a") is None  # never started: the caller builds it
    beside.start("a", lambda: build("a"))
    beside.start("a", lambda: build("a again"))  # under way or built: not again
    assert beside.get("a").itl_s is not None and builds == ["a"]
    beside.start("b", lambda: build("b"))
    beside.start("c", lambda: build("c"))  # the third key lets the oldest go
    assert beside.get("a") is None and beside.get("c") is not None


def test_a_report_beside_that_fails_raises_its_error_to_the_page_that_asks() -> None:
    beside = ReportsBeside()

    def fail() -> Report:
        raise ConfigError("no records in the window")

    beside.start("k", fail)
    with pytest.raises(ConfigError, match="no records in the window"):
        beside.get("k")
