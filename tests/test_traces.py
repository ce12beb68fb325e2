"""Trace readers: each public format on its shipped excerpt and on constructed files, every bad input one line."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import SAMPLE_DATA

from servebench.errors import InputFormatError, RecordValidationError
from servebench.records.traces import FORMATS, detect_format, read_trace

TRACES = SAMPLE_DATA / "traces"
MOONCAKE = TRACES / "mooncake_conversation_300.jsonl"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def mooncake_line(ts: int = 0, inp: int = 600, out: int = 5, hashes: object = (1, 2)) -> str:
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(hashes)}) + "\n"


def write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def refused(path, fmt: str = "auto") -> str:
    with pytest.raises((InputFormatError, RecordValidationError)) as err:
        read_trace(path, fmt)
    message = str(err.value)
    assert "\n" not in message
    return message


# --- the shipped excerpts ------------------------------------------------------------------------------------

def test_mooncake_excerpt_keeps_every_request_and_its_blocks():
    lines = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
    trace = read_trace(MOONCAKE)
    assert trace.format == "mooncake" and len(trace) == len(lines) == 300 and trace.block_tokens == 512
    assert trace.row.tolist() == list(range(1, 301))
    assert trace.arrival_s.tolist() == [(d["timestamp"] - lines[0]["timestamp"]) / 1000 for d in lines]
    assert trace.prompt_tokens.tolist() == [d["input_length"] for d in lines]
    assert trace.output_tokens.tolist() == [d["output_length"] for d in lines]
    for i in (0, 1, 150, 299):
        blocks = trace.hash_values[trace.hash_offsets[i]:trace.hash_offsets[i + 1]]
        assert blocks.tolist() == lines[i]["hash_ids"]
    assert trace.failed is None and trace.warnings == []


def test_mooncake_synthetic_excerpt_reads():
    trace = read_trace(TRACES / "mooncake_synthetic_250.jsonl", "mooncake")
    assert len(trace) == 250 and trace.prompt_tokens[0] == 40160 and trace.has_hashes


@pytest.mark.parametrize("name, second_s, first_prompt", [("azure_conv_2023_300.csv", 4.314579, 374),
                                                          ("azure_code_2023_300.csv", 0.052, 4808)])
def test_azure_2023_excerpts(name, second_s, first_prompt):
    with (TRACES / name).open() as f:
        rows = list(csv.DictReader(f))
    trace = read_trace(TRACES / name)
    assert trace.format == "azure" and len(trace) == len(rows) == 300 and not trace.has_hashes
    assert trace.arrival_s[0] == 0.0 and trace.arrival_s[1] == pytest.approx(second_s, abs=1e-9)
    assert trace.prompt_tokens[0] == first_prompt
    assert trace.prompt_tokens.tolist() == [int(r["ContextTokens"]) for r in rows]
    assert trace.output_tokens.tolist() == [int(r["GeneratedTokens"]) for r in rows]


def test_azure_2024_timestamps_with_a_zone_offset(tmp_path):
    path = write(tmp_path, "week.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2024-05-10 00:00:00.009930+00:00,4808,10\n2024-05-10 00:00:01.5+00:00,3180,8\n")
    trace = read_trace(path)
    assert trace.format == "azure" and trace.arrival_s.tolist() == pytest.approx([0.0, 1.49007])


def test_servebench_records_as_a_trace():
    path = SAMPLE_DATA / "requests_sample.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    trace = read_trace(path)
    assert trace.format == "records" and len(trace) == 3000
    assert int(trace.failed.sum()) == sum(r["status"] != "success" for r in rows)
    starts = sorted(float(r["start"]) for r in rows)
    assert trace.arrival_s.tolist() == pytest.approx([s - starts[0] for s in starts])


def test_records_with_cached_prompt_tokens(tmp_path):
    path = write(tmp_path, "run.jsonl", "".join(json.dumps(r) + "\n" for r in [
        {"start": 5, "end": 6, "first_token": 5.5, "status": "success", "output_tokens": 3, "prompt_tokens": 10,
         "cached_prompt_tokens": 4},
        {"start": 1, "end": 2, "status": "timeout", "prompt_tokens": 7}]))
    trace = read_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 4.0] and trace.row.tolist() == [2, 1]
    assert trace.output_tokens.tolist() == [0, 3] and trace.failed.tolist() == [True, False]
    assert trace.cached_prompt_tokens.tolist() == [-1, 4]


# --- BurstGPT, in its documented columns -----------------------------------------------------------------------

def test_burstgpt_failures_models_and_order(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT_HEADER + "45,ChatGPT,1087,230,1317,Conversation log\n"
                 "5,ChatGPT,472,18,490,Conversation log\n118,GPT-4,417,0,417,API log\n")
    trace = read_trace(path)
    assert trace.format == "burstgpt"
    assert trace.arrival_s.tolist() == [0.0, 40.0, 113.0] and trace.row.tolist() == [2, 1, 3]
    assert trace.prompt_tokens.tolist() == [472, 1087, 417] and trace.output_tokens.tolist() == [18, 230, 0]
    assert trace.failed.tolist() == [False, False, True]
    assert trace.model.to_pylist() == ["ChatGPT", "ChatGPT", "GPT-4"]


def test_burstgpt_3_with_session_and_elapsed_time(tmp_path):
    path = write(tmp_path, "burst3.csv", "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                 "Total tokens,Log Type\n0.5,a1,2.5,GPT-4,100,20,120,Conversation log\n"
                 "1.25,,1.0,ChatGPT,50,5,55,API log\n")
    trace = read_trace(path, "burstgpt")
    assert trace.arrival_s.tolist() == [0.0, 0.75] and trace.output_tokens.tolist() == [20, 5]


# --- detection ---------------------------------------------------------------------------------------------

def test_formats_are_detected_from_columns(tmp_path):
    assert detect_format(MOONCAKE, MOONCAKE.read_bytes()) == "mooncake"
    assert detect_format(tmp_path / "x.csv", BURSTGPT_HEADER.encode()) == "burstgpt"
    assert detect_format(tmp_path / "x.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n") == "azure"
    assert detect_format(tmp_path / "x.csv", b"start,end,status\n") == "records"
    assert detect_format(tmp_path / "x.json", b'[{"start": 1}]') == "records"
    assert detect_format(tmp_path / "x.jsonl", b'{"start": 1, "end": 2}\n') == "records"
    assert detect_format(tmp_path / "x.parquet", b"PAR1") == "records"
    assert set(FORMATS) == {"mooncake", "azure", "burstgpt", "records"}


def test_unknown_columns_and_format_names_are_refused(tmp_path):
    path = write(tmp_path, "odd.csv", "when,tokens\n1,2\n")
    assert refused(path) == ("odd.csv: cannot tell the trace format from its columns (tokens, when); name it "
                             "with --format mooncake, azure, burstgpt, records")
    assert refused(path, "alibaba") == "unknown trace format 'alibaba': auto, mooncake, azure, burstgpt, records"


# --- bad input: one line with file, line and field ---------------------------------------------------------

def test_empty_and_header_only_files(tmp_path):
    assert refused(write(tmp_path, "empty.jsonl", "")) == "empty.jsonl: the file is empty"
    assert refused(write(tmp_path, "blank.csv", "\n \n")) == "blank.csv: the file is empty"
    head = write(tmp_path, "head.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n")
    assert refused(head) == "head.csv: no requests in the trace"
    assert refused(tmp_path / "nothing.csv") == f"{tmp_path / 'nothing.csv'}: no such file"


def test_truncated_mooncake_line(tmp_path):
    path = write(tmp_path, "cut.jsonl", mooncake_line() * 3 + '{"timestamp": 9, "input_len')
    assert refused(path) == "cut.jsonl: line 4: invalid JSON at column 18: Unterminated string starting at"


@pytest.mark.parametrize("bad, message", [
    ('{"timestamp": 1, "input_length": "600", "output_length": 5}', "line 3, field 'input_length': \"600\" is not "
                                                                    "a token count (a whole number from 0)"),
    ('{"timestamp": 1, "input_length": 60.5, "output_length": 5}', "line 3, field 'input_length': 60.5 is not a "
                                                                   "token count (a whole number from 0)"),
    ('{"timestamp": 1, "input_length": 6, "output_length": -5}', "line 3, field 'output_length': -5 is not a token "
                                                                 "count (a whole number from 0)"),
    ('{"timestamp": 1, "input_length": 6}', "line 3, field 'output_length': missing"),
    ('{"timestamp": true, "input_length": 6, "output_length": 5}', "line 3, field 'timestamp': true is not a number"),
    ('{"timestamp": NaN, "input_length": 6, "output_length": 5, "hash_ids": [1]}',
     "line 3, field 'timestamp': nan is not a finite number"),
    ('{"timestamp": 1, "timestamp": 2, "input_length": 6, "output_length": 5}', "line 3, field 'timestamp': given "
                                                                               "twice"),
    ('[1, 600, 5]', "line 3: [1, 600, 5] is not a JSON object (a request)"),
    ('{"timestamp": 1, "input_length": 6, "output_length": 5, "hash_ids": null}',
     "line 3, field 'hash_ids': missing (other lines have block hashes)"),
    ('{"timestamp": 1, "input_length": 6, "output_length": 5, "hash_ids": [1, "b"]}',
     "line 3, field 'hash_ids': \"b\" is not a block ID (a whole number)"),
    ('{"timestamp": 1, "input_length": 6, "output_length": 5, "hash_ids": 7}',
     "line 3, field 'hash_ids': 7 is not a list of block IDs"),
])
def test_bad_mooncake_values_name_line_and_field(tmp_path, bad, message):
    # a blank line before the bad one still counts: the line is what an editor shows
    path = write(tmp_path, "bad.jsonl", mooncake_line() + "\n" + bad + "\n" + mooncake_line())
    assert refused(path, "mooncake") == f"bad.jsonl: {message}"


def test_mooncake_without_a_column_or_without_hashes(tmp_path):
    path = write(tmp_path, "nolen.jsonl", '{"timestamp": 1, "input_length": 6}\n' * 2)
    assert refused(path, "mooncake") == ("nolen.jsonl: no 'output_length' in any line: a Mooncake trace has "
                                         "timestamp, input_length, output_length and hash_ids")
    plain = write(tmp_path, "plain.jsonl", '{"timestamp": 1, "input_length": 6, "output_length": 2}\n' * 2)
    assert not read_trace(plain).has_hashes


def test_mooncake_hashes_that_do_not_cover_the_prompt_are_a_warning(tmp_path):
    path = write(tmp_path, "short.jsonl", mooncake_line(inp=1600, hashes=(1, 2)) + mooncake_line(ts=5))
    assert read_trace(path).warnings == [
        "1 requests have a number of hash_ids other than their input_length in 512-token blocks; their tokens "
        "past the last block count as never cached"]


@pytest.mark.parametrize("rows, message", [
    ("2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,abc,44\n",
     "line 3, field 'ContextTokens': abc is not a whole number"),
    ("2023-11-16 18:15:46.68,374,44\n\n2023-11-16 18:15:47,3,4\n16/11/2023,3,4\n",
     "line 5, field 'TIMESTAMP': 16/11/2023 is not a date and time like the first row's"),
    ("2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,3\n", "line 3: 2 fields where the header has 3"),
    ("2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,3,\n", "line 3, field 'GeneratedTokens': missing"),
    ("2023-11-16 18:15:46.68,-374,44\n", "line 2, field 'ContextTokens': -374 is not a token count (a whole "
                                        "number from 0)"),
])
def test_bad_azure_values_name_line_and_field(tmp_path, rows, message):
    path = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows)
    assert refused(path, "azure") == f"az.csv: {message}"


def test_missing_columns_are_named(tmp_path):
    path = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n")
    assert refused(path, "azure") == ("az.csv: no column 'GeneratedTokens': an Azure LLM inference trace has "
                                      "TIMESTAMP, ContextTokens, GeneratedTokens")
    burst = write(tmp_path, "b.csv", "Timestamp,Model,Request tokens\n5,GPT-4,3\n")
    assert refused(burst, "burstgpt") == ("b.csv: no column 'Response tokens': a BurstGPT trace has Timestamp, "
                                          "Request tokens, Response tokens")


def test_bad_burstgpt_value(tmp_path):
    path = write(tmp_path, "b.csv", BURSTGPT_HEADER + "5,GPT-4,3,4,7,API log\n7,GPT-4,3,4.5,7,API log\n")
    assert refused(path) == "b.csv: line 3, field 'Response tokens': 4.5 is not a whole number"
    path = write(tmp_path, "c.csv", BURSTGPT_HEADER + "inf,GPT-4,3,4,7,API log\n")
    assert refused(path) == "c.csv: line 2, field 'Timestamp': inf is not a finite number"


def test_records_without_prompt_tokens(tmp_path):
    path = write(tmp_path, "r.csv", "start,end,status,prompt_tokens\n0,1,failed,5\n1,2,failed,\n")
    assert refused(path) == ("r.csv: row 2, field 'prompt_tokens': missing (a trace needs every request's "
                             "prompt length)")


# --- the command line ------------------------------------------------------------------------------------------

def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args], capture_output=True, text=True, timeout=120)


def test_cli_json_has_exactly_the_issue_keys():
    res = run("trace", "stats", str(MOONCAKE), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert list(doc) == ["requests", "duration_s", "rate_rps", "prompt_tokens", "output_tokens", "peak_rate_rps",
                         "prefix"]
    assert list(doc["prompt_tokens"]) == list(doc["output_tokens"]) == ["mean", "p50", "p90", "p99", "max"]
    assert list(doc["prefix"]) == ["block_tokens", "reusable_token_share", "hit_rate_by_capacity"]
    caps = [h["capacity_tokens"] for h in doc["prefix"]["hit_rate_by_capacity"]]
    assert caps[0] == 10 ** 5 and caps[-1] == 10 ** 8 and 3_000_000 in caps and 50_000_000 in caps
    assert list(doc["prefix"]["hit_rate_by_capacity"][0]) == ["capacity_tokens", "token_hit_rate"]
    assert doc["requests"] == 300 and doc["duration_s"] == 102.0


def test_cli_tables_for_people_and_no_prefix_without_hashes():
    res = run("trace", "stats", str(TRACES / "azure_conv_2023_300.csv"), "--format", "azure")
    assert res.returncode == 0, res.stderr
    assert "azure trace" in res.stdout and "p99" in res.stdout and "no block hashes" in res.stdout
    doc = json.loads(run("trace", "stats", str(TRACES / "azure_conv_2023_300.csv"), "--json").stdout)
    assert doc["prefix"] is None


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    path = write(tmp_path, "cut.jsonl", mooncake_line() + '{"timestamp": 9, "input_len')
    res = run("trace", "stats", str(path))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "error: cut.jsonl: line 2: invalid JSON at column 18: Unterminated string starting at"]
    res = run("trace", "stats", str(path), "--format", "csv")
    assert res.returncode == 2 and "unknown trace format 'csv'" in res.stderr


def test_cli_json_notes_go_to_stderr(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT_HEADER + "5,ChatGPT,472,0,472,API log\n70,GPT-4,3,4,7,API log\n")
    res = run("trace", "stats", str(path), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["requests"] == 2
    assert "1 of 2 requests failed" in res.stderr
    assert np.isclose(json.loads(res.stdout)["rate_rps"], 2 / 65)


def test_unsorted_mooncake_keeps_each_request_with_its_blocks(tmp_path):
    path = write(tmp_path, "late.jsonl", mooncake_line(ts=2000, inp=1024, hashes=(5, 6))
                 + mooncake_line(ts=500, inp=512, hashes=(5,)) + mooncake_line(ts=500, inp=10, hashes=()))
    trace = read_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 0.0, 1.5] and trace.row.tolist() == [2, 3, 1]
    assert trace.hash_offsets.tolist() == [0, 1, 1, 3] and trace.hash_values.tolist() == [5, 5, 6]
    assert trace.prompt_tokens.tolist() == [512, 10, 1024]


def test_a_byte_order_mark_before_the_header(tmp_path):
    path = write(tmp_path, "bom.csv", b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n"
                 b"2023-11-16 18:15:46.68,374,44\n")
    assert read_trace(path).prompt_tokens.tolist() == [374]
