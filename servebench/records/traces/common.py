"""The trace every reader returns, and what the readers share: CSV reading, value checks, where a bad value is.

Readers parse with pyarrow (vectorised); only when pyarrow refuses a file do they walk it line by line,
to name the first bad line and field in one sentence.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from servebench.errors import InputFormatError


@dataclass(frozen=True)
class Trace:
    """A trace's requests in arrival order (a stable sort: ties keep the file's order).

    ``hash_offsets`` and ``hash_values`` hold each request's prefix block IDs as Arrow lists do: request
    ``i``'s blocks are ``hash_values[hash_offsets[i]:hash_offsets[i + 1]]``, each ``block_tokens`` tokens
    of its prompt (the last block may be partial). Equal IDs are the same reusable KV block.
    """

    source: str
    format: str
    arrival_s: np.ndarray  # float64, seconds after the first request (the first is 0.0)
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    row: np.ndarray  # int64: the request's 1-based place among the file's requests (header, blank lines not counted)
    hash_offsets: np.ndarray | None = None  # int64, one more than requests; None: the trace has no block hashes
    hash_values: np.ndarray | None = None  # int64 block IDs
    block_tokens: int | None = None
    failed: np.ndarray | None = None  # bool; None when the format does not say
    model: pa.Array | None = None  # Arrow strings, null where blank; None when the format has no model
    cached_prompt_tokens: np.ndarray | None = None  # int64, -1 where unknown; None when no request says
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def has_hashes(self) -> bool:
        """Return True when the trace names its requests' prefix blocks."""
        return self.hash_offsets is not None


def finish(source: str, fmt: str, times: np.ndarray, prompt: np.ndarray, output: np.ndarray, *,
           hashes: pa.ListArray | None = None, block_tokens: int | None = None, failed: np.ndarray | None = None,
           model: pa.Array | None = None, cached: np.ndarray | None = None,
           units_per_s: float = 1.0, warnings: list[str] | None = None) -> Trace:
    """Return the rows as a Trace: sorted by arrival (stably), times relative to the first, in seconds.

    ``times`` are in the file's own unit and type (int64 milliseconds, nanoseconds), ``units_per_s`` of them
    to a second. The first time is subtracted before dividing, so large epoch values keep their precision, and
    a division (not a product with 0.001) gives the nearest float to 3536.999 s for 3536999 ms.
    """
    n = int(times.size)
    if n == 0:
        raise InputFormatError(f"{source}: no requests in the trace")
    row = np.arange(1, n + 1, dtype=np.int64)
    order = None
    if n > 1 and bool((times[1:] < times[:-1]).any()):
        order = np.argsort(times, kind="stable")
        times, prompt, output, row = times[order], prompt[order], output[order], row[order]
        failed = None if failed is None else failed[order]
        model = None if model is None else model.take(pa.array(order))
        cached = None if cached is None else cached[order]
        if hashes is not None:
            hashes = hashes.take(pa.array(order))
    first = times[0]
    arrival_s = (times - first).astype(np.float64) / units_per_s
    offsets = values = None
    if hashes is not None:  # no null lists here: the readers refuse them
        offsets = as_numpy(hashes.offsets).astype(np.int64)
        offsets = offsets - offsets[0]  # a sliced or taken array's offsets need not start at 0
        values = as_numpy(hashes.flatten()).astype(np.int64)
    return Trace(source=source, format=fmt, arrival_s=arrival_s, prompt_tokens=prompt.astype(np.int64),
                 output_tokens=output.astype(np.int64), row=row, hash_offsets=offsets, hash_values=values,
                 block_tokens=block_tokens if hashes is not None else None, failed=failed, model=model,
                 cached_prompt_tokens=cached, warnings=list(warnings or []))


# --- where a bad value is -------------------------------------------------------------------------------

def record_line(data: bytes, index: int, *, header_lines: int, blank: Callable[[bytes], bool]) -> int:
    """Return the 1-based line of the ``index``-th (0-based) request, skipping header and blank lines.

    Only called to name a bad value, so it walks the lines in Python. A CSV field with a line break inside
    quotes would shift the count; trace files have none.
    """
    seen = -1
    line_no = 0
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if line_no <= header_lines or blank(line):
            continue
        seen += 1
        if seen == index:
            return line_no
    return line_no


def json_blank(line: bytes) -> bool:
    """A line pyarrow's JSON reader skips: whitespace only."""
    return not line.strip()


def csv_blank(line: bytes) -> bool:
    """A line pyarrow's CSV reader skips: empty (a line of spaces is a row)."""
    return line in (b"", b"\r")


def where(source: str, line: int, name: str) -> str:
    """Return the place of a value in an error message: ``file: line 7, field 'input_length'``."""
    return f"{source}: line {line}, field '{name}'"


def shown(value: Any, *, as_json: bool = True) -> str:
    """Return a value as an error message shows it, short: as JSON (``"600"`` is text), or a CSV cell as it is."""
    text = json.dumps(value) if as_json else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


COUNT_RULE = "is not a token count (a whole number from 0)"


def first_index(mask: np.ndarray) -> int | None:
    """Return the index of the first True, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def check_column(values: pa.ChunkedArray | pa.Array, name: str, *, count: bool,
                 locate: Callable[[int], int], source: str) -> np.ndarray:
    """Return a parsed column as numpy, or raise at its first missing, negative or non-finite value.

    ``count`` columns are token counts (int64, at least 0); the others are times (finite numbers).
    ``locate`` turns a request's index into its line.
    """
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    bad = first_index(np.asarray(arr.is_null(), dtype=bool)) if arr.null_count else None
    if bad is not None:
        raise InputFormatError(f"{where(source, locate(bad), name)}: missing")
    out = as_numpy(arr)
    if count:
        bad = first_index(out < 0)
        if bad is not None:
            raise InputFormatError(f"{where(source, locate(bad), name)}: {int(out[bad])} {COUNT_RULE}")
    elif out.dtype.kind == "f":
        bad = first_index(~np.isfinite(out))
        if bad is not None:
            raise InputFormatError(f"{where(source, locate(bad), name)}: {out[bad]} is not a finite number")
    return out


def as_numpy(arr: pa.Array) -> np.ndarray:
    """Return a fixed-width Arrow array without nulls as a numpy view of its buffer.

    ``Array.to_numpy`` imports pandas (0.25 s of a command's start, which ``trace stats`` does not need).
    """
    dtype = np.dtype(np.int64) if pa.types.is_timestamp(arr.type) else np.dtype(arr.type.to_pandas_dtype())
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


# --- CSV ------------------------------------------------------------------------------------------------

def csv_header(data: bytes, source: str) -> list[str]:
    """Return the names in a CSV file's first line (a UTF-8 byte-order mark dropped)."""
    first = data.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{source}: line 1: not UTF-8 text (byte 0x{first[exc.start]:02x})") from None
    return [name.strip() for name in next(csv.reader(io.StringIO(text)), [])]


def read_csv(data: bytes, source: str, kind: str, required: dict[str, pa.DataType],
             optional: dict[str, pa.DataType]) -> pa.Table:
    """Read the named CSV columns with their types; every problem is one line naming its line and field.

    A missing required column names the columns the format needs; a row with too few or too many fields
    names its line; a value pyarrow cannot parse as its column's type is found (pyarrow's own message does
    not say where) by parsing the column as text and casting it piece by piece.
    """
    names = csv_header(data, source)
    missing = [name for name in required if name not in names]
    if missing:
        raise InputFormatError(f"{source}: no column {', '.join(repr(m) for m in missing)}: {kind} has "
                               f"{', '.join(required)}")
    types = {**required, **{k: v for k, v in optional.items() if k in names}}
    ragged: list[Any] = []

    def skip(row: Any) -> str:
        if not ragged:
            ragged.append(row)
        return "skip"

    def parse(column_types: dict[str, pa.DataType]) -> pa.Table:
        return pcsv.read_csv(pa.BufferReader(data), parse_options=pcsv.ParseOptions(invalid_row_handler=skip),
                             convert_options=pcsv.ConvertOptions(column_types=column_types,
                                                                 include_columns=list(column_types),
                                                                 quoted_strings_can_be_null=False))

    try:
        table = parse(types)
    except pa.ArrowInvalid as exc:
        text = parse({name: pa.string() for name in types})
        for name, typ in types.items():
            bad = _first_unparsable(text.column(name).combine_chunks(), typ)
            if bad is not None:
                line = record_line(data, bad, header_lines=1, blank=csv_blank)
                value = shown(text.column(name)[bad].as_py(), as_json=False)
                raise InputFormatError(f"{where(source, line, name)}: {value} is not {_type_words(typ)}") from None
        raise InputFormatError(f"{source}: not a {kind} CSV file ({str(exc).splitlines()[0]})") from None
    if ragged:
        row = ragged[0]
        line = _line_of_text(data, row.text)
        raise InputFormatError(f"{source}: line {line}: {row.actual_columns} fields where the header has "
                               f"{row.expected_columns}")
    return table


def _type_words(typ: pa.DataType) -> str:
    if pa.types.is_integer(typ):
        return "a whole number"
    if pa.types.is_timestamp(typ):
        return "a date and time like the first row's" if typ.tz is None else "a date and time with a zone offset"
    if pa.types.is_floating(typ):
        return "a number"
    return str(typ)


def _first_unparsable(values: pa.Array, typ: pa.DataType, chunk: int = 65_536) -> int | None:
    """Return the index of the first non-null value that does not cast to ``typ``, or None."""
    def casts(part: pa.Array) -> bool:
        try:
            pc.cast(part, typ)
            return True
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False

    for start in range(0, len(values), chunk):
        part = values.slice(start, chunk)
        if casts(part):
            continue
        lo, hi = 0, len(part)  # the first bad value is in part[lo:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if casts(part.slice(lo, mid - lo)):
                lo = mid
            else:
                hi = mid
        return start + lo
    return None


def _line_of_text(data: bytes, text: str) -> int | str:
    """Return the 1-based line whose text is ``text`` (a row pyarrow refused), or '?' when not found."""
    target = text.encode("utf-8")
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if line.rstrip(b"\r") == target:
            return line_no
    return "?"
