"""Validation in the DuckDB engine: every record rule as one SQL predicate, and servebench's own words for the first bad row.

The predicate holds every rule of ``records.table.first_violation``, in its order (each line of
:func:`violation_sql` names the rule). The first row (in part order) failing any is found in SQL;
its part is then re-validated by servebench's own validator, so the error is the same line, naming
the part, the row in it and the field. The token-time rules (``token_times.check``) are not
restated in SQL: parts with token times are staged, and staging records servebench's own verdict
per row (``tokens_bad``). Rules a reader applies while parsing (columns, extra columns that are
not scalars, text that is not UTF-8) raise while a part is read, as in memory.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow.parquet as pq

from servebench.analysis.duckdb_parts import PartPlan, lit, q
from servebench.errors import RecordValidationError
from servebench.records.recordset import read_part
from servebench.records.schema import TEXT_FIELDS, parse_arrow
from servebench.records.table import first_violation


def violation_sql(window_start: float, window_end: float) -> str:
    """Return a boolean SQL expression over the parsed view: the row breaks some rule (``first_violation``'s)."""
    def has(f: str) -> str:
        return q(f + ".present")

    def bad(f: str) -> str:
        return q(f + ".bad")

    s, e, f, a = q("start"), q("end"), q("first_token"), q("admitted")
    ok = f"({q('status')} = 0)"
    prompt_bad = f"({has('prompt_tokens')} AND ({bad('prompt_tokens')} OR {q('prompt_tokens')} < 0))"
    cached = q("cached_prompt_tokens")
    fa, r = q("first_answer_token"), q("reasoning_tokens")
    rules = [
        "not_object",  # Record must be an object
        f"(NOT {has('start')} OR {bad('start')} OR NOT isfinite({s}) OR {s} < {lit(window_start)})",  # times
        f"(NOT {has('end')} OR {bad('end')} OR NOT isfinite({e}) OR {e} > {lit(window_end)})",
        f"({s} > {e})",
        f"({q('status')} < 0)",  # Invalid status
        (f"({ok} AND (NOT {has('first_token')} OR {bad('first_token')} OR NOT isfinite({f}) OR {f} < {s} "
         f"OR {f} > {e}))"),  # Invalid successful output
        f"({ok} AND (NOT {has('output_tokens')} OR {bad('output_tokens')} OR {q('output_tokens')} < 1))",
        (f"(NOT {ok} AND {has('first_token')} AND ({bad('first_token')} OR NOT isfinite({f}) OR {f} < {s} "
         f"OR {f} > {e}))"),  # Invalid first token time
        f"(NOT {ok} AND {has('output_tokens')} AND ({bad('output_tokens')} OR {q('output_tokens')} < 0))",
        (f"({has('admitted')} AND ({bad('admitted')} OR NOT isfinite({a}) OR {a} < {s} OR "
         f"{a} > CASE WHEN {ok} THEN {f} ELSE {e} END))"),  # Invalid admission time
        prompt_bad,  # Invalid prompt tokens
        "(" + " OR ".join(bad(t) for t in TEXT_FIELDS) + ")",  # Invalid text field
        (f"({has('cached_prompt_tokens')} AND ({bad('cached_prompt_tokens')} OR {cached} < 0 "
         f"OR ({has('prompt_tokens')} AND NOT {prompt_bad} AND {cached} > {q('prompt_tokens')})))"),  # cached
        f"({has('attempt')} AND ({bad('attempt')} OR {q('attempt')} < 1))",  # Invalid attempt
        (f"({has('first_answer_token')} AND ({bad('first_answer_token')} OR NOT isfinite({fa}) "
         f"OR NOT {has('first_token')} OR {fa} < {f} OR {fa} > {e}))"),  # Invalid first answer token time
        (f"({has('reasoning_tokens')} AND ({bad('reasoning_tokens')} OR {r} < 0 OR ({has('output_tokens')} "
         f"AND NOT {bad('output_tokens')} AND {r} > {q('output_tokens')})))"),  # Invalid reasoning tokens
        "tokens_bad",  # Invalid token times / counts: servebench's own check, while staging
    ]
    return "(" + " OR ".join(rules) + ")"


def first_bad_row(con: duckdb.DuckDBPyConnection, window_start: float, window_end: float) -> tuple[int, int] | None:
    """Return (part index, 0-based row) of the first row in the view ``parsed`` breaking a rule, or None."""
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


__all__ = ["explain_row", "first_bad_row", "violation_sql"]
