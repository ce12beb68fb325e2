"""Read public LLM-serving traces as one model: arrival times, prompt and output lengths, prefix blocks.

One module per format: ``mooncake`` (JSONL with block hashes), ``azure`` (the 2023 and 2024 Azure LLM
inference traces), ``burstgpt`` and ``records`` (servebench's own record files, so a measured run can be
replayed). :func:`read_trace` detects the format from the file's columns, or takes it by name.
"""

from __future__ import annotations

import json
from pathlib import Path

from servebench.errors import InputFormatError
from servebench.records.traces import azure, burstgpt, mooncake, records
from servebench.records.traces.common import Trace, csv_header

__all__ = ["FORMATS", "Trace", "detect_format", "read_trace"]

FORMATS: tuple[str, ...] = (mooncake.FORMAT, azure.FORMAT, burstgpt.FORMAT, records.FORMAT)
_RECORD_SUFFIXES = (".parquet", ".pq")


def detect_format(path: Path, data: bytes) -> str:
    """Return the trace format of a file from its columns (a JSON line's keys, a CSV header).

    A folder, a Parquet file, a JSON array or an object that is not a Mooncake request is servebench's own
    records; a CSV header with ``start`` too.
    """
    if path.is_dir() or path.suffix.lower() in _RECORD_SUFFIXES:
        return records.FORMAT
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] == b"[":
        return records.FORMAT
    if head[:1] == b"{":
        try:
            first = json.loads(head.split(b"\n", 1)[0])
        except ValueError:  # an object over several lines: a JSON file of records
            return records.FORMAT
        return mooncake.FORMAT if isinstance(first, dict) and mooncake.sniff(set(first)) else records.FORMAT
    names = set(csv_header(head, path.name))
    for module in (azure, burstgpt):
        if module.sniff(names):
            return module.FORMAT
    if "start" in names:
        return records.FORMAT
    shown = ", ".join(sorted(names))[:200] or "none"
    raise InputFormatError(f"{path.name}: cannot tell the trace format from its columns ({shown}); name it with "
                           f"--format {', '.join(FORMATS)}")


def read_trace(path: str | Path, fmt: str = "auto") -> Trace:
    """Read a trace file (or a run folder's records) in the named format, or the one its columns show."""
    p = Path(path)
    name = fmt.strip().lower()
    if name not in ("auto", *FORMATS):
        raise InputFormatError(f"unknown trace format {fmt!r}: auto, {', '.join(FORMATS)}")
    if not p.exists():
        raise InputFormatError(f"{p}: no such file")
    if name in ("auto", records.FORMAT) and (p.is_dir() or p.suffix.lower() in _RECORD_SUFFIXES):
        return records.read(p)  # no bytes to read twice: the record readers map a Parquet file themselves
    data = b""
    if not p.is_dir():
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise InputFormatError(f"{p}: cannot read ({exc.strerror or exc})") from None
        if not data.strip():
            raise InputFormatError(f"{p.name}: the file is empty")
    if name == "auto":
        name = detect_format(p, data)
    if name == records.FORMAT:
        return records.read(p)
    if p.is_dir():
        raise InputFormatError(f"{p}: a folder; a {name} trace is one file")
    reader = {mooncake.FORMAT: mooncake.read, azure.FORMAT: azure.read, burstgpt.FORMAT: burstgpt.read}[name]
    return reader(data, p.name)
