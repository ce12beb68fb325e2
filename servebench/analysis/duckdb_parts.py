"""The DuckDB engine's view of a record set: which parts DuckDB scans itself, and the parsed layout of every row.

Parquet parts with plain column types are scanned by DuckDB directly (:func:`native_view_sql`).
Every other part (CSV, JSONL, JSON, other tools' exports, Parquet with unusual types, and any part
with ``token_times`` or ``token_counts``) is parsed by servebench's own reader one part at a time
and staged as Parquet (:func:`staged_table`), so each such part must fit in memory on its own.

Both give the same parsed layout, one row per record: ``part`` and ``part_row`` (where it is), each
field's value with ``<field>.present`` and ``<field>.bad`` flags as ``records.table`` parses them,
``extra.<name>`` for extra columns, and the token columns: ``times_present``, ``tokens_bad`` (the
token-time rules, checked by servebench's own validator while staging), ``gaps`` (the gaps between
consecutive arrivals, as ``token_times.gaps`` computes them), ``max_gap``, ``itl_p99`` (the row's own
p99 gap, only when an ITL SLO asks for it) and ``has_times``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.records import token_times as tt
from servebench.records.recordset import Part
from servebench.records.schema import FIELDS, FLOAT_FIELDS, INT_FIELDS, INT_LIMIT, ParsedRows, canonical_name
from servebench.records.table import STATUSES, RecordTable, token_rules
from servebench.records.textcolumns import text_array

OPTIONAL_FLOATS = ("first_token", "admitted", "first_answer_token")  # NaN in a typed column means absent; in start or end it is an error


def q(name: str) -> str:
    """Quote an identifier for SQL.

    >>> q("gpu") == chr(34) + "gpu" + chr(34)
    True
    """
    return '"' + name.replace('"', '""') + '"'


def lit(value: float) -> str:
    """Return a float as an exact SQL DOUBLE literal (repr round-trips; inf and nan as text)."""
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def text_lit(value: str) -> str:
    """Quote a text value for SQL."""
    return "'" + value.replace("'", "''") + "'"


def extra_col(name: str) -> str:
    """The column that holds an extra column's values in the scanned view (apart from the schema's names)."""
    return q("extra." + name)


# --------------------------------------------------------------------------- which parts DuckDB reads itself


_NUMERIC_KINDS = ("int", "float")


def _kind(typ: pa.DataType) -> str:
    """Classify an Arrow type: int, float, text, bool or other (dictionaries by their values)."""
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_integer(typ):
        return "int"
    if pa.types.is_floating(typ):
        return "float"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return "text"
    if pa.types.is_boolean(typ):
        return "bool"
    return "other"


@dataclass(frozen=True)
class PartPlan:
    """How one part is read: natively by DuckDB (its schema's kinds by canonical field), or staged."""

    part: Part
    index: int
    native: bool
    columns: tuple[tuple[str, str, str], ...] = ()  # (column name, canonical field, kind)
    extra: tuple[str, ...] = ()
    rows: int = 0
    extra_types: tuple[pa.DataType, ...] = ()  # each extra column's Arrow type, as the part's reader reads it


def plan_part(part: Part, index: int, fmt: str) -> PartPlan:
    """Decide whether DuckDB can scan a part itself with the same meaning as servebench's reader.

    A part with token_times or token_counts is staged: their rules and gaps are servebench's own.
    """
    if part.path.suffix.lower() not in (".parquet", ".pq") or fmt not in ("auto", "parquet"):
        return PartPlan(part, index, False)
    try:
        meta = pq.read_metadata(part.path)
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError):
        return PartPlan(part, index, False)  # servebench's reader says what is wrong
    columns, extra, extra_types, seen = [], [], [], set()
    for name, typ in zip(schema.names, schema.types):
        canon = canonical_name(name)
        if name in seen or (canon is not None and canon in seen) or name in ("file_row_number", "__file"):
            return PartPlan(part, index, False)
        if canon in tt.LIST_FIELDS:
            return PartPlan(part, index, False)
        seen.update({name, canon} - {None})
        kind = _kind(typ)
        if canon is None:
            if pa.types.is_nested(typ.value_type if pa.types.is_dictionary(typ) else typ):
                return PartPlan(part, index, False)
            extra.append(name)
            extra_types.append(typ)
            continue
        ok = (kind in _NUMERIC_KINDS if canon in FLOAT_FIELDS or canon in INT_FIELDS
              else kind == "text" or (canon in ("request_id", "logical_id") and kind == "int"))
        if not ok:
            return PartPlan(part, index, False)
        columns.append((name, canon, kind))
    if meta.num_rows == 0 or not {"start", "end", "status"} <= {c for _, c, _ in columns}:
        return PartPlan(part, index, False)
    if any(k in extra for k, _ in part.partition):
        return PartPlan(part, index, False)
    return PartPlan(part, index, True, tuple(columns), tuple(extra), meta.num_rows, tuple(extra_types))


def values_table(k: int, source: str, extra: Mapping[str, pa.Array]) -> RecordTable:
    """Return k placeholder records carrying ``extra`` columns' values, for the in-memory code that names them.

    The engine gives the in-memory functions that name slices and replicas one row per distinct value,
    so the names, their order and the messages are theirs.
    """
    return RecordTable.from_columns(
        start=np.zeros(k), end=np.zeros(k), status=np.zeros(k, np.int8), first_token=np.zeros(k),
        output_tokens=np.ones(k, np.int64), admitted=np.full(k, np.nan), prompt_tokens=np.full(k, -1, np.int64),
        source=source, extra=dict(extra))


def _signature(plan: PartPlan) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((canon, kind) for _, canon, kind in plan.columns))


def choose_native(plans: Sequence[PartPlan]) -> list[PartPlan]:
    """Return the plans with DuckDB scanning the largest group of native parts whose canonical kinds agree.

    One scan unions its parts' columns by name; an int column in one part and a float one in another
    would be widened, which changes what an integer field means, so only one kind per field is scanned.
    """
    groups: dict[Any, int] = {}
    for p in plans:
        if p.native:
            groups[_signature(p)] = groups.get(_signature(p), 0) + p.rows
    if not groups:
        return list(plans)
    best = max(groups, key=lambda s: groups[s])
    return [p if not p.native or _signature(p) == best else PartPlan(p.part, p.index, False) for p in plans]


# --------------------------------------------------------------------------- the parsed view, native and staged


# The characters a blank value may consist of: those ``textcolumns.blank_mask`` counts as space
# (Arrow's utf8_is_space; tests/test_duckdb_report.py checks every character up to U+3000, the last).
SPACE_CHARS = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) \
    + "\u2028\u2029\u202f\u205f\u3000"

# The token columns of the parsed view, and what a part without token times holds in them.
TOKEN_COLUMNS: dict[str, str] = {
    "times_present": "false", "tokens_bad": "false", "gaps": "CAST(NULL AS DOUBLE[])",
    "max_gap": "CAST(NULL AS DOUBLE)", "itl_p99": "CAST(NULL AS DOUBLE)", "has_times": "false",
}


def blank_sql(expr: str) -> str:
    """SQL: the text is null, empty or only spaces (trimmed only when its first character is one)."""
    chars = text_lit(SPACE_CHARS)
    return (f"({expr} IS NULL OR {expr} = '' OR (strpos({chars}, left({expr}, 1)) > 0 "
            f"AND trim({expr}, {chars}) = ''))")


def _native_field(canon: str, sources: list[tuple[str, str]]) -> list[str]:
    """SQL for one field's parsed columns (value, present, bad) from the scan's source columns."""
    presents, values, bads = [], [], []
    for col, kind in sources:
        c = q(col)
        if canon in FLOAT_FIELDS:
            p = f"({c} IS NOT NULL" + (f" AND NOT isnan(CAST({c} AS DOUBLE)))" if canon in OPTIONAL_FLOATS else ")")
            v, b = f"CAST({c} AS DOUBLE)", "false"
        elif canon in INT_FIELDS:
            if kind == "float":  # a token count stored as float is refused, NaN meaning absent
                p, v, b = f"({c} IS NOT NULL AND NOT isnan(CAST({c} AS DOUBLE)))", "CAST(-1 AS BIGINT)", "true"
            else:
                b = f"({c} >= {INT_LIMIT} OR {c} <= -{INT_LIMIT})"
                p, v = f"({c} IS NOT NULL)", f"CASE WHEN {b} THEN -1 ELSE TRY_CAST({c} AS BIGINT) END"
        elif canon == "status":
            cases = " ".join(f"WHEN {text_lit(s)} THEN {i}" for i, s in enumerate(STATUSES))
            p, v, b = f"({c} IS NOT NULL)", f"CASE CAST({c} AS VARCHAR) {cases} ELSE -1 END", "false"
        else:
            text = f"CAST({c} AS VARCHAR)"
            p = f"({c} IS NOT NULL)" if kind == "int" else f"(NOT {blank_sql(text)})"
            v, b = text, "false"
        presents.append(p)
        values.append((p, v))
        bads.append((p, b))
    absent = {"status": "-1", **{f: "CAST('nan' AS DOUBLE)" for f in FLOAT_FIELDS},
              **{f: "CAST(-1 AS BIGINT)" for f in INT_FIELDS}}.get(canon, "CAST(NULL AS VARCHAR)")
    present = " OR ".join(presents) if presents else "false"
    value = ("CASE " + " ".join(f"WHEN {p} THEN {v}" for p, v in values) + f" ELSE {absent} END") if values else absent
    bad = ("CASE " + " ".join(f"WHEN {p} THEN {b}" for p, b in bads) + " ELSE false END") if bads else "false"
    status_type = "TINYINT" if canon == "status" else None
    out = [f"{'CAST(' + value + ' AS TINYINT)' if status_type else value} AS {q(canon)}",
           f"({present}) AS {q(canon + '.present')}"]
    if canon != "status":
        out.append(f"({bad}) AS {q(canon + '.bad')}")
    return out


REQUIRED_FIELDS = ("start", "end", "status")


def field_columns(canon: str) -> list[str]:
    """The parsed layout's columns of one field: its value, and its present and bad flags (status has no bad)."""
    return [canon, canon + ".present"] + ([] if canon == "status" else [canon + ".bad"])


def absent_field_sql(canon: str) -> list[str]:
    """SQL for the parsed columns of a field that no part has: its absent marker, present and bad false."""
    return _native_field(canon, [])


def native_view_sql(plans: Sequence[PartPlan], extras: Sequence[str]) -> str | None:
    """Return SELECT SQL over the native parts giving the parsed layout, or None if there are none."""
    native = [p for p in plans if p.native]
    if not native:
        return None
    files = ", ".join(text_lit(p.part.path.resolve().as_posix()) for p in native)
    part_of = " ".join(f"WHEN {text_lit(p.part.path.resolve().as_posix())} THEN {p.index}" for p in native)
    sources: dict[str, list[tuple[str, str]]] = {}
    for p in native:
        for col, canon, kind in p.columns:
            if (col, kind) not in sources.setdefault(canon, []):
                sources[canon].append((col, kind))
    cols = [f"CAST(CASE __file {part_of} END AS INTEGER) AS part", "file_row_number AS part_row",
            "false AS not_object"]
    for canon in FIELDS:
        cols += _native_field(canon, sources.get(canon, []))
    cols += [f"{sql} AS {q(name)}" for name, sql in TOKEN_COLUMNS.items()]
    file_extra = {name for p in native for name in p.extra}
    partition_keys = {k for p in native for k, _ in p.part.partition}
    for name in extras:
        if name not in file_extra and name not in partition_keys:
            continue  # only staged parts have it: UNION BY NAME leaves it absent here, keeping its type
        if name in file_extra:
            cols.append(f"{q(name)} AS {extra_col(name)}")
        else:
            values = " ".join(f"WHEN {p.index} THEN {text_lit(dict(p.part.partition)[name])}"
                              for p in native if name in dict(p.part.partition))
            cols.append(f"CAST(CASE CAST(CASE __file {part_of} END AS INTEGER) {values} ELSE NULL END AS VARCHAR) "
                        f"AS {extra_col(name)}" if values else f"CAST(NULL AS VARCHAR) AS {extra_col(name)}")
    return (f"SELECT {', '.join(cols)} FROM read_parquet([{files}], filename='__file', file_row_number=true, "
            "union_by_name=true)")


def staged_table(rows: ParsedRows, index: int, *, itl_p99: bool = False) -> pa.Table:
    """Return one part's parsed rows in the parsed layout (value, present and bad flags per field, token columns).

    ``itl_p99``: compute each row's own p99 gap (an ITL SLO needs it; it costs a sort of every gap).
    """
    c = rows.columns
    cols: dict[str, Any] = {"part": pa.array(np.full(rows.n, index, dtype=np.int32)),
                            "part_row": pa.array(np.arange(rows.n, dtype=np.int64)),
                            "not_object": pa.array(rows.not_object)}
    for name in FIELDS:
        col = c[name]
        if name in FLOAT_FIELDS or name in INT_FIELDS:
            cols[name] = pa.array(col.values)
        elif name == "status":
            cols[name] = pa.array(np.asarray(col.values, dtype=np.int8))
        else:
            cols[name] = text_array(col.values)
        cols[name + ".present"] = pa.array(col.present)
        if name != "status":
            cols[name + ".bad"] = pa.array(col.bad)
    cols.update(_token_columns(rows, itl_p99))
    for name, values in rows.extra.items():
        cols["extra." + name] = values
    return pa.table(cols)


def _token_columns(rows: ParsedRows, itl_p99: bool) -> dict[str, pa.Array]:
    """The token columns of one part: its rows' token-rule failures (servebench's own check) and gaps."""
    n = rows.n
    rules = token_rules(rows, rows.columns["status"].values) if rows.lists else None
    times = rows.lists.get("token_times")
    if times is None or not times.present.any():
        return {"times_present": pa.array(np.zeros(n, dtype=bool)),
                "tokens_bad": pa.array(np.zeros(n, dtype=bool) if rules is None else rules.bad),
                "gaps": pa.nulls(n, pa.list_(pa.float64())), "max_gap": pa.nulls(n, pa.float64()),
                "itl_p99": pa.nulls(n, pa.float64()), "has_times": pa.array(np.zeros(n, dtype=bool))}
    g = tt.gaps(times.array)  # bad rows hold null here; a part with any fails validation before its gaps are read
    p99 = g.row_percentile(99) if itl_p99 else np.full(n, np.nan)
    return {"times_present": pa.array(times.present), "tokens_bad": pa.array(rules.bad if rules is not None
                                                                              else np.zeros(n, dtype=bool)),
            "gaps": tt.from_flat(g.values, g.offsets, g.counts > 0),
            "max_gap": pa.array(g.max_gap, mask=np.isnan(g.max_gap)),
            "itl_p99": pa.array(p99, mask=np.isnan(p99)), "has_times": pa.array(g.has_times)}


__all__ = ["REQUIRED_FIELDS", "SPACE_CHARS", "TOKEN_COLUMNS", "PartPlan", "absent_field_sql", "blank_sql",
           "choose_native", "extra_col", "field_columns", "lit", "native_view_sql", "plan_part", "q", "staged_table",
           "text_lit", "values_table"]
