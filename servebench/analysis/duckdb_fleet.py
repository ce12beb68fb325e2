"""The fleet section out of core: ``analysis.fleet``'s numbers over DuckDB's ``records``, bit for bit.

Each record's replica is coded in the report's order (:func:`replica_codes`). The names are
``analysis.fleet``'s own: its ``replica_labels`` and ``replica_names`` run on one row per distinct
value of the ``replica`` column, so integers sort as numbers (text, or integers beside blanks, as
text) and blank text names no replica, as the reader reads it. Per replica (:func:`fleet_from_connection`):
requests and exact token sums in SQL, the nearest-rank p95 of TTFT and latency of its successes picked
from DuckDB's sorted stream, and the in-flight peak by a running sum over its start and end events in
time order, a departure before an arrival at the same time (``duckdb_report.timeline``).

DuckDB unions the parts' columns by its own rules, which give the same values as the in-memory join of
parts for integers, text and both (an integer becomes the same text), and for booleans alone; a column
of another type in some part (a float, a dictionary) is refused (:func:`replica_types_refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from servebench.analysis.duckdb_parts import blank_sql, extra_col, values_table
from servebench.analysis.duckdb_report import METRICS, grouped_sums, stream, timeline
from servebench.analysis.fleet import (
    REPLICA_COLUMN,
    FleetReport,
    ReplicaReport,
    fleet_of,
    hit_rate,
    replica_labels,
    replica_names,
)
from servebench.analysis.percentiles import nearest_rank
from servebench.analysis.sorted_stream import SortedSink

CODE = "r"  # the records' column holding each record's replica code (NULL: no replica)
_P95 = 95


def _kind(typ: pa.DataType) -> str:
    """Name a part's replica type: int, text, bool, or the type (a dictionary by its values)."""
    if pa.types.is_dictionary(typ):
        return f"a dictionary of {typ.value_type}"
    if pa.types.is_integer(typ):
        return "int"
    if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_string_view(typ):
        return "text"
    return "bool" if pa.types.is_boolean(typ) else str(typ)


def replica_types_refusal(types: Sequence[tuple[str, pa.DataType]]) -> str | None:
    """Say why the parts' ``replica`` types (part name, type) would name replicas otherwise than memory, or None.

    >>> replica_types_refusal([("a.csv", pa.int64()), ("b.csv", pa.string()), ("c.csv", pa.null())]) is None
    True
    >>> replica_types_refusal([("a.parquet", pa.int64()), ("b.parquet", pa.float64())])
    "the DuckDB engine reads a 'replica' column of integers or text (or of booleans alone), and b.parquet holds double"
    """
    typed = [(name, _kind(t)) for name, t in types if not pa.types.is_null(t)]  # a part of nulls takes any type
    kinds = {k for _, k in typed}
    if kinds <= {"int", "text"} or kinds == {"bool"}:
        return None
    part, kind = next((n, k) for n, k in typed if k not in ("int", "text"))
    return (f"the DuckDB engine reads a '{REPLICA_COLUMN}' column of integers or text (or of booleans alone), "
            f"and {part} holds {kind}")


def replica_codes(con: duckdb.DuckDBPyConnection, source: str) -> tuple[str, list[str]] | None:
    """Return SQL for each row of ``parsed p``'s replica code and the replicas' names in code order.

    None when no record names a replica. The codes are looked up in a small table (``__replica_map``)
    of the column's distinct values, each named by ``analysis.fleet`` itself.
    """
    column = f"p.{extra_col(REPLICA_COLUMN)}"
    text = str(con.sql(f"SELECT {column} FROM parsed p LIMIT 0").types[0]) == "VARCHAR"
    value = f"CASE WHEN {blank_sql(column)} THEN NULL ELSE {column} END" if text else column
    keys = con.sql(f"SELECT DISTINCT {value} AS key FROM parsed p").to_arrow_table().column("key").combine_chunks()
    labels = replica_labels(values_table(len(keys), source, {REPLICA_COLUMN: keys}))
    assert labels is not None
    names = replica_names(labels)
    if not names:
        return None
    code = {name: i for i, name in enumerate(names)}
    mapping = pa.table({"key": keys, "code": pa.array([code.get(v) for v in labels.tolist()], pa.int32())})
    con.register("__replica_map_src", mapping)
    con.sql("CREATE OR REPLACE TEMP TABLE __replica_map AS SELECT * FROM __replica_map_src")
    con.unregister("__replica_map_src")
    return f"(SELECT code FROM __replica_map m WHERE m.key = {value})", [str(name) for name in names]


def fleet_from_connection(con: duckdb.DuckDBPyConnection, names: Sequence[str], cached: bool) -> FleetReport:
    """Return the fleet section over ``records`` (column ``r``: the replica's code, ``names[r]`` its name).

    ``cached``: ``records`` has ``cached_prompt_tokens`` (without it no record says, and every hit rate is None).
    """
    exprs = {"n": "count(*)", "ok": f"count(*) FILTER (WHERE {METRICS['latency'].where})"}
    if cached:
        both = "cached_prompt_tokens >= 0 AND prompt_tokens >= 0"
        exprs.update(cached=f"sum(cached_prompt_tokens) FILTER (WHERE {both})",
                     prompt=f"sum(prompt_tokens) FILTER (WHERE {both})")
    agg = grouped_sums(con, exprs, True, where=f"{CODE} IS NOT NULL", key=CODE)
    p95: dict[str, dict[int, float | None]] = {}
    for metric in ("ttft", "latency"):
        sinks = {code: SortedSink(agg[code]["ok"], {nearest_rank(_P95, agg[code]["ok"])} if agg[code]["ok"] else set())
                 for code in range(len(names))}
        stream(con, METRICS[metric].value, METRICS[metric].where, sinks, grouped=True, key=CODE)
        p95[metric] = {code: s.picked[s.ranks[0]] if s.n else None for code, s in sinks.items()}
    peaks = timeline(con, '"start"', "true", True, 0.0, 1.0, key=CODE)

    def rate(a: dict) -> float | None:
        return hit_rate(int(a.get("cached", 0)), int(a.get("prompt", 0)))

    per = {name: ReplicaReport(requests=int(agg[code]["n"]), in_flight_peak=peaks[code].peak,
                               token_hit_rate=rate(agg[code]), ttft_p95_s=p95["ttft"][code],
                               latency_p95_s=p95["latency"][code])
           for code, name in enumerate(names)}
    return fleet_of(per, rate(agg[None]))


__all__ = ["CODE", "fleet_from_connection", "replica_codes", "replica_types_refusal"]
