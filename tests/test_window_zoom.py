"""The window as a zoom (dashboard and `summarize --trim-to-window`) and the list of bad rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import SAMPLE_DATA

from servebench.analysis.contract import summarize
from servebench.errors import RecordValidationError
from servebench.records.loaders import read_bytes, read_path
from servebench.records.validation_report import MAX_BAD_ROWS, bad_rows, bad_rows_text
from servebench.records.window_zoom import trim_to_window


def test_trim_keeps_records_inside_and_counts_each_edge() -> None:
    loaded = read_bytes(b"start,end,status\n0,2,timeout\n1,3,timeout\n4,6,timeout\n7,8,timeout\n0,9,timeout\n",
                        "w.csv")
    kept = trim_to_window(loaded, 0.5, 6.5)
    assert len(kept.table) == 2 and kept.total == 5 and kept.left_out == 3
    assert (kept.started_before, kept.ended_after, kept.spans_window, kept.outside) == (1, 0, 1, 1)
    assert kept.note() == ("The window keeps 2 of 5 records; 3 left out because they do not lie inside it: "
                           "1 lie wholly outside it, 1 started before its start, 1 started before it and ended "
                           "after it.")
    assert trim_to_window(loaded).note() is None  # the default window is the data's span: nothing left out


def test_trimmed_records_satisfy_the_contracts_rule() -> None:
    kept = trim_to_window(read_path(SAMPLE_DATA / "r1_r4.json"), 0, 5)
    out = summarize(kept.table.to_dicts(), 0, 5)  # every kept record lies in the window: the spec accepts it
    assert out["requests"] == 3 and out["successful_requests_per_second"] == 0.4


def test_bad_window_is_refused() -> None:
    with pytest.raises(RecordValidationError, match="Invalid observation window"):
        trim_to_window(read_path(SAMPLE_DATA / "r1_r4.json"), 5, 5)
    with pytest.raises(RecordValidationError, match="Invalid observation window"):
        trim_to_window(read_path(SAMPLE_DATA / "r1_r4.json"), 0, math.inf)


def test_cli_trim_to_window_says_what_it_left_out() -> None:
    args = [sys.executable, "-m", "servebench", "summarize", str(SAMPLE_DATA / "r1_r4.json"),
            "--window-start", "0", "--window-end", "5"]
    refused = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "row 3, field 'end'" in refused.stderr  # the spec's rule by default
    res = subprocess.run([*args, "--trim-to-window", "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["summary"]["requests"] == 3
    assert any("keeps 3 of 4 records" in n for n in doc["notes"])


def test_bad_rows_lists_up_to_ten_in_file_order_with_the_validators_messages() -> None:
    body = "0,1,success,0.5,9.0\n0,1,success,0.5,3\n2,1,timeout,,\n" + "0,1,sucess,,\n" * 12
    rows = read_bytes(f"start,end,status,first_token,output_tokens\n{body}".encode(), "bad.csv").rows
    found = bad_rows(rows)
    assert len(found) == MAX_BAD_ROWS
    assert [b.row for b in found[:3]] == [1, 3, 4]
    assert str(found[0]) == "row 1, field 'output_tokens': Invalid successful output: '9.0' is not an integer"
    assert found[1].field == "end" and found[2].field == "status"
    text = bad_rows_text(rows)
    assert text.startswith("bad.csv: 10 bad rows (the first 10; there may be more)")
    with pytest.raises(RecordValidationError) as first:
        trim_to_window(read_bytes(f"start,end,status,first_token,output_tokens\n{body}".encode(), "bad.csv"))
    assert str(first.value) == f"bad.csv, {found[0]}"  # the same words as the single error


def test_bad_rows_of_a_clean_file_is_empty() -> None:
    assert bad_rows_text(read_path(SAMPLE_DATA / "r1_r4.json").rows) is None
