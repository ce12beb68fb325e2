"""Mooncake traces (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``, FAST 2025).

One JSON object a line: ``timestamp`` (ms after the trace's start), ``input_length`` and ``output_length``
(tokens), ``hash_ids`` (one ID per 512-token block of the prompt, each the hash of the block and all before
it, remapped to integers: equal IDs are reusable KV blocks). AIPerf's and Dynamo's Mooncake-style files may
leave ``hash_ids`` out; such a trace replays without reuse. Other keys are ignored.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from servebench.errors import InputFormatError
from servebench.records.traces.common import (
    COUNT_RULE,
    Trace,
    as_numpy,
    check_column,
    finish,
    json_blank,
    record_line,
    shown,
    where,
)

FORMAT = "mooncake"
BLOCK_TOKENS = 512
COLUMNS: tuple[str, ...] = ("timestamp", "input_length", "output_length")
SCHEMA = pa.schema([("timestamp", pa.float64()), ("input_length", pa.int64()), ("output_length", pa.int64()),
                    ("hash_ids", pa.list_(pa.int64()))])
_PARSE = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
_BLOCK_BYTES = 1 << 24  # pyarrow reads JSON in blocks; a line must fit in one


def sniff(keys: set[str]) -> bool:
    """Return True when a first line's keys are a Mooncake request's."""
    return set(COLUMNS) <= keys


def read(data: bytes, source: str) -> Trace:
    """Read a Mooncake JSONL trace; the first bad line is named with its field."""
    try:
        table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(block_size=_BLOCK_BYTES),
                             parse_options=_PARSE)
    except pa.ArrowInvalid as exc:
        raise _first_bad_line(data, source) or InputFormatError(
            f"{source}: not a Mooncake trace ({str(exc).splitlines()[0]})") from None

    def locate(i: int) -> int:
        return record_line(data, i, header_lines=0, blank=json_blank)

    for name in COLUMNS:
        if table.column(name).null_count == table.num_rows and table.num_rows:
            raise InputFormatError(f"{source}: no '{name}' in any line: a Mooncake trace has "
                                   f"{', '.join(COLUMNS)} and hash_ids")
    times = check_column(table.column("timestamp"), "timestamp", count=False, locate=locate, source=source)
    prompt = check_column(table.column("input_length"), "input_length", count=True, locate=locate, source=source)
    output = check_column(table.column("output_length"), "output_length", count=True, locate=locate, source=source)
    hashes = table.column("hash_ids").combine_chunks()
    warnings = []
    if hashes.null_count == len(hashes):
        hashes = None
    else:
        if hashes.null_count:
            bad = int(np.flatnonzero(np.asarray(hashes.is_null()))[0])
            raise InputFormatError(f"{where(source, locate(bad), 'hash_ids')}: missing (other lines have block "
                                   "hashes)")
        if hashes.values.null_count:
            flat = int(np.flatnonzero(np.asarray(hashes.values.is_null()))[0])
            bad = int(np.searchsorted(np.asarray(hashes.offsets), flat, side="right")) - 1
            raise InputFormatError(f"{where(source, locate(bad), 'hash_ids')}: null is not a block ID")
        blocks = np.diff(as_numpy(hashes.offsets).astype(np.int64))
        uncovered = int(np.count_nonzero(blocks != -(-prompt // BLOCK_TOKENS)))
        if uncovered:
            warnings.append(f"{uncovered:,} requests have a number of hash_ids other than their input_length in "
                            f"{BLOCK_TOKENS}-token blocks; their tokens past the last block count as never cached")
    return finish(source, FORMAT, times, prompt, output, hashes=hashes, block_tokens=BLOCK_TOKENS,
                  units_per_s=1e3, warnings=warnings)


def _first_bad_line(data: bytes, source: str) -> InputFormatError | None:
    """Walk the lines pyarrow refused as a whole; return the first line's error, or None if none is found."""
    for line_no, line in enumerate(data.split(b"\n"), start=1):
        if json_blank(line):
            continue
        try:
            doc = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as exc:
            return InputFormatError(f"{source}: line {line_no}: invalid JSON at column {exc.colno}: {exc.msg}")
        except _DuplicateKey as exc:
            return InputFormatError(f"{where(source, line_no, str(exc))}: given twice")
        except (RecursionError, ValueError) as exc:  # nested too deeply; an integer of more than 4300 digits
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            return InputFormatError(f"{source}: line {line_no}: unreadable JSON: {why}")
        if not isinstance(doc, dict):
            return InputFormatError(f"{source}: line {line_no}: {shown(doc)} is not a JSON object (a request)")
        problem = _bad_field(doc)
        if problem:
            name, why = problem
            return InputFormatError(f"{where(source, line_no, name)}: {why}")
    return None


def _bad_field(doc: dict[str, Any]) -> tuple[str, str] | None:
    """Return the first field pyarrow's schema cannot take, and why; None when every field fits."""
    value = doc.get("timestamp")
    if value is not None and not _is_number(value):
        return "timestamp", f"{shown(value)} is not a number"
    if isinstance(value, int) and not -2.0 ** 1023 < value < 2.0 ** 1023:
        return "timestamp", f"{shown(value)} is too large"
    for name in ("input_length", "output_length"):
        value = doc.get(name)
        if value is not None and not _is_int64(value):
            return name, f"{shown(value)} {COUNT_RULE}"
    value = doc.get("hash_ids")
    if value is not None:
        if not isinstance(value, list):
            return "hash_ids", f"{shown(value)} is not a list of block IDs"
        for item in value:
            if item is not None and not _is_int64(item):
                return "hash_ids", f"{shown(item)} is not a block ID (a whole number)"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


class _DuplicateKey(ValueError):
    """A JSON object names a key twice (pyarrow refuses it; json.loads would keep the last)."""


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out
