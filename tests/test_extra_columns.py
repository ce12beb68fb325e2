"""Columns the schema does not know (gpu, model, note): kept, noted once, checked, and a report breakdown."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench import summarize
from servebench.analysis.summary import build_report
from servebench.errors import ConfigError, InputFormatError, RecordValidationError
from servebench.output.site import RunInput, SiteOptions, build_site
from servebench.records.extra_columns import MAX_SLICE_VALUES, extra_columns_note, near_misses, slice_by, slice_choices
from servebench.records.loaders import encode_records, load_table, read_bytes, to_table

EXPORT_CSV = (
    "request_id,start,first_token,end,status,output_tokens,gpu,model,note\n"
    "a,0,0.5,1,success,3,A100,llama-8b,warm\n"
    "b,1,1.2,2,success,4,H100,llama-8b,\n"
    "c,1.5,,3,timeout,7,A100,qwen-7b,slow \"day\"\n"
    "d,2,,2,rejected,,,qwen-7b,\n"
)


def _rows() -> list[dict]:
    return [
        {"request_id": "a", "start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 3,
         "gpu": "A100", "model": "llama-8b", "note": "warm"},
        {"request_id": "b", "start": 1, "first_token": 1.2, "end": 2, "status": "success", "output_tokens": 4,
         "gpu": "H100", "model": "llama-8b"},
        {"request_id": "c", "start": 1.5, "end": 3, "status": "timeout", "output_tokens": 7, "gpu": "A100",
         "model": "qwen-7b", "note": "slow \"day\""},
        {"request_id": "d", "start": 2, "end": 2, "status": "rejected", "gpu": None, "model": "qwen-7b"},
    ]


def _write(tmp_path: Path, fmt: str) -> Path:
    path = tmp_path / f"export.{fmt}"
    if fmt == "csv":
        path.write_text(EXPORT_CSV)
    elif fmt == "json":
        path.write_text(json.dumps(_rows()))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in _rows()))
    else:
        pq.write_table(pa.Table.from_pylist(_rows()), path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "parquet"])
def test_every_format_keeps_extra_columns_as_arrow_attributes(tmp_path, fmt):
    table, ws, we = load_table(_write(tmp_path, fmt))
    assert list(table.extra) == ["gpu", "model", "note"]
    assert all(isinstance(v, (pa.Array, pa.ChunkedArray)) for v in table.extra.values())
    assert table.extra["gpu"].to_pylist() == ["A100", "H100", "A100", None]  # blank or null: absent
    assert table.extra["note"].to_pylist() == ["warm", None, 'slow "day"', None]
    assert len(table) == 4 and (ws, we) == (0.0, 3.0)


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl", "parquet"])
def test_slice_by_an_extra_column_breaks_the_report_down_by_its_values(tmp_path, fmt):
    table, ws, we = load_table(_write(tmp_path, fmt))
    report = build_report(slice_by(table, "gpu"), ws, we)
    assert {k: v.summary["requests"] for k, v in report.slices.items()} == {"A100": 2, "H100": 1}  # d has none
    assert report.slices["A100"].summary["successes"] == 1 and report.slices["A100"].timed_out == 1
    assert report.summary == build_report(table, ws, we).summary  # the whole file is the same
    by_model = build_report(slice_by(table, "model"), ws, we)
    assert {k: v.offered for k, v in by_model.slices.items()} == {"llama-8b": 2, "qwen-7b": 2}


def test_slice_keeps_the_slice_column_and_lists_the_choices(tmp_path):
    table, _, _ = load_table(_write(tmp_path, "csv"))
    assert slice_by(table, "slice") is table
    assert slice_choices(table) == ["slice", "gpu", "model", "note"]


def test_an_unknown_slice_column_is_a_clear_error_with_a_suggestion(tmp_path):
    table, _, _ = load_table(_write(tmp_path, "csv"))
    with pytest.raises(ConfigError, match=r"--slice-by 'gpus': export.csv has no such column .*did you mean 'gpu'"):
        slice_by(table, "gpus")


def test_a_column_of_ids_is_refused_as_a_breakdown():
    n = MAX_SLICE_VALUES + 1
    rows = [{"start": float(i), "end": float(i), "status": "failed", "trace": f"t{i}"} for i in range(n)]
    loaded = read_bytes("".join(json.dumps(r) + "\n" for r in rows).encode(), "many.jsonl")
    table, _, _ = to_table(loaded)
    with pytest.raises(ConfigError, match=f"{n:,} distinct values"):
        slice_by(table, "trace")


def test_typed_parquet_extras_slice_by_their_text(tmp_path):
    n = 6
    path = tmp_path / "typed.parquet"
    pq.write_table(pa.table({
        "start": np.arange(n, dtype=float), "end": np.arange(n, dtype=float) + 1, "status": ["failed"] * n,
        "gpu_index": pa.array([0, 1, 0, 1, 0, None], pa.int16()),
        "temperature": [0.0, 0.7, float("nan"), 0.7, 0.0, 0.0],
        "warm": [True, False, True, None, True, True],
        "day": pa.array([datetime(2026, 1, 1, tzinfo=timezone.utc)] * n, pa.timestamp("s", tz="UTC")),
        "region": pa.array(["eu", "us", "eu", "us", "eu", "us"]).dictionary_encode(),
    }), path)
    table, ws, we = load_table(path)
    counts = {col: {k: v.offered for k, v in build_report(slice_by(table, col), ws, we).slices.items()}
              for col in ("gpu_index", "temperature", "warm", "region")}
    assert counts == {"gpu_index": {"0": 3, "1": 2}, "temperature": {"0": 3, "0.7": 2},  # NaN: absent
                      "warm": {"false": 1, "true": 4}, "region": {"eu": 3, "us": 3}}
    assert len(build_report(slice_by(table, "day"), ws, we).slices) == 1


def test_extra_values_must_be_scalars(tmp_path):
    doc = [{"start": 0, "end": 1, "status": "failed"}, {"start": 0, "end": 1, "status": "failed", "tags": ["a"]}]
    with pytest.raises(RecordValidationError) as info:
        read_bytes(json.dumps(doc).encode(), "nested.json")
    assert str(info.value).startswith("nested.json, row 2, field 'tags': Invalid extra field: a list is not a scalar")
    path = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"start": [0.0], "end": [1.0], "status": ["failed"], "meta": [{"k": 1}]}), path)
    with pytest.raises(InputFormatError, match="nested.parquet, field 'meta': Invalid extra field"):
        load_table(path)


def test_mixed_json_types_and_huge_numbers_are_kept_as_text():
    doc = [{"start": 0, "end": 1, "status": "failed", "gpu": 0, "big": 10**30},
           {"start": 0, "end": 1, "status": "failed", "gpu": "A100", "big": 10**30},
           {"start": 0, "end": 1, "status": "failed", "gpu": True}]
    table, _, _ = to_table(read_bytes(json.dumps(doc).encode(), "mixed.json"))
    assert table.extra["gpu"].to_pylist() == ["0", "A100", "true"]
    assert table.extra["big"].to_pylist() == [str(10**30), str(10**30), None]


def test_note_lists_the_columns_once_and_names_near_misses_of_schema_fields():
    note = extra_columns_note(["gpu", "first_tokn", "Output_Tokens", "requestID"])
    assert note is not None and note.count("'gpu'") == 1
    assert "'first_tokn' (did you mean 'first_token'?" in note
    assert "'Output_Tokens' (did you mean 'output_tokens'?" in note
    assert "'requestID' (did you mean 'request_id'?" in note
    assert extra_columns_note([]) is None
    assert near_misses("model") == [] and near_misses("stat") == ["start", "status"]


def test_a_misspelled_field_is_still_caught_where_it_is_needed(tmp_path):
    bad = tmp_path / "typo.csv"
    bad.write_text("start,first_tokn,end,status,output_tokens\n0,0.5,1,success,3\n")
    with pytest.raises(RecordValidationError, match="typo.csv, row 1, field 'first_token': Invalid successful output"):
        load_table(bad)
    missing = tmp_path / "strat.csv"
    missing.write_text("strat,end,status\n0,1,failed\n")
    with pytest.raises(InputFormatError, match="missing column 'start'"):
        load_table(missing)
    quiet = tmp_path / "quiet.csv"  # a failure needs no first token, so only the note can tell
    quiet.write_text("start,first_tokn,end,status\n0,0.5,1,failed\n")
    table, _, _ = load_table(quiet)
    assert "did you mean 'first_token'" in (extra_columns_note(table.extra) or "")


def test_extra_columns_survive_take_and_every_output_format(tmp_path):
    table, _, _ = load_table(_write(tmp_path, "csv"))
    picked = table.take(np.array([2, 0]))
    assert picked.extra["gpu"].to_pylist() == ["A100", "A100"] and picked.extra["model"].to_pylist()[0] == "qwen-7b"
    for fmt in ("csv", "parquet", "json", "jsonl"):
        again, _, _ = to_table(read_bytes(encode_records(table, fmt), f"again.{fmt}"))
        assert {k: v.to_pylist() for k, v in again.extra.items()} == \
            {k: v.to_pylist() for k, v in table.extra.items()}, fmt


def test_the_spec_summarize_still_ignores_unknown_keys(r1_r4):
    tagged = [{**r, "gpu": "A100"} for r in r1_r4]
    assert summarize(tagged, 0, 10) == summarize(r1_r4, 0, 10)
    assert tagged[0]["gpu"] == "A100"  # the input is not changed


def test_a_large_parquet_keeps_its_extra_column_in_arrow(tmp_path):
    n = 200_000
    rng = np.random.default_rng(7)
    start = rng.uniform(0, 100, n)
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"start": start, "end": start + 1.0, "status": pa.array(["failed"] * n),
                             "gpu": pa.array(rng.choice(["A100", "H100", "L4"], n))}), path)
    table, ws, we = load_table(path)
    assert isinstance(table.extra["gpu"], pa.ChunkedArray)
    report = build_report(slice_by(table, "gpu"), ws, we)
    assert sum(s.offered for s in report.slices.values()) == n and set(report.slices) == {"A100", "H100", "L4"}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["A100", "H100", "L4", None, ""]), st.sampled_from(["success", "failed"])),
                min_size=1, max_size=40))
def test_slices_by_a_column_count_exactly_the_records_that_have_a_value(rows):
    records = [{"start": float(i), "first_token": i + 0.5, "end": i + 1.0, "status": s, "output_tokens": 2,
                "gpu": g} for i, (g, s) in enumerate(rows)]
    table, ws, we = to_table(read_bytes(json.dumps(records).encode(), "p.json"))
    report = build_report(slice_by(table, "gpu"), ws, we)
    expected: dict[str, list[str]] = {}
    for g, s in rows:
        if g:
            expected.setdefault(g, []).append(s)
    assert {k: (v.offered, v.completed) for k, v in report.slices.items()} == \
        {k: (len(v), v.count("success")) for k, v in expected.items()}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120)


def test_cli_summarize_slice_by_in_json_and_tables(tmp_path):
    path = _write(tmp_path, "csv")
    res = _cli("summarize", str(path), "--slice-by", "gpu", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["slice_by"] == "gpu" and doc["extra_columns"] == ["gpu", "model", "note"]
    assert {k: v["offered"] for k, v in doc["slices"].items()} == {"A100": 2, "H100": 1}
    assert len(doc["notes"]) == 1 and "'model'" in doc["notes"][0]
    people = _cli("summarize", str(path), "--slice-by", "model")
    assert people.returncode == 0, people.stderr
    assert "model = 'llama-8b'" in people.stdout and "model = 'qwen-7b'" in people.stdout
    assert people.stdout.count("note:") == 1


def test_cli_slice_by_a_column_the_file_lacks_is_one_line_exit_2(tmp_path):
    res = _cli("summarize", str(_write(tmp_path, "csv")), "--slice-by", "gpus")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "did you mean 'gpu'" in res.stderr and "Traceback" not in res.stderr


def test_report_site_slices_by_an_extra_column_and_notes_the_columns(tmp_path):
    table, ws, we = load_table(_write(tmp_path, "parquet"))
    run = RunInput(name="export", path=str(tmp_path), kind="records", table=table, window_start=ws, window_end=we,
                   format="parquet")
    files = build_site([run], SiteOptions(slice_by="model"))
    page = next(data.decode() for path, data in files.items() if path.startswith("run-"))
    assert "Slices by model" in page and "llama-8b" in page and "qwen-7b" in page
    assert "3 columns the schema does not know are kept as record attributes" in page
    plain = next(data.decode() for path, data in build_site([run]).items() if path.startswith("run-"))
    assert "Slices by" not in plain
    with pytest.raises(ConfigError, match="no such column"):
        build_site([run], SiteOptions(slice_by="region"))


def test_cli_report_slice_by(tmp_path):
    res = _cli("report", str(_write(tmp_path, "jsonl")), "-o", str(tmp_path / "site"), "--slice-by", "gpu", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["runs"][0]["extra_columns"] == ["gpu", "model", "note"]
    page = next((tmp_path / "site").glob("run-*.html")).read_text()
    assert "Slices by gpu" in page and "H100" in page
