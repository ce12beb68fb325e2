"""The fleet section out of core: ``--engine duckdb`` gives ``analysis.fleet``'s section bit for bit, or refuses."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.record_sets import summarize_path
from servebench.errors import ConfigError, ServebenchError
from servebench.records.table import STATUSES


def same_report(path: Path, **kw) -> dict | None:
    """Return the in-memory report after checking DuckDB's JSON is the same text (fields, values, key order).

    When memory refuses the records, DuckDB must refuse them with the same error.
    """
    try:
        memory = summarize_path(path, engine="memory", **kw).report.model_dump_json()
    except ServebenchError as exc:
        with pytest.raises(type(exc)) as info:
            summarize_path(path, engine="duckdb", **kw)
        assert str(info.value) == str(exc)
        return None
    duck = summarize_path(path, engine="duckdb", **kw)
    assert duck.engine == "duckdb"
    assert duck.report.model_dump_json() == memory
    return json.loads(memory)


times = st.integers(0, 24).map(lambda k: k / 4)  # a coarse grid: starts and ends tie often, on one replica or across


@st.composite
def fleet_records(draw) -> list[dict]:
    """Records of a few replicas, with ties, every status, and prompt and cached tokens on some."""
    n = draw(st.integers(1, 40))
    replicas = draw(st.integers(1, 12))  # past 10: '10' sorts before '2' as text, after it as a number
    out = []
    for i in range(n):
        status = draw(st.sampled_from(STATUSES))
        start = draw(times)
        end = start + draw(times) + (0.25 if i == 0 else 0.0)  # a window of some length
        rec: dict = {"start": start, "end": end, "status": status, "replica": draw(st.integers(0, replicas - 1))}
        if status == "success":
            rec["first_token"] = draw(st.sampled_from([start, end, (start + end) / 2]))
            rec["output_tokens"] = draw(st.integers(1, 5))
        if draw(st.booleans()):
            rec["prompt_tokens"] = draw(st.integers(0, 9))
            if draw(st.booleans()):
                rec["cached_prompt_tokens"] = draw(st.integers(0, rec["prompt_tokens"]))
        elif draw(st.integers(0, 3)) == 0:
            rec["cached_prompt_tokens"] = draw(st.integers(0, 9))  # cached tokens without the prompt's: left out
        out.append(rec)
    return out


TYPES = {"start": pa.float64(), "end": pa.float64(), "first_token": pa.float64(), "prompt_tokens": pa.int64(),
         "output_tokens": pa.int64(), "cached_prompt_tokens": pa.int64(), "status": pa.string()}


INT64 = pa.int64()


def write(recs: list[dict], path: Path, replica_type: pa.DataType = INT64) -> Path:
    """Write records as Parquet (typed; the replica column of ``replica_type``), CSV or JSONL (absent keys left out)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        cols = list(dict.fromkeys(k for r in recs for k in r))
        types = {**TYPES, "replica": replica_type}
        pq.write_table(pa.table({c: pa.array([r.get(c) for r in recs], types[c]) for c in cols}), path)
    elif path.suffix == ".csv":
        cols = list(dict.fromkeys(k for r in recs for k in r))
        lines = [",".join(cols)] + [",".join("" if r.get(c) is None else str(r[c]) for c in cols) for r in recs]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        path.write_text("".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in recs),
                        encoding="utf-8")
    return path


def named(recs: list[dict], how: str) -> list[dict]:
    """The records with their replicas as numbers, text (``gpu-<k>``), or numbers some records leave out."""
    if how == "text":
        return [{**r, "replica": f"gpu-{r['replica']}"} for r in recs]
    if how == "some absent":
        return [{**r, "replica": None} if i % 3 == 1 else r for i, r in enumerate(recs)]
    return recs


@given(fleet_records(), st.sampled_from(["numbers", "text", "some absent"]), st.sampled_from([None, "replica"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_fleet_section_of_one_file_is_the_in_memory_one(tmp_path_factory, recs, how, slice_column):
    """Every field of the report (the fleet's included) is the same text; by numbers, by text, or some unnamed."""
    recs = named(recs, how)
    replica_type = pa.string() if how == "text" else pa.int64()
    path = write(recs, tmp_path_factory.mktemp("one") / "records.parquet", replica_type)
    doc = same_report(path, slice_column=slice_column)
    assert doc is not None
    if any(r["replica"] is not None for r in recs):
        assert sum(r["requests"] for r in doc["fleet"]["per_replica"].values()) == \
            sum(r["replica"] is not None for r in recs)


@given(fleet_records(), st.lists(st.sampled_from(["parquet", "csv", "jsonl"]), min_size=2, max_size=3),
       st.sampled_from(["numbers", "text", "some absent", "mixed"]))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_fleet_section_of_several_parts_is_the_in_memory_one(tmp_path_factory, recs, formats, how):
    """A set of parts DuckDB scans itself (Parquet) or servebench stages (CSV, JSONL); 'mixed': numbers in one
    part and text in another (both engines read every replica as text), or a part without the column."""
    folder = tmp_path_factory.mktemp("set") / "set"
    cuts = np.linspace(0, len(recs), len(formats) + 1).astype(int)
    for i, (fmt, a, b) in enumerate(zip(formats, cuts[:-1], cuts[1:])):
        part = recs[a:b] or recs[:1]
        if how == "mixed" and i == 1:
            part = named(part, "text") if fmt != "csv" else [{k: v for k, v in r.items() if k != "replica"}
                                                             for r in part]
        elif how != "mixed":
            part = named(part, how)
        replica_type = pa.string() if how == "text" or (how == "mixed" and i == 1) else pa.int64()
        write(part, folder / f"part-{i}.{fmt}", replica_type)
    same_report(folder)


def test_the_section_is_filled_alike_with_ties_numbers_past_ten_and_no_successes(tmp_path):
    """A fixed case the equality above cannot pass by leaving the section out of both."""
    recs = [  # replica 2: [0, 1) and [1, 2) tie at 1 (a departure first: peak 1), then three at once
        {"start": 0.0, "first_token": 0.5, "end": 1.0, "status": "success", "output_tokens": 2, "replica": 2,
         "prompt_tokens": 10, "cached_prompt_tokens": 5},
        {"start": 1.0, "first_token": 1.25, "end": 2.0, "status": "success", "output_tokens": 2, "replica": 2,
         "prompt_tokens": 10, "cached_prompt_tokens": 0},
        *[{"start": 3.0, "first_token": 3.0 + k, "end": 5.0, "status": "success", "output_tokens": 2, "replica": 2}
          for k in (0.5, 1.0, 1.5)],
        {"start": 0.0, "end": 4.0, "status": "timeout", "replica": 10, "prompt_tokens": 8},
    ]
    doc = same_report(write(recs, tmp_path / "r.parquet"))
    assert doc is not None
    fleet = doc["fleet"]
    assert list(fleet["per_replica"]) == ["2", "10"]  # numbers sort as numbers
    assert fleet["replicas"] == 2 and fleet["load_imbalance"] == 5 * 2 / 6 and fleet["token_hit_rate"] == 0.25
    two, ten = fleet["per_replica"]["2"], fleet["per_replica"]["10"]
    assert (two["requests"], two["in_flight_peak"], two["token_hit_rate"]) == (5, 3, 0.25)
    assert (two["ttft_p95_s"], two["latency_p95_s"]) == (1.5, 2.0)
    assert ten == {"requests": 1, "in_flight_peak": 1, "token_hit_rate": None, "ttft_p95_s": None,
                   "latency_p95_s": None}
    text = same_report(write([{**r, "replica": str(r["replica"])} for r in recs], tmp_path / "t.parquet",
                             pa.string()))
    assert text is not None and list(text["fleet"]["per_replica"]) == ["10", "2"]  # text sorts as text


def test_blank_or_absent_replicas_name_none_and_none_named_leaves_the_section_out(tmp_path):
    recs = [{"start": float(i), "end": i + 1.0, "status": "failed", "replica": r}
            for i, r in enumerate(["a", "", " ", None, "a", "b"])]
    doc = same_report(write(recs, tmp_path / "r.parquet", pa.string()))
    assert doc is not None and doc["fleet"]["per_replica"].keys() == {"a", "b"}
    assert doc["fleet"]["load_imbalance"] == 2 * 2 / 3
    none = same_report(write([{**r, "replica": ""} for r in recs], tmp_path / "blank.parquet", pa.string()))
    assert none is not None and "fleet" not in none


def test_a_simulated_fleet_is_summarized_alike(tmp_path, capsys):
    """``servebench simulate`` of a fleet scenario: its records' report from either engine, by the CLI."""
    scenario = {"name": "f", "seed": 3, "server": {"kv_budget_tokens": 20000, "max_num_seqs": 8,
                                                   "prefix_caching": True},
                "step_model": {"base_s": 0.01, "per_decode_seq_s": 0.001},
                "workload": {"arrival": {"kind": "poisson", "rate_rps": 60}, "num_requests": 300,
                             "classes": [{"prompt": {"value": 100}, "output": {"value": 20}}]},
                "fleet": {"replicas": 3, "router": "least_outstanding"}}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(scenario), encoding="utf-8")
    code, _, err = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"))
    assert code == 0, err
    records = next(p for p in (tmp_path / "out").iterdir() if p.name.startswith("records."))
    docs = []
    for engine in ("memory", "duckdb"):
        code, out, err = run_cli(capsys, "summarize", str(records), "--engine", engine, "--json")
        assert code == 0, err
        docs.append(json.loads(out))
    assert docs[0]["engine"] == "memory" and docs[1]["engine"] == "duckdb"
    assert json.dumps({**docs[0], "engine": None}) == json.dumps({**docs[1], "engine": None})
    assert docs[1]["fleet"]["replicas"] == 3 and sum(r["requests"] for r in docs[1]["fleet"]["per_replica"].values()) \
        == docs[1]["offered"]


def test_a_replica_column_of_another_type_is_refused_by_duckdb_and_read_in_memory_by_auto(tmp_path, capsys,
                                                                                         monkeypatch):
    """A float column: DuckDB and memory would name its values otherwise ('1.0' and '1' as text beside text)."""
    recs = [{"start": float(i), "end": i + 1.0, "status": "failed", "replica": float(i % 2)} for i in range(4)]
    path = write(recs, tmp_path / "r.parquet", pa.float64())
    with pytest.raises(ConfigError, match="^--engine duckdb: the DuckDB engine reads a 'replica' column of integers "
                                          r"or text \(or of booleans alone\), and r.parquet holds double; use "
                                          "--engine memory$"):
        summarize_path(path, engine="duckdb")
    monkeypatch.setattr("servebench.records.recordset.BYTES_PER_PARQUET_ROW", 10**12)  # auto takes DuckDB for size
    out = summarize_path(path)
    assert out.engine == "memory" and "holds double: summarizing them in memory instead" in out.engine_note
    assert list(out.report.fleet.per_replica) == ["0.0", "1.0"]
    code, _, err = run_cli(capsys, "summarize", str(path), "--engine", "duckdb")
    assert code == 2 and err.strip().count("\n") == 0 and "holds double" in err
