"""Record sets (folders, globs, hive partitions) and the DuckDB engine: the same report, the same errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.duckdb_engine import summarize_set
from servebench.analysis.exact_sum import exact_total, mean_of
from servebench.analysis.record_sets import summarize_path
from servebench.analysis.sorted_stream import SortedSink, pairwise_sum
from servebench.analysis.summary import SLO, Report
from servebench.errors import ConfigError, RecordValidationError, ServebenchError
from servebench.records.loaders import write_records
from servebench.records.recordset import choose_engine, find_parts
from servebench.records.table import STATUSES, RecordTable


def report_json(path: Path | str, engine: str, **kw) -> dict:
    out = summarize_path(path, engine=engine, **kw)
    assert out.engine == engine
    return json.loads(out.report.model_dump_json())


def both_engines(path: Path | str, **kw) -> dict | None:
    """Return the in-memory report, after checking DuckDB's is the same in every field (or the same error)."""
    try:
        memory = report_json(path, "memory", **kw)
    except ServebenchError as exc:
        with pytest.raises(type(exc)) as info:
            report_json(path, "duckdb", **kw)
        assert str(info.value) == str(exc)
        return None
    assert report_json(path, "duckdb", **kw) == memory
    return memory


def refusals(path: Path | str, error: type[ServebenchError] = RecordValidationError, **kw) -> list[str]:
    """Return the message each engine refuses the set with, the in-memory one first."""
    messages = []
    for engine in ("memory", "duckdb"):
        with pytest.raises(error) as info:
            summarize_path(path, engine=engine, **kw)
        messages.append(str(info.value))
    return messages


# --------------------------------------------------------------------------- sums, streamed


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=600), st.integers(1, 97))
@settings(max_examples=60, deadline=None)
def test_streamed_sums_match_numpy_pairwise_and_the_exact_mean(values, chunk):
    arr = np.sort(np.array(values, dtype=np.float64))
    assert pairwise_sum(arr) == float(np.add.reduce(arr)) or arr.size == 0
    sink = SortedSink(arr.size, {1, arr.size})
    for lo in range(0, arr.size, chunk):
        sink.feed(arr[lo:lo + chunk])
    if arr.size:
        assert mean_of(sink.total(), arr.size) == float(sum(map(Fraction, values), Fraction(0)) / arr.size)
        assert sink.last == arr[-1] and sink.picked[1] == arr[0]


def test_streamed_mean_at_a_million_values_in_uneven_chunks_is_the_in_memory_one():
    arr = np.sort(np.random.default_rng(7).lognormal(0, 2, 1_000_003))
    sink = SortedSink(arr.size, set())
    cuts = np.r_[0, np.sort(np.random.default_rng(8).integers(0, arr.size, 40)), arr.size]
    for a, b in zip(cuts[:-1], cuts[1:]):
        sink.feed(arr[a:b])
    assert sink.total() == exact_total(np.random.default_rng(9).permutation(arr))
    assert abs(mean_of(sink.total(), arr.size) - float(arr.mean())) <= 4 * np.spacing(arr.mean())  # numpy's, to rounding


def test_space_chars_are_the_ones_blank_mask_counts():
    from servebench.analysis.duckdb_parts import SPACE_CHARS
    from servebench.records.textcolumns import blank_mask
    chars = [chr(i) for i in range(0x3100) if not 0xD800 <= i < 0xE000]
    blank = blank_mask(pa.array(chars))
    assert "".join(c for c, b in zip(chars, blank) if b) == SPACE_CHARS


# --------------------------------------------------------------------------- the same report, field by field


times = st.integers(0, 40).map(lambda k: k / 4)  # a coarse grid: many ties between starts and ends


@st.composite
def records(draw) -> list[dict]:
    n = draw(st.integers(1, 40))
    out = []
    for i in range(n):
        status = draw(st.sampled_from(STATUSES))
        start = draw(times)
        end = start + draw(times)
        rec: dict = {"start": start, "end": end, "status": status}
        if status == "success":
            rec["first_token"] = draw(st.sampled_from([start, end, (start + end) / 2]))
            rec["output_tokens"] = draw(st.integers(1, 5))
            if draw(st.booleans()):
                rec["admitted"] = draw(st.sampled_from([start, rec["first_token"]]))
        else:
            if draw(st.booleans()):
                rec["output_tokens"] = draw(st.integers(0, 3))
            rec["error"] = draw(st.sampled_from([None, "queue full", "deadline"]))
        if draw(st.booleans()):
            rec["prompt_tokens"] = draw(st.integers(0, 9))
        rec["request_id"] = draw(st.sampled_from([None, f"r{i}", "dup"]))
        rec["slice"] = draw(st.sampled_from([None, "a", "b"]))
        rec["gpu"] = draw(st.sampled_from(["h100", "a100", None]))
        out.append(rec)
    return out


@st.composite
def records_with_cache_and_tokens(draw) -> list[dict]:
    """``records``, some with cached_prompt_tokens (hits and misses) and token times (some in chunks), on a grid."""
    out = draw(records())
    for rec in out:
        if draw(st.booleans()):
            rec["cached_prompt_tokens"] = draw(st.integers(0, rec.get("prompt_tokens", 9)))
        start, end, k = rec["start"], rec["end"], rec.get("output_tokens")
        if rec["status"] == "success" and draw(st.integers(0, 3)):
            first = rec["first_token"]
            arrivals = draw(st.integers(1, k))
            later = sorted(draw(st.lists(st.integers(0, 4), min_size=arrivals - 1, max_size=arrivals - 1)))
            rec["token_times"] = [first] + [first + (end - first) * j / 4 for j in later]
            if arrivals < k or draw(st.booleans()):
                rec["token_counts"] = [1] * (arrivals - 1) + [k - arrivals + 1]
        elif rec["status"] != "success" and k and draw(st.booleans()):  # tokens before it failed
            rec["first_token"] = start
            rec["token_times"] = [start, end][:draw(st.integers(1, min(k, 2)))]
    return out


TYPES = {"start": pa.float64(), "end": pa.float64(), "admitted": pa.float64(), "first_token": pa.float64(),
         "prompt_tokens": pa.int64(), "output_tokens": pa.int64(), "cached_prompt_tokens": pa.int64(),
         "token_times": pa.list_(pa.float64()), "token_counts": pa.list_(pa.int64()), "attempt": pa.int64()}


def write_parquet(recs: list[dict], path: Path) -> Path:
    """Write records to Parquet: the usual columns, and cached_prompt_tokens and token columns where any has them."""
    cols = ["request_id", "start", "admitted", "first_token", "end", "status", "prompt_tokens", "output_tokens",
            "slice", "error", "gpu"]
    cols += [c for c in ("cached_prompt_tokens", "token_times", "token_counts") if any(c in r for r in recs)]
    table = pa.table({c: pa.array([r.get(c) for r in recs], TYPES.get(c, pa.string())) for c in cols})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


@given(records(), st.sampled_from([None, "gpu"]), st.booleans())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_duckdb_report_equals_the_in_memory_report_in_every_field(recs, slice_column, with_slo):
    slo = SLO(ttft_s=2.0, tpot_s=1.0, latency_s=5.0) if with_slo else None
    with tempfile.TemporaryDirectory() as tmp:
        path = write_parquet(recs, Path(tmp) / "records.parquet")
        both_engines(path, slo=slo, slice_column=slice_column)


@given(records_with_cache_and_tokens(), st.sampled_from([None, "gpu"]),
       st.sampled_from([None, SLO(itl_p99_s=0.5), SLO(ttft_s=2.0, itl_p99_s=1.0, stall_s=0.5), SLO(stall_s=1.0)]),
       st.booleans())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_prefix_cache_and_token_sections_equal_the_in_memory_report(recs, slice_column, slo, split):
    """cached_prompt_tokens and token times (ITL, stalls, the ITL SLO): the same in every field, one part or two."""
    with tempfile.TemporaryDirectory() as tmp:
        if split:  # a plain part DuckDB scans itself, then a part with the new columns, staged
            plain = [{k: v for k, v in r.items() if k not in ("cached_prompt_tokens", "token_times", "token_counts")}
                     for r in recs[: len(recs) // 2]]
            write_parquet(plain, Path(tmp) / "set" / "a.parquet")
            write_parquet(recs[len(recs) // 2:] or recs, Path(tmp) / "set" / "b.parquet")
            both_engines(Path(tmp) / "set", slo=slo, slice_column=slice_column)
        else:
            both_engines(write_parquet(recs, Path(tmp) / "records.parquet"), slo=slo, slice_column=slice_column)


def test_token_and_cache_sections_are_filled_by_both_engines(tmp_path):
    """A fixed case that has every new section, so the equality above cannot pass by both leaving them out."""
    recs = []
    for i in range(30):
        start = float(i)
        end = start + 2.0
        rec = {"start": start, "first_token": start + 0.5, "end": end, "status": "success", "output_tokens": 4,
               "prompt_tokens": 100, "cached_prompt_tokens": 60 if i % 2 else 0, "admitted": start + 0.25,
               "token_times": [start + 0.5, start + 0.75, start + (1.0 if i % 5 else 1.9), end],
               "gpu": "a" if i % 3 else "b"}
        recs.append(rec)
    doc = both_engines(write_parquet(recs, tmp_path / "r.parquet"), slo=SLO(itl_p99_s=1.05), slice_column="gpu")
    assert doc is not None
    assert doc["itl_s"]["n"] == 90 and doc["max_stall_s"]["n"] == 30 and doc["stalls"]["stalled"] == 6
    assert doc["prefix_cache"]["requests_with_hit"] == 15 and doc["prefix_cache"]["prefill_s_per_prompt_token"] == 0.0025
    assert doc["slo"]["good_requests"] == 24 and doc["slices"]["b"]["itl_s"]["n"] == 30


def test_the_engine_covers_every_field_of_the_report():
    """A field build_report gains must be computed by the DuckDB engine too, or the engine refuses (see below)."""
    from servebench.analysis.duckdb_report import COVERED_FIELDS, uncovered_fields
    assert uncovered_fields() == [] and COVERED_FIELDS >= set(Report.model_fields)


def test_records_with_logical_ids_are_summarized_by_duckdb_as_in_memory(tmp_path, monkeypatch):
    """The logical-request section out of core (retry runs), the same in every field; a bad attempt is the same error."""
    recs = rule_part()
    for i, rec in enumerate(recs):
        rec.update(logical_id=f"u{i // 2}", attempt=i % 2 + 1)
    path = write_part(recs, tmp_path / "r.parquet")
    doc = both_engines(path)
    assert doc is not None and doc["logical"]["logical_requests"] == 4 and doc["logical"]["attempts"] == 8
    monkeypatch.setattr("servebench.records.recordset.BYTES_PER_PARQUET_ROW", 10**12)  # auto takes DuckDB for size
    out = summarize_path(path)
    assert out.engine == "duckdb" and out.report.logical is not None
    recs[2]["attempt"] = 0
    write_part(recs, tmp_path / "r.parquet")
    assert refusals(path)[0] == refusals(path)[1]
    with pytest.raises(RecordValidationError, match="^r.parquet, row 3, field 'attempt': Invalid attempt"):
        summarize_path(path, engine="duckdb")


def test_a_field_the_engine_lacks_is_refused_by_name_and_left_to_memory_in_auto(tmp_path, monkeypatch):
    import servebench.analysis.duckdb_report as dr
    path = write_parquet(sample_records(), tmp_path / "r.parquet")
    monkeypatch.setattr(dr, "COVERED_FIELDS", dr.COVERED_FIELDS - {"prefix_cache"})
    assert dr.uncovered_fields() == ["prefix_cache"]
    with pytest.raises(ConfigError, match="^--engine duckdb: the DuckDB engine does not compute the report's "
                                          "'prefix_cache' yet; use --engine memory$"):
        summarize_path(path, engine="duckdb")
    out = summarize_path(path, memory_limit="1KB")  # auto would take DuckDB for size
    assert out.engine == "memory" and "'prefix_cache'" in out.engine_note and "in memory instead" in out.engine_note


@pytest.mark.skipif("fairness" not in Report.model_fields, reason="no fairness section (issue 17) yet")
def test_fairness_with_a_run_folders_tenant_weights_and_warmup_slices_agree(tmp_path):
    """The fairness section weighs slices by a run folder's tenant weights; --warmup-s slices cold and warm."""
    folder = tmp_path / "run"
    write_parquet(sample_records(60), folder / "records.parquet")
    (folder / "metadata.json").write_text(json.dumps({"scenario": {"server": {"tenants": {"chat": {"weight": 3}}}}}))
    doc = both_engines(folder, slo=SLO(ttft_s=1.0))
    assert doc is not None and doc["fairness"]["weights_from"] == "metadata"
    assert doc["fairness"]["slices"]["chat"]["weight"] == 3.0 and doc["fairness"]["slices"]["code"]["weight"] == 1.0
    warm = both_engines(folder, warmup_s=5.0)
    assert warm is not None and set(warm["slices"]) == {"cold", "warm"} and warm["fairness"] is not None
    assert both_engines(folder, warmup_s=0.0) is None  # the same error from both


def test_distribution_edges_agree_at_sizes_that_bound_intervals(tmp_path):
    """0, 1 and 2 successes, all failed, and enough rows for confidence bounds, with ties and failures."""
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 50, 1001):
        recs = []
        for i in range(n):
            start = float(rng.integers(0, 20))
            end = start + float(rng.integers(0, 5))
            status = "success" if i % 3 else ("timeout" if i % 2 else "rejected")
            rec = {"start": start, "end": end, "status": status, "request_id": f"r{i % 40}"}
            if status == "success":
                rec.update(first_token=start, output_tokens=int(rng.integers(1, 4)))
            recs.append(rec)
        both_engines(write_parquet(recs, tmp_path / f"n{n}.parquet"))
    failed = [{"start": 0.0, "end": 1.0, "status": "failed"}, {"start": 0.5, "end": 0.5, "status": "rejected"}]
    doc = both_engines(write_parquet(failed, tmp_path / "failed.parquet"))
    assert doc is not None and doc["latency_s"]["n"] == 0
    assert doc["failure_aware_latency_s"]["percentiles"][0]["value"] == "Infinity"


# --------------------------------------------------------------------------- folders, globs, hive partitions


def sample_records(n: int = 60, seed: int = 1) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        start = float(np.round(rng.uniform(0, 30), 2))
        ok = rng.random() < 0.8
        end = start + float(np.round(rng.uniform(0.5, 4), 2))
        rec = {"request_id": f"r{i}", "start": start, "end": end, "status": "success" if ok else "timeout",
               "slice": "chat" if i % 2 else "code"}
        if ok:
            rec.update(first_token=start + 0.25, output_tokens=int(rng.integers(1, 50)))
        else:
            rec.update(error="deadline")
        out.append(rec)
    return out


def without_source(doc: dict) -> dict:
    """The report with its (and its slices') source left out: a folder and a file are named differently."""
    return {**doc, "source": None, "slices": {k: without_source(v) for k, v in doc["slices"].items()}}


def hive_folder(root: Path, recs: list[dict]) -> Path:
    """Write records as hive parts: gpu=a (Parquet, two parts), gpu=b (CSV) and gpu=c (JSONL)."""
    third = len(recs) // 3
    groups = {"a": recs[:third], "b": recs[third:2 * third], "c": recs[2 * third:]}
    def table(rs: list[dict]) -> RecordTable:
        return RecordTable.from_columns(
            start=np.array([r["start"] for r in rs]), end=np.array([r["end"] for r in rs]),
            status=np.array([STATUSES.index(r["status"]) for r in rs], np.int8),
            first_token=np.array([r.get("first_token", np.nan) for r in rs]),
            output_tokens=np.array([r.get("output_tokens", -1) for r in rs], np.int64),
            admitted=np.full(len(rs), np.nan), prompt_tokens=np.full(len(rs), -1, np.int64),
            request_id=[r["request_id"] for r in rs], slice=[r["slice"] for r in rs],
            error=[r.get("error") for r in rs])
    half = len(groups["a"]) // 2
    for name, rows in (("part-0.parquet", groups["a"][:half]), ("part-1.parquet", groups["a"][half:])):
        (root / "gpu=a").mkdir(parents=True, exist_ok=True)
        write_records(table(rows), root / "gpu=a" / name)
    (root / "gpu=b").mkdir()
    write_records(table(groups["b"]), root / "gpu=b" / "part-0.csv")
    (root / "gpu=c").mkdir()
    write_records(table(groups["c"]), root / "gpu=c" / "part-0.jsonl")
    (root / "_SUCCESS").write_text("")
    return root


def test_a_folder_is_one_record_set_equal_to_one_file(tmp_path):
    recs = sample_records()
    folder = hive_folder(tmp_path / "trace", recs)
    one = tmp_path / "one.parquet"
    write_parquet([{**r, "gpu": g} for r, g in zip(recs, ["a"] * 20 + ["b"] * 20 + ["c"] * 20)], one)
    parts = find_parts(folder)
    assert [p.name for p in parts.parts] == ["gpu=a/part-0.parquet", "gpu=a/part-1.parquet", "gpu=b/part-0.csv",
                                             "gpu=c/part-0.jsonl"]
    for slice_column in (None, "gpu"):
        from_folder = both_engines(folder, slice_column=slice_column)
        from_file = report_json(one, "memory", slice_column=slice_column)
        assert from_folder["source"] == str(folder) and from_file["source"] == "one.parquet"
        assert without_source(from_folder) == without_source(from_file)
    assert set(both_engines(folder, slice_column="gpu")["slices"]) == {"a", "b", "c"}
    by_glob = both_engines(str(folder / "gpu=*" / "*.parquet"), slice_column="gpu")
    assert set(by_glob["slices"]) == {"a"} and by_glob["offered"] == 20


def test_a_part_with_a_column_of_another_type_is_read_by_servebench(tmp_path):
    """output_tokens stored as int in one part and as float in another: the float one is refused, by name."""
    recs = sample_records(10)
    write_parquet(recs[:5], tmp_path / "set" / "p0.parquet")
    second = pa.table({"start": [r["start"] for r in recs[5:]], "end": [r["end"] for r in recs[5:]],
                       "status": ["success"] * 5, "first_token": [r["start"] for r in recs[5:]],
                       "output_tokens": [3.0] * 5})
    pq.write_table(second, tmp_path / "set" / "p1.parquet")
    errors = refusals(tmp_path / "set")
    assert errors[0] == errors[1]
    assert errors[0].startswith("p1.parquet, row 1, field 'output_tokens': Invalid successful output")


# --------------------------------------------------------------------------- the same first bad row


@pytest.mark.parametrize("suffix", ["parquet", "csv", "jsonl"])
def test_validation_names_the_same_part_row_and_field(tmp_path, suffix):
    recs = sample_records(30)
    bad = [dict(r) for r in recs[10:]]
    ok_at = next(i for i, r in enumerate(bad) if r["status"] == "success")
    bad[ok_at]["first_token"] = bad[ok_at]["end"] + 1  # after its end: Invalid successful output
    later = next(i for i, r in enumerate(bad) if i > ok_at)
    bad[later]["status"] = "done"  # a later bad row must not be the one reported
    folder = tmp_path / "set"
    write_parquet(recs[:10], folder / "a.parquet")
    table = pa.Table.from_pylist(bad)
    path = folder / f"b.{suffix}"
    if suffix == "parquet":
        pq.write_table(table, path)
    elif suffix == "csv":
        import pyarrow.csv as pacsv
        pacsv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in bad))
    messages = refusals(folder)
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"b.{suffix}, row {ok_at + 1}, field 'first_token': Invalid successful output")


def rule_part(n: int = 8, tokens: bool = False) -> list[dict]:
    """Good records for a part (every fourth a timeout), token times on successes when ``tokens``."""
    out = []
    for i in range(n):
        start = float(i)
        rec = {"request_id": f"b{i}", "start": start, "admitted": start + 0.1, "end": start + 2.0,
               "status": "success", "prompt_tokens": 100, "output_tokens": 3, "cached_prompt_tokens": 40,
               "slice": "chat"}
        if i % 4 == 3:
            rec.update(status="timeout", output_tokens=1, error="deadline")
        else:
            rec["first_token"] = start + 0.5
            if tokens:
                rec["token_times"] = [start + 0.5, start + 1.0, start + 2.0]
        out.append(rec)
    return out


S, F, E = 2.0, 2.5, 4.0  # row 3's start, first token and end (0-based row 2: the part's fourth row is a timeout)
RULES = [  # (what, format, the record's changes, field, message): every rule first_violation applies, in order
    ("not an object", "jsonl", None, None, "Record must be an object"),
    ("start missing", "parquet", {"start": None}, "start", "Invalid request times"),
    ("start not finite", "parquet", {"start": math.nan}, "start", "Invalid request times"),
    ("end not finite", "parquet", {"end": math.inf}, "end", "Invalid request times"),
    ("end before start", "parquet", {"end": S - 0.5, "first_token": None, "status": "failed", "admitted": None},
     "end", "Invalid request times"),
    ("unknown status", "parquet", {"status": "ok"}, "status", "Invalid status"),
    ("success without first token", "parquet", {"first_token": None}, "first_token", "Invalid successful output"),
    ("success without output", "parquet", {"output_tokens": 0}, "output_tokens", "Invalid successful output"),
    ("failure's first token after end", "parquet", {"status": "failed", "first_token": E + 1},
     "first_token", "Invalid first token time"),
    ("failure's negative output", "parquet", {"status": "failed", "output_tokens": -1},
     "output_tokens", "Invalid output tokens"),
    ("admitted before start", "parquet", {"admitted": S - 1}, "admitted", "Invalid admission time"),
    ("admitted after first token", "parquet", {"admitted": F + 0.1}, "admitted", "Invalid admission time"),
    ("negative prompt", "parquet", {"prompt_tokens": -1}, "prompt_tokens", "Invalid prompt tokens"),
    ("slice not text", "jsonl", {"slice": 7}, "slice", "Invalid text field"),
    ("logical id not text", "jsonl", {"logical_id": 5.5}, "logical_id", "Invalid text field"),
    ("cached above prompt", "parquet", {"cached_prompt_tokens": 101}, "cached_prompt_tokens",
     "Invalid cached prompt tokens"),
    ("cached negative", "parquet", {"cached_prompt_tokens": -1}, "cached_prompt_tokens",
     "Invalid cached prompt tokens"),
    ("cached not an integer", "jsonl", {"cached_prompt_tokens": 1.5}, "cached_prompt_tokens",
     "Invalid cached prompt tokens"),
    ("attempt below 1", "parquet", {"attempt": 0}, "attempt", "Invalid attempt"),
    ("token times not a list", "jsonl", {"token_times": "soon"}, "token_times", "Invalid token times"),
    ("token time not finite", "parquet", {"token_times": [F, math.nan, E]}, "token_times", "Invalid token times"),
    ("first token time differs", "parquet", {"token_times": [F + 0.1, F + 0.5, E]}, "token_times",
     "Invalid token times"),
    ("token times decrease", "parquet", {"token_times": [F, F + 1, F + 0.5]}, "token_times", "Invalid token times"),
    ("last token time after end", "parquet", {"token_times": [F, F + 0.5, E + 1]}, "token_times",
     "Invalid token times"),
    ("counts without times", "parquet", {"token_times": None, "token_counts": [3]}, "token_counts",
     "Invalid token counts"),
    ("counts of another length", "parquet", {"token_counts": [1, 2]}, "token_counts", "Invalid token counts"),
    ("a count below 1", "parquet", {"token_counts": [0, 1, 2]}, "token_counts", "Invalid token counts"),
    ("times short of output tokens", "jsonl", {"token_times": [F, E]}, "token_times", "Invalid token times"),
    ("failure with more tokens than output", "parquet", {"status": "failed", "output_tokens": 1},
     "token_times", "Invalid token times"),
]



def write_part(recs: list, path: Path) -> Path:
    """Write a part as Parquet (typed columns) or JSONL (absent keys left out; a non-object as it is)."""
    if path.suffix == ".parquet":
        cols = list(dict.fromkeys(k for r in recs for k in r))
        pq.write_table(pa.table({c: pa.array([r.get(c) for r in recs], TYPES.get(c, pa.string())) for c in cols}),
                       path)
    else:
        path.write_text("".join(json.dumps(r if not isinstance(r, dict) else
                                           {k: v for k, v in r.items() if v is not None}) + "\n" for r in recs))
    return path


@pytest.mark.parametrize("what, fmt, change, field, message", RULES, ids=[r[0] for r in RULES])
def test_each_rule_gives_the_same_first_bad_row_and_message(tmp_path, what, fmt, change, field, message):
    """Row 3 of the second part breaks the rule, a later part another (a decoy): both engines name row 3 alike.

    The decoy sits in another part, so a rule the SQL lacked would name the decoy: re-validating the
    part SQL finds in Python could not correct it.
    """
    tokens = what.startswith(("token", "first token", "last token", "count", "a count", "times", "failure with"))
    folder = tmp_path / "set"
    folder.mkdir()
    write_parquet(sample_records(10), folder / "a.parquet")
    recs: list = rule_part(tokens=tokens)
    recs[2] = [1, 2] if change is None else {**recs[2], **change}
    write_part(recs, folder / f"b.{fmt}")
    write_parquet([{**r, "status": "done"} for r in sample_records(3)], folder / "c.parquet")
    errors = refusals(folder)
    assert errors[0] == errors[1]
    where = f"b.{fmt}, row 3" + (f", field '{field}'" if field else "")
    assert errors[0].startswith(f"{where}: {message}"), errors[0]


def test_a_parquet_part_duckdb_reads_itself_is_checked_for_cached_prompt_tokens(tmp_path):
    """The rule only servebench's validator knew: a native part's bad cached_prompt_tokens is found by SQL too."""
    from servebench.analysis.duckdb_parts import plan_part
    recs = rule_part()
    recs[6] = {**recs[6], "cached_prompt_tokens": 500}
    path = write_part(recs, tmp_path / "b.parquet")
    assert plan_part(find_parts(path).parts[0], 0, "auto").native
    with pytest.raises(RecordValidationError, match="^b.parquet, row 7, field 'cached_prompt_tokens': Invalid cached"):
        summarize_path(path, engine="duckdb")


def test_extra_columns_that_are_not_scalars_are_the_same_error(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    write_parquet(sample_records(10), folder / "a.parquet")
    recs = rule_part()
    recs[2] = {**recs[2], "note": ["a", "list"]}
    write_part(recs, folder / "b.jsonl")
    nested = pa.table({"start": [0.0], "end": [1.0], "status": ["failed"], "tags": pa.array([{"k": 1}])})
    for extra in (None, nested):
        if extra is not None:
            (folder / "b.jsonl").unlink()
            pq.write_table(extra, folder / "b.parquet")
        errors = []
        for engine in ("memory", "duckdb"):
            with pytest.raises(ServebenchError) as info:
                summarize_path(folder, engine=engine)
            errors.append((type(info.value), str(info.value)))
        assert errors[0] == errors[1] and "Invalid extra field" in errors[0][1]


def test_an_unknown_slice_column_is_the_same_error(tmp_path):
    folder = hive_folder(tmp_path / "trace", sample_records())
    errors = refusals(folder, ConfigError, slice_column="gpus")
    assert errors[0] == errors[1] and "did you mean 'gpu'" in errors[0]


# --------------------------------------------------------------------------- choosing the engine; the CLI


def test_auto_takes_duckdb_when_the_records_exceed_the_budget(tmp_path):
    path = write_parquet(sample_records(), tmp_path / "r.parquet")
    record_set = find_parts(path)
    assert choose_engine("auto", record_set, None) == ("memory", None)
    engine, note = choose_engine("auto", record_set, "1KB")
    assert engine == "duckdb" and "out of core with DuckDB" in note and "--memory-limit" in note
    out = summarize_set(record_set, memory_limit="256MB", threads=1)
    assert json.loads(out.report.model_dump_json()) == report_json(path, "memory")


def test_the_memory_estimate_is_not_below_a_real_runs_peak(tmp_path):
    """``--engine auto`` keeps a file in memory only if the estimate fits: it must not underestimate."""
    import subprocess
    import sys

    from servebench.records.recordset import estimate_memory_bytes
    n = 300_000
    table = many_records(n, 4).append_column("request_id", pa.array([f"req-{i:09d}" for i in range(n)]))
    path = tmp_path / "r.parquet"
    pq.write_table(table, path)
    code = ("from pathlib import Path; from servebench.analysis.record_sets import summarize_path;"
            f"summarize_path(Path({str(path)!r}), engine='memory');"
            "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))")
    peak_bytes = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                     .stdout.split()[-1]) * 1024
    assert estimate_memory_bytes(find_parts(path)) >= peak_bytes


def many_records(n: int, seed: int) -> pa.Table:
    """n records with every status, in a few vectorised lines."""
    rng = np.random.default_rng(seed)
    start = np.cumsum(rng.exponential(0.01, n))
    first = start + rng.exponential(0.2, n)
    end = first + rng.exponential(1.0, n)
    status = np.where(rng.random(n) < 0.9, "success", np.where(rng.random(n) < 0.5, "timeout", "rejected"))
    ok = status == "success"
    return pa.table({"start": start, "first_token": pa.array(first, mask=~ok), "end": end, "status": status,
                     "output_tokens": pa.array(rng.integers(1, 300, n), mask=~ok),
                     "error": pa.array(np.where(ok, "", "deadline")).cast(pa.string())})


def test_cli_engine_duckdb_and_the_auto_note(tmp_path):
    """100,000 records need about 30 MB in memory: a 24 MB budget sends them to DuckDB, held to 24 MB."""
    for gpu, seed in (("a", 1), ("b", 2)):
        (tmp_path / "trace" / f"gpu={gpu}").mkdir(parents=True)
        pq.write_table(many_records(50_000, seed), tmp_path / "trace" / f"gpu={gpu}" / "part-0.parquet")
    base = [sys.executable, "-m", "servebench", "summarize", str(tmp_path / "trace"), "--slice-by", "gpu", "--json"]
    memory = subprocess.run(base + ["--engine", "memory"], capture_output=True, text=True, timeout=120)
    auto = subprocess.run(base + ["--memory-limit", "24MB"], capture_output=True, text=True, timeout=120)
    assert memory.returncode == 0 and auto.returncode == 0, memory.stderr + auto.stderr
    assert "more than the 24 MB servebench allows itself (--memory-limit)" in " ".join(auto.stderr.split())
    a, b = json.loads(memory.stdout), json.loads(auto.stdout)
    assert a["engine"] == "memory" and b["engine"] == "duckdb"
    assert {**a, "engine": None} == {**b, "engine": None}
    assert a["slices"].keys() == {"a", "b"} and a["extra_columns"] == ["gpu"] and a["offered"] == 100_000


def test_cli_bad_part_is_one_line_exit_2(tmp_path):
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "a.csv").write_text("start,first_token,end,status,output_tokens\n0,0.5,2.5,success,9\n")
    (folder / "b.csv").write_text("start,first_token,end,status,output_tokens\n0,0.5,2.5,success,9.0\n")
    for engine in ("memory", "duckdb"):
        res = subprocess.run([sys.executable, "-m", "servebench", "summarize", str(folder), "--engine", engine],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stderr.strip().count("\n") == 0
        assert res.stderr.startswith("error: b.csv, row 1, field 'output_tokens': Invalid successful output")


def test_the_default_path_imports_neither_duckdb_nor_polars_nor_ray(tmp_path):
    path = write_parquet(sample_records(), tmp_path / "r.parquet")
    code = ("import sys, servebench, servebench.cli.core\n"
            f"try:\n    servebench.cli.core.main(['summarize', {str(path)!r}, '--json'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('duckdb', 'polars', 'ray') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"
