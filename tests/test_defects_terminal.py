"""The terminal's logical-request and fairness sections read shares through servebench.formatting, as every other does."""

from __future__ import annotations

from rich.console import Console

from servebench.analysis.summary import SLO, build_report
from servebench.formatting import NO_DATA, fmt_share
from servebench.output.terminal import print_fairness, print_logical
from servebench.records.schema import parse_objects
from servebench.records.table import validate

# Two users whose every attempt failed, in two slices, and one success: without an SLO the slices have no
# SLO attainment; the failing slice has no goodput; the logical success share is 1 of 3.
FAILED = [
    {"request_id": "a", "logical_id": "u1", "attempt": 1, "start": 0.0, "end": 3.0, "status": "timeout",
     "slice": "chat"},
    {"request_id": "b", "logical_id": "u1", "attempt": 2, "start": 4.0, "end": 6.0, "status": "rejected",
     "slice": "chat"},
    {"request_id": "c", "logical_id": "u2", "attempt": 1, "start": 1.0, "end": 1.0, "status": "rejected",
     "slice": "chat"},
    {"request_id": "d", "logical_id": "u3", "attempt": 1, "start": 2.0, "first_token": 2.5, "end": 3.0,
     "status": "success", "output_tokens": 5, "slice": "batch"},
]


def printed(fn, section) -> str:
    console = Console(record=True, width=200, color_system=None)
    fn(console, section)
    return console.export_text()


def test_missing_shares_read_as_no_data_not_a_dash() -> None:
    report = build_report(validate(parse_objects(FAILED, strict_keys=True), 0.0, 10.0), 0.0, 10.0)
    assert report.fairness is not None and report.logical is not None
    chat = report.fairness.slices["chat"]
    assert chat.slo_attainment is None  # no SLO given: nothing to attain
    text = printed(print_fairness, report.fairness)
    chat_row = next(line for line in text.splitlines() if "chat" in line)
    assert " - " not in chat_row and chat_row.count(NO_DATA) >= 1
    batch_row = next(line for line in text.splitlines() if "batch" in line)
    assert fmt_share(report.fairness.slices["batch"].goodput_share) in batch_row  # "100%", as the dashboard reads it
    assert fmt_share(report.logical.success_fraction) in printed(print_logical, report.logical)


def test_a_logical_report_without_a_success_share_reads_no_data() -> None:
    lg = build_report(validate(parse_objects(FAILED, strict_keys=True), 0.0, 10.0), 0.0, 10.0).logical
    assert lg is not None
    text = printed(print_logical, lg.model_copy(update={"success_fraction": None}))
    assert f"({NO_DATA})" in text and "(-)" not in text


def test_shares_with_an_slo_read_as_the_dashboard_reads_them() -> None:
    report = build_report(validate(parse_objects(FAILED, strict_keys=True), 0.0, 10.0), 0.0, 10.0,
                          SLO(ttft_s=1.0))
    assert report.fairness is not None
    text = printed(print_fairness, report.fairness)
    batch = report.fairness.slices["batch"]
    assert f"{fmt_share(batch.goodput_share)}" in text and f"{fmt_share(batch.slo_attainment)}" in text
