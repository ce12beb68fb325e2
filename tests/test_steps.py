"""The one step-trace schema: written alike by the simulator and the engine, read by one reader (old names too)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.capacity.stepmodel import fit_step_model
from servebench.errors import InputFormatError
from servebench.records.steps import (
    COLUMNS,
    LANES,
    NAMES,
    OLD_NAMES,
    StepRow,
    StepTrace,
    from_step_rows,
    parse_steps,
    read_steps,
    steps_from_bytes,
    write_steps,
)

# a trace as the simulator wrote it before the one schema (CSV header of servebench simulate --trace-format csv)
OLD_SIMULATOR_CSV = (b"time,duration,steps,lane,active,waiting,kv_tokens_used,kv_tokens_read,prefill_tokens,"
                     b"decode_seqs,kv_tokens_held,prefill_seqs\n"
                     b"0.0,0.01,1,step,1,0,112,0,100,0,0,1\n"
                     b"0.01,0.006,3,step,1,0,112,100,0,1,100,0\n")
# rows as servebench run wrote them before: start, kv_tokens and compute_start, plus the alias columns
OLD_ENGINE_ROW = {"start": 1.5, "duration_s": 0.002, "compute_s": 0.0015, "prefill_tokens": 0, "decode_seqs": 2,
                  "kv_tokens": 40, "kv_tokens_used": 64, "kv_tokens_held": 42, "running": 2, "waiting": 0,
                  "preempted": 0, "prefill_seqs": 0, "admitted": 0, "compute_start": 1.5001,
                  "duration": 0.002, "kv_tokens_read": 40}


def test_the_engine_row_and_the_schema_name_the_same_columns() -> None:
    assert {f.name for f in dataclasses.fields(StepRow)} == set(NAMES)
    assert all(new in NAMES for new in OLD_NAMES.values()) and not set(OLD_NAMES) & set(NAMES)
    assert all(c.name.endswith("_s") for c in COLUMNS if c.kind == "float")  # seconds, said in the name


def test_an_old_simulator_csv_reads_under_the_new_names() -> None:
    trace = steps_from_bytes(OLD_SIMULATOR_CSV, "steps.csv")
    rows = trace.to_rows()
    assert rows[1]["start_s"] == 0.01 and rows[1]["duration_s"] == 0.006 and rows[1]["running"] == 1
    assert rows[1]["kv_tokens_read"] == 100 and rows[1]["steps"] == 3 and rows[1]["lane"] == "step"
    assert rows[0]["compute_s"] is None and rows[0]["admitted"] is None  # the old simulator did not write them
    assert list(rows[0]) == list(NAMES)


def test_an_old_engine_trace_with_alias_columns_reads_once() -> None:
    row = parse_steps([OLD_ENGINE_ROW], "steps.jsonl").to_rows()[0]
    assert row["start_s"] == 1.5 and row["kv_tokens_read"] == 40 and row["compute_start_s"] == 1.5001
    assert row["duration_s"] == 0.002 and row["steps"] is None  # an old engine file did not say


def test_a_column_under_two_names_that_disagree_is_refused() -> None:
    with pytest.raises(InputFormatError, match=r"t\.jsonl: row 1: columns 'kv_tokens' \(40\) and 'kv_tokens_read' "
                                               r"\(41\) differ"):
        parse_steps([{**OLD_ENGINE_ROW, "kv_tokens_read": 41}], "t.jsonl")


@pytest.mark.parametrize(("value", "why"), [("two", "'two' is not a number"), (True, "True is not a number"),
                                            (1.5, "1.5 is not a whole number"), (-1, "-1 is not a whole number"),
                                            (float("inf"), "inf is not a finite number")])
def test_bad_values_name_file_row_and_column(value: object, why: str) -> None:
    rows = [{"start_s": 0.0, "decode_seqs": 1}, {"start_s": 0.1, "decode_seqs": value}]
    with pytest.raises(InputFormatError, match=f"t.jsonl: row 2, column 'decode_seqs': {why}"):
        parse_steps(rows, "t.jsonl")


def test_an_unknown_lane_and_a_file_without_trace_columns_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="row 1, column 'lane': 'gpu' is not one of step, decode, prefill"):
        parse_steps([{"lane": "gpu"}], "t.jsonl")
    path = tmp_path / "points.jsonl"
    path.write_text('{"rate": 1}\n')
    with pytest.raises(InputFormatError, match="points.jsonl: no step-trace columns"):
        read_steps(path)


def test_rows_mixing_old_and_new_names_join_row_by_row() -> None:
    trace = parse_steps([{"time": 0.0, "duration": 0.1}, {"start_s": 0.1, "duration_s": 0.2}], "t")
    assert trace.start_s.tolist() == [0.0, 0.1] and trace.duration_s.tolist() == [0.1, 0.2]


def test_the_engine_rows_become_the_schema_columns(tmp_path: Path) -> None:
    rows = [StepRow(start_s=0.0, duration_s=0.01, compute_s=0.008, prefill_tokens=10, decode_seqs=0, kv_tokens_read=0,
                    kv_tokens_used=16, kv_tokens_held=10, running=1, waiting=0, preempted=0, prefill_seqs=1,
                    admitted=1, compute_start_s=0.001)]
    path = tmp_path / "steps.jsonl"
    write_steps(rows, path)
    doc = json.loads(path.read_text())
    assert list(doc) == list(NAMES) and doc["steps"] == 1 and doc["lane"] == "step" and doc["compute_s"] == 0.008
    assert read_steps(path).to_rows() == from_step_rows(rows).to_rows() == [doc]


def _trace(draw: st.DrawFn) -> StepTrace:
    n = draw(st.integers(0, 6))
    counts = st.lists(st.integers(0, 10_000), min_size=n, max_size=n)
    times = st.lists(st.floats(0, 1e4, allow_nan=False), min_size=n, max_size=n)
    maybe = st.lists(st.one_of(st.none(), st.floats(0, 10, allow_nan=False)), min_size=n, max_size=n)
    cols: dict[str, object] = {}
    for c in COLUMNS:
        if c.kind == "lane":
            cols[c.name] = np.array(draw(st.lists(st.integers(0, len(LANES) - 1), min_size=n, max_size=n)), np.int8)
        elif c.name.startswith("compute"):
            values = draw(maybe)
            cols[c.name] = None if all(v is None for v in values) else np.array(
                [np.nan if v is None else v for v in values])
        elif c.kind == "int":
            cols[c.name] = np.array(draw(counts), dtype=np.int64)
        else:
            cols[c.name] = np.array(draw(times), dtype=np.float64)
    return StepTrace(**cols)  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(st.composite(_trace)(), st.sampled_from(["steps.jsonl", "steps.csv", "steps.parquet"]))
def test_write_then_read_gives_the_same_rows(tmp_path_factory: pytest.TempPathFactory, trace: StepTrace,
                                              name: str) -> None:
    path = tmp_path_factory.mktemp("trace") / name
    write_steps(trace, path)
    assert read_steps(path).to_rows() == trace.to_rows()


def test_fitting_reads_old_and_new_names_alike() -> None:
    rng = np.random.default_rng(3)
    prefill, decode = rng.integers(0, 300, 60), rng.integers(0, 16, 60)
    kv = decode * rng.integers(10, 400, 60)
    duration = 0.002 + 1e-5 * prefill + 3e-4 * decode + 2e-7 * kv
    new = [{"duration_s": float(d), "prefill_tokens": int(p), "decode_seqs": int(s), "kv_tokens_read": int(k)}
           for d, p, s, k in zip(duration, prefill, decode, kv)]
    old = [{"duration": r["duration_s"], "prefill_tokens": r["prefill_tokens"], "decode_seqs": r["decode_seqs"],
            "kv_tokens": r["kv_tokens_read"]} for r in new]
    assert fit_step_model(new).model == fit_step_model(old).model
    assert fit_step_model(new).model.per_decode_seq_s == pytest.approx(3e-4, rel=1e-6)


@pytest.mark.parametrize(("values", "why"), [([0, 1.5], "1.5 is not a whole number"), ([0, -1], "-1 is not a whole number"),
                                             ([0.0, float("inf")], "inf is not a finite number"),
                                             (["1", "two"], "'1' is not a number")])
def test_a_parquet_trace_is_checked_like_a_text_one(tmp_path: Path, values: list[object], why: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"start_s": [0.0, 0.1], "decode_seqs": values}), path)
    with pytest.raises(InputFormatError, match=f"steps.parquet: row [12], column 'decode_seqs': {why}"):
        read_steps(path)


def test_a_parquet_trace_reads_old_names_and_refuses_an_unknown_lane(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = tmp_path / "steps.parquet"
    pq.write_table(pa.table({"time": [0.0, 0.5], "active": [1, None], "lane": ["step", None]}), path)
    trace = read_steps(path)
    assert trace.start_s.tolist() == [0.0, 0.5] and np.isnan(trace.running[1]) and trace.lane.tolist() == [0, -1]
    pq.write_table(pa.table({"lane": ["step", "gpu"]}), path)
    with pytest.raises(InputFormatError, match="row 2, column 'lane': 'gpu' is not one of step, decode, prefill"):
        read_steps(path)


@settings(max_examples=40, deadline=None)
@given(st.composite(_trace)(), st.sampled_from([1, 2, 5]), st.booleans())
def test_a_parquet_trace_written_in_parts_and_with_int32_counts_reads_back_whole_as_int64(
        tmp_path_factory: pytest.TempPathFactory, trace: StepTrace, part_rows: int, narrow: bool) -> None:
    import pyarrow.parquet as pq

    import servebench.records.steps as steps_module
    if narrow:  # a simulation's counts: int32 where they fit
        trace = StepTrace(**{c.name: a.astype(np.int32) if (a := getattr(trace, c.name)) is not None
                             and c.kind == "int" and a.dtype.kind == "i" else a for c in COLUMNS})
    path = tmp_path_factory.mktemp("trace") / "steps.parquet"
    saved, steps_module.WRITE_ROWS = steps_module.WRITE_ROWS, part_rows
    try:
        write_steps(trace, path)
    finally:
        steps_module.WRITE_ROWS = saved
    assert pq.read_metadata(path).num_row_groups == max(1, -(-len(trace) // part_rows))
    assert read_steps(path).to_rows() == trace.to_rows()
    assert all(pq.read_schema(path).field(c.name).type == "int64" for c in COLUMNS if c.kind == "int")
