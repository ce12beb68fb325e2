"""The dashboard's pure helpers: formatting, contract cells, frames, the explorer's metric values and figures."""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from servebench.analysis.contract import metric_values
from servebench.analysis.summary import SLO, build_report
from servebench.errors import ConfigError, InputFormatError
from servebench.formatting import fmt, fmt_share, fmt_share_of
from servebench.output.figures.records import cdf_figure, timeline_figure
from servebench.output.figures.summary import contract_cells, distribution_frame, slice_frame, status_frame
from servebench.output.figures.vegalite import percentile_cdf, percentile_histogram
from servebench.output.terminal import epoch_utc, fmt_window
from servebench.records.loaders import encode_records, read_bytes, to_table
from servebench.records.schema import parse_objects
from servebench.records.table import validate


@pytest.fixture
def table(r1_r4):
    return validate(parse_objects(r1_r4), 0, 10)


def test_fmt_keeps_no_data_and_infinity_visible() -> None:
    assert fmt(None) == "—"
    assert fmt(float("nan")) == "—"
    assert fmt(float("inf")) == "∞"
    assert fmt(0.2) == "0.2"
    assert fmt(0.0) == "0"
    assert fmt(3000) == "3,000"
    assert fmt(1_700_000_000.25) == "1,700,000,000"
    assert fmt_share(1 / 3) == "33.3%"
    assert fmt_share_of(1, 4) == "25%"
    assert fmt_share_of(0, 4) is None and fmt_share_of(1, 0) is None


def test_window_on_an_epoch_clock_keeps_both_ends_distinct() -> None:
    assert fmt_window(0.095315, 614.792) == "0.095315 to 614.792 s (614.697 s)"
    text = fmt_window(1795947574.9312, 1795947585.0396)
    assert text.startswith("1795947574.931 to 1795947585.040 s (10.1084 s")  # not '1.79595e+09 to 1.79595e+09'
    assert "2026-11-29 10:19:34.931 UTC" in text
    assert epoch_utc(614.0) is None


def test_timeline_on_an_epoch_clock_counts_from_the_window_start() -> None:
    t0 = 1_795_947_574.0
    rows = [{"start": t0 + 1, "first_token": t0 + 1.5, "end": t0 + 3, "status": "success", "output_tokens": 2},
            {"start": t0 + 2, "end": t0 + 4, "status": "timeout"}]
    fig = timeline_figure(validate(parse_objects(rows), t0, t0 + 5), t0, t0 + 5)
    assert list(fig.layout.xaxis.range) == [0.0, 5.0]
    assert min(fig.data[0].x) == 0.0 and max(fig.data[0].x) == 5.0
    assert "UTC" in fig.layout.xaxis.title.text
    small = timeline_figure(validate(parse_objects(rows), t0, t0 + 5), 0.0, t0 + 5)
    assert small.layout.xaxis.title.text == "time, s"  # a clock from 0 is drawn as is


def test_cdf_title_lines_stay_short_for_a_third_of_a_page() -> None:
    fig = cdf_figure(np.linspace(0.01, 0.05, 200), "tpot", left_out=265, left_out_reason="non-success")
    lines = fig.layout.title.text.split("<br>")
    assert lines[0] == "Request TPOT"
    assert all(len(line) <= 70 for line in lines), lines


def test_contract_cells_show_clock_metrics_of_a_file_without_timestamps_as_na(table) -> None:
    report = build_report(table, 0, 10)
    cells = {c.key: c for c in contract_cells(report.summary, frozenset({"successful_requests_per_second"}))}
    assert cells["successful_requests_per_second"].text == "n/a"
    assert "no timestamps" in cells["successful_requests_per_second"].help
    assert cells["successes"].text == "2"


def test_contract_cells_keep_spec_order_and_keys(table) -> None:
    report = build_report(table, 0, 10)
    cells = contract_cells(report.summary)
    assert [c.key for c in cells] == list(report.summary)
    by_key = {c.key: c for c in cells}
    assert by_key["successful_requests_per_second"].text == "0.2"
    assert by_key["successful_requests_per_second"].label == "Successful requests/s"


def test_contract_cells_show_fractions_as_percents_and_times_in_the_unit(table) -> None:
    report = build_report(table, 0, 10)  # R1-R4: half the requests fail, latency p95 2.5 s, TTFT p95 0.5 s
    by_key = {c.key: c for c in contract_cells(report.summary)}
    assert by_key["non_success_fraction"].text == "50%"
    assert "0.5" in by_key["non_success_fraction"].help  # the spec's fraction is still there for who wants it
    assert by_key["success_latency_p95_s"].text == "2.5" and by_key["success_latency_p95_s"].label == "Latency p95 (s)"
    in_ms = {c.key: c for c in contract_cells(report.summary, unit="ms")}
    assert in_ms["success_latency_p95_s"].text == "2,500"
    assert in_ms["success_latency_p95_s"].label == "Latency p95 (ms)"
    assert in_ms["success_ttft_p95_s"].text == "500" and in_ms["success_request_tpot_p95_s"].text == "250"
    assert in_ms["non_success_fraction"].text == "50%"  # no time: the same in either unit
    assert in_ms["successful_requests_per_second"].text == "0.2"  # a rate, not a time


def test_slice_frame_for_people_shows_percents_and_the_unit() -> None:
    rows = [{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 3, "slice": "a"},
            {"start": 0, "end": 2, "status": "timeout", "slice": "a"},
            {"start": 1, "first_token": 1.25, "end": 2, "status": "success", "output_tokens": 3, "slice": "b"}]
    report = build_report(validate(parse_objects(rows), 0, 2), 0, 2, SLO(ttft_s=1))
    raw = slice_frame(report).set_index("slice")
    assert raw.loc["a", "non_success_fraction"] == 0.5  # the raw numbers, for a download
    shown = slice_frame(report, "ms").set_index("slice")
    assert shown.loc["a", "non_success_fraction"] == "50%" and shown.loc["a", "slo_attainment"] == "50%"
    assert shown.loc["b", "success_ttft_p95_ms"] == pytest.approx(250.0)
    assert "success_ttft_p95_s" not in shown.columns


def test_contract_cell_for_none_says_why() -> None:
    (cell,) = contract_cells({"success_request_tpot_p95_s": None})
    assert cell.text == "—" and "no value counts" in cell.help


def test_frames(table) -> None:
    report = build_report(table, 0, 10, SLO(ttft_s=1))
    st = status_frame(report)
    assert dict(zip(st.status, st.requests)) == {"success": 2, "failed": 0, "timeout": 1, "cancelled": 0,
                                                 "rejected": 1}
    df = distribution_frame({"latency_s": report.latency_s, "queue_wait_s": None})
    assert list(df.metric) == ["latency_s"]
    # p95 of two values is the larger; two values cannot bound p95 from above
    assert df.loc[0, "p95 [95% CI]"].startswith("2.5 [") and df.loc[0, "p95 [95% CI]"].endswith(", —]")
    assert slice_frame(report).empty


def test_metric_values_success_only_and_failure_aware(table) -> None:
    vals, idx = metric_values(table, "latency")
    assert list(idx) == [0, 1] and list(vals) == [2.5, 0.25]
    vals, idx = metric_values(table, "tpot")
    assert list(idx) == [0] and list(vals) == [0.25]  # R2 has one output token
    vals, idx = metric_values(table, "ttft", failure_aware=True)
    assert list(idx) == [0, 1, 2, 3]
    assert vals[:2].tolist() == [0.5, 0.25] and np.isinf(vals[2:]).all()
    vals, idx = metric_values(table, "queue_wait", failure_aware=True)
    assert vals.size == 0 and idx.size == 0  # no admitted times anywhere: unknown, not infinite


def test_metric_values_queue_wait_and_prefill() -> None:
    rows = [{"start": 0, "admitted": 1, "first_token": 1.5, "end": 3, "status": "success", "output_tokens": 4},
            {"start": 1, "first_token": 2, "end": 3, "status": "success", "output_tokens": 4},
            {"start": 2, "end": 4, "status": "rejected"}]
    t = validate(parse_objects(rows), 0, 4)
    assert metric_values(t, "queue_wait")[0].tolist() == [1.0]
    assert metric_values(t, "prefill")[0].tolist() == [0.5]
    vals, idx = metric_values(t, "prefill", failure_aware=True)
    assert idx.tolist() == [0, 2] and vals[0] == 0.5 and math.isinf(vals[1])


def test_metric_values_rejects_unknown_metric(table) -> None:
    with pytest.raises(ConfigError, match="unknown metric 'itl'"):
        metric_values(table, "itl")


@pytest.mark.parametrize("fmt_name", ["csv", "parquet", "json", "jsonl"])
def test_encode_records_round_trips(table, fmt_name) -> None:
    data = encode_records(table, fmt_name)
    if fmt_name == "parquet":
        assert pq.read_table(io.BytesIO(data)).num_rows == 4
    again, _, _ = to_table(read_bytes(data, f"x.{fmt_name}"), 0, 10)
    assert again.to_dicts() == table.to_dicts()


def test_encode_records_unknown_format(table) -> None:
    with pytest.raises(InputFormatError, match="'xml'"):
        encode_records(table, "xml")


def test_percentile_charts_mark_the_value() -> None:
    ok = np.array([1.0, 2.0, 3.0])
    fa = np.array([1.0, 2.0, 3.0, np.inf])
    spec = percentile_cdf(ok, fa, 95, 3.0, math.inf, "Latency (s)")
    curves = spec["datasets"]["curves"]
    assert list(curves["view"].unique()) == ["success-only", "failure-aware"]
    assert curves[curves["view"] == "failure-aware"]["share"].max() == pytest.approx(0.75)  # stops at the success share
    assert list(spec["datasets"]["rules"]["about"]) == ["p95 success-only: 3"]
    assert spec["title"]["subtitle"] == ["p95 success-only: 3 (dashed line)",
                                         "p95 failure-aware = ∞: non-successes reach it"]
    hist = percentile_histogram(fa, 50, 2.0, "Latency (s)")
    assert hist["title"]["subtitle"] == ["p50 = 2 (dashed line)", "1 non-successes at ∞ not drawn"]
    bins = hist["datasets"]["bins"]
    assert bins["records"].sum() == 3  # the finite values, binned here
    assert bins["lo"].iloc[0] == 1.0 and bins["hi"].iloc[-1] == 3.0


def test_percentile_histogram_sends_bins_not_values() -> None:
    values = np.random.default_rng(18).exponential(1.0, 100_000)
    bins = percentile_histogram(values, 95, float(np.quantile(values, 0.95)), "TTFT (s)", bins=60)["datasets"]["bins"]
    assert len(bins) == 60 and bins["records"].sum() == 100_000
