"""The DuckDB engine's edge: a record set's parts into one DuckDB table, validated, sliced and reported.

:func:`summarize_set` gives the same report, warnings and errors as the in-memory path
(``servebench.analysis.record_sets``) for a record set that need not fit in memory. Steps: the
parts become the table ``parsed`` (``duckdb_parts``), the window defaults as in memory, the rules
run in SQL (``duckdb_checks``), ``--slice-by`` codes each record, and the validated ``records`` are
reported (``duckdb_report``). DuckDB spills past ``--memory-limit`` to a temporary folder.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.analysis.disagg import PREFILL_COLUMN
from servebench.analysis.duckdb_checks import explain_row, first_bad_row
from servebench.analysis.duckdb_fleet import CODE, fleet_from_connection, replica_codes, replica_types_refusal
from servebench.analysis.duckdb_parts import (
    REQUIRED_FIELDS,
    PartPlan,
    absent_field_sql,
    choose_native,
    extra_col,
    field_columns,
    lit,
    native_view_sql,
    plan_part,
    q,
    staged_table,
    text_lit,
    values_table,
)
from servebench.analysis.duckdb_report import report_from_connection, uncovered_fields
from servebench.analysis.fleet import REPLICA_COLUMN
from servebench.analysis.summary import SLO
from servebench.errors import ConfigError, InputFormatError, RecordValidationError
from servebench.records.recordset import RecordSet, SetSummary, check_set_window, extra_names, parse_size, read_part
from servebench.records.schema import FIELDS, int_ids_note


class EngineRefused(ConfigError):
    """The DuckDB engine does not compute a section these records would have (``--engine memory`` does)."""


def unsupported() -> str | None:
    """Say why the DuckDB engine cannot give the in-memory report's every field, or None if it can."""
    missing = uncovered_fields()
    if missing:
        return f"the DuckDB engine does not compute the report's {', '.join(repr(m) for m in missing)} yet"
    return None


def slice_codes(con: duckdb.DuckDBPyConnection, column: str | None, extras: Sequence[str],
                source: str) -> tuple[str, list[str]]:
    """Return SQL for each record's slice code and the slice names (sorted), as ``--slice-by`` splits in memory.

    An extra column's distinct values are turned into names by ``extra_columns.slice_by`` itself, on a
    small table holding one row per distinct value, so the names, the checks and the messages are its own.
    """
    from servebench.records.extra_columns import MAX_SLICE_VALUES, SLICE_COLUMN, no_such_column, slice_by
    if column is None or column == SLICE_COLUMN:
        names = sorted(r[0] for r in con.sql("SELECT DISTINCT slice FROM parsed WHERE slice IS NOT NULL").fetchall())
        if not names:
            return "CAST(NULL AS INTEGER)", []
        mapping = pa.table({"key": pa.array(names, pa.string()), "code": pa.array(range(len(names)), pa.int32())})
        con.register("__slice_map_src", mapping)
        con.sql("CREATE OR REPLACE TEMP TABLE __slice_map AS SELECT * FROM __slice_map_src")
        return "(SELECT code FROM __slice_map m WHERE m.key = p.slice)", names
    if column in extras:
        col = extra_col(column)
        distinct = con.sql(f"SELECT count(DISTINCT {col}) FROM parsed").fetchall()[0][0]
        if distinct > 10 * MAX_SLICE_VALUES:
            raise ConfigError(f"--slice-by {column!r}: {distinct:,} distinct values; a breakdown takes a column "
                              f"with at most {MAX_SLICE_VALUES:,} (groups such as a GPU or a model, not IDs)")
        values = con.sql(f"SELECT DISTINCT {col} AS key FROM parsed WHERE {col} IS NOT NULL").to_arrow_table()
        keys = values.column("key").combine_chunks()
    else:
        has_slices = bool(con.sql('SELECT bool_or("slice.present") FROM parsed').fetchall()[0][0])
        raise no_such_column(column, source, has_slices, list(extras))
    k = len(keys)
    tiny = values_table(k, source, {name: (keys if name == column else pa.nulls(k)) for name in extras})
    named = slice_by(tiny, column)  # raises the in-memory path's error for too many values
    per_value = named.slice
    names = sorted({v for v in per_value if v is not None})
    code = {name: i for i, name in enumerate(names)}
    mapping = pa.table({"key": keys, "code": pa.array([code.get(v) for v in per_value], pa.int32())})
    con.register("__slice_map_src", mapping)
    con.sql("CREATE OR REPLACE TEMP TABLE __slice_map AS SELECT * FROM __slice_map_src")
    return f"(SELECT code FROM __slice_map m WHERE m.key = p.{extra_col(column)})", names


@dataclass
class _Scan:
    plans: list[PartPlan]
    extras: list[str]
    warnings: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    extra_types: list[dict[str, pa.DataType]] = field(default_factory=list)  # per part: its extra columns' types


def _scan(con: duckdb.DuckDBPyConnection, record_set: RecordSet, fmt: str, stage_dir: Path,
          progress: Callable[[str], None], itl_p99: bool) -> _Scan:
    """Create the view ``parsed`` over every part: native Parquet scanned by DuckDB, the rest staged.

    Its rows are the table ``parsed_rows``; a field that no part has is a constant of the view, not
    a column held in memory per record.
    """
    plans = choose_native([plan_part(p, i, fmt) for i, p in enumerate(record_set.parts)])
    part_warnings: list[list[str]] = []
    unavailable: list[str] = []
    extras_per_part: list[list[str]] = []
    types_per_part: list[dict[str, pa.DataType]] = []
    files = []
    held: set[str] = set(REQUIRED_FIELDS)  # the fields some part has
    for plan in plans:
        if plan.native:
            held.update(canon for _, canon, _ in plan.columns)
            extras_per_part.append([*plan.extra, *(k for k, _ in plan.part.partition)])
            types_per_part.append({**dict(zip(plan.extra, plan.extra_types)),
                                   **{k: pa.string() for k, _ in plan.part.partition}})
            part_warnings.append([])
            continue
        progress(f"reading {plan.part.name} ({plan.index + 1:,} of {len(plans):,} parts)")
        loaded = read_part(plan.part, fmt)
        part_warnings.append(list(loaded.warnings))
        unavailable.extend(loaded.metadata.get("unavailable_metrics") or [])
        extras_per_part.append(list(loaded.rows.extra))
        types_per_part.append({name: values.type for name, values in loaded.rows.extra.items()})
        held.update(name for name, col in loaded.rows.columns.items() if col.present.any() or col.bad.any())
        path = stage_dir / f"part-{plan.index:06d}.parquet"
        pq.write_table(staged_table(loaded.rows, plan.index, itl_p99=itl_p99), path)
        files.append(path)
        del loaded
    extras = extra_names(extras_per_part)
    selects = []
    native_sql = native_view_sql(plans, extras)
    if native_sql is not None:
        selects.append(native_sql)
    if files:
        listed = ", ".join(text_lit(f.as_posix()) for f in files)
        selects.append(f"SELECT * FROM read_parquet([{listed}], union_by_name=true)")
    progress("reading records with DuckDB")
    absent = [name for name in FIELDS if name not in held]
    rows_sql = " UNION ALL BY NAME ".join(selects)
    if absent:
        rows_sql = (f"SELECT * EXCLUDE ({', '.join(q(c) for name in absent for c in field_columns(name))}) "
                    f"FROM ({rows_sql})")
    con.sql("CREATE OR REPLACE TABLE parsed_rows AS " + rows_sql)
    constants = "".join(f", {sql}" for name in absent for sql in absent_field_sql(name))
    con.sql(f"CREATE OR REPLACE VIEW parsed AS SELECT *{constants} FROM parsed_rows")
    for plan in plans:  # integer IDs are read as text, with the note the one-file reader gives
        for id_field in ("request_id", "logical_id"):
            if plan.native and any(c == id_field and k == "int" for _, c, k in plan.columns):
                count, first = con.sql(f"SELECT count(*), min(part_row) FROM parsed WHERE part = {plan.index} "
                                       f"AND {q(id_field + '.present')}").fetchall()[0]
                if count:
                    part_warnings[plan.index].append(int_ids_note(int(count), int(first), id_field))
    if len(plans) == 1:
        warnings = part_warnings[0]
    else:  # as recordset.set_warnings words them
        warnings = [f"{p.part.name}: {w}" for p, ws in zip(plans, part_warnings) for w in ws]
    return _Scan(plans, extras, warnings, list(dict.fromkeys(unavailable)), types_per_part)


def _default_window(con: duckdb.DuckDBPyConnection) -> tuple[float, float] | None:
    lo, hi = con.sql('SELECT min("start") FILTER (WHERE isfinite("start")), '
                     'max("end") FILTER (WHERE isfinite("end")) FROM parsed').fetchall()[0]
    return None if lo is None or hi is None else (float(lo), float(hi))


def _validate(con: duckdb.DuckDBPyConnection, plans: Sequence[PartPlan], ws: float, we: float, fmt: str) -> None:
    found = first_bad_row(con, ws, we)
    if found is not None:
        raise explain_row(plans[found[0]], found[1], ws, we, fmt)


def _window(con: duckdb.DuckDBPyConnection, plans: Sequence[PartPlan], window_start: float | None,
            window_end: float | None, source: str, fmt: str) -> tuple[float, float]:
    """Return the window, defaulting as ``loaders.to_table`` does (a bad first row explains a bad default)."""
    ws, we = window_start, window_end
    if ws is None or we is None:
        found = _default_window(con)
        if found is None:
            _validate(con, plans, -math.inf, math.inf, fmt)
        assert found is not None
        ws = found[0] if ws is None else ws
        we = found[1] if we is None else we
        if not (we > ws):
            _validate(con, plans, -math.inf, math.inf, fmt)
    check_set_window(ws, we, source)
    return float(ws), float(we)


@dataclass(frozen=True)
class _Sections:
    """Which optional sections the records bring: token times, cached prompt tokens, logical requests, reasoning."""

    tokens: bool
    cached: bool
    logical: bool
    reasoning: bool


def _sections(con: duckdb.DuckDBPyConnection) -> _Sections:
    """Whether some record has token_times, cached_prompt_tokens, logical_id, and first_answer_token or
    reasoning_tokens."""
    found = con.sql('SELECT bool_or(times_present), bool_or("cached_prompt_tokens.present"), '
                    'bool_or("logical_id.present"), '
                    'bool_or("first_answer_token.present" OR "reasoning_tokens.present") FROM parsed').fetchall()[0]
    return _Sections(*(bool(f) for f in found))


def _records_table(con: duckdb.DuckDBPyConnection, code_sql: str, sections: _Sections,
                   replica_sql: str | None = None) -> None:
    """Create ``records``: the validated rows with the in-memory table's columns, ``g``, the slice code, and
    (``replica_sql``) ``r``, the replica's code."""
    more = (", gaps, max_gap, itl_p99, has_times" if sections.tokens else "") + \
        (", cached_prompt_tokens" if sections.cached else "") + \
        (", logical_id, attempt" if sections.logical else "") + \
        (", first_answer_token, reasoning_tokens" if sections.reasoning else "") + \
        (", part, part_row" if sections.cached or sections.logical else "") + \
        (f", {replica_sql} AS {CODE}" if replica_sql is not None else "")
    con.sql(f"""CREATE OR REPLACE TABLE records AS SELECT "start", "end", status, first_token, output_tokens,
                admitted, prompt_tokens, request_id, error{more}, {code_sql} AS g FROM parsed p""")
    con.sql("DROP VIEW parsed")
    con.sql("DROP TABLE parsed_rows")


def _replicas(con: duckdb.DuckDBPyConnection, scan: _Scan, source: str) -> tuple[str, list[str]] | None:
    """Return SQL for each record's replica code and the replicas' names, or None without a ``replica`` column.

    Refuses a column whose types across parts DuckDB would read otherwise than memory does.
    """
    if REPLICA_COLUMN not in scan.extras:
        return None
    refused = replica_types_refusal([(plan.part.name, types[REPLICA_COLUMN])
                                     for plan, types in zip(scan.plans, scan.extra_types) if REPLICA_COLUMN in types])
    if refused is not None:
        raise EngineRefused(f"--engine duckdb: {refused}; use --engine memory")
    return replica_codes(con, source)


def _reader_error(record_set: RecordSet, fmt: str, exc: Exception) -> Exception:
    """Return servebench's own error for what DuckDB could not read, by reading the parts in order."""
    for part in record_set.parts:
        try:
            read_part(part, fmt)
        except (InputFormatError, RecordValidationError) as err:
            return err
    return InputFormatError(f"{record_set.source}: DuckDB could not read the records: {' '.join(str(exc).split())[:300]}")


def summarize_set(record_set: RecordSet, fmt: str = "auto", window_start: float | None = None,
                  window_end: float | None = None, slo: SLO | None = None, slice_column: str | None = None,
                  memory_limit: str | None = None, progress: Callable[[str], None] = lambda _: None,
                  *, engine_note: str | None = None, threads: int | None = None,
                  weights: Mapping[str, float] | None = None, warmup_s: float | None = None) -> SetSummary:
    """Summarize a record set out of core with DuckDB: the same report, warnings and errors as in memory.

    ``weights`` and ``warmup_s`` as ``build_report`` takes them (the fairness section; cold and warm slices).
    """
    from servebench.records.extra_columns import extra_columns_note
    refused = unsupported()
    if refused is not None:
        raise EngineRefused(f"--engine duckdb: {refused}; use --engine memory")
    with tempfile.TemporaryDirectory(prefix="servebench-duckdb-") as tmp:
        stage = Path(tmp)
        # tables past the memory limit spill to the temporary folder
        con = duckdb.connect(":memory:", config={"temp_directory": str(stage / "spill")})
        try:
            if memory_limit is not None:
                con.sql(f"SET memory_limit = '{parse_size(memory_limit)}B'")
            if threads is not None:
                con.sql(f"SET threads = {int(threads)}")
            con.sql("SET preserve_insertion_order = false")
            # Parquet min/max statistics leave NaN out, and DuckDB (2.0) folds isnan() and comparisons to false
            # from them: a NaN first_token among finite ones read as present. Read every value instead.
            con.sql("SET disabled_optimizers = 'statistics_propagation'")
            con.sql("SET enable_progress_bar = false")
            try:
                scan = _scan(con, record_set, fmt, stage, progress,
                             itl_p99=slo is not None and slo.itl_p99_s is not None)
                progress("validating records with DuckDB")
                ws, we = _window(con, scan.plans, window_start, window_end, record_set.source, fmt)
                _validate(con, scan.plans, ws, we, fmt)
                if PREFILL_COLUMN in scan.extras:  # the disaggregated section is computed in memory only, for now
                    raise EngineRefused("--engine duckdb: the DuckDB engine does not compute the report's "
                                        "'disaggregated' section yet; use --engine memory")
                replicas = _replicas(con, scan, record_set.source)
                code_sql, names = slice_codes(con, slice_column, scan.extras, record_set.source)
                if warmup_s is not None:  # as build_report: the records' slices give way to cold and warm
                    if not warmup_s > 0:
                        raise ConfigError(f"warmup_s {warmup_s!r} must be positive")
                    code_sql, names = f'CASE WHEN "start" < {lit(ws + warmup_s)} THEN 0 ELSE 1 END', ["cold", "warm"]
                sections = _sections(con)
                _records_table(con, code_sql, sections, replicas[0] if replicas else None)
                progress("summarizing records with DuckDB")
                report = report_from_connection(con, record_set.source, ws, we, slo, names, tokens=sections.tokens,
                                                cached=sections.cached, logical=sections.logical,
                                                reasoning=sections.reasoning, weights=weights)
                if replicas:
                    report = report.model_copy(
                        update={"fleet": fleet_from_connection(con, replicas[1], sections.cached)})
            except duckdb.OutOfMemoryException as exc:
                raise ConfigError(f"DuckDB ran out of memory within the limit ({memory_limit or 'its default'}); "
                                  f"give it more with --memory-limit: {' '.join(str(exc).split())[:200]}") from None
            except duckdb.Error as exc:
                raise _reader_error(record_set, fmt, exc) from None
        finally:
            con.close()
    note = extra_columns_note(scan.extras)
    return SetSummary(report, scan.warnings + report.warnings(), scan.unavailable, scan.extras, "duckdb", engine_note,
                      [note] if note else [])


__all__ = ["EngineRefused", "slice_codes", "summarize_set", "unsupported"]
