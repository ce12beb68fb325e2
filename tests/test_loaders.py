"""Record files in every format: they load the same, and bad input names the file, row and field."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.contract import summarize
from servebench.errors import InputFormatError, RecordValidationError
from servebench.records.loaders import load_table, read_bytes, read_path, to_table, write_records
from servebench.records.schema import TimingRecord

CSV_R1_R4 = (
    "request_id,start,first_token,end,status,output_tokens\n"
    "R1,0,0.5,2.5,success,9\n"
    "R2,1,1.25,1.25,success,1\n"
    "R3,2,,7,timeout,\n"
    "R4,3,,3,rejected,\n"
)


def load(text: str | bytes, name: str = "runs.csv", ws=0.0, we=10.0):
    data = text.encode() if isinstance(text, str) else text
    return to_table(read_bytes(data, name), ws, we)


def test_every_format_gives_the_same_table(tmp_path, r1_r4):
    expected = summarize(r1_r4, 0, 10)
    table, _, _ = load(CSV_R1_R4)
    paths = []
    for ext in ("csv", "json", "jsonl", "parquet"):
        p = tmp_path / f"r.{ext}"
        write_records(table, p)
        paths.append(p)
    (tmp_path / "wrapped.json").write_text(json.dumps({"records": r1_r4}))
    paths.append(tmp_path / "wrapped.json")
    for p in paths:
        t, ws, we = load_table(p, 0, 10)
        from servebench.analysis.contract import contract_summary
        assert contract_summary(t, ws, we) == expected, p.name
        assert t.to_dicts() == table.to_dicts() or p.name == "wrapped.json"


def test_format_detected_from_content_without_extension(tmp_path):
    for name, body in (("a", CSV_R1_R4), ("b", json.dumps([{"start": 0, "end": 1, "status": "failed"}])),
                       ("c", '{"start": 0, "end": 1, "status": "failed"}\n{"start": 1, "end": 2, "status": "failed"}\n')):
        (tmp_path / name).write_text(body)
        assert read_path(tmp_path / name).format == {"a": "csv", "b": "json", "c": "jsonl"}[name]


def test_csv_header_spaces_and_crlf_line_ends_are_read():
    table, _, _ = load("start, end , status\r\n0,1,failed\r\n0.5,2,timeout\r\n")
    assert table.end.tolist() == [1.0, 2.0] and len(table) == 2


def test_a_run_folder_reads_its_records(tmp_path):
    table, _, _ = load(CSV_R1_R4)
    write_records(table, tmp_path / "records.jsonl")
    assert read_path(tmp_path).rows.n == 4
    with pytest.raises(InputFormatError, match="a folder without records.jsonl"):
        read_path(tmp_path / "..")


def test_default_window_is_min_start_to_max_end():
    _, ws, we = to_table(read_bytes(CSV_R1_R4.encode(), "runs.csv"))
    assert (ws, we) == (0.0, 7.0)


def test_empty_optional_cell_means_missing_not_zero():
    table, _, _ = load("start,end,status,output_tokens,prompt_tokens\n0,1,failed,,\n0,2,timeout,5,\n")
    assert table.output_tokens.tolist() == [-1, 5]
    assert table.prompt_tokens.tolist() == [-1, -1]
    assert "output_tokens" not in table.to_dicts()[0]


@pytest.mark.parametrize("body, row, field, fragment", [
    ("start,first_token,end,status,output_tokens\n0,0.5,2.5,success,9.0\n", 1, "output_tokens", "'9.0' is not an integer"),
    ("start,end,status\n0,1,failed\n0,nan,failed\n", 2, "end", "'nan' is not a number"),
    ("start,end,status\n0,1,failed\ninf,2,failed\n", 2, "start", "'inf' is not a number"),
    ("start,end,status\ntrue,1,failed\n", 1, "start", "'true' is not a number"),
    ("start,end,status\n0,1,failed\n0,1,FAILED\n", 2, "status", "Invalid status"),
    ("start,end,status\n0,1,failed\n2,1,failed\n", 2, "end", "Invalid request times"),
    ("start,end,status\n0,1,failed\n0,11,failed\n", 2, "end", "<= window end 10"),
    ("start,end,status,first_token,output_tokens\n0,1,success,,3\n", 1, "first_token", "Invalid successful output"),
    ("start,end,status,admitted\n0,1,failed,2\n", 1, "admitted", "Invalid admission time"),
    ("start,end,status,prompt_tokens\n0,1,failed,-3\n", 1, "prompt_tokens", "Invalid prompt tokens"),
    ("start,end,status,output_tokens\n0,1,failed,-1\n", 1, "output_tokens", "Invalid output tokens"),
])
def test_bad_csv_names_file_row_and_field(body, row, field, fragment):
    with pytest.raises(RecordValidationError) as info:
        load(body)
    err = info.value
    assert (err.source, err.row, err.field) == ("runs.csv", row, field)
    assert str(err).startswith(f"runs.csv, row {row}, field '{field}': ")
    assert fragment in str(err)


@pytest.mark.parametrize("doc, row, field, fragment", [
    ([{"start": 0, "end": 1, "status": "failed"}, {"start": True, "end": 1, "status": "failed"}], 2, "start",
     "True is not a number"),
    ([{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 2.0}], 1, "output_tokens",
     "2.0 is not an integer"),
    ([{"start": 0, "end": 1, "status": "failed", "slice": 3}], 1, "slice", "3 is not text"),
    ([{"start": 0, "end": 1, "status": "failed", "sattus": {"a": 1}}], 1, "sattus", "not a scalar"),
    ([{"start": 0, "end": 1, "status": "failed"}, "oops"], 2, None, "Record must be an object"),
])
def test_bad_json_names_row_and_field(doc, row, field, fragment):
    with pytest.raises(RecordValidationError) as info:
        load(json.dumps(doc), "runs.json")
    assert (info.value.row, info.value.field) == (row, field)
    assert fragment in str(info.value)


def test_json_nan_and_infinity_literals_are_rejected():
    with pytest.raises(RecordValidationError, match="row 1, field 'end'.*nan is not a finite number"):
        load('[{"start": 0, "end": NaN, "status": "failed"}]', "runs.json")


@pytest.mark.parametrize("data, name, fragment", [
    (b"", "empty.csv", "the file is empty"),
    (b"start,end\n0,1\n", "nostatus.csv", "missing column 'status'"),
    (b"start,end,status\n", "header.csv", "no records after the header"),
    (b"start,end,status\n0,1,failed\n".replace(b"failed", b"f\xe9iled"), "latin1.csv", "not UTF-8"),
    (b"[{\"start\": 0,", "broken.json", "invalid JSON at line 1"),
    (b"{\"start\": 0, \"end\": 1, \"status\": \"failed\"}\n\n{\"start\": 0}\n", "gap.jsonl", "row 2: invalid JSON"),
    (b"{\"runs\": []}", "obj.json", "expected a JSON array"),
    (b"start,end,status,gpu,gpu\n0,1,failed,a,b\n", "twice.csv", "two columns are named 'gpu'"),
    # a binary file said 'missing columns' (issue 36): an image, an archive, bytes that happen to be valid UTF-8
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "shot.png", "not a text file (a NUL byte at offset 8)"),
    (b"PK\x03\x04\x14\x00\x06\x00", "book.xlsx", "not a text file (a NUL byte at offset 5)"),
    (b"\x00\x01\x02" * 100, "a.bin", "not a text file (a NUL byte at offset 0)"),
    ("start,end,status\n0,1,failed\n".encode("utf-16"), "wide.csv", "not UTF-8 text"),  # text, in the wrong encoding
])
def test_malformed_files_get_one_clear_error(data, name, fragment):
    with pytest.raises(InputFormatError) as info:
        load(data, name)
    assert name in str(info.value) and fragment in str(info.value)


@settings(max_examples=200, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=200),
       junk=st.binary(min_size=1, max_size=64).filter(lambda b: re.search(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]", b)),
       at=st.integers(0, 4000))
def test_a_nul_byte_among_other_control_bytes_is_not_text_and_named_where(text: str, junk: bytes, at: int):
    data = ("start,end,status\n" + text).encode()[:at] + b"\x00" + junk
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"PAR1")):
        return
    with pytest.raises(InputFormatError, match=rf"^x\.csv: not a text file \(a NUL byte at offset {data.index(0)}\)"):
        load(data, "x.csv")


@settings(max_examples=100, deadline=None)
@given(row=st.integers(1, 30), cut=st.integers(0, 6))
def test_one_nul_in_clean_text_is_the_cells_defect_named_by_row_and_field(row: int, cut: int):
    # a stray NUL in a CSV cell is not a binary file: the reader names the row and field it spoils
    lines = ["start,end,status"] + ["0,1,timeout"] * 30
    lines[row] = lines[row][:-7] + "timeout"[:cut] + "\x00" + "timeout"[cut:]
    with pytest.raises(RecordValidationError, match=rf"x\.csv, row {row}, field 'status'"):
        load(("\n".join(lines) + "\n").encode(), "x.csv")


def test_parquet_types_are_checked(tmp_path):
    p = tmp_path / "typed.parquet"
    pq.write_table(pa.table({"start": [0.0, 1.0], "end": [1.0, 2.0], "status": ["success", "failed"],
                             "first_token": [0.5, float("nan")], "output_tokens": [3.0, float("nan")]}), p)
    with pytest.raises(RecordValidationError, match=r"typed.parquet, row 1, field 'output_tokens'.*3.0 is not an integer"):
        load_table(p)
    q = tmp_path / "bools.parquet"
    pq.write_table(pa.table({"start": [0.0], "end": [True], "status": ["failed"]}), q)
    with pytest.raises(RecordValidationError, match="row 1, field 'end'.*True is not a number"):
        load_table(q)
    ok = tmp_path / "ok.parquet"
    pq.write_table(pa.table({"start": [0.0, 1.0], "end": [1.0, 2.0], "status": ["success", "failed"],
                             "first_token": [0.5, float("nan")],
                             "output_tokens": pa.array([3, None], pa.int64())}), ok)
    table, _, _ = load_table(ok)
    assert table.output_tokens.tolist() == [3, -1] and math.isnan(table.first_token[1])


# The vectorised file validation must find the same first error as the spec's record-by-record loop.
cell = st.sampled_from(["0", "1", "2.5", "9", "9.0", "", "nan", "true", "-1", "x", "11", "3"])
status_cell = st.sampled_from(["success", "failed", "timeout", "rejected", "bogus", ""])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(cell, cell, cell, status_cell, cell), min_size=1, max_size=6))
def test_vectorised_validation_reports_the_spec_order_first_error(rows):
    body = "start,first_token,end,status,output_tokens\n" + "".join(",".join(r) + "\n" for r in rows)

    def value(text, integer=False):
        if text == "":
            return None
        try:
            return int(text) if integer else float(text)
        except ValueError:
            return text

    records = []
    for s, f, e, stat, out in rows:
        rec = {"start": value(s), "end": value(e), "status": stat or None, "first_token": value(f)}
        out_v = value(out, integer=True)
        rec["output_tokens"] = out_v if isinstance(out_v, int) else (out if out else None)
        for key in ("start", "end", "first_token"):
            if isinstance(rec[key], float) and not math.isfinite(rec[key]):
                rec[key] = "non-finite"
        records.append({k: v for k, v in rec.items() if v is not None})
    expected = None
    for i, rec in enumerate(records):
        try:
            summarize([rec], 0, 10)  # the spec's rules for this record alone
        except ValueError as exc:
            expected = (i, str(exc))
            break
        # servebench's rules for optional fields, checked after the spec's: first_token, then output_tokens
        ft = rec.get("first_token")
        if rec["status"] != "success" and ft is not None and not (
                isinstance(ft, float) and rec["start"] <= ft <= rec["end"]):
            expected = (i, "Invalid first token time")
            break
        out = rec.get("output_tokens")
        if rec["status"] != "success" and out is not None and not (isinstance(out, int) and out >= 0):
            expected = (i, "Invalid output tokens")  # servebench's rule, checked after the spec's
            break
    try:
        load(body, ws=0, we=10)
        got = None
    except RecordValidationError as exc:
        got = (exc.row - 1, exc.rule)
    assert got == expected


def test_timing_record_model_mirrors_the_rules():
    TimingRecord.model_validate({"start": 0, "firstToken": 0.5, "end": 1, "status": "success", "outputTokens": 2})
    for bad in ({"start": 0, "end": 1, "status": "success", "first_token": 0.5, "output_tokens": 9.0},
                {"start": 2, "end": 1, "status": "failed"},
                {"start": 0, "end": 1, "status": "failed", "extra": 1},
                {"start": True, "end": 1, "status": "failed"}):
        with pytest.raises(ValueError):
            TimingRecord.model_validate(bad)


def test_large_parquet_round_trip_keeps_every_row(tmp_path):
    rng = np.random.default_rng(1)
    n = 20_000
    start = np.sort(rng.uniform(0, 100, n))
    ft = start + rng.uniform(0.01, 1, n)
    end = ft + rng.uniform(0, 2, n)
    status = np.where(rng.random(n) < 0.9, "success", "timeout")
    out = rng.integers(1, 100, n)
    p = tmp_path / "big.parquet"
    pq.write_table(pa.table({"start": start, "first_token": ft, "end": end, "status": status,
                             "output_tokens": out}), p)
    table, ws, we = load_table(p)
    assert len(table) == n and ws == start.min() and we == end.max()
    assert int((table.status == 0).sum()) == int((status == "success").sum())


# --------------------------------------------------------------------------- issue 14: hostile values


def _error(data: bytes | str, name: str, **window) -> str:
    with pytest.raises((InputFormatError, RecordValidationError)) as info:
        load(data, name, **window) if window else to_table(read_bytes(
            data.encode() if isinstance(data, str) else data, name))
    return str(info.value)


@pytest.mark.parametrize("data, name, expected", [
    ("start,end,status,output_tokens\n0,1,failed,99999999999999999999\n", "big.csv",
     "big.csv, row 1, field 'output_tokens': Invalid output tokens: '99999999999999999999' is too large"),
    ('[{"start": %s, "end": 1, "status": "failed"}]' % ("1" + "0" * 400), "big.json",
     "big.json, row 1, field 'start': Invalid request times: 100000000000000000...0000000000000000000 is too large"),
    ('[{"start": 0, "end": 1, "status": "failed", "output_tokens": %s}]' % ("9" * 5000), "longer.json",
     "longer.json, row 1, field 'output_tokens': Invalid output tokens: an integer of 5,000 digits is too large"),
    ("[" * 100_000 + "]" * 100_000, "deep.json", "deep.json: JSON nested too deeply to read"),
    ('{"start": 0, "end": 1, "status": "failed"}\n{"start": 0, "end": 1, "status": "failed", "error": "\\ud800"}\n',
     "lone.jsonl", "lone.jsonl, row 2, field 'error': Invalid text field: '\\ud800' is not valid Unicode text"),
    ('start,end,status,error\n0,1,failed,ok\n0,2,failed,"oops\n', "quote.csv",
     "quote.csv, row 2, field 'error': a quoted value opens here and is never closed"),
    ('start,end,status\n0,1,failed\n"0,2,failed\n1,3,failed\n', "swallow.csv",
     "swallow.csv, row 2, field 'start': a quoted value opens here"),
    ("start,end,status,first_token\n0,1,failed,abc\n", "ft.csv",
     "ft.csv, row 1, field 'first_token': Invalid first token time: 'abc' is not a number"),
    ('[{"start": 0, "end": 1, "status": "timeout", "first_token": 1.5}]', "ft.json",
     "ft.json, row 1, field 'first_token': Invalid first token time: 1.5 must be between start 0.0 and end 1.0"),
    ('[{"start": 0, "end": 1, "status": "failed"}, {"start": 0, "end": 2, "end": 1, "status": "failed"}]', "dup.json",
     "dup.json, row 2, field 'end': the key appears twice in one record"),
    ('{"start": 0, "end": 1, "status": "failed", "status": "success"}\n', "dup.jsonl",
     "dup.jsonl, row 1, field 'status': the key appears twice"),
    ('[{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 3, "outputTokens": 4}]',
     "alias.json", "alias.json, row 1, field 'output_tokens': given twice, as 'output_tokens' (3) and as "
                   "'outputTokens' (4); keep one"),
    ("start,end,status,output_tokens\n0,1,failed,1\n0,2,failed\n", "short.csv",
     "short.csv, row 2: 3 values where the header has 4 columns"),
])
def test_hostile_values_get_one_line_naming_file_row_and_field(data, name, expected):
    message = _error(data, name)
    assert message.startswith(expected), message
    assert "\n" not in message


def test_a_one_record_file_that_ends_before_it_starts_names_row_and_field_not_the_window():
    assert _error("start,end,status\n2.5,1,failed\n", "one.csv") == \
        "one.csv, row 1, field 'end': Invalid request times: end 1.0 is before start 2.5"


def test_messages_show_plain_numbers_not_numpy_reprs():
    message = _error("start,first_token,end,status,output_tokens\n2.5,3,1,success,2\n", "plain.csv", ws=0.0, we=10.0)
    assert "end 1.0 is before start 2.5" in message and "np.float" not in message
    message = _error(json.dumps([{"start": 0.5, "first_token": 3, "end": 1.5, "status": "success",
                                  "output_tokens": 2}]), "plain.json", ws=0.0, we=10.0)
    assert "between start 0.5 and end 1.5" in message and "np.float" not in message


def test_an_infinite_window_is_refused():
    with pytest.raises(RecordValidationError, match="Invalid observation window: start 0.0 and end inf"):
        load(CSV_R1_R4, ws=0.0, we=math.inf)


def test_non_success_times_are_checked_in_files_but_the_spec_contract_needs_only_start_and_end():
    records = [{"start": 0, "end": 1, "status": "timeout", "first_token": "abc"}]
    assert summarize(records, 0, 10)["requests"] == 1  # the spec: non-success records need only start and end
    with pytest.raises(RecordValidationError, match="row 1, field 'first_token': Invalid first token time"):
        load(json.dumps(records), "t.json")
    TimingRecord.model_validate({"start": 0, "end": 1, "status": "timeout", "first_token": 0.5})
    with pytest.raises(ValueError, match="Invalid first token time"):
        TimingRecord.model_validate({"start": 0, "end": 1, "status": "timeout", "first_token": 2})


def test_integer_request_ids_are_read_as_text_and_said_so(tmp_path):
    loaded = read_bytes(b'[{"request_id": 7, "start": 0, "end": 1, "status": "failed"},'
                        b' {"request_id": "x", "start": 0, "end": 1, "status": "failed"}]', "ids.json")
    assert loaded.warnings == ["request_id: 1 integer ID (first in row 1) read as text, e.g. 7 as '7'; "
                               "the schema's request IDs are strings"]
    assert to_table(loaded)[0].request_id.tolist() == ["7", "x"]
    p = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"request_id": pa.array([None, 8], pa.int64()), "start": [0.0, 0.0], "end": [1.0, 1.0],
                             "status": ["failed", "failed"]}), p)
    loaded = read_path(p)
    assert "1 integer ID (first in row 2)" in loaded.warnings[0]
    assert read_bytes(CSV_R1_R4.encode(), "r.csv").warnings == []


def test_same_value_under_both_names_is_accepted():
    table, _, _ = load('[{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 3, '
                       '"outputTokens": 3}]', "same.json")
    assert table.output_tokens.tolist() == [3]


def test_parquet_out_of_range_integers_and_invalid_utf8_name_row_and_field(tmp_path):
    p = tmp_path / "u64.parquet"
    pq.write_table(pa.table({"start": pa.array([0, 2**64 - 1], pa.uint64()), "end": [1.0, 2.0],
                             "status": ["failed", "failed"],
                             "output_tokens": pa.array([1, 2**64 - 1], pa.uint64())}), p)
    with pytest.raises(RecordValidationError, match=r"u64.parquet, row 2, field 'end': .*end 2.0 is before start "
                                                    r"1.8446744073709552e\+19"):
        load_table(p)
    pq.write_table(pa.table({"start": [0.0, 1.0], "end": [1.0, 2.0], "status": ["failed", "failed"],
                             "output_tokens": pa.array([1, 2**64 - 1], pa.uint64())}), p)
    with pytest.raises(RecordValidationError, match="row 2, field 'output_tokens'.*18446744073709551615 is too large"):
        load_table(p)
    offsets = np.array([0, 1, 3], dtype=np.int32).tobytes()
    bad_text = pa.Array.from_buffers(pa.string(), 2, [None, pa.py_buffer(offsets), pa.py_buffer(b"a\xff\xfe")])
    q = tmp_path / "utf8.parquet"
    pq.write_table(pa.table({"request_id": bad_text, "start": [0.0, 0.0], "end": [1.0, 1.0],
                             "status": ["failed", "failed"]}), q)
    with pytest.raises(RecordValidationError, match="utf8.parquet, row 2, field 'request_id': not valid UTF-8 text"):
        load_table(q)


def test_corrupt_parquet_pages_name_the_rows_and_column(tmp_path):
    n = 2000
    table, _, _ = load("start,end,status\n" + "".join(f"{i},{i + 1},failed\n" for i in range(n)), "big.csv",
                       ws=0.0, we=float(n + 1))
    p = tmp_path / "records.parquet"
    write_records(table, p)  # servebench writes page checksums
    data = bytearray(p.read_bytes())
    meta = pq.ParquetFile(p).metadata.row_group(0)
    start_col = meta.column(table.to_arrow().column_names.index("start"))
    data[start_col.data_page_offset + 200] ^= 0x01  # one bit inside the start column's values
    p.write_bytes(bytes(data))
    with pytest.raises(RecordValidationError, match=r"records.parquet, row 1, field 'start': corrupt Parquet data "
                                                    r"in rows 1-2000 .*CRC"):
        load_table(p)
