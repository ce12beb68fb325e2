"""Record files a hostile user writes (issue 33, part 2): no traceback, no silent accept, both engines alike.

Each case is built in ``tmp_path`` (CSV, JSONL, JSON or Parquet) and summarized by the in-memory engine
and by DuckDB (``--engine duckdb``): both must give the same report and warnings, or the same one-line
error, and the CLI must exit 0 or 2 with one line, never a traceback.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.record_sets import summarize_path
from servebench.analysis.retries import ATTEMPT_RULE, AttemptIssue
from servebench.cli.core import main
from servebench.errors import ConfigError, RecordValidationError, ServebenchError
from servebench.records.loaders import load_table

ENGINES = ("memory", "duckdb")
CSV_HEADER = "request_id,start,first_token,end,status,output_tokens,prompt_tokens,cached_prompt_tokens,attempt"


def outcome(path: Path, engine: str, **kw: Any) -> tuple[Any, ...]:
    """What one engine makes of a file: ("ok", report JSON, warnings) or ("error", type, message)."""
    try:
        done = summarize_path(path, engine=engine, **kw)
    except ServebenchError as exc:
        return "error", type(exc).__name__, str(exc)
    assert done.engine == engine
    return "ok", json.loads(done.report.model_dump_json()), done.warnings


def same_in_both(path: Path, **kw: Any) -> tuple[Any, ...]:
    """Return the in-memory outcome after checking DuckDB's is identical (report and warnings, or error)."""
    memory = outcome(path, "memory", **kw)
    assert outcome(path, "duckdb", **kw) == memory
    return memory


def cli_line(path: Path, engine: str, capsys, *args: str) -> tuple[int, str]:
    """Run ``servebench summarize --json`` in process; return the exit code and stderr, which holds no traceback."""
    try:
        main(["summarize", str(path), "--engine", engine, "--json", *args])
        code = 0
    except SystemExit as stop:
        code = int(stop.code)
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    return code, err.strip()


def write_json(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps(records))
    return path


def write_rows(records: list[dict], path: Path) -> Path:
    """Write records as Parquet, every key any record has a column (None where a record lacks it)."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    pq.write_table(pa.table({k: [r.get(k) for r in records] for k in keys}), path)
    return path


def write_parquet(path: Path, **columns: pa.Array) -> Path:
    base = {"request_id": pa.array(["a", "b", "c"]), "start": pa.array([0.0, 1.0, 3.0]),
            "first_token": pa.array([0.5, 1.5, 3.5]), "end": pa.array([2.5, 7.0, 4.0]),
            "status": pa.array(["success"] * 3), "output_tokens": pa.array([2, 2, 1], pa.int64())}
    pq.write_table(pa.table({**base, **columns}), path)
    return path


# --------------------------------------------------------------------------- "+4" in an integer CSV column


@pytest.mark.parametrize("column", ["output_tokens", "prompt_tokens", "cached_prompt_tokens", "attempt"])
def test_a_plus_sign_in_an_integer_csv_column_reads_as_the_number_in_both_engines(tmp_path, capsys, column):
    row = {"request_id": "c", "start": "3", "first_token": "3.5", "end": "4", "status": "success",
           "output_tokens": "5", "prompt_tokens": "6", "cached_prompt_tokens": "1", "attempt": "1"}
    row[column] = "+4"
    path = tmp_path / "plus.csv"
    path.write_text(f"{CSV_HEADER}\na,0,0.5,2.5,success,9,10,2,1\nb,1,,7,timeout,,,,\n"
                    + ",".join(row[c] for c in CSV_HEADER.split(",")) + "\n")
    table, _, _ = load_table(path)
    assert getattr(table, column)[2] == 4  # "+4" is 4, as "+4.5" is 4.5 in a time column
    kind, report, _ = same_in_both(path)
    assert kind == "ok" and report["offered"] == 3
    for engine in ENGINES:
        assert cli_line(path, engine, capsys)[0] == 0


# --------------------------------------------------------------------------- Parquet types


def test_uint64_token_counts_at_2_63_are_too_large_in_both_engines(tmp_path, capsys):
    path = write_parquet(tmp_path / "counts.parquet", token_times=pa.array([[0.5, 1.0], [1.5, 2.0], [3.5]]),
                         token_counts=pa.array([[1, 2**63], [1, 1], [1]], pa.list_(pa.uint64())))
    kind, error, message = same_in_both(path)
    assert (kind, error) == ("error", "RecordValidationError")
    assert message.startswith("counts.parquet, row 1, field 'token_counts': Invalid token counts: element 2 "
                              "(9223372036854775808) is too large (a token count must be below 10**18)")
    for engine in ENGINES:
        assert "too large" in cli_line(path, engine, capsys)[1]


@pytest.mark.parametrize("field, values", [("attempt", ["1", "1", "1"]), ("output_tokens", ["2", "2", "1"]),
                                           ("cached_prompt_tokens", ["0", "1", "0"]), ("start", ["0", "1", "3"])])
def test_a_number_stored_as_text_in_parquet_is_refused_in_both_engines(tmp_path, field, values):
    path = write_parquet(tmp_path / "text.parquet", logical_id=pa.array(["x", "y", "z"]), **{field: pa.array(values)})
    kind, error, message = same_in_both(path)
    assert (kind, error) == ("error", "RecordValidationError")
    assert message.startswith(f"text.parquet, row 1, field '{field}': ")
    assert f"{values[0]!r} is text, not a" in message and "too large" not in message


def test_a_nan_among_finite_values_in_an_optional_parquet_column_is_absent_in_duckdb_too(tmp_path):
    """Parquet's min/max statistics leave NaN out; DuckDB must not conclude from them that no value is NaN."""
    path = write_parquet(tmp_path / "nan.parquet", status=pa.array(["success", "timeout", "success"]),
                         first_token=pa.array([0.5, float("nan"), 3.5]), output_tokens=pa.array([2, 0, 1]),
                         admitted=pa.array([0.25, float("nan"), 3.25]))
    kind, report, _ = same_in_both(path)
    assert kind == "ok" and report["timed_out"] == 1 and report["queue_wait_s"]["n"] == 2


def test_a_string_view_slice_is_read_as_text(tmp_path):
    path = write_parquet(tmp_path / "view.parquet", slice=pa.array(["p", "q", "p"], pa.string_view()),
                         error=pa.array([None, None, None], pa.string_view()))
    kind, report, _ = same_in_both(path)
    assert kind == "ok" and {k: v["offered"] for k, v in report["slices"].items()} == {"p": 2, "q": 1}


# --------------------------------------------------------------------------- blank slices


@pytest.mark.parametrize("suffix", ["json", "jsonl", "csv", "parquet"])
def test_a_blank_slice_is_no_slice_in_both_engines_with_a_warning(tmp_path, suffix):
    """"" and " " are absent, as an empty CSV cell is: such records count in the whole report, in no slice."""
    slices = ["a", "", "b", " ", "a", "\t"]
    recs = [{"request_id": str(i), "start": float(i), "first_token": i + 0.5, "end": i + 1.0, "status": "success",
             "output_tokens": 3, "slice": s} for i, s in enumerate(slices)]
    path = tmp_path / f"blank.{suffix}"
    if suffix == "json":
        write_json(path, recs)
    elif suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    elif suffix == "csv":
        path.write_text("request_id,start,first_token,end,status,output_tokens,slice\n" + "".join(
            f'{r["request_id"]},{r["start"]},{r["first_token"]},{r["end"]},success,3,"{r["slice"]}"\n' for r in recs))
    else:
        write_rows(recs, path)
    kind, report, warnings = same_in_both(path)
    assert kind == "ok" and report["offered"] == 6
    assert {k: v["offered"] for k, v in report["slices"].items()} == {"a": 2, "b": 1}
    assert report["fairness"] is not None
    assert warnings == ["slice: 3 of 6 records have none (absent, or blank text): they count in the whole report "
                        "but in no slice's"]


# --------------------------------------------------------------------------- retries out of core


def _attempt(logical_id: str | None, attempt: int | None, start: float, end: float, status: str, **more: Any) -> dict:
    rec: dict[str, Any] = {"start": float(start), "end": float(end), "status": status, **more}
    if status == "success":
        rec.update(first_token=start, output_tokens=2)
    if logical_id is not None:
        rec["logical_id"] = logical_id
    if attempt is not None:
        rec["attempt"] = attempt
    return rec


@st.composite
def retry_runs(draw) -> list[dict]:
    """Attempts of a few logical requests on a coarse grid: retries, partial output, deadlines, some numbers at odds."""
    out = [_attempt(None, None, 0, 10, "failed")]  # the window: 0 to 10 s
    for i in range(draw(st.integers(1, 25))):
        start = draw(st.integers(0, 20)) / 2
        end = start + draw(st.integers(0, 8)) / 2
        status = draw(st.sampled_from(["success", "failed", "timeout", "rejected"]))
        more: dict[str, Any] = {"request_id": f"r{i}"}
        if status != "success" and draw(st.booleans()):
            more.update(first_token=start, output_tokens=draw(st.integers(0, 3)))
        if status == "timeout" and draw(st.booleans()):
            more["error"] = "client_deadline"
        logical = draw(st.sampled_from([None, "u1", "u2", "u3", "u4"]))
        attempt = draw(st.sampled_from([None, 1, 1, 2, 3]))
        out.append(_attempt(logical, attempt, start, end, status, **more))
    return out


@given(retry_runs(), st.sampled_from(["jsonl", "parquet"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_duckdb_gives_the_logical_section_and_its_warnings_as_in_memory(recs, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"runs.{suffix}"
        if suffix == "jsonl":
            path.write_text("".join(json.dumps(r) + "\n" for r in recs))
        else:
            write_rows(recs, path)
        kind, report, warnings = same_in_both(path)
        assert kind == "ok"
        logical = report["logical"]
        if any("logical_id" in r for r in recs):
            assert logical["attempts"] == len(recs)
            assert warnings == [AttemptIssue(**i).warning() for i in logical["inconsistent_attempts"]]
        else:
            assert logical is None and warnings == []


def test_a_retry_run_split_into_parts_is_one_logical_section_in_both_engines(tmp_path):
    """A logical request whose attempts sit in two parts (one JSONL, staged; one Parquet, scanned by DuckDB)."""
    folder = tmp_path / "set"
    folder.mkdir()
    first = [_attempt("u1", 1, 0.0, 1.0, "timeout", first_token=0.5, output_tokens=3), _attempt("u2", 1, 0.0, 2.0, "success")]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    write_rows([_attempt("u1", 2, 2.0, 4.0, "success"), _attempt(None, None, 1.0, 1.5, "failed")], folder / "b.parquet")
    kind, report, warnings = same_in_both(folder)
    lg = report["logical"]
    assert kind == "ok" and warnings == []
    assert (lg["logical_requests"], lg["logical_successes"], lg["attempts"], lg["retried"]) == (3, 2, 4, 1)
    assert lg["partial_then_retry"] == 1 and lg["user_latency_s"]["max"] == 4.0


# --------------------------------------------------------------------------- inconsistent attempts


# Each kind of inconsistency: the records, the warning's words, and the numbers the stated rule gives
# (logical requests, those that succeeded, the longest user latency: earliest start to latest end).
INCONSISTENT = [
    ("repeated_number", [_attempt("L", 1, 0, 1, "failed"), _attempt("L", 1, 1, 2, "success"),
                         _attempt("M", 1, 0, 1, "success")],
     "with one attempt number given twice (first: 'L', attempt 1 appears 2 times)", (2, 2, 2.0)),
    ("several_successes", [_attempt("K", 1, 0, 1, "failed"), _attempt("L", 1, 0, 1, "success"),
                           _attempt("L", 2, 1, 2, "success"), _attempt("M", 1, 0, 1, "success"),
                           _attempt("M", 2, 1, 3, "success")],
     "with more than one successful attempt (first: 'L', 2 successful attempts)", (3, 2, 3.0)),
    ("missing_number", [_attempt("L", 1, 0, 1, "failed"), _attempt("L", 3, 1, 2, "success")],
     "with an attempt number skipped (first: 'L', no attempt 2, though there is an attempt 3)", (1, 1, 2.0)),
    ("out_of_order", [_attempt("L", 1, 1, 2, "failed"), _attempt("L", 2, 0, 0.5, "success")],
     "with a later attempt starting before an earlier one (first: 'L', attempt 2 starts at 0.0 s, before attempt 1 "
     "at 1.0 s)", (1, 1, 2.0)),
]


@pytest.mark.parametrize("kind, recs, text, numbers", INCONSISTENT, ids=[c[0] for c in INCONSISTENT])
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_inconsistent_attempts_warn_with_the_count_and_first_example_in_both_engines(tmp_path, capsys, kind, recs,
                                                                                       text, numbers, suffix):
    path = tmp_path / f"runs.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        write_rows(recs, path)
    result, report, warnings = same_in_both(path)
    count = 2 if kind == "several_successes" else 1
    assert result == "ok" and warnings == [f"logical_id: {count} logical request{'s' if count > 1 else ''} {text}; "
                                           f"{ATTEMPT_RULE}"]
    issues = report["logical"]["inconsistent_attempts"]
    assert [(i["kind"], i["logical_requests"]) for i in issues] == [(kind, count)]
    lg = report["logical"]  # the stated rule: every record an attempt, a success once, earliest start to latest end
    assert lg["attempts"] == len(recs)
    assert (lg["logical_requests"], lg["logical_successes"], lg["user_latency_s"]["max"]) == numbers
    for engine in ENGINES:
        code, _ = cli_line(path, engine, capsys)
        assert code == 0


def test_consistent_retries_warn_about_nothing(tmp_path):
    recs = [_attempt("L", 1, 0, 1, "failed"), _attempt("L", 2, 1, 2, "success"), _attempt("M", 1, 0, 3, "timeout"),
            _attempt("N", None, 0, 1, "failed"), _attempt("N", None, 0.5, 1, "success"),  # no numbers to check
            _attempt(None, 3, 0, 1, "success")]  # a number without a logical_id: a request of its own
    path = write_json(tmp_path / "ok.json", recs)
    result, report, warnings = same_in_both(path)
    assert result == "ok" and report["logical"]["inconsistent_attempts"] == [] and warnings == []
    assert report["logical"]["logical_requests"] == 4


# --------------------------------------------------------------------------- the option and the messages


def test_a_memory_limit_no_engine_can_hold_is_a_usage_error_naming_the_option(tmp_path, capsys):
    path = write_json(tmp_path / "r.json", [_attempt(None, None, 0, 1, "success")])
    for limit, why in (("99999999999999999999999999TB", "too large"), ("0.1B", "less than one byte"),
                       ("lots", "expected a size")):
        errors = [outcome(path, engine, memory_limit=limit) for engine in ENGINES]
        assert errors[0] == errors[1] and errors[0][1] == "ConfigError"
        assert errors[0][2].startswith(f"--memory-limit {limit!r}: ") and why in errors[0][2]
        for engine in (*ENGINES, "auto"):
            code, err = cli_line(path, engine, capsys, "--memory-limit", limit)
            assert code == 2 and err.startswith(f"error: --memory-limit {limit!r}: ")
        code, err = cli_line(path, "memory", capsys, "--memory-limit", limit, "--trim-to-window")
        assert code == 2 and "--memory-limit" in err
    assert outcome(path, "duckdb", memory_limit="1048576TiB")[0] == "ok"  # the largest allowed, 1 EiB


def test_a_cached_prompt_tokens_of_text_is_called_text_not_too_large(tmp_path):
    path = write_json(tmp_path / "c.json", [{"start": 0, "end": 1, "status": "failed", "cached_prompt_tokens": "5"},
                                            {"start": 0, "end": 2, "status": "failed"}])
    kind, _, message = same_in_both(path)
    assert kind == "error"
    assert message == ("c.json, row 1, field 'cached_prompt_tokens': Invalid cached prompt tokens: '5' is text, not "
                       "an integer (nothing is coerced: store it as a number)")


@pytest.mark.parametrize("suffix", ["json", "csv"])
def test_a_huge_attempt_is_called_an_attempt_number(tmp_path, suffix):
    huge = "99999999999999999999999"
    path = tmp_path / f"a.{suffix}"
    if suffix == "json":
        path.write_text(f'[{{"start": 0, "end": 1, "status": "failed", "attempt": {huge}}}]')
    else:
        path.write_text(f"start,end,status,attempt\n0,1,failed,{huge}\n")
    kind, _, message = same_in_both(path)
    shown = repr(huge) if suffix == "csv" else huge
    assert kind == "error" and message.endswith(f"field 'attempt': Invalid attempt: {shown} is too large "
                                                "(an attempt number must be below 10**18)")
    assert "token count" not in message


def test_slice_by_lists_slice_only_when_the_file_has_one(tmp_path):
    plain = write_json(tmp_path / "plain.json", [_attempt(None, None, 0, 1, "success")])
    kind, error, message = same_in_both(plain, slice_column="gpu")
    assert (kind, error) == ("error", "ConfigError")
    assert message == ("--slice-by 'gpu': plain.json has no such column (it has neither a slice nor a column the "
                       "schema does not know)")
    sliced = write_json(tmp_path / "sliced.json", [{**_attempt(None, None, 0, 1, "success"), "slice": "a",
                                                   "model": "m"}])
    assert same_in_both(sliced, slice_column="gpu")[2] == ("--slice-by 'gpu': sliced.json has no such column "
                                                           "(it has 'slice', 'model')")


@pytest.mark.parametrize("suffix", ["json", "parquet"])
def test_integer_logical_ids_are_read_as_text_with_a_warning_as_request_ids_are(tmp_path, suffix):
    recs = [{"request_id": 7, "logical_id": 70, "attempt": 1, "start": 0.0, "end": 1.0, "status": "failed"},
            {"request_id": 8, "logical_id": 70, "attempt": 2, "start": 1.0, "end": 2.0, "status": "failed"}]
    path = tmp_path / f"ids.{suffix}"
    if suffix == "json":
        write_json(path, recs)
    else:
        write_rows(recs, path)
    kind, report, warnings = same_in_both(path)
    assert kind == "ok" and report["logical"]["logical_requests"] == 1 and report["logical"]["retried"] == 1
    assert warnings == [
        "request_id: 2 integer IDs (first in row 1) read as text, e.g. 7 as '7'; the schema's request IDs are strings",
        "logical_id: 2 integer IDs (first in row 1) read as text, e.g. 7 as '7'; the schema's logical IDs are strings"]
    with pytest.raises(RecordValidationError, match="field 'logical_id'"):  # a float ID is still refused
        load_table(write_json(tmp_path / "float.json", [{**recs[0], "logical_id": 7.5}]))


def test_the_memory_limit_is_checked_even_for_one_file_in_memory(tmp_path):
    path = write_json(tmp_path / "r.json", [_attempt(None, None, 0, 1, "success")])
    with pytest.raises(ConfigError, match="^--memory-limit 'lots': "):
        summarize_path(path, engine="memory", memory_limit="lots")
