"""Record sets (folders, globs, hive partitions) and the DuckDB engine: the same report, the same errors."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from servebench.analysis.duckdb_report import SortedSink, pairwise_sum, summarize_set
from servebench.errors import ConfigError, RecordValidationError, ServebenchError
from servebench.records.loaders import write_records
from servebench.records.table import RecordTable, STATUSES
from servebench.analysis.record_sets import summarize_path
from servebench.records.recordset import choose_engine, find_parts
from servebench.analysis.summary import SLO


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


# --------------------------------------------------------------------------- numpy's pairwise sum, streamed


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=600), st.integers(1, 97))
@settings(max_examples=60, deadline=None)
def test_streamed_sum_rounds_as_numpy_mean_does(values, chunk):
    arr = np.sort(np.array(values, dtype=np.float64))
    assert pairwise_sum(arr) == float(np.add.reduce(arr)) or arr.size == 0
    sink = SortedSink(arr.size, {1, arr.size})
    for lo in range(0, arr.size, chunk):
        sink.feed(arr[lo:lo + chunk])
    if arr.size:
        assert sink.total() / arr.size == float(arr.mean())
        assert sink.last == arr[-1] and sink.picked[1] == arr[0]


def test_streamed_sum_at_a_million_values_in_uneven_chunks():
    arr = np.sort(np.random.default_rng(7).lognormal(0, 2, 1_000_003))
    sink = SortedSink(arr.size, set())
    cuts = np.r_[0, np.sort(np.random.default_rng(8).integers(0, arr.size, 40)), arr.size]
    for a, b in zip(cuts[:-1], cuts[1:]):
        sink.feed(arr[a:b])
    assert sink.total() / arr.size == float(arr.mean())


def test_space_chars_are_the_ones_blank_mask_counts():
    from servebench.analysis.duckdb_report import SPACE_CHARS
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


def write_parquet(recs: list[dict], path: Path) -> Path:
    cols = ["request_id", "start", "admitted", "first_token", "end", "status", "prompt_tokens", "output_tokens",
            "slice", "error", "gpu"]
    types = {"start": pa.float64(), "end": pa.float64(), "admitted": pa.float64(), "first_token": pa.float64(),
             "prompt_tokens": pa.int64(), "output_tokens": pa.int64()}
    table = pa.table({c: pa.array([r.get(c) for r in recs], types.get(c, pa.string())) for c in cols})
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
    table = lambda rs: RecordTable.from_columns(  # noqa: E731
        start=np.array([r["start"] for r in rs]), end=np.array([r["end"] for r in rs]),
        status=np.array([STATUSES.index(r["status"]) for r in rs], np.int8),
        first_token=np.array([r.get("first_token", np.nan) for r in rs]),
        output_tokens=np.array([r.get("output_tokens", -1) for r in rs], np.int64),
        admitted=np.full(len(rs), np.nan), prompt_tokens=np.full(len(rs), -1, np.int64),
        request_id=[r["request_id"] for r in rs], slice=[r["slice"] for r in rs], error=[r.get("error") for r in rs])
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
    errors = []
    for engine in ("memory", "duckdb"):
        with pytest.raises(RecordValidationError) as info:
            summarize_path(tmp_path / "set", engine=engine)
        errors.append(str(info.value))
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
    messages = []
    for engine in ("memory", "duckdb"):
        with pytest.raises(RecordValidationError) as info:
            summarize_path(folder, engine=engine)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith(f"b.{suffix}, row {ok_at + 1}, field 'first_token': Invalid successful output")


def test_an_unknown_slice_column_is_the_same_error(tmp_path):
    folder = hive_folder(tmp_path / "trace", sample_records())
    errors = []
    for engine in ("memory", "duckdb"):
        with pytest.raises(ConfigError) as info:
            summarize_path(folder, engine=engine, slice_column="gpus")
        errors.append(str(info.value))
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
