"""Read canonical record files (CSV, JSON, JSONL, Parquet) into parsed rows; files stay at this edge."""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import re
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from servebench.errors import InputFormatError, RecordValidationError, ServebenchError
from servebench.records.loaded import LoadedRecords
from servebench.records.rundir import records_file
from servebench.records.schema import (
    ParsedRows,
    canonical_name,
    parse_arrow,
    parse_objects,
    plain_strings,
    printable_key,
    shown,
)
from servebench.records.table import RecordTable, default_window, validate

if TYPE_CHECKING:  # the importers load on first use
    from servebench.records.importers.common import ImportOptions

REQUIRED_COLUMNS = ("start", "end", "status")
TEXT_SNIFF_BYTES = 4096  # how much of a file is looked at for a NUL byte before it is read as text


def detect_format(name: str, head: bytes) -> str:
    """Return the canonical format from the file name's extension, else from its first bytes."""
    lower = name.lower()
    for ext, fmt in ((".parquet", "parquet"), (".pq", "parquet"), (".jsonl", "jsonl"), (".ndjson", "jsonl"),
                     (".json", "json"), (".csv", "csv")):
        if lower.endswith(ext):
            return fmt
    if head.startswith(b"PAR1"):
        return "parquet"
    text = head.lstrip()
    if text.startswith(b"["):
        return "json"
    if text.startswith(b"{"):
        first_line = text.split(b"\n", 1)[0].strip()
        try:
            json.loads(first_line)
            return "jsonl" if b"\n" in text.strip() else "json"
        except ValueError:
            return "json"
    return "csv"


def check_text(data: bytes, source: str) -> None:
    r"""Refuse a binary file (an image, an archive, a spreadsheet) as what it is, before a text reader sees it.

    Binary: a NUL byte in the first :data:`TEXT_SNIFF_BYTES`, beside another NUL, another control byte (not
    tab, CR or LF) or bytes that are not UTF-8 there; read as CSV such a file gave 'missing columns'. One NUL
    in otherwise clean text is a defect of the cell it sits in, and the reader names its row and field. UTF-16
    text (NUL in every other byte) starts with its byte-order mark and is left to the decoder, which asks for
    UTF-8.

    >>> check_text(b"start,end,status\n", "r.csv")
    >>> check_text(b"start,end,status\n0,1,time\x00out\n", "r.csv")  # a cell's defect: named by the reader
    >>> check_text(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "shot.png")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    servebench.errors.InputFormatError: shot.png: not a text file (a NUL byte at offset 8): records and exports ...
    """
    head = data[:TEXT_SNIFF_BYTES]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return
    at = head.find(b"\x00")
    if at >= 0 and not _clean_text_but_one_nul(head, at):
        raise InputFormatError(f"{source}: not a text file (a NUL byte at offset {at}): records and exports are CSV, "
                               "JSON or JSONL text, or Parquet")


_OTHER_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _clean_text_but_one_nul(head: bytes, at: int) -> bool:
    """Whether ``head`` is UTF-8 text without control bytes but its one NUL (at ``at``)."""
    rest = head[:at] + head[at + 1:]
    if _OTHER_CONTROL.search(rest):
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(rest)  # a character cut at the end of the head is not a fault
    except UnicodeDecodeError:
        return False
    return True


def _decode(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(
            f"{source}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8") from None


def _check_columns(names: list[str], source: str) -> None:
    canon = {canonical_name(n) for n in names}
    missing = [c for c in REQUIRED_COLUMNS if c not in canon]
    if missing:
        raise InputFormatError(f"{source}: missing column{'s' if len(missing) > 1 else ''} "
                               f"{', '.join(repr(m) for m in missing)} (required: {', '.join(REQUIRED_COLUMNS)})")


def parse_csv(data: bytes, source: str) -> ParsedRows:
    """Parse CSV with every column read as text, so nothing is coerced before validation."""
    text = _decode(data, source)
    header_line = _LINE_BREAK.split(text, 1)[0]  # CR-only line ends too
    if not header_line.strip():
        raise InputFormatError(f"{source}: no header row")
    try:
        names = next(csv.reader([header_line]))
    except csv.Error as exc:
        raise InputFormatError(f"{source}: unreadable header row: {exc}") from None
    _check_columns([n.strip() for n in names], source)
    if text.count('"') % 2:  # an odd number of quotes: maybe a quoted field that never closes
        _refuse_unterminated_quote(text, [n.strip() for n in names], source)
    try:
        table = pacsv.read_csv(
            io.BytesIO(text.encode()),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        _refuse_ragged_row(text, len(names), source)
        raise InputFormatError(f"{source}: malformed CSV: {_one_line(exc)}") from None
    if table.num_rows == 0:
        raise InputFormatError(f"{source}: no records after the header")
    return parse_arrow(table.rename_columns([n.strip() for n in table.column_names]), source,  # "a, b" headers
                       text_numbers=True)


# A quoted field: from a quote at the start of a field to its closing quote ("" inside is a quote),
# or to the end of the text when it never closes (group 1 empty).
_QUOTED_FIELD = re.compile(r'(?:^|(?<=[,\r\n]))"(?:[^"]|"")*("|\Z)')
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _refuse_ragged_row(text: str, columns: int, source: str) -> None:
    """Raise naming the first row whose number of values differs from the header's (blank lines skipped)."""
    rows = (r for r in csv.reader(io.StringIO(text, newline="")) if r)
    next(rows, None)
    try:
        for i, values in enumerate(rows, start=1):
            if len(values) != columns:
                raise RecordValidationError(f"{len(values)} values where the header has {columns} columns",
                                            source=source, row=i, rule="wrong number of values")
    except csv.Error:
        return  # the caller reports what Arrow found


def _refuse_unterminated_quote(text: str, names: list[str], source: str) -> None:
    """Raise naming the row and field of a quoted field that is never closed (it would swallow the rest)."""
    quoted_breaks = 0
    for m in _QUOTED_FIELD.finditer(text):
        if m.group(1):
            quoted_breaks += len(_LINE_BREAK.findall(m.group()))
            continue
        line_start = max(text.rfind("\n", 0, m.start()), text.rfind("\r", 0, m.start())) + 1
        row = len(_LINE_BREAK.findall(text, 0, line_start)) - quoted_breaks  # the header is line 0
        column = text.count(",", line_start, m.start())
        name = names[column] if column < len(names) else f"column {column + 1}"
        raise RecordValidationError("a quoted value opens here and is never closed (a missing '\"'), so it "
                                    "would swallow the rest of the file", source=source, row=max(row, 1),
                                    field=name, rule="unterminated quote")


class _DuplicateKeys(dict):  # type: ignore[type-arg]
    """A JSON object that names some key twice; ``duplicate`` is the first such key."""

    duplicate: str = ""


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Build a JSON object, marking one that repeats a key (json.loads would silently keep the last value)."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    marked = _DuplicateKeys(obj)
    marked.duplicate = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return marked


def _exact_int(digits: str) -> int:
    """Read an integer of any length (int() refuses strings past 4300 digits; Decimal does not)."""
    return int(Decimal(digits))


def _load_json(text: str, where: str, *, one_line: bool = False) -> Any:
    """Parse JSON text; ``where`` (file, or file and row for ``one_line``) starts every error message."""
    try:
        try:
            return json.loads(text, object_pairs_hook=_object_pairs)
        except json.JSONDecodeError:
            raise
        except ValueError:  # an integer of more than 4300 digits: read it, and let validation refuse it
            return json.loads(text, object_pairs_hook=_object_pairs, parse_int=_exact_int)
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if one_line else f"line {exc.lineno}, column {exc.colno}"
        raise InputFormatError(f"{where}: invalid JSON at {at}: {exc.msg}") from None
    except RecursionError:
        raise InputFormatError(f"{where}: JSON nested too deeply to read; a record is one flat object") from None


def _refuse_duplicate_keys(docs: list[Any], source: str) -> None:
    """Raise naming the row and key of the first record that gives a key twice."""
    for i, doc in enumerate(docs):
        if type(doc) is _DuplicateKeys:
            raise RecordValidationError("the key appears twice in one record; JSON would keep only the last value",
                                        source=source, row=i + 1, field=printable_key(doc.duplicate),
                                        rule="duplicate key")


def parse_json(data: bytes, source: str) -> ParsedRows:
    """Parse a JSON array of records, or an object whose ``records`` key holds one."""
    text = _decode(data, source)
    doc = _load_json(text, source)
    if type(doc) is _DuplicateKeys:
        raise InputFormatError(f"{source}: the key {printable_key(doc.duplicate)!r} appears twice in the top-level "
                               "object; JSON would keep only the last value")
    if isinstance(doc, dict) and "records" in doc:
        doc = doc["records"]
    if not isinstance(doc, list):
        raise InputFormatError(f"{source}: expected a JSON array of records or an object with 'records'")
    if not doc:
        raise InputFormatError(f"{source}: no records")
    return _objects(doc, source)


def parse_jsonl(data: bytes, source: str) -> ParsedRows:
    """Parse one JSON record per line; a blank line inside the file is an error, not a skipped row."""
    text = _decode(data, source)
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise InputFormatError(f"{source}: no records")
    docs = [_load_json(line, f"{source}: row {i}", one_line=True) for i, line in enumerate(lines, start=1)]
    return _objects(docs, source)


def _objects(docs: list[Any], source: str) -> ParsedRows:
    _refuse_duplicate_keys(docs, source)
    first = next((d for d in docs if isinstance(d, dict)), None)
    if first is not None:
        _check_columns(list(first), source)
    return parse_objects(docs, source, keep_extra=True)


def parse_parquet(data: bytes | BinaryIO | pa.NativeFile, source: str) -> ParsedRows:
    """Parse Parquet: the canonical columns, and any others as extra columns."""
    # page checksums, where the writer stored them, are verified; pre-buffered column chunks are slices of a
    # memory-mapped file, where page by page the verifying reader copied every page into fresh memory (10M
    # records: 0.3-0.9 s of system time against 0.8-3.0 s, alternated runs)
    try:
        pf = pq.ParquetFile(io.BytesIO(data) if isinstance(data, bytes) else data, page_checksum_verification=True,
                            pre_buffer=True)
        names = pf.schema_arrow.names
    except (pa.ArrowException, OSError) as exc:
        raise InputFormatError(f"{source}: not a readable Parquet file: {_one_line(exc)}") from None
    _check_columns(names, source)
    try:
        table = plain_strings(pf.read())  # columns the schema does not know are kept as extra columns
    except (pa.ArrowException, OSError) as exc:
        raise _corrupt_parquet(pf, source, exc) from None
    _refuse_invalid_utf8(table, source)
    if table.num_rows == 0:
        raise InputFormatError(f"{source}: no records")
    return parse_arrow(table, source)


def _one_line(exc: BaseException, limit: int = 200) -> str:
    """Return an exception's message on one line, shortened."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _corrupt_parquet(pf: pq.ParquetFile, source: str, exc: BaseException) -> ServebenchError:
    """Return an error naming the rows and column whose data pages cannot be read (the footer was fine)."""
    first_row = 0
    for group in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(group).num_rows
        for name in pf.schema_arrow.names:
            try:
                pf.read_row_group(group, columns=[name])
            except (pa.ArrowException, OSError) as col_exc:
                return RecordValidationError(
                    f"corrupt Parquet data in rows {first_row + 1}-{first_row + rows} (row group {group}): "
                    f"{_one_line(col_exc)}", source=source, row=first_row + 1, field=name, rule="corrupt file")
        first_row += rows
    return InputFormatError(f"{source}: corrupt Parquet data: {_one_line(exc)}")


_UTF8_AT = re.compile(r"string index (\d+)")


def _refuse_invalid_utf8(table: pa.Table, source: str) -> None:
    """Raise naming the row and column of a text value that is not UTF-8 (Parquet readers do not check)."""
    for name, column in zip(table.column_names, table.columns):
        typ = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
        if not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
            continue
        first_row = 0
        for chunk in column.chunks:
            strings = chunk.dictionary if pa.types.is_dictionary(chunk.type) else chunk
            try:
                strings.validate(full=True)
            except pa.ArrowInvalid as exc:
                found = _UTF8_AT.search(str(exc))
                at = int(found.group(1)) if found else None
                if at is not None and strings is not chunk:  # a dictionary entry: the first row using it
                    hits = np.flatnonzero(chunk.indices.fill_null(-1).to_numpy(zero_copy_only=False) == at)
                    at = int(hits[0]) if hits.size else None
                raise RecordValidationError(
                    "not valid UTF-8 text", source=source, field=name, rule="invalid text",
                    row=None if at is None else first_row + at + 1) from None
            first_row += len(chunk)


def _loaded(rows: ParsedRows, fmt: str) -> LoadedRecords:
    """Wrap a canonical reader's rows, with what reading changed as warnings."""
    return LoadedRecords(rows, fmt, list(rows.notes))


READERS: dict[str, Callable[..., ParsedRows]] = {
    "csv": parse_csv, "json": parse_json, "jsonl": parse_jsonl, "parquet": parse_parquet}
CANONICAL_FORMATS: tuple[str, ...] = tuple(READERS)


def read_bytes(data: bytes, name: str, fmt: str = "auto", options: ImportOptions | None = None) -> LoadedRecords:
    """Parse a file's bytes as canonical records, or through an importer for other tools' exports.

    ``options`` (which run, warm-up and cool-down) apply to another tool's export, chosen or detected;
    servebench's own files have no options to apply.
    """
    if not data.strip():
        raise InputFormatError(f"{name}: the file is empty")
    detected = fmt == "auto"
    if detected:
        fmt = detect_format(name, data[:4096])
    if fmt != "parquet" and not data.startswith(b"PAR1"):  # every other reader reads text
        check_text(data, name)
    if detected:
        try:
            return _loaded(READERS[fmt](data, name), fmt)
        except (InputFormatError, RecordValidationError):
            from servebench.records.importers import detect, import_bytes  # not canonical: maybe another tool's export
            try:
                foreign = None if fmt == "parquet" else detect(data, name)
            except RecursionError:  # JSON nested too deeply for any reader: the canonical error says so
                foreign = None
            if foreign is None:
                raise
            return import_bytes(data, name, foreign, options)
    if fmt not in READERS:
        from servebench.records.importers import import_bytes  # e.g. "vllm", "guidellm:run=1,outside_window=drop"
        return import_bytes(data, name, fmt, options)
    return _loaded(READERS[fmt](data, name), fmt)


def read_path(path: str | Path, fmt: str = "auto") -> LoadedRecords:
    """Read a record file from disk, or the records of a run folder (the file ``rundir.records_file`` names)."""
    p = Path(path)
    if p.is_dir():
        p = records_file(p)
    if not p.is_file():
        raise InputFormatError(f"{p}: no such file")
    try:
        if fmt == "parquet" or (fmt == "auto" and p.suffix.lower() in (".parquet", ".pq")):
            with pa.memory_map(str(p)) as mapped:  # no copy through Python file objects
                return _loaded(parse_parquet(mapped, p.name), "parquet")
        data = p.read_bytes()
    except OSError as exc:
        raise InputFormatError(f"{p}: cannot read ({exc.strerror or _one_line(exc)})") from None
    return read_bytes(data, p.name, fmt)


def to_table(loaded: LoadedRecords, window_start: float | None = None,
             window_end: float | None = None) -> tuple[RecordTable, float, float]:
    """Validate loaded rows over a window, defaulting to [min start, max end]; return table and window."""
    ws, we = window_start, window_end
    if ws is None or we is None:
        if _no_finite_times(loaded.rows):
            validate(loaded.rows, -math.inf, math.inf)  # raises the first row's own error
        dws, dwe = default_window(loaded.rows)
        ws = dws if ws is None else ws
        we = dwe if we is None else we
        if not (we > ws):  # e.g. one record that ends before it starts: name its row and field
            validate(loaded.rows, -math.inf, math.inf)
    if not (math.isfinite(ws) and math.isfinite(we) and we > ws):
        raise RecordValidationError(
            f"Invalid observation window: start {shown(ws)} and end {shown(we)} must be finite, end after start",
            source=loaded.rows.source, rule="Invalid observation window")
    return validate(loaded.rows, ws, we), float(ws), float(we)


def _no_finite_times(rows: ParsedRows) -> bool:
    c = rows.columns
    return not (np.isfinite(c["start"].values).any() and np.isfinite(c["end"].values).any())


def load_table(path: str | Path, window_start: float | None = None, window_end: float | None = None,
               fmt: str = "auto") -> tuple[RecordTable, float, float]:
    """Read and validate a record file; return the table and the window used."""
    found = to_table(read_path(path, fmt), window_start, window_end)
    pa.default_memory_pool().release_unused()  # Arrow's pool keeps what reading freed; the report needs it
    return found


def encode_records(table: RecordTable, fmt: str) -> bytes:
    """Return records as the bytes of a canonical file: ``csv``, ``parquet``, ``json`` or ``jsonl``."""
    if fmt == "parquet":
        buf = pa.BufferOutputStream()
        arrow = table.to_arrow()
        # token times are distinct floats, so dictionary pages would hold every value again; reading is no
        # faster either way (benchmarks/fast_paths.py case list_dictionary: 0.9x to 1.4x)
        plain = [f.name for f in arrow.schema if pa.types.is_list(f.type)]
        pq.write_table(arrow, buf, write_page_checksum=True,  # readers can tell corrupt pages
                       use_dictionary=[n for n in arrow.column_names if n not in plain] if plain else True)
        return buf.getvalue().to_pybytes()
    if fmt == "csv":
        buf = pa.BufferOutputStream()
        pacsv.write_csv(_lists_as_json(table.to_arrow()), buf)
        return buf.getvalue().to_pybytes()
    if fmt == "json":
        return json.dumps(table.to_dicts(), indent=1).encode()
    if fmt == "jsonl":
        return "".join(json.dumps(d) + "\n" for d in table.to_dicts()).encode()
    raise InputFormatError(f"unknown output format '{fmt}'; expected one of {', '.join(CANONICAL_FORMATS)}")


def _lists_as_json(arrow: pa.Table) -> pa.Table:
    """Return a table whose list columns (token_times, token_counts) hold JSON text, as CSV cells do."""
    from servebench.records.token_times import as_json_text
    for i, name in enumerate(arrow.column_names):
        if pa.types.is_list(arrow.schema.field(i).type):
            arrow = arrow.set_column(i, name, as_json_text(arrow.column(i).combine_chunks()))
    return arrow


def write_records(table: RecordTable, path: str | Path) -> None:
    """Write records as Parquet, CSV, JSON or (any other extension) JSONL, chosen by extension."""
    p = Path(path)
    suffix = p.suffix.lower()
    fmt = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json"}.get(suffix, "jsonl")
    p.write_bytes(encode_records(table, fmt))
