"""The observation window as a zoom: keep the records that lie inside it and say what was left out.

The spec's ``summarize`` refuses a window that cuts a request (every record must lie inside). The
dashboard and ``servebench summarize --trim-to-window`` instead validate the whole file once, keep the
records inside ``[window_start, window_end]`` and report how many were left out and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from servebench.errors import RecordValidationError
from servebench.records.loaders import LoadedRecords, to_table
from servebench.records.schema import shown
from servebench.records.table import RecordTable


@dataclass(frozen=True)
class TrimmedRecords:
    """The records inside a window, with counts of those left out by which edge they crossed."""

    table: RecordTable
    window_start: float
    window_end: float
    total: int
    started_before: int  # start < window start (and end inside)
    ended_after: int  # end > window end (and start inside)
    spans_window: int  # both: started before and ended after
    outside: int  # entirely before the window start or entirely after its end

    @property
    def left_out(self) -> int:
        """Return how many records the window left out."""
        return self.total - len(self.table)

    def note(self) -> str | None:
        """Return one sentence on what the window left out, or None when it kept every record."""
        if not self.left_out:
            return None
        parts = [f"{n:,} {what}" for n, what in (
            (self.outside, "lie wholly outside it"),
            (self.started_before, "started before its start"),
            (self.ended_after, "ended after its end"),
            (self.spans_window, "started before it and ended after it"),
        ) if n]
        kept = len(self.table)
        return (f"The window keeps {kept:,} of {self.total:,} records; {self.left_out:,} left out because they do "
                f"not lie inside it: {', '.join(parts)}.")


def full_table(loaded: LoadedRecords) -> RecordTable:
    """Validate every record with no window limit (the file's own defects still raise, naming row and field)."""
    return to_table(loaded)[0]


def trim(table: RecordTable, window_start: float, window_end: float) -> TrimmedRecords:
    """Keep the records of a validated table that lie inside [window_start, window_end].

    >>> from servebench.records.table import RecordTable
    >>> t = RecordTable.from_columns(start=np.array([0.0, 1.0, 4.0]), end=np.array([2.0, 3.0, 6.0]),
    ...     status=np.array([1, 1, 1]), first_token=np.full(3, np.nan), output_tokens=np.full(3, -1),
    ...     admitted=np.full(3, np.nan), prompt_tokens=np.full(3, -1))
    >>> r = trim(t, 0.5, 5.0)
    >>> len(r.table), r.started_before, r.ended_after
    (1, 1, 1)
    """
    if not (math.isfinite(window_start) and math.isfinite(window_end) and window_end > window_start):
        raise RecordValidationError(
            f"Invalid observation window: start {shown(window_start)} and end {shown(window_end)} must be finite, "
            "end after start", source=table.source, rule="Invalid observation window")
    s, e = table.start, table.end
    before, after = s < window_start, e > window_end
    outside = (e < window_start) | (s > window_end)
    inside = ~before & ~after
    kept = table if inside.all() else table.take(np.flatnonzero(inside))
    return TrimmedRecords(
        table=kept, window_start=float(window_start), window_end=float(window_end), total=len(table),
        started_before=int((before & ~after & ~outside).sum()), ended_after=int((after & ~before & ~outside).sum()),
        spans_window=int((before & after).sum()), outside=int(outside.sum()))


def trim_to_window(loaded: LoadedRecords, window_start: float | None = None,
                   window_end: float | None = None) -> TrimmedRecords:
    """Validate a file's records, then keep those inside the window (default: the whole file)."""
    table, ws, we = to_table(loaded)
    return trim(table, ws if window_start is None else window_start, we if window_end is None else window_end)
