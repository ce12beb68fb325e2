"""A reasoning model's record fields (issue 37, part 4): first_answer_token and reasoning_tokens.

Each bad value is refused with one line naming file, row and field, the same in CSV, JSONL, JSON and
Parquet and in both engines; the spec's rules keep their order and messages; the report's reasoning
section (time to first answer token) is the same from either engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.contract import summarize
from servebench.analysis.record_sets import summarize_path
from servebench.analysis.summary import build_report
from servebench.cli.core import main
from servebench.errors import ServebenchError
from servebench.records.schema import TimingRecord, parse_objects
from servebench.records.table import validate

ENGINES = ("memory", "duckdb")
GOOD = {"request_id": "a", "start": 0.0, "first_token": 0.5, "end": 2.5, "status": "success", "output_tokens": 8}


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    """Write records in the format the suffix names; CSV and Parquet get a column per key any record has."""
    keys = list(dict.fromkeys(k for r in records for k in r))
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif path.suffix == ".json":
        path.write_text(json.dumps(records))
    elif path.suffix == ".csv":
        cells = [",".join("" if r.get(k) is None else str(r[k]) for k in keys) for r in records]
        path.write_text(",".join(keys) + "\n" + "\n".join(cells) + "\n")
    else:
        pq.write_table(pa.table({k: [r.get(k) for r in records] for k in keys}), path)
    return path


def outcome(path: Path, engine: str) -> tuple[Any, ...]:
    """("ok", report JSON, warnings) or ("error", message) from one engine."""
    try:
        done = summarize_path(path, engine=engine)
    except ServebenchError as exc:
        return "error", str(exc)
    return "ok", json.loads(done.report.model_dump_json()), done.warnings


def same_in_both(path: Path) -> tuple[Any, ...]:
    memory = outcome(path, "memory")
    assert outcome(path, "duckdb") == memory
    return memory


FORMATS = (".jsonl", ".json", ".csv", ".parquet")
BAD_ROWS = [  # (second record's changes, field, the message after "field 'x': "; a CSV shows its cell's text)
    ({"first_answer_token": 0.25}, "first_answer_token",
     "Invalid first answer token time: {0.25} must be between first_token 0.5 and end 2.5"),
    ({"first_answer_token": 3.5}, "first_answer_token",
     "Invalid first answer token time: {3.5} must be between first_token 0.5 and end 2.5"),
    ({"status": "timeout", "first_token": None, "output_tokens": None, "first_answer_token": 1.0},
     "first_answer_token",
     "Invalid first answer token time: {1.0} is given but first_token is missing (the first token of either kind "
     "comes first)"),
    ({"reasoning_tokens": 9}, "reasoning_tokens", "Invalid reasoning tokens: {9} must be between 0 and output_tokens 8"),
    ({"reasoning_tokens": -1}, "reasoning_tokens",
     "Invalid reasoning tokens: {-1} must be between 0 and output_tokens 8"),
    ({"status": "failed", "output_tokens": None, "first_token": None, "first_answer_token": None,
      "reasoning_tokens": -2}, "reasoning_tokens", "Invalid reasoning tokens: {-2} must be at least 0"),
]


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("change,field,message", BAD_ROWS)
def test_a_bad_reasoning_field_is_one_line_in_every_format_and_engine(tmp_path, suffix, change, field, message):
    good = {**GOOD, "first_answer_token": 1.0, "reasoning_tokens": 3}
    bad = {**good, "request_id": "b", **change}
    path = write(tmp_path / f"r{suffix}", [good, bad])
    value = change[field]
    shown = message.replace(f"{{{value}}}", repr(str(value)) if suffix == ".csv" else str(value))
    assert same_in_both(path) == ("error", f"{path.name}, row 2, field '{field}': {shown}")


@pytest.mark.parametrize("suffix", (".jsonl", ".parquet"))
def test_a_number_stored_as_text_or_a_fraction_is_refused(tmp_path, suffix):
    for change, message in (
            ({"first_answer_token": "1.0"}, "Invalid first answer token time: '1.0' is text, not a number (nothing "
                                            "is coerced: store it as a number)"),
            ({"reasoning_tokens": 1.5}, "Invalid reasoning tokens: 1.5 is not an integer")):
        path = write(tmp_path / f"{next(iter(change))}{suffix}", [{**GOOD, **change}])
        assert same_in_both(path) == ("error", f"{path.name}, row 1, field '{next(iter(change))}': {message}")


def test_the_spec_rules_come_first_with_their_messages(tmp_path):
    """A success whose first_token is out of order fails the spec's rule, not the first answer's."""
    path = write(tmp_path / "r.jsonl", [{**GOOD, "first_token": 3.0, "first_answer_token": 9.0, "reasoning_tokens": 99}])
    assert same_in_both(path) == ("error", f"{path.name}, row 1, field 'first_token': Invalid successful output: 3.0 must "
                                           "be between start 0.0 and end 2.5")
    # the spec's summarize ignores the optional fields, as it ignores every field it does not name
    assert summarize([{**GOOD, "first_answer_token": 9.0, "reasoning_tokens": -5}], 0, 10)["successes"] == 1
    with pytest.raises(ValueError, match="^Invalid successful output$"):
        summarize([{**GOOD, "output_tokens": 0, "first_answer_token": 1.0}], 0, 10)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.one_of(st.none(), st.floats(0, 3)), answer=st.one_of(st.none(), st.floats(-1, 4)),
       out=st.one_of(st.none(), st.integers(0, 5)), reasoning=st.one_of(st.none(), st.integers(-2, 7)),
       success=st.booleans())
def test_the_model_and_the_file_validator_agree(first, answer, out, reasoning, success):
    """TimingRecord (one record in Python) and the file validator accept and refuse the same records."""
    rec = {"start": 0.0, "end": 3.0, "status": "success" if success else "failed", "first_token": first,
           "output_tokens": out, "first_answer_token": answer, "reasoning_tokens": reasoning}
    rec = {k: v for k, v in rec.items() if v is not None}
    try:
        TimingRecord(**rec)
        model_ok = True
    except ValueError:
        model_ok = False
    try:
        validate(parse_objects([rec], "r.jsonl"), 0.0, 3.0)
        file_ok = True
    except ServebenchError:
        file_ok = False
    assert model_ok == file_ok
    if file_ok and answer is not None:
        assert first is not None and first <= answer <= 3.0
    if file_ok and reasoning is not None:
        assert reasoning >= 0 and (out is None or reasoning <= out)


REASONING_RUN = [
    {"request_id": "r1", "start": 0.0, "first_token": 0.25, "first_answer_token": 1.0, "end": 2.0,
     "status": "success", "output_tokens": 10, "reasoning_tokens": 6, "slice": "think"},
    {"request_id": "r2", "start": 1.0, "first_token": 1.5, "first_answer_token": 3.5, "end": 4.0,
     "status": "success", "output_tokens": 20, "reasoning_tokens": 14, "slice": "think"},
    {"request_id": "r3", "start": 2.0, "first_token": 2.25, "first_answer_token": 2.25, "end": 3.0,
     "status": "success", "output_tokens": 5, "reasoning_tokens": 0, "slice": "think"},
    {"request_id": "r4", "start": 2.0, "first_token": 2.5, "end": 6.0, "status": "timeout", "output_tokens": 30,
     "reasoning_tokens": 30, "slice": "think"},  # cut short while thinking: no answer, its tokens wasted
    {"request_id": "r5", "start": 3.0, "first_token": 3.5, "end": 4.0, "status": "success", "output_tokens": 4,
     "slice": "plain"},  # a record that says nothing of reasoning
]


@pytest.mark.parametrize("suffix", FORMATS)
def test_the_reasoning_section_in_both_engines(tmp_path, suffix):
    status, report, _ = same_in_both(write(tmp_path / f"r{suffix}", REASONING_RUN))
    assert status == "ok"
    rs = report["reasoning"]
    assert rs["requests"] == 3 and rs["requests_with_reasoning_tokens"] == 3
    assert rs["reasoning_tokens"] == 20 and rs["output_tokens"] == 35 and rs["reasoning_token_share"] == 20 / 35
    ttfa = {p["q"]: p["value"] for p in rs["ttfa_s"]["percentiles"]}
    assert ttfa[50] == 1.0 and ttfa[95] == 2.5 and rs["ttfa_s"]["max"] == 2.5  # 0.25, 1.0, 2.5
    assert rs["reasoning_s"]["max"] == 2.0 and rs["reasoning_s"]["n"] == 3  # 0.75, 2.0, 0.0
    # TTFT is the first token of either kind: 0.25, 0.5, 0.25, 0.5 over the four successes
    assert report["ttft_s"]["max"] == 0.5
    assert report["slices"]["plain"]["reasoning"] is None and report["slices"]["think"]["reasoning"]["requests"] == 3


def test_no_reasoning_fields_no_section(tmp_path):
    plain = [{k: v for k, v in r.items() if k not in ("first_answer_token", "reasoning_tokens")} for r in REASONING_RUN]
    status, report, _ = same_in_both(write(tmp_path / "r.parquet", plain))
    assert status == "ok" and report["reasoning"] is None


def test_records_round_trip_the_fields(tmp_path):
    table = validate(parse_objects(REASONING_RUN, "r"), 0.0, 6.0)
    assert table.to_dicts()[0]["first_answer_token"] == 1.0 and table.to_dicts()[3]["reasoning_tokens"] == 30
    assert "first_answer_token" not in table.to_dicts()[4]
    arrow = table.to_arrow()
    assert arrow.column("reasoning_tokens").to_pylist() == [6, 14, 0, 30, None]
    assert build_report(table, 0.0, 6.0).reasoning.requests == 3
    camel = [{"start": 0.0, "firstToken": 0.5, "firstAnswerToken": 1.0, "end": 2.0, "status": "success",
              "outputTokens": 3, "reasoningTokens": 2}]
    assert validate(parse_objects(camel, "r", strict_keys=True), 0.0, 2.0).to_dicts()[0]["reasoning_tokens"] == 2


def test_the_json_schema_names_both_fields(capsys):
    with pytest.raises(SystemExit) as done:
        main(["schema"])
    assert done.value.code == 0
    props = json.loads(capsys.readouterr().out)["properties"]
    assert props["reasoning_tokens"]["anyOf"][0]["minimum"] == 0
    assert "first_token" in props["first_answer_token"]["description"]


def test_the_html_report_shows_both_first_tokens():
    from servebench.output.site import RunInput, build_site
    table = validate(parse_objects(REASONING_RUN, "think.json"), 0.0, 6.0)
    files = build_site([RunInput(name="think.json", path="think.json", kind="records", table=table,
                                 window_start=0.0, window_end=6.0)])
    page = next(v.decode() for k, v in files.items() if k.startswith("run-"))
    assert '<section id="reasoning">' in page and 'href="#reasoning"' in page
    assert page.count("TTFA (first answer token), s") == 2  # in the percentiles and in its own section
    assert "57.1%" in page  # 20 of 35 output tokens were reasoning
    plain = validate(parse_objects([{k: v for k, v in r.items() if k != "first_answer_token" and k != "reasoning_tokens"}
                                    for r in REASONING_RUN], "plain.json"), 0.0, 6.0)
    files = build_site([RunInput(name="plain.json", path="plain.json", kind="records", table=plain,
                                 window_start=0.0, window_end=6.0)])
    assert "TTFA" not in next(v.decode() for k, v in files.items() if k.startswith("run-"))
