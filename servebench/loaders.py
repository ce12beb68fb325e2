"""Read canonical record files (CSV, JSON, JSONL, Parquet) into parsed rows; files stay at this edge."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from .errors import InputFormatError, RecordValidationError
from .records import FIELDS, ParsedRows, RecordTable, canonical_name, default_window, parse_arrow, \
    parse_objects, validate

REQUIRED_COLUMNS = ("start", "end", "status")


@dataclass
class LoadedRecords:
    """Parsed rows from one file, with what the reader could not carry over."""

    rows: ParsedRows
    format: str
    warnings: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


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
    header_line = text.split("\n", 1)[0].strip("\r")
    if not header_line.strip():
        raise InputFormatError(f"{source}: no header row")
    names = next(csv.reader([header_line]))
    _check_columns([n.strip() for n in names], source)
    try:
        table = pacsv.read_csv(
            io.BytesIO(text.encode()),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        raise InputFormatError(f"{source}: malformed CSV: {exc}") from None
    if table.num_rows == 0:
        raise InputFormatError(f"{source}: no records after the header")
    return parse_arrow(table.rename_columns([n.strip() for n in table.column_names]), source)  # "a, b" headers


def parse_json(data: bytes, source: str) -> ParsedRows:
    """Parse a JSON array of records, or an object whose ``records`` key holds one."""
    text = _decode(data, source)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{source}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
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
    docs = []
    for i, line in enumerate(lines, start=1):
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputFormatError(f"{source}: row {i}: invalid JSON at column {exc.colno}: {exc.msg}") from None
    return _objects(docs, source)


def _objects(docs: list[Any], source: str) -> ParsedRows:
    first = next((d for d in docs if isinstance(d, dict)), None)
    if first is not None:
        _check_columns(list(first), source)
    return parse_objects(docs, source, keep_extra=True)


def parse_parquet(data: bytes | BinaryIO | pa.NativeFile, source: str) -> ParsedRows:
    """Parse Parquet: the canonical columns, and any others as extra columns."""
    try:
        pf = pq.ParquetFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputFormatError(f"{source}: not a readable Parquet file: {exc}") from None
    names = pf.schema_arrow.names
    _check_columns(names, source)
    table = pf.read()  # columns the schema does not know are kept as extra columns
    if table.num_rows == 0:
        raise InputFormatError(f"{source}: no records")
    return parse_arrow(table, source)


READERS: dict[str, Callable[..., ParsedRows]] = {
    "csv": parse_csv, "json": parse_json, "jsonl": parse_jsonl, "parquet": parse_parquet}
CANONICAL_FORMATS: tuple[str, ...] = tuple(READERS)


def read_bytes(data: bytes, name: str, fmt: str = "auto") -> LoadedRecords:
    """Parse a file's bytes as canonical records, or through an importer for other tools' exports."""
    if not data.strip():
        raise InputFormatError(f"{name}: the file is empty")
    if fmt == "auto":
        fmt = detect_format(name, data[:4096])
        try:
            return LoadedRecords(READERS[fmt](data, name), fmt)
        except (InputFormatError, RecordValidationError):
            from .importers import detect, import_bytes  # not canonical: maybe another tool's export
            foreign = None if fmt == "parquet" else detect(data, name)
            if foreign is None:
                raise
            return import_bytes(data, name, foreign)
    if fmt not in READERS:
        from .importers import import_bytes  # e.g. "vllm", "guidellm:run=1,outside_window=drop"
        return import_bytes(data, name, fmt)
    return LoadedRecords(READERS[fmt](data, name), fmt)


RUN_FOLDER_RECORDS = ("records.jsonl", "records.parquet", "records.csv", "records.json")


def read_path(path: str | Path, fmt: str = "auto") -> LoadedRecords:
    """Read a record file from disk, or the records of a folder written by run, load or simulate."""
    p = Path(path)
    if p.is_dir():
        found = next((p / name for name in RUN_FOLDER_RECORDS if (p / name).is_file()), None)
        if found is None:
            raise InputFormatError(f"{p}: a folder without {' or '.join(RUN_FOLDER_RECORDS)}")
        p = found
    if not p.is_file():
        raise InputFormatError(f"{p}: no such file")
    if fmt == "parquet" or (fmt == "auto" and p.suffix.lower() in (".parquet", ".pq")):
        with pa.memory_map(str(p)) as mapped:  # no copy through Python file objects
            return LoadedRecords(parse_parquet(mapped, p.name), "parquet")
    return read_bytes(p.read_bytes(), p.name, fmt)


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
    if not (we > ws):
        raise RecordValidationError(f"Invalid observation window: end {we} must be after start {ws}",
                                    source=loaded.rows.source, rule="Invalid observation window")
    return validate(loaded.rows, ws, we), float(ws), float(we)


def _no_finite_times(rows: ParsedRows) -> bool:
    c = rows.columns
    return not (np.isfinite(c["start"].values).any() and np.isfinite(c["end"].values).any())


def load_table(path: str | Path, window_start: float | None = None, window_end: float | None = None,
               fmt: str = "auto") -> tuple[RecordTable, float, float]:
    """Read and validate a record file; return the table and the window used."""
    return to_table(read_path(path, fmt), window_start, window_end)


def encode_records(table: RecordTable, fmt: str) -> bytes:
    """Return records as the bytes of a canonical file: ``csv``, ``parquet``, ``json`` or ``jsonl``."""
    if fmt == "parquet":
        buf = pa.BufferOutputStream()
        pq.write_table(table.to_arrow(), buf)
        return buf.getvalue().to_pybytes()
    if fmt == "csv":
        buf = pa.BufferOutputStream()
        pacsv.write_csv(table.to_arrow(), buf)
        return buf.getvalue().to_pybytes()
    if fmt == "json":
        return json.dumps(table.to_dicts(), indent=1).encode()
    if fmt == "jsonl":
        return "".join(json.dumps(d) + "\n" for d in table.to_dicts()).encode()
    raise InputFormatError(f"unknown output format '{fmt}'; expected one of {', '.join(CANONICAL_FORMATS)}")


def write_records(table: RecordTable, path: str | Path) -> None:
    """Write records as Parquet, CSV, JSON or (any other extension) JSONL, chosen by extension."""
    p = Path(path)
    suffix = p.suffix.lower()
    fmt = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".json": "json"}.get(suffix, "jsonl")
    p.write_bytes(encode_records(table, fmt))
