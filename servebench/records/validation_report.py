"""List the first few bad rows of a file (up to 10), each with row and field, so they are fixed in one pass.

``records.validate`` stops at the first broken rule, as the spec requires; this module asks the same
``first_violation`` again on the rows after each one found, so the messages are the same ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from servebench.records.schema import Column, ParsedRows
from servebench.records.table import first_violation

MAX_BAD_ROWS = 10


@dataclass(frozen=True)
class BadRow:
    """One broken record: 1-based row, the field (None when the record is not an object) and the message."""

    row: int
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" + (f", field '{self.field}'" if self.field else "")
        return f"{where}: {self.message}"


def _tail_column(col: Column, offset: int) -> Column:
    raw = col.raw
    return Column(values=col.values[offset:], present=col.present[offset:], bad=col.bad[offset:],
                  raw=lambda i: raw(i + offset))


def _tail(rows: ParsedRows, offset: int) -> ParsedRows:
    """Return the rows from ``offset`` on (row numbers shift by offset)."""
    return replace(rows, n=rows.n - offset, not_object=rows.not_object[offset:],
                   columns={name: _tail_column(col, offset) for name, col in rows.columns.items()})


def bad_rows(rows: ParsedRows, window_start: float = -math.inf, window_end: float = math.inf,
             limit: int = MAX_BAD_ROWS) -> list[BadRow]:
    """Return the first ``limit`` rows that break a rule, in file order, each with its first broken rule."""
    found: list[BadRow] = []
    offset = 0
    while offset < rows.n and len(found) < limit:
        part = rows if offset == 0 else _tail(rows, offset)
        violation, _ = first_violation(part, window_start, window_end)
        if violation is None:
            break
        row = offset + violation.row
        found.append(BadRow(row + 1, violation.field, f"{violation.message}: {violation.detail}"))
        offset = row + 1
    return found


def bad_rows_text(rows: ParsedRows, window_start: float = -math.inf, window_end: float = math.inf,
                  limit: int = MAX_BAD_ROWS) -> str | None:
    """Return the bad rows as lines under one heading naming the file, or None when every row is valid."""
    found = bad_rows(rows, window_start, window_end, limit)
    if not found:
        return None
    more = " (the first {limit}; there may be more)".format(limit=limit) if len(found) == limit else ""
    head = f"{rows.source or 'the file'}: {len(found)} bad row{'s' if len(found) > 1 else ''}{more}"
    return "\n".join([head, *(f"- {b}" for b in found)])


__all__ = ["BadRow", "MAX_BAD_ROWS", "bad_rows", "bad_rows_text"]
