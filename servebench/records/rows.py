"""Read plain tables of rows (step traces, sweep points) from CSV, JSONL or JSON; errors name file and line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from servebench.errors import InputFormatError


def _number(text: str) -> Any:
    """Turn a CSV cell into an int, float or None where it is one, else keep the text."""
    if text == "":
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            continue
    return text


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Read a list of objects from JSONL, JSON (an array, or the first list of objects in an object) or CSV."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return rows_from_bytes(data, str(path))


def rows_from_bytes(data: bytes, name: str) -> list[dict[str, Any]]:
    """Parse a file's bytes as rows (CSV by its suffix, JSONL by suffix or one object per line, else JSON).

    A step trace or sweep uploaded to the dashboard goes through here too. Errors name the file and line.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(f"{name}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    suffix = Path(name).suffix.lower()
    if suffix == ".csv":
        try:
            return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text), strict=True)]
        except csv.Error as exc:
            raise InputFormatError(f"{name}: malformed CSV: {exc}") from None
    stripped = text.lstrip()
    if suffix in (".jsonl", ".ndjson") or (stripped.startswith("{") and "\n{" in stripped.rstrip()):
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputFormatError(f"{name}: line {i}: invalid JSON at column {exc.colno}: {exc.msg}") from None
            except (RecursionError, ValueError) as exc:  # nested too deeply; an integer past 4300 digits
                raise InputFormatError(f"{name}: line {i}: unreadable JSON: {_why(exc)}") from None
            if not isinstance(obj, dict):
                raise InputFormatError(f"{name}: line {i}: expected a JSON object, got {type(obj).__name__}")
            rows.append(obj)
        return rows
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{name}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except (RecursionError, ValueError) as exc:  # nested too deeply; an integer past 4300 digits
        raise InputFormatError(f"{name}: unreadable JSON: {_why(exc)}") from None
    rows = _first_row_list(doc)
    if rows is None:
        raise InputFormatError(f"{name}: expected a list of objects")
    return rows


def _why(exc: Exception) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]


def _first_row_list(doc: Any) -> list[dict[str, Any]] | None:
    if isinstance(doc, list) and all(isinstance(r, dict) for r in doc):
        return doc
    if isinstance(doc, dict):
        for key in ("points", "results", "rows", "steps"):
            if isinstance(doc.get(key), list):
                return _first_row_list(doc[key])
        for value in doc.values():
            if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
                return value
    return None
