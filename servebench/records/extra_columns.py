"""Columns a record file carries beyond the schema (``gpu``, ``model``, ``note``): the note, and slicing by one.

Readers keep such columns as Arrow arrays on the table (``RecordTable.extra``); nothing here copies
them into Python lists. A misspelled schema field (``first_tokn``) would otherwise be kept silently,
so :func:`extra_columns_note` names the schema fields each one resembles.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from servebench.errors import ConfigError
from servebench.records.schema import ALIASES, FIELDS
from servebench.records.table import RecordTable
from servebench.records.textcolumns import categorical

SLICE_COLUMN = "slice"
MAX_SLICE_VALUES = 1000  # a report per value: more than this is a column of IDs, not of groups
_KNOWN = (*FIELDS, *ALIASES)


def near_misses(name: str) -> list[str]:
    """Return the schema fields a column name resembles (case, spacing and small typos ignored).

    >>> near_misses("first_tokn"), near_misses("Start"), near_misses("gpu")
    (['first_token'], ['start'], [])
    """
    folded = {k.lower().replace(" ", "_").replace("-", "_"): k for k in _KNOWN}
    key = name.lower().strip().replace(" ", "_").replace("-", "_")
    matches = difflib.get_close_matches(key, list(folded), n=3, cutoff=0.8)
    return list(dict.fromkeys(ALIASES.get(folded[m], folded[m]) for m in matches))


def extra_columns_note(names: Iterable[str], slice_hint: str = "--slice-by NAME") -> str | None:
    """Return one line listing the extra columns (and the schema fields they resemble), or None if none.

    ``slice_hint`` says how to break a report down by one (the CLI's option, or the dashboard's box).

    >>> print(extra_columns_note(["gpu", "first_tokn"]))
    2 columns the schema does not know are kept as record attributes (--slice-by NAME breaks the report down by one): 'gpu', 'first_tokn' (did you mean 'first_token'? It is not read as one)
    """
    names = list(names)
    if not names:
        return None
    parts = []
    for name in names:
        close = near_misses(name)
        hint = f" (did you mean {' or '.join(repr(c) for c in close)}? It is not read as one)" if close else ""
        parts.append(f"{name!r}{hint}")
    what = "1 column the schema does not know is" if len(names) == 1 else \
        f"{len(names)} columns the schema does not know are"
    return (f"{what} kept as record attributes ({slice_hint} breaks the report down by one): "
            f"{', '.join(parts)}")


def slice_choices(table: RecordTable) -> list[str]:
    """Return the columns a report can be broken down by: ``slice`` and every extra column."""
    return [SLICE_COLUMN, *table.extra]


def no_such_column(column: str, source: str | None, has_slices: bool, extra: list[str]) -> ConfigError:
    """Return the error for ``--slice-by`` naming a column the records lack, with the columns they do have.

    'slice' is listed only when some record has a slice: a file without one has no such column.
    """
    has = ([SLICE_COLUMN] if has_slices else []) + extra
    known = f"it has {', '.join(repr(c) for c in has)}" if has else \
        "it has neither a slice nor a column the schema does not know"
    close = difflib.get_close_matches(column, extra, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(f"--slice-by {column!r}: {source or 'the records'} has no such column ({known}){hint}")


def slice_by(table: RecordTable, column: str) -> RecordTable:
    """Return the table with ``column``'s values (as text) as each record's slice.

    ``slice`` keeps the table as it is. A null, NaN or blank value leaves a record out of every slice.
    """
    if column == SLICE_COLUMN:
        return table
    if column not in table.extra:
        raise no_such_column(column, table.source, table.has_slices, list(table.extra))
    values = _as_text(table.extra[column], column)
    names = categorical(values)
    distinct = len(names.dictionary)
    if distinct > MAX_SLICE_VALUES:
        raise ConfigError(f"--slice-by {column!r}: {distinct:,} distinct values; a breakdown takes a column "
                          f"with at most {MAX_SLICE_VALUES:,} (groups such as a GPU or a model, not IDs)")
    return table.with_columns(slice=names)


def _as_text(values: pa.Array | pa.ChunkedArray, column: str) -> pa.Array | pa.ChunkedArray:
    """Return a column's values as strings; NaN is absent."""
    typ = values.type
    if pa.types.is_dictionary(typ):
        values = values.cast(typ.value_type)
        typ = values.type
    if pa.types.is_floating(typ):
        nan = pc.is_nan(values).fill_null(False)
        if np.any(np.asarray(nan)):
            values = pc.if_else(nan, pa.scalar(None, typ), values)
    if typ in (pa.string(), pa.large_string()):
        return values
    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ConfigError(f"--slice-by {column!r}: its {typ} values cannot be shown as text: {exc}") from None
