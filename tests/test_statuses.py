"""The one status mapping every source uses (servebench.records.statuses), and the docs table that shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.records.statuses import STATUS_TABLE, failure_status
from servebench.records.table import STATUSES

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("http_status,cause,status", [
    (429, None, "rejected"), (503, None, "rejected"), (503, "upstream timed out", "rejected"),
    (400, "request rejected: kv_exceeds_budget", "rejected"), (None, '{"code": "queue_full"}', "rejected"),
    (None, "server overloaded", "rejected"), (None, "Too Many Requests", "rejected"),
    (None, "Service Unavailable", "rejected"),
    (408, None, "timeout"), (504, None, "timeout"), (None, "ReadTimeout('')", "timeout"),
    (None, "asyncio.exceptions.TimeoutError", "timeout"), (200, "request ended with timeout: deadline_exceeded",
                                                           "timeout"),
    (499, None, "cancelled"), (499, "Request cancelled 0.400s after being sent", "cancelled"),
    (500, None, "failed"), (None, "RemoteProtocolError: peer closed connection", "failed"),
    (None, "request ended with cancelled: engine_stopped", "failed"),  # the server cancelled, not the client
    (None, None, "failed"),
])
def test_failure_status_rules(http_status, cause, status):
    assert failure_status(http_status, cause) == status


@settings(max_examples=60, derandomize=True, deadline=None)
@given(st.one_of(st.none(), st.integers(100, 599)), st.one_of(st.none(), st.text(max_size=40)))
def test_client_decisions_win_and_every_answer_is_a_record_status(http_status, cause):
    assert failure_status(http_status, cause, client_cancelled=True) == "cancelled"
    assert failure_status(http_status, cause, client_timeout=True) == "timeout"
    assert failure_status(http_status, cause) in set(STATUSES) - {"success"}


def test_the_docs_show_one_table_and_the_load_docs_point_to_it():
    importers, load = (DOCS / "importers.md").read_text(), (DOCS / "load.md").read_text()
    for status, _ in STATUS_TABLE:
        assert f"| `{status}` |" in importers
    assert "importers.md#one-status-vocabulary" in load and "| `rejected` |" not in load


def test_one_status_list_gives_the_type_and_one_table_gives_the_words() -> None:
    """Status (and FailureStatus) come from STATUSES; Compare, the labels and the outcome cells use STATUS_WORDS."""
    from typing import get_args

    from servebench.analysis.compare import outcome_table
    from servebench.analysis.summary import build_report
    from servebench.output.figures.summary import outcome_cells
    from servebench.output.plain import label
    from servebench.records import schema, statuses, table
    from servebench.records.schema import parse_objects
    from servebench.records.statuses import STATUS_WORDS, FailureStatus, Status
    from servebench.records.table import validate

    assert table.STATUSES is statuses.STATUSES and schema.STATUSES is STATUSES and schema.Status is Status
    assert get_args(Status) == STATUSES and get_args(FailureStatus) == STATUSES[1:]
    assert tuple(STATUS_WORDS) == STATUSES
    words = list(STATUS_WORDS.values())
    assert [label(k) for k in ("completed", "failed", "timed_out", "cancelled", "rejected")] == words
    rows = [{"request_id": f"r{i}", "start": 0.0, "end": 1.0, "status": s, "prompt_tokens": 1,
             "output_tokens": 1 if s == "success" else 0, "first_token": 0.5 if s == "success" else None}
            for i, s in enumerate(STATUSES)]
    report = build_report(validate(parse_objects(rows), 0, 2), 0, 2)
    assert list(outcome_table({"run": report}).columns)[2:7] == words
    assert [c.label for c in outcome_cells(report)][1:6] == words
