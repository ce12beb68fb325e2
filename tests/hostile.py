"""A corpus of hostile record files: CSV, JSON, JSONL and Parquet, each with one known defect (or none).

``corpus()`` builds every file in memory; ``write_corpus(folder)`` writes them for a test. A case whose
defect sits in one place says so (``row``, ``field``), so a test can check the error names it. Cases are
made by code, not kept as files, so the defect of each is written next to it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FILE = "file"  # the defect is the file's as a whole: the error names the file, no row


@dataclass(frozen=True)
class Case:
    """One hostile file: its name (the extension picks the reader), bytes, and where its defect is.

    ``row`` (1-based) and ``field`` name the defect; ``row=FILE`` means a whole-file error; ``ok``
    means the file must load; ``row=None`` and not ``ok`` means either outcome is fine, if clean.
    """

    name: str
    data: bytes
    row: int | str | None = None
    field: str | None = None
    ok: bool = False
    warning: str | None = None  # a fragment the loaded file's warnings must hold


# Three valid records: a success, a timeout and a rejection.
BASE: list[dict[str, Any]] = [
    {"request_id": "a", "start": 0.0, "first_token": 0.5, "end": 2.5, "status": "success", "output_tokens": 9},
    {"request_id": "b", "start": 1.0, "end": 7.0, "status": "timeout"},
    {"request_id": "c", "start": 3.0, "end": 3.0, "status": "rejected"},
]
COLUMNS = ["request_id", "start", "first_token", "end", "status", "output_tokens"]
HUGE = "1" + "0" * 400  # an integer no float holds
VERY_LONG = "7" * 5000  # past Python's 4300-digit limit for int(str)


# --------------------------------------------------------------------------- text formats


def _json_token(value: Any) -> str:
    """A Python value as JSON text; a ``Raw`` string is written as it is (NaN, 10**400, "\\ud800")."""
    return value.text if isinstance(value, Raw) else json.dumps(value)


@dataclass(frozen=True)
class Raw:
    """Text written into a file exactly as given (a CSV cell, or a JSON token)."""

    text: str


def _with(row: int, **changes: Any) -> list[dict[str, Any]]:
    """BASE with fields of one 1-based row changed (a value of ``...`` removes the field)."""
    records = [dict(r) for r in BASE]
    for key, value in changes.items():
        if value is ...:
            records[row - 1].pop(key, None)
        else:
            records[row - 1][key] = value
    return records


def _json_object(rec: dict[str, Any], pairs: list[tuple[str, Any]] | None = None) -> str:
    items = pairs if pairs is not None else list(rec.items())
    return "{" + ", ".join(f"{json.dumps(k)}: {_json_token(v)}" for k, v in items) + "}"


def as_json(records: list[Any]) -> bytes:
    return ("[\n" + ",\n".join(r.text if isinstance(r, Raw) else _json_object(r) for r in records) + "\n]\n").encode()


def as_jsonl(records: list[Any]) -> bytes:
    return "".join((r.text if isinstance(r, Raw) else _json_object(r)) + "\n" for r in records).encode()


def _cell(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)


def as_csv(records: list[dict[str, Any]], columns: list[str] | None = None, newline: str = "\n") -> bytes:
    cols = columns or list(dict.fromkeys(k for r in records for k in r))
    lines = [",".join(cols)] + [",".join(_cell(r.get(c)) for c in cols) for r in records]
    return (newline.join(lines) + newline).encode()


# Value defects, each written in every text format: (label, row, field, value, expected row, field).
# ``None`` as the expected row: the file loads (the value is fine, or only warned about).
VALUE_CASES: list[tuple[str, int, str, Any, int | None, str | None]] = [
    ("int64_overflow_tokens", 1, "output_tokens", Raw("99999999999999999999"), 1, "output_tokens"),
    ("huge_int_tokens", 1, "output_tokens", Raw(HUGE), 1, "output_tokens"),
    ("huge_int_start", 2, "start", Raw(HUGE), 2, "start"),
    ("huge_negative_start", 2, "start", Raw("-" + HUGE), 2, "start"),
    ("huge_int_end", 2, "end", Raw(HUGE), 2, "end"),
    ("huge_int_first_token", 1, "first_token", Raw(HUGE), 1, "first_token"),
    ("float_overflow_start", 2, "start", Raw("1e400"), 2, "start"),
    ("very_long_int_start", 3, "start", Raw(VERY_LONG), 3, "start"),
    ("very_long_int_tokens", 1, "output_tokens", Raw(VERY_LONG), 1, "output_tokens"),
    ("big_start_before_end", 2, "start", Raw("99999999999999999999"), 2, "end"),
    ("float_tokens", 1, "output_tokens", Raw("9.0"), 1, "output_tokens"),
    ("zero_tokens_success", 1, "output_tokens", Raw("0"), 1, "output_tokens"),
    ("negative_tokens_timeout", 2, "output_tokens", Raw("-1"), 2, "output_tokens"),
    ("text_first_token_timeout", 2, "first_token", "abc", 2, "first_token"),
    ("first_token_after_end_timeout", 2, "first_token", Raw("8"), 2, "first_token"),
    ("first_token_before_start_rejected", 3, "first_token", Raw("2"), 3, "first_token"),
    ("first_token_after_end_success", 1, "first_token", Raw("3"), 1, "first_token"),
    ("text_start", 2, "start", "soon", 2, "start"),
    ("empty_status", 2, "status", "", 2, "status"),
    ("unknown_status", 2, "status", "SUCCESS", 2, "status"),
    ("admitted_after_end", 2, "admitted", Raw("9"), 2, "admitted"),
    ("negative_prompt_tokens", 3, "prompt_tokens", Raw("-5"), 3, "prompt_tokens"),
    ("huge_prompt_tokens", 3, "prompt_tokens", Raw(HUGE), 3, "prompt_tokens"),
    ("end_before_start", 3, "end", Raw("2"), 3, "end"),
]
# NaN and infinity in each spelling a file may hold, per format.
NONFINITE_JSON = ["NaN", "Infinity", "-Infinity", '"nan"', '"inf"']
NONFINITE_CSV = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"]


def _value_files() -> list[Case]:
    cases = []
    for label, row, fld, value, exp_row, exp_field in VALUE_CASES:
        records = _with(row, **{fld: value})
        csv_cols = list(dict.fromkeys([*COLUMNS, *(k for r in records for k in r)]))
        for ext, data in (("csv", as_csv(records, csv_cols)), ("json", as_json(records)),
                          ("jsonl", as_jsonl(records))):
            cases.append(Case(f"{label}.{ext}", data, exp_row, exp_field, ok=exp_row is None))
    for i, token in enumerate(NONFINITE_JSON):
        for ext, enc in (("json", as_json), ("jsonl", as_jsonl)):
            cases.append(Case(f"nonfinite_{i}.{ext}", enc(_with(2, end=Raw(token))), 2, "end"))
    for i, token in enumerate(NONFINITE_CSV):
        cases.append(Case(f"nonfinite_{i}.csv", as_csv(_with(2, start=Raw(token)), COLUMNS), 2, "start"))
    return cases


def _json_only_files() -> list[Case]:
    """Defects only JSON can hold: types, surrogates, duplicate and conflicting keys, nesting."""
    cases = []
    one_line = [
        ("bool_start", _with(2, start=True), 2, "start"),
        ("list_end", _with(2, end=[7]), 2, "end"),
        ("object_status", _with(2, status={"code": 1}), 2, "status"),
        ("bool_tokens", _with(1, output_tokens=True), 1, "output_tokens"),
        ("float_request_id", _with(2, request_id=1.5), 2, "request_id"),
        ("surrogate_request_id", _with(2, request_id=Raw('"\\ud800"')), 2, "request_id"),
        ("surrogate_error", _with(2, error=Raw('"bad \\udfff cause"')), 2, "error"),
        ("surrogate_status", _with(2, status=Raw('"\\ud83d"')), 2, "status"),
        ("list_slice", _with(2, slice=[1]), 2, "slice"),
        ("conflicting_aliases", _with(1, outputTokens=4), 1, "output_tokens"),
        ("conflicting_id_aliases", _with(3, requestId="z"), 3, "request_id"),
    ]
    for label, records, row, fld in one_line:
        for ext, enc in (("json", as_json), ("jsonl", as_jsonl)):
            cases.append(Case(f"{label}.{ext}", enc(records), row, fld))
    # a key given twice: json.loads would keep the last value without a word
    dup = [Raw(_json_object(BASE[0])),
           Raw(_json_object(BASE[1], [*BASE[1].items(), ("start", 5.0)])), Raw(_json_object(BASE[2]))]
    cases += [Case("duplicate_key.json", as_json(dup), 2, "start"),
              Case("duplicate_key.jsonl", as_jsonl(dup), 2, "start")]
    alias_dup = [Raw(_json_object(BASE[0], [*BASE[0].items(), ("outputTokens", 9)])), *BASE[1:]]
    cases.append(Case("same_value_both_aliases.json", as_json(alias_dup), ok=True))
    cases.append(Case("duplicate_records_key.json",
                      ('{"records": ' + as_json(BASE).decode() + ', "records": []}').encode(), FILE))
    int_ids = [{**r, "request_id": i + 7} for i, r in enumerate(BASE)]
    for ext, enc in (("json", as_json), ("jsonl", as_jsonl)):
        cases.append(Case(f"integer_request_ids.{ext}", enc(int_ids), ok=True, warning="integer ID"))
    deep = "[" * 100_000 + "]" * 100_000
    cases += [
        Case("deep_array.json", deep.encode(), FILE),
        Case("deep_in_field.json", as_json(_with(2, error=Raw(deep))), FILE),
        Case("deep_in_field.jsonl", as_jsonl(_with(2, error=Raw(deep))), 2),
        Case("deep_objects.json", ('{"a":' * 50_000 + "1" + "}" * 50_000).encode(), FILE),
        Case("not_objects.json", as_json([BASE[0], Raw("[1, 2]"), BASE[2]]), 2),
        Case("string_record.jsonl", as_jsonl([BASE[0], Raw('"oops"')]), 2),
        Case("trailing_comma.json", as_json(BASE).replace(b"}\n]", b"},\n]"), FILE),
        Case("blank_line_inside.jsonl", as_jsonl(BASE).replace(b"}\n{", b"}\n\n{", 1), 2),
        Case("scalar_document.json", b"5\n", FILE),
        Case("null_document.json", b"null", FILE),
        Case("empty_array.json", b"[]", FILE),
        Case("empty_object.json", b"{}", FILE),
        Case("records_not_a_list.json", b'{"records": 5}', FILE),
        Case("nan_window_json.json", as_json(_with(1, start=Raw("NaN"), end=Raw("NaN"))), 1, "start"),
    ]
    return cases


def _csv_only_files() -> list[Case]:
    """Defects of CSV text: quoting, line ends, headers, column counts."""
    good = as_csv(BASE, COLUMNS)
    lines = good.decode().splitlines()
    return [
        Case("unterminated_quote_last_field.csv", good + b'd,4,,5,failed,"9\n', 4, "output_tokens"),
        Case("unterminated_quote_middle.csv",
             (lines[0] + "\n" + lines[1] + '\n"b,1,,7,timeout,\n' + lines[3] + "\n").encode(), 2, "request_id"),
        Case("unterminated_quote_error_column.csv",
             as_csv(_with(2, error=Raw('"connection reset')), [*COLUMNS, "error"]), 2, "error"),
        Case("quoted_values.csv", as_csv([{k: Raw(f'"{_cell(v)}"') for k, v in r.items()} for r in BASE], COLUMNS),
             ok=True),
        Case("quoted_comma_and_quote.csv", as_csv(_with(2, error=Raw('"reset, by ""peer"""')),
                                                  [*COLUMNS, "error"]), ok=True),
        Case("crlf.csv", as_csv(BASE, COLUMNS, "\r\n"), ok=True),
        Case("cr_only.csv", as_csv(BASE, COLUMNS, "\r"), ok=True),
        Case("mixed_line_ends.csv", (lines[0] + "\r\n" + lines[1] + "\n" + lines[2] + "\r" + lines[3] + "\n").encode(),
             ok=True),
        Case("bom.csv", b"\xef\xbb\xbf" + good, ok=True),
        Case("double_bom.csv", b"\xef\xbb\xbf\xef\xbb\xbf" + good),  # the second BOM is part of a column name
        Case("latin1.csv", as_csv(_with(2, request_id="caf\u00e9"), COLUMNS).decode().encode("latin-1"), FILE),
        Case("utf16.csv", good.decode().encode("utf-16"), FILE),
        Case("truncated_utf8.csv", good + b"d,4,,5,failed,\xe2\x82", FILE),  # a multi-byte character cut short
        Case("header_only.csv", (lines[0] + "\n").encode(), FILE),
        Case("no_header.csv", b"\n\n0,1,failed\n", FILE),
        Case("missing_status_column.csv", as_csv([{k: v for k, v in r.items() if k != "status"} for r in BASE]),
             FILE),
        Case("short_row.csv", (lines[0] + "\n" + lines[1] + "\nb,1,,7\n" + lines[3] + "\n").encode(), 2),
        Case("long_row.csv", (lines[0] + "\n" + lines[1] + "\n" + lines[2] + ",x,y\n" + lines[3] + "\n").encode(), 2),
        Case("nul_byte.csv", good.replace(b"timeout", b"time\x00out"), 2, "status"),
        Case("space_padded.csv", as_csv([{k: Raw(f" {_cell(v)} ") if k in ("start", "end") else v
                                          for k, v in r.items()} for r in BASE], COLUMNS), ok=True),
        Case("one_record_end_before_start.csv", b"start,end,status\n2.5,1,failed\n", 1, "end"),
        Case("one_record_zero_length.csv", b"start,end,status\n3,3,rejected\n", FILE),
    ]


def _truncations() -> list[Case]:
    """Valid files cut short at several points: each must load or fail cleanly (outcome not fixed)."""
    cases = []
    for ext, data in (("csv", as_csv(BASE, COLUMNS)), ("json", as_json(BASE)), ("jsonl", as_jsonl(BASE))):
        for frac in (0.25, 0.5, 0.75, 0.97):
            cases.append(Case(f"truncated_{int(frac * 100)}.{ext}", data[:int(len(data) * frac)]))
    return cases


def _whole_file_defects() -> list[Case]:
    cases = []
    for ext in ("csv", "json", "jsonl", "parquet"):
        cases.append(Case(f"empty.{ext}", b"", FILE))
        cases.append(Case(f"whitespace.{ext}", b" \n\t\r\n", FILE))
        cases.append(Case(f"random_bytes.{ext}", bytes(np.random.default_rng(14).integers(0, 256, 300, np.uint8)),
                          FILE))
    return cases


# --------------------------------------------------------------------------- Parquet


def parquet_bytes(table: pa.Table, **options: Any) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return buf.getvalue()


def _base_columns() -> dict[str, Any]:
    return {
        "request_id": pa.array(["a", "b", "c"]),
        "start": pa.array([0.0, 1.0, 3.0]),
        "first_token": pa.array([0.5, None, None], pa.float64()),
        "end": pa.array([2.5, 7.0, 3.0]),
        "status": pa.array(["success", "timeout", "rejected"]),
        "output_tokens": pa.array([9, None, None], pa.int64()),
    }


def _pq(label: str, row: int | str | None, field: str | None = None, ok: bool = False, warning: str | None = None,
        **columns: Any) -> Case:
    cols = _base_columns()
    for name, arr in columns.items():
        if arr is None:
            del cols[name]
        else:
            cols[name] = arr
    return Case(f"{label}.parquet", parquet_bytes(pa.table(cols)), row, field, ok=ok, warning=warning)


def _invalid_utf8(values: list[bytes]) -> pa.Array:
    """A string array holding bytes that are not UTF-8 (Arrow does not check when built from buffers)."""
    offsets = np.cumsum([0] + [len(v) for v in values]).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets.tobytes()),
                                                            pa.py_buffer(b"".join(values))])


def _corrupt_pages(column: str, row_group_rows: int | None = None) -> tuple[bytes, int]:
    """A Parquet file of 3,000 records whose ``column`` has its page header overwritten; footer intact.

    Returns the bytes and the 1-based first row of the row group that was damaged.
    """
    n = 3000
    start = np.arange(n, dtype=np.float64)
    table = pa.table({"start": start, "end": start + 1.0, "status": pa.array(["failed"] * n),
                      "output_tokens": pa.array(np.zeros(n, dtype=np.int64))})
    data = bytearray(parquet_bytes(table, row_group_size=row_group_rows or n, compression="snappy"))
    meta = pq.ParquetFile(io.BytesIO(bytes(data))).metadata
    group = meta.num_row_groups - 1  # damage the last row group
    index = table.column_names.index(column)
    chunk = meta.row_group(group).column(index)
    offset = chunk.dictionary_page_offset or chunk.data_page_offset
    for k in range(offset, offset + 12):
        data[k] ^= 0xFF
    first_row = sum(meta.row_group(g).num_rows for g in range(group)) + 1
    return bytes(data), first_row


def _parquet_files() -> list[Case]:
    u64max = 2**64 - 1
    nan, inf = float("nan"), float("inf")
    good = parquet_bytes(pa.table(_base_columns()))
    cases = [
        _pq("uint64_max_tokens", 1, "output_tokens", output_tokens=pa.array([u64max, None, None], pa.uint64())),
        _pq("int64_max_tokens", 1, "output_tokens", output_tokens=pa.array([2**63 - 1, None, None], pa.int64())),
        _pq("int64_min_prompt", 3, "prompt_tokens", prompt_tokens=pa.array([1, 2, -2**63], pa.int64())),
        _pq("uint64_max_start", 2, "end", start=pa.array([0, u64max, 3], pa.uint64())),
        _pq("int64_start_past_2_53", 2, "end", start=pa.array([0, 2**53 + 1, 3], pa.int64())),
        _pq("nan_start", 2, "start", start=pa.array([0.0, nan, 3.0])),
        _pq("inf_end", 2, "end", end=pa.array([2.5, inf, 3.0])),
        _pq("null_end", 3, "end", end=pa.array([2.5, 7.0, None], pa.float64())),
        _pq("bool_end", 1, "end", end=pa.array([True, False, True])),
        # a typed file holds numbers as numbers: a text column is refused at its first value, "0" as much as "abc"
        _pq("text_start", 1, "start", start=pa.array(["0", "abc", "3"])),
        _pq("text_first_token_timeout", 1, "first_token", first_token=pa.array(["0.5", "abc", None])),
        _pq("text_attempt", 1, "attempt", attempt=pa.array(["1", "1", "1"])),
        _pq("text_output_tokens", 1, "output_tokens", output_tokens=pa.array(["9", None, None])),
        _pq("first_token_after_end_timeout", 2, "first_token", first_token=pa.array([0.5, 8.0, None])),
        _pq("timestamp_start", 1, "start", start=pa.array([0, 1, 3], pa.timestamp("s"))),
        _pq("float_tokens", 1, "output_tokens", output_tokens=pa.array([9.5, None, None])),
        _pq("decimal_start", None, ok=True, start=pa.array([0, 1, 3], pa.decimal128(10, 2))),
        _pq("float32_times", None, ok=True, start=pa.array([0.0, 1.0, 3.0], pa.float32())),
        _pq("int32_tokens", None, ok=True, output_tokens=pa.array([9, None, None], pa.int32())),
        _pq("dictionary_status_bad", 2, "status",
            status=pa.array(["success", "TIMEOUT", "rejected"]).dictionary_encode()),
        _pq("null_status", 2, "status", status=pa.array(["success", None, "rejected"])),
        _pq("struct_start", 1, "start", start=pa.array([{"s": 0.0}, {"s": 1.0}, {"s": 3.0}])),
        _pq("list_request_id", 1, "request_id", request_id=pa.array([["a"], ["b"], ["c"]])),
        _pq("binary_request_id", 1, "request_id", request_id=pa.array([b"a", b"b", b"c"])),
        _pq("integer_request_ids", None, ok=True, warning="integer ID", request_id=pa.array([7, 8, 9])),
        _pq("invalid_utf8_request_id", 2, "request_id", request_id=_invalid_utf8([b"a", b"\xff\xfe", b"c"])),
        _pq("invalid_utf8_status", 3, "status", status=_invalid_utf8([b"success", b"timeout", b"rej\xc3"])),
        _pq("surrogate_bytes_error", 2, "error", error=_invalid_utf8([b"", b"\xed\xa0\x80", b""])),
        _pq("missing_status", FILE, status=None),
        _pq("zero_rows", FILE, **{k: v.slice(0, 0) for k, v in _base_columns().items()}),
        Case("truncated_footer.parquet", good[:-20], FILE),
        Case("magic_only.parquet", b"PAR1PAR1", FILE),
        Case("csv_named_parquet.parquet", as_csv(BASE, COLUMNS), FILE),
        Case("half_file.parquet", good[:len(good) // 2], FILE),
    ]
    for column in ("start", "status", "output_tokens"):
        data, first_row = _corrupt_pages(column)
        cases.append(Case(f"corrupt_pages_{column}.parquet", data, first_row, column))
    data, first_row = _corrupt_pages("end", row_group_rows=1000)
    cases.append(Case("corrupt_pages_last_row_group.parquet", data, first_row, "end"))
    return cases


BUILDERS: tuple[Callable[[], list[Case]], ...] = (
    _value_files, _json_only_files, _csv_only_files, _truncations, _whole_file_defects, _parquet_files)


def corpus() -> list[Case]:
    """Every hostile case, names unique."""
    cases = [c for build in BUILDERS for c in build()]
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"corpus names used twice: {sorted(duplicates)}")
    return cases


def write_corpus(folder: Path) -> list[tuple[Path, Case]]:
    """Write every case into ``folder``; return each file's path with its case."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in corpus():
        path = folder / case.name
        path.write_bytes(case.data)
        written.append((path, case))
    return written
