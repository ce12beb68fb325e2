"""The full report out of core: DuckDB scans the record files, validates them in SQL and computes every field.

The numbers are the in-memory ``build_report``'s, bit for bit. Counts and token sums are exact
integers in SQL. Each distribution is streamed from DuckDB in sorted order (DuckDB sorts out of
core): the nearest ranks and interval ranks come from ``servebench.analysis.percentiles`` and are picked
from the stream, and the mean is summed in numpy's own pairwise order (:func:`pairwise_sum`), so
it rounds as ``ndarray.mean`` does. Peak concurrency is a running sum over start and end events
grouped by time (a departure before an arrival at the same time, as ``servebench.analysis.timeline``); the
spans held at the peak are fetched and summed by numpy as the in-memory path sums them.

Validation runs the record rules as SQL predicates in the spec's order, takes the first row (in
part order) failing any, and re-validates that row's part with servebench's own validator, so the
error is the same line, naming the part, the row in it and the field.

Parquet parts with plain column types are scanned by DuckDB directly. Every other part (CSV, JSONL,
JSON, other tools' exports, Parquet with unusual types) is parsed by servebench's own reader one
part at a time and staged as Parquet for DuckDB, so each such part must fit in memory on its own.

Layout: :func:`summarize_set` is the edge (a temporary folder, the connection, staging files);
the rest takes a DuckDB connection and returns data.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from servebench.errors import ConfigError, InputFormatError, RecordValidationError
from servebench.analysis.percentiles import nearest_rank, rank_interval
from servebench.records.table import (FIELDS, FLOAT_FIELDS, INT_FIELDS, INT_LIMIT, MSG_EMPTY, STATUSES, TEXT_FIELDS,
                      ParsedRows, RecordTable, _int_ids_note, canonical_name, first_violation, parse_arrow)
from servebench.records.recordset import Part, RecordSet, SetSummary, check_set_window, extra_names, read_part
from servebench.analysis.summary import (REPORT_QUANTILES, SLO, Concurrency, Distribution, Percentile, Report, SLOResult)

OPTIONAL_FLOATS = ("first_token", "admitted")  # NaN in a typed column means absent; in start or end it is an error
BATCH_ROWS = 1 << 20


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


def plan_part(part: Part, index: int, fmt: str) -> PartPlan:
    """Decide whether DuckDB can scan a part itself with the same meaning as servebench's reader."""
    if part.path.suffix.lower() not in (".parquet", ".pq") or fmt not in ("auto", "parquet"):
        return PartPlan(part, index, False)
    try:
        meta = pq.read_metadata(part.path)
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError):
        return PartPlan(part, index, False)  # servebench's reader says what is wrong
    columns, extra, seen = [], [], set()
    for name, typ in zip(schema.names, schema.types):
        canon = canonical_name(name)
        if name in seen or (canon is not None and canon in seen) or name in ("file_row_number", "__file"):
            return PartPlan(part, index, False)
        seen.update({name, canon} - {None})
        kind = _kind(typ)
        if canon is None:
            if pa.types.is_nested(typ.value_type if pa.types.is_dictionary(typ) else typ):
                return PartPlan(part, index, False)
            extra.append(name)
            continue
        ok = (kind in _NUMERIC_KINDS if canon in FLOAT_FIELDS or canon in INT_FIELDS
              else kind == "text" or (canon == "request_id" and kind == "int"))
        if not ok:
            return PartPlan(part, index, False)
        columns.append((name, canon, kind))
    if meta.num_rows == 0 or not {"start", "end", "status"} <= {c for _, c, _ in columns}:
        return PartPlan(part, index, False)
    if any(k in extra for k, _ in part.partition):
        return PartPlan(part, index, False)
    return PartPlan(part, index, True, tuple(columns), tuple(extra), meta.num_rows)


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


def _blank(expr: str) -> str:
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
            p = f"({c} IS NOT NULL)" if kind == "int" else f"(NOT {_blank(text)})"
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


def staged_table(rows: ParsedRows, index: int) -> pa.Table:
    """Return one part's parsed rows in the parsed layout (value, present and bad flags per field)."""
    from servebench.records.textcolumns import text_array
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
            values = text_array(col.values)
            cols[name] = values
        cols[name + ".present"] = pa.array(col.present)
        if name != "status":
            cols[name + ".bad"] = pa.array(col.bad)
    for name, values in rows.extra.items():
        cols["extra." + name] = values
    return pa.table(cols)


# --------------------------------------------------------------------------- validation in SQL


def violation_sql(window_start: float, window_end: float) -> str:
    """Return a boolean SQL expression over the parsed view: the row breaks some rule (``first_violation``'s)."""
    def has(f: str) -> str:
        return q(f + ".present")

    def bad(f: str) -> str:
        return q(f + ".bad")

    s, e, f, a = q("start"), q("end"), q("first_token"), q("admitted")
    ok = f"({q('status')} = 0)"
    start_bad = f"(NOT {has('start')} OR {bad('start')} OR NOT isfinite({s}) OR {s} < {lit(window_start)})"
    end_bad = f"(NOT {has('end')} OR {bad('end')} OR NOT isfinite({e}) OR {e} > {lit(window_end)})"
    rules = [
        "not_object", start_bad, end_bad, f"({s} > {e})", f"({q('status')} < 0)",
        f"({ok} AND (NOT {has('first_token')} OR {bad('first_token')} OR NOT isfinite({f}) OR {f} < {s} "
        f"OR {f} > {e}))",
        f"({ok} AND (NOT {has('output_tokens')} OR {bad('output_tokens')} OR {q('output_tokens')} < 1))",
        f"(NOT {ok} AND {has('first_token')} AND ({bad('first_token')} OR NOT isfinite({f}) OR {f} < {s} "
        f"OR {f} > {e}))",
        f"(NOT {ok} AND {has('output_tokens')} AND ({bad('output_tokens')} OR {q('output_tokens')} < 0))",
        f"({has('admitted')} AND ({bad('admitted')} OR NOT isfinite({a}) OR {a} < {s} OR "
        f"{a} > CASE WHEN {ok} THEN {f} ELSE {e} END))",
        f"({has('prompt_tokens')} AND ({bad('prompt_tokens')} OR {q('prompt_tokens')} < 0))",
        " OR ".join(bad(t) for t in TEXT_FIELDS),
        f"({has('attempt')} AND ({bad('attempt')} OR {q('attempt')} < 1))",
    ]
    return "(" + " OR ".join(rules) + ")"


def first_bad_row(con: duckdb.DuckDBPyConnection, window_start: float, window_end: float) -> tuple[int, int] | None:
    """Return (part index, 0-based row) of the first row breaking a rule, in part order, or None."""
    found = con.sql(f"SELECT part, part_row FROM parsed WHERE {violation_sql(window_start, window_end)} "
                    "ORDER BY part, part_row LIMIT 1").fetchall()
    return (int(found[0][0]), int(found[0][1])) if found else None


def explain_row(plan: PartPlan, row: int, window_start: float, window_end: float, fmt: str) -> RecordValidationError:
    """Return servebench's own error for the first bad row of a part, found by re-validating it in Python.

    A native Parquet part is re-read one row group at a time up to the row, so memory stays bounded.
    """
    if plan.native:  # the rows before it passed: read only the row group holding it
        pf = pq.ParquetFile(plan.part.path)
        first = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if first + n > row:
                group = parse_arrow(pf.read_row_group(g), plan.part.name)
                violation = first_violation(group, window_start, window_end)[0]
                if violation is not None:
                    return _error(violation, plan.part.name, first)
                break
            first += n
    else:
        violation = first_violation(read_part(plan.part, fmt).rows, window_start, window_end)[0]
        if violation is not None:
            return _error(violation, plan.part.name, 0)
    return RecordValidationError("DuckDB's checks refuse this row but servebench's own accept it (please report "
                                 "it; --engine memory reads it)", source=plan.part.name, row=row + 1)


def _error(violation: Any, source: str, offset: int) -> RecordValidationError:
    """The error ``records.validate`` raises for a violation, its row counted from the part's start."""
    return RecordValidationError(f"{violation.message}: {violation.detail}", source=source,
                                 row=offset + violation.row + 1, field=violation.field, rule=violation.message)


# --------------------------------------------------------------------------- sorted streams: ranks and numpy's sum


_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE: pairwise summation's leaves hold at most this many values


@lru_cache(maxsize=256)
def pairwise_plan(n: int) -> tuple[np.ndarray, np.ndarray, tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]]:
    """Return numpy's pairwise-summation tree for n values: leaf offsets and sizes, and its levels.

    numpy sums a contiguous float64 array by halves (rounded down to a multiple of 8) until a block
    has at most 128 values, which it sums with eight accumulators. Each level is (sizes, is_leaf,
    leaf index); children of a level's inner nodes are the next level's nodes, two each, in order.
    """
    levels = []
    sizes = np.array([n], dtype=np.int64)
    offsets = np.zeros(1, dtype=np.int64)
    leaf_offsets, leaf_sizes = [], []
    while sizes.size:
        leaf = sizes <= _PW_BLOCK
        levels.append((sizes, leaf, offsets))
        leaf_offsets.append(offsets[leaf])
        leaf_sizes.append(sizes[leaf])
        inner, inner_off = sizes[~leaf], offsets[~leaf]
        half = inner // 2
        half -= half % 8
        sizes = np.stack([half, inner - half], axis=1).ravel()
        offsets = np.stack([inner_off, inner_off + half], axis=1).ravel()
    all_off = np.concatenate(leaf_offsets)
    order = np.argsort(all_off, kind="stable")
    sorted_off, sorted_size = all_off[order], np.concatenate(leaf_sizes)[order]
    out_levels = tuple((s, lf, np.searchsorted(sorted_off, off[lf])) for s, lf, off in levels)
    return sorted_off, sorted_size, out_levels


def leaf_sums(values: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """Sum blocks of ``size`` values starting at ``offsets`` as numpy's pairwise leaf does (eight accumulators)."""
    block = values[offsets[:, None] + np.arange(size)]
    if size < 8:
        res = np.zeros(offsets.size)
        for i in range(size):
            res += block[:, i]
        return res
    whole = size - size % 8
    r = block[:, :8].copy()
    for i in range(8, whole, 8):
        r += block[:, i:i + 8]
    res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    for i in range(whole, size):
        res += block[:, i]
    return res


def combine_pairwise(n: int, sums_of_leaves: np.ndarray) -> float:
    """Add leaf sums up numpy's tree for n values; return the total as ``np.add.reduce`` gives it."""
    _, _, levels = pairwise_plan(n)
    below: np.ndarray | None = None
    for sizes, leaf, leaf_index in reversed(levels):
        sums = np.empty(sizes.size)
        sums[leaf] = sums_of_leaves[leaf_index]
        if below is not None:
            sums[~leaf] = below[0::2] + below[1::2]
        below = sums
    assert below is not None
    return 0.0 + float(below[0])


def pairwise_sum(values: np.ndarray) -> float:
    """Return ``values.sum()`` as numpy computes it, from the values in one array (for tests and chunks).

    >>> v = np.random.default_rng(1).random(1000); pairwise_sum(v) == float(v.sum())
    True
    """
    offsets, sizes, _ = pairwise_plan(values.size)
    sums = np.empty(offsets.size)
    for size in np.unique(sizes).tolist():
        at = sizes == size
        sums[at] = leaf_sums(values, offsets[at], size)
    return combine_pairwise(values.size, sums)


class SortedSink:
    """Take one group's values in ascending order, chunk by chunk; keep the wanted ranks, the last value and numpy's sum."""

    def __init__(self, n: int, ranks: set[int]) -> None:
        self.n = n
        self.ranks = sorted(r for r in ranks if 1 <= r <= n)
        self.picked: dict[int, float] = {}
        self.seen = 0
        self.last: float | None = None
        self._offsets, self._sizes, _ = pairwise_plan(n) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64), ())
        self._leaf_sums = np.empty(self._offsets.size)
        self._next_leaf = 0
        self._pending = np.empty(0)
        self._pending_start = 0

    def feed(self, chunk: np.ndarray) -> None:
        """Take the next values in order."""
        if chunk.size == 0:
            return
        lo, hi = self.seen, self.seen + chunk.size
        for r in self.ranks:
            if lo < r <= hi:
                self.picked[r] = float(chunk[r - 1 - lo])
        self.seen = hi
        self.last = float(chunk[-1])
        buf = np.concatenate([self._pending, chunk]) if self._pending.size else chunk
        end = self._pending_start + buf.size
        k0 = self._next_leaf
        k1 = int(np.searchsorted(self._offsets + self._sizes, end, side="right"))
        if k1 > k0:
            offs, sizes = self._offsets[k0:k1] - self._pending_start, self._sizes[k0:k1]
            for size in np.unique(sizes).tolist():
                at = sizes == size
                self._leaf_sums[k0:k1][at] = leaf_sums(buf, offs[at], size)
            done = int(self._offsets[k1 - 1] + self._sizes[k1 - 1])
            self._pending = buf[done - self._pending_start:].copy()
            self._pending_start = done
            self._next_leaf = k1
        else:
            self._pending = buf.copy() if buf is chunk else buf

    def total(self) -> float:
        """numpy's sum of every value fed (all n must have been)."""
        if self.seen != self.n:
            raise RuntimeError(f"expected {self.n} sorted values, got {self.seen}")
        return combine_pairwise(self.n, self._leaf_sums)


def distribution(sink: SortedSink, infinite: int = 0) -> Distribution:
    """Build a Distribution as ``summary._distribution`` does, from a sink fed the sorted values."""
    finite_n = sink.n
    n = finite_n + infinite
    if n == 0:
        pcts = [Percentile(q=float(qq), value=None, ci_low=None, ci_high=None) for qq in REPORT_QUANTILES]
        return Distribution(n=0, percentiles=pcts, max=None, mean=None)

    def at(rank: int | None) -> float | None:
        if rank is None:
            return None
        return sink.picked[rank] if rank <= finite_n else math.inf

    pcts = []
    for qq in REPORT_QUANTILES:
        ri = rank_interval(qq, n)
        pcts.append(Percentile(q=float(qq), value=at(nearest_rank(qq, n)), ci_low=at(ri.lower_rank),
                               ci_high=at(ri.upper_rank)))
    finite = finite_n > 0 and infinite == 0 and sink.last is not None and math.isfinite(sink.last)
    mean = float(sink.total() / finite_n) if finite else None
    return Distribution(n=n, percentiles=pcts, max=math.inf if infinite else sink.last if finite_n else None,
                        mean=mean)


def ranks_for(n: int) -> set[int]:
    """Every 1-based rank a distribution of n values reads: each percentile and both ends of its interval."""
    out: set[int] = set()
    for qq in REPORT_QUANTILES:
        if n:
            out.add(nearest_rank(qq, n))
            ri = rank_interval(qq, n)
            out.update(r for r in (ri.lower_rank, ri.upper_rank) if r is not None)
    return out


# --------------------------------------------------------------------------- the report from the records view


METRICS: dict[str, tuple[str, str]] = {  # value and which records count, over the validated view
    "latency": ('"end" - "start"', "status = 0"),
    "ttft": ('first_token - "start"', "status = 0"),
    "tpot": ('("end" - first_token) / CAST(output_tokens - 1 AS DOUBLE)', "status = 0 AND output_tokens > 1"),
    "queue_wait": ('admitted - "start"', "status = 0 AND isfinite(admitted)"),
    "prefill": ("first_token - admitted", "status = 0 AND isfinite(admitted)"),
}


def _stream_sorted(con: duckdb.DuckDBPyConnection, metric: str, counts: dict[int | None, int],
                   extra_ranks: dict[int | None, int], grouped: bool) -> dict[int | None, SortedSink]:
    """Stream one metric's values sorted (per slice when ``grouped``) into a sink per group."""
    value, where = METRICS[metric]
    sinks = {g: SortedSink(n, ranks_for(n) | ranks_for(n + extra_ranks.get(g, 0))) for g, n in counts.items()}
    if not any(counts.values()):
        return sinks
    if grouped:
        sql = f"SELECT g, {value} AS v FROM records WHERE {where} AND g IS NOT NULL ORDER BY g, v"
    else:
        sql = f"SELECT {value} AS v FROM records WHERE {where} ORDER BY v"
    for batch in con.sql(sql).to_arrow_reader(BATCH_ROWS):
        v = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if not grouped:
            sinks[None].feed(v)
            continue
        g = batch.column(0).to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(g[1:] != g[:-1]) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, g.size]):
            sinks[int(g[a])].feed(v[a:b])
    return sinks


def _timeline(con: duckdb.DuckDBPyConnection, begin: str, where: str, grouped: bool, window_start: float,
              window_end: float) -> dict[int | None, Concurrency]:
    """Peak open intervals [begin, end) and the time held at it, per group, as ``timeline.active_timeline``.

    Events are streamed in time order, a departure before an arrival at the same time, and walked by
    a running sum in numpy; a span at the peak lasts until the next event (always a departure).
    """
    g = "g" if grouped else "CAST(NULL AS INTEGER)"
    cond = f"({where}) AND g IS NOT NULL" if grouped else where
    sql = f"""SELECT g, t, d FROM (
                SELECT {g} AS g, {begin} AS t, CAST(1 AS TINYINT) AS d FROM records WHERE {cond}
                UNION ALL SELECT {g} AS g, "end" AS t, CAST(-1 AS TINYINT) AS d FROM records WHERE {cond})
              ORDER BY g, t, d"""
    walks: dict[int | None, _PeakWalk] = {}
    for batch in con.sql(sql).to_arrow_reader(BATCH_ROWS):
        t = batch.column(1).to_numpy(zero_copy_only=False)
        d = batch.column(2).to_numpy(zero_copy_only=False)
        if not grouped:
            walks.setdefault(None, _PeakWalk()).feed(t, d)
            continue
        k = batch.column(0).to_numpy(zero_copy_only=False)
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, k.size]):
            walks.setdefault(int(k[a]), _PeakWalk()).feed(t[a:b], d[a:b])
    return {key: walk.result(window_start, window_end) for key, walk in walks.items()}


class _PeakWalk:
    """A running sum over one group's events in order: the peak, and the spans [event, next event) at it."""

    def __init__(self) -> None:
        self.level = 0
        self.peak: int | None = None
        self.held_from: list[np.ndarray] = []
        self.held_to: list[np.ndarray] = []
        self.pending = False  # the last time seen was at the peak; its span ends at the next time

    def feed(self, t: np.ndarray, d: np.ndarray) -> None:
        level = np.cumsum(d, dtype=np.int64)
        level += self.level
        self.level = int(level[-1])
        top = int(level.max())
        if self.pending and (self.peak is None or top <= self.peak):
            self.held_to.append(t[:1])
        self.pending = False
        if self.peak is None or top > self.peak:
            self.peak, self.held_from, self.held_to = top, [], []
        if top == self.peak:
            at = np.flatnonzero(level == top)
            self.held_from.append(t[at])
            inner = at[at + 1 < t.size]
            self.held_to.append(t[inner + 1])
            self.pending = bool(at[-1] == t.size - 1)

    def result(self, window_start: float, window_end: float) -> Concurrency:
        window_s = float(window_end - window_start)
        if self.peak is None or self.peak <= 0:
            return Concurrency(peak=0, share_of_window_at_peak=1.0, time_at_peak_s=window_s)
        held_from, held_to = np.concatenate(self.held_from), np.concatenate(self.held_to)
        time_at = float(np.sum(np.clip(held_to, window_start, window_end) - np.clip(held_from, window_start, window_end)))
        return Concurrency(peak=self.peak, share_of_window_at_peak=float(time_at / window_s), time_at_peak_s=time_at)


def _aggregates(con: duckdb.DuckDBPyConnection, slo: SLO | None, grouped: bool) -> dict[int | None, dict[str, Any]]:
    """Counts and exact token sums for the whole set and (``grouped``) each slice, in one scan."""
    good = ["status = 0"]
    if slo is not None and slo.ttft_s is not None:
        good.append(f'first_token - "start" <= {lit(slo.ttft_s)}')
    if slo is not None and slo.latency_s is not None:
        good.append(f'"end" - "start" <= {lit(slo.latency_s)}')
    if slo is not None and slo.tpot_s is not None:
        good.append(f"(output_tokens <= 1 OR {METRICS['tpot'][0]} <= {lit(slo.tpot_s)})")
    good_sql = " AND ".join(good)
    produced = "CASE WHEN output_tokens > 0 THEN output_tokens ELSE 0 END"
    exprs = {
        "n": "count(*)",
        **{f"status_{i}": f"count(*) FILTER (WHERE status = {i})" for i in range(len(STATUSES))},
        "total_tokens": f"sum({produced})",
        "success_tokens": f"sum({produced}) FILTER (WHERE status = 0)",
        "prompt_sum": "sum(prompt_tokens) FILTER (WHERE prompt_tokens >= 0)",
        "prompt_n": "count(*) FILTER (WHERE prompt_tokens >= 0)",
        "no_id": "count(*) FILTER (WHERE request_id IS NULL)",
        "good": f"count(*) FILTER (WHERE {good_sql})",
        "good_tokens": f"sum(output_tokens) FILTER (WHERE {good_sql})",
        "any_admitted": "count(*) FILTER (WHERE isfinite(admitted))",
        **{f"n_{m}": f"count(*) FILTER (WHERE {where})" for m, (_, where) in METRICS.items()},
    }
    select = ", ".join(f"{e} AS {k}" for k, e in exprs.items())
    group = "GROUP BY GROUPING SETS ((), (g)) HAVING grouping(g) = 1 OR g IS NOT NULL" if grouped else ""
    key = "CASE WHEN grouping(g) = 1 THEN NULL ELSE g END" if grouped else "NULL"
    rows = con.sql(f"SELECT {key} AS key, {select} FROM records {group}").fetchall()
    names = ["key", *exprs]
    out = {}
    for r in rows:
        d = dict(zip(names, r))
        out[d.pop("key")] = {k: (0 if v is None and k != "prompt_sum" else v) for k, v in d.items()}
    return out


def _causes(con: duckdb.DuckDBPyConnection, grouped: bool) -> dict[int | None, dict[str, int]]:
    """Non-success records by error text ('unspecified' if none), most common first, per group."""
    sets = "GROUPING SETS ((error), (g, error)) HAVING grouping(g) = 1 OR g IS NOT NULL" if grouped else "error"
    key = "CASE WHEN grouping(g) = 1 THEN NULL ELSE g END" if grouped else "NULL"
    rows = con.sql(f"SELECT {key}, error, count(*) FROM records WHERE status <> 0 GROUP BY {sets}").fetchall()
    out: dict[int | None, dict[str, int]] = {}
    for k, error, count in rows:
        by_name = out.setdefault(k, {})
        name = "unspecified" if error is None else error
        by_name[name] = by_name.get(name, 0) + int(count)
    return {k: dict(sorted(v.items(), key=lambda p: (-p[1], p[0]))) for k, v in out.items()}


def _duplicates(con: duckdb.DuckDBPyConnection) -> tuple[int, list[str]]:
    """Return the number of repeated request IDs (each beyond its first) and the first five repeated, sorted."""
    dup = ("SELECT request_id, count(*) AS c FROM records WHERE request_id IS NOT NULL "
           "GROUP BY request_id HAVING count(*) > 1")
    total = con.sql(f"SELECT coalesce(sum(c - 1), 0) FROM ({dup})").fetchall()[0][0]
    examples = [r[0] for r in con.sql(f"SELECT request_id FROM ({dup}) ORDER BY request_id LIMIT 5").fetchall()]
    return int(total), examples


def report_from_connection(con: duckdb.DuckDBPyConnection, source: str | None, window_start: float,
                           window_end: float, slo: SLO | None, slice_names: Sequence[str]) -> Report:
    """Return the full report over the validated view ``records`` (columns as in memory, ``g`` the slice code).

    ``slice_names[g]`` names slice code g; the codes are in name order, as the in-memory report sorts them.
    """
    grouped = bool(slice_names)
    agg = _aggregates(con, slo, grouped)
    whole = agg.get(None)
    if whole is None or whole["n"] == 0:
        raise ConfigError(MSG_EMPTY)
    groups: list[int | None] = [None, *[g for g in range(len(slice_names)) if g in agg]]
    failures = {g: agg[g]["n"] - agg[g]["status_0"] for g in groups}
    sinks: dict[str, dict[int | None, SortedSink]] = {}
    for metric in METRICS:
        extra = failures if metric in ("latency", "ttft") else {}
        sinks[metric] = _stream_sorted(con, metric, {None: agg[None][f"n_{metric}"]}, extra, grouped=False)
        if grouped:
            sinks[metric].update(_stream_sorted(con, metric, {g: agg[g][f"n_{metric}"] for g in groups if g is not None},
                                                extra, grouped=True))
    active = _timeline(con, '"start"', "true", False, window_start, window_end)
    service = _timeline(con, "admitted", "isfinite(admitted)", False, window_start, window_end)
    if grouped:
        active.update(_timeline(con, '"start"', "true", True, window_start, window_end))
        service.update(_timeline(con, "admitted", "isfinite(admitted)", True, window_start, window_end))
    causes = _causes(con, grouped)
    window_s = window_end - window_start

    def one(g: int | None) -> Report:
        a = agg[g]
        n = a["n"]
        by_status = {name: int(a[f"status_{i}"]) for i, name in enumerate(STATUSES)}
        successes = by_status["success"]
        dist = {m: distribution(sinks[m][g]) for m in METRICS}
        has_adm = a["n_queue_wait"] > 0
        slo_result = None
        if slo is not None and slo.any:
            slo_result = SLOResult(slo=slo, good_requests=int(a["good"]), attainment=int(a["good"]) / n,
                                   goodput_requests_per_second=int(a["good"]) / window_s,
                                   goodput_output_tokens_per_second=int(a["good_tokens"]) / window_s)
        total_tokens, success_tokens = int(a["total_tokens"]), int(a["success_tokens"])
        empty = Concurrency(peak=0, share_of_window_at_peak=1.0, time_at_peak_s=float(window_end - window_start))
        summary = {
            "requests": n, "successes": successes, "non_success_fraction": 1 - successes / n,
            "successful_requests_per_second": successes / window_s,
            "successful_output_tokens_per_second": success_tokens / window_s,
            "success_latency_p95_s": dist["latency"].at(95), "success_ttft_p95_s": dist["ttft"].at(95),
            "success_request_tpot_p95_s": dist["tpot"].at(95),
        }
        return Report(
            source=source, window_start=window_start, window_end=window_end, window_s=window_s,
            summary=summary, offered=n, accepted=n - by_status["rejected"], completed=successes,
            rejected=by_status["rejected"], timed_out=by_status["timeout"], by_status=by_status,
            by_cause=causes.get(g, {}),
            latency_s=dist["latency"], ttft_s=dist["ttft"], request_tpot_s=dist["tpot"],
            queue_wait_s=dist["queue_wait"] if has_adm else None, prefill_s=dist["prefill"] if has_adm else None,
            failure_aware_latency_s=distribution(sinks["latency"][g], infinite=failures[g]),
            failure_aware_ttft_s=distribution(sinks["ttft"][g], infinite=failures[g]),
            slo=slo_result, total_output_tokens=total_tokens, successful_output_tokens=success_tokens,
            wasted_output_tokens=total_tokens - success_tokens,
            total_prompt_tokens=int(a["prompt_sum"]) if a["prompt_n"] else None,
            active_requests=active.get(g, empty),
            in_service=service.get(g, empty) if a["any_admitted"] else None,
            duplicate_request_ids=0, duplicate_request_id_examples=[],
            records_without_request_id=int(a["no_id"]),
        )

    dups, examples = _duplicates(con)
    slices = {slice_names[g]: one(g) for g in groups if g is not None}
    return one(None).model_copy(update=dict(duplicate_request_ids=dups, duplicate_request_id_examples=examples,
                                            slices=slices))


# --------------------------------------------------------------------------- slices


def slice_codes(con: duckdb.DuckDBPyConnection, column: str | None, extras: Sequence[str],
                source: str) -> tuple[str, list[str]]:
    """Return SQL for each record's slice code and the slice names (sorted), as ``--slice-by`` splits in memory.

    An extra column's distinct values are turned into names by ``extra_columns.slice_by`` itself, on a
    small table holding one row per distinct value, so the names, the checks and the messages are its own.
    """
    from servebench.records.extra_columns import MAX_SLICE_VALUES, SLICE_COLUMN, slice_by
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
        keys = pa.array([], pa.string())
    k = len(keys)
    tiny = RecordTable.from_columns(
        start=np.zeros(k), end=np.zeros(k), status=np.zeros(k, np.int8), first_token=np.zeros(k),
        output_tokens=np.ones(k, np.int64), admitted=np.full(k, np.nan), prompt_tokens=np.full(k, -1, np.int64),
        source=source, extra={name: (keys if name == column else pa.nulls(k)) for name in extras})
    named = slice_by(tiny, column)  # raises the in-memory path's errors: unknown column, too many values
    per_value = named.slice
    names = sorted({v for v in per_value if v is not None})
    code = {name: i for i, name in enumerate(names)}
    mapping = pa.table({"key": keys, "code": pa.array([code.get(v) for v in per_value], pa.int32())})
    con.register("__slice_map_src", mapping)
    con.sql("CREATE OR REPLACE TEMP TABLE __slice_map AS SELECT * FROM __slice_map_src")
    return f"(SELECT code FROM __slice_map m WHERE m.key = p.{extra_col(column)})", names


# --------------------------------------------------------------------------- the edge: files, staging, connection


@dataclass
class _Scan:
    plans: list[PartPlan]
    extras: list[str]
    warnings: list[str] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)


def _scan(con: duckdb.DuckDBPyConnection, record_set: RecordSet, fmt: str, stage_dir: Path,
          progress: Callable[[str], None]) -> _Scan:
    """Create the view ``parsed`` over every part: native Parquet scanned by DuckDB, the rest staged."""
    plans = choose_native([plan_part(p, i, fmt) for i, p in enumerate(record_set.parts)])
    part_warnings: list[list[str]] = []
    unavailable: list[str] = []
    extras_per_part: list[list[str]] = []
    files = []
    for plan in plans:
        if plan.native:
            extras_per_part.append([*plan.extra, *(k for k, _ in plan.part.partition)])
            part_warnings.append([])
            continue
        progress(f"reading {plan.part.name} ({plan.index + 1:,} of {len(plans):,} parts)")
        loaded = read_part(plan.part, fmt)
        part_warnings.append(list(loaded.warnings))
        unavailable.extend(loaded.metadata.get("unavailable_metrics") or [])
        extras_per_part.append(list(loaded.rows.extra))
        path = stage_dir / f"part-{plan.index:06d}.parquet"
        pq.write_table(staged_table(loaded.rows, plan.index), path)
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
    con.sql("CREATE OR REPLACE TABLE parsed AS " + " UNION ALL BY NAME ".join(selects))
    for plan in plans:  # integer request IDs are read as text, with the note the one-file reader gives
        if plan.native and any(c == "request_id" and k == "int" for _, c, k in plan.columns):
            count, first = con.sql(f'SELECT count(*), min(part_row) FROM parsed WHERE part = {plan.index} '
                                   f'AND "request_id.present"').fetchall()[0]
            if count:
                part_warnings[plan.index].append(_int_ids_note(int(count), int(first)))
    if len(plans) == 1:
        warnings = part_warnings[0]
    else:  # as recordset.set_warnings words them
        warnings = [f"{p.part.name}: {w}" for p, ws in zip(plans, part_warnings) for w in ws]
    return _Scan(plans, extras, warnings, list(dict.fromkeys(unavailable)))


def _default_window(con: duckdb.DuckDBPyConnection) -> tuple[float, float] | None:
    lo, hi = con.sql('SELECT min("start") FILTER (WHERE isfinite("start")), '
                     'max("end") FILTER (WHERE isfinite("end")) FROM parsed').fetchall()[0]
    return None if lo is None or hi is None else (float(lo), float(hi))


def _validate(con: duckdb.DuckDBPyConnection, plans: Sequence[PartPlan], ws: float, we: float, fmt: str) -> None:
    found = first_bad_row(con, ws, we)
    if found is not None:
        raise explain_row(plans[found[0]], found[1], ws, we, fmt)


def summarize_set(record_set: RecordSet, fmt: str = "auto", window_start: float | None = None,
                  window_end: float | None = None, slo: SLO | None = None, slice_column: str | None = None,
                  memory_limit: str | None = None, progress: Callable[[str], None] = lambda _: None,
                  *, engine_note: str | None = None, threads: int | None = None) -> SetSummary:
    """Summarize a record set out of core with DuckDB: the same report, warnings and errors as in memory."""
    from servebench.records.extra_columns import extra_columns_note
    with tempfile.TemporaryDirectory(prefix="servebench-duckdb-") as tmp:
        stage = Path(tmp)
        # tables past the memory limit spill to the temporary folder
        con = duckdb.connect(":memory:", config={"temp_directory": str(stage / "spill")})
        try:
            if memory_limit is not None:
                from servebench.records.recordset import parse_size
                con.sql(f"SET memory_limit = '{parse_size(memory_limit)}B'")
            if threads is not None:
                con.sql(f"SET threads = {int(threads)}")
            con.sql("SET preserve_insertion_order = false")
            con.sql("SET enable_progress_bar = false")
            try:
                scan = _scan(con, record_set, fmt, stage, progress)
                progress("validating records with DuckDB")
                ws, we = _window(con, scan.plans, window_start, window_end, record_set.source, fmt)
                _validate(con, scan.plans, ws, we, fmt)
                code_sql, names = slice_codes(con, slice_column, scan.extras, record_set.source)
                _records_view(con, code_sql)
                progress("summarizing records with DuckDB")
                report = report_from_connection(con, record_set.source, ws, we, slo, names)
            except duckdb.OutOfMemoryException as exc:
                raise ConfigError(f"DuckDB ran out of memory within the limit ({memory_limit or 'its default'}); "
                                  f"give it more with --memory-limit: {' '.join(str(exc).split())[:200]}") from None
            except duckdb.Error as exc:
                raise _reader_error(record_set, fmt, exc) from None
        finally:
            con.close()
    note = extra_columns_note(scan.extras)
    return SetSummary(report, scan.warnings, scan.unavailable, scan.extras, "duckdb", engine_note,
                      [note] if note else [])


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


def _records_view(con: duckdb.DuckDBPyConnection, code_sql: str) -> None:
    """Create ``records``: the validated rows with the in-memory table's columns and ``g``, the slice code."""
    con.sql(f"""CREATE OR REPLACE TABLE records AS SELECT "start", "end", status, first_token, output_tokens,
                admitted, prompt_tokens, request_id, error, {code_sql} AS g FROM parsed p""")
    con.sql("DROP TABLE parsed")


def _reader_error(record_set: RecordSet, fmt: str, exc: Exception) -> Exception:
    """Return servebench's own error for what DuckDB could not read, by reading the parts in order."""
    for part in record_set.parts:
        try:
            read_part(part, fmt)
        except (InputFormatError, RecordValidationError) as err:
            return err
    return InputFormatError(f"{record_set.source}: DuckDB could not read the records: {' '.join(str(exc).split())[:300]}")


__all__ = ["pairwise_sum", "report_from_connection", "summarize_set", "violation_sql"]
